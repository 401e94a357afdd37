"""Support bundles: a live probe replays to the same profile; bundles assembled from recorded
fixture sets replay to the right cards, memory, link matrix and NUMA map."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from conftest import SHARED, cli_json, run_cli
from nodeledger.machine.probe import probe_machine
from nodeledger.machine.probe.bundle import FORMAT, ReplayRunner, manifest_from_outputs

REAL = SHARED / "fixtures" / "real"
QUERY = (
    "nvidia-smi",
    "--query-gpu=index,name,memory.total,pci.bus_id,mig.mode.current",
    "--format=csv,noheader,nounits",
)


def test_live_bundle_replays_to_the_same_profile(tmp_path):
    b = tmp_path / "b.tar.gz"
    proc = run_cli("bundle", "-o", str(b))
    assert proc.returncode == 0 and "wrote" in proc.stdout
    replay, live = cli_json("machine", "probe", "--from", str(b)), cli_json("machine", "probe")
    for prof in (replay, live):  # what changes from one second to the next
        prof["notes"] = [
            n for n in prof["notes"] if not n.startswith("NVML:")
        ]  # in-process, not bundled
        prof["host"].pop("available_bytes")
        prof["host"].pop("swap_used_bytes")
        prof["host"]["sources"].pop("available_bytes", None)
    assert replay == live
    with tarfile.open(b) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
    assert manifest["format"] == FORMAT and "/proc/meminfo" in manifest["files"]


def test_bad_bundle_is_one_line(tmp_path):
    bad = tmp_path / "x.tar.gz"
    bad.write_text("garbage")
    proc = run_cli("machine", "probe", "--from", str(bad))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    empty = tmp_path / "e.tar.gz"
    with tarfile.open(empty, "w:gz") as tar:
        info = tarfile.TarInfo("other.txt")
        tar.addfile(info, io.BytesIO(b""))
    proc = run_cli("machine", "probe", "--from", str(empty))
    assert proc.returncode == 2 and "no manifest.json" in proc.stderr


def _replay(commands: dict, tools: tuple[str, ...]):
    b = manifest_from_outputs(commands, tools=tools)
    return probe_machine(ReplayRunner(b["manifest"], b["blobs"], "fixture set"))


def _text(rel):
    p = REAL / rel
    if not p.is_file():
        pytest.skip(f"../shared fixture {rel} absent")
    return p.read_text(errors="replace")


@pytest.mark.shared
def test_bundle_8x_h100_nv18():
    # the recorded set has the default table, not the --query-gpu CSV: the backend falls back
    p = _replay({("nvidia-smi",): _text("nvidia-smi-table/gls-h100-sxm-x8.txt"),
                 ("nvidia-smi", "topo", "-m"): _text("nvidia-topo/mlengineering-8x-h100-nv18-compact.txt")},
                ("nvidia-smi",))  # fmt: skip
    assert len(p.accelerators) == 8
    assert {a.memory_bytes for a in p.accelerators} == {81559 * 2**20}
    assert {p.link(a, b).label for a in range(8) for b in range(8) if a != b} == {"NV18"}
    assert [a.numa_node for a in p.accelerators] == [0, 0, 0, 0, 1, 1, 1, 1]


@pytest.mark.shared
def test_bundle_8x_rtx4090_all_sys():
    p = _replay({("nvidia-smi",): _text("nvidia-smi-table/gls-rtx4090-x8.txt"),
                 ("nvidia-smi", "topo", "-m"): _text("nvidia-topo/gpuallocator17-8x-rtx4090-sys.txt")},
                ("nvidia-smi",))  # fmt: skip
    assert len(p.accelerators) == 8 and {a.memory_bytes for a in p.accelerators} == {24564 * 2**20}
    assert {p.link(a, b).kind.value for a in range(8) for b in range(8) if a != b} == {"sys"}
    assert [a.numa_node for a in p.accelerators] == [0, 0, 0, 0, 1, 1, 1, 1]


@pytest.mark.shared
def test_bundle_8x_k100_ai_dcu():
    p = _replay({("rocm-smi",): _text("dcu/flyaibox-k100ai-8x-rocm-smi.txt"),
                 ("rocm-smi", "--showtopo"): _text("dcu/flyaibox-k100ai-8x-rocm-smi-showtopo.txt")},
                ("rocm-smi",))  # fmt: skip
    assert len(p.accelerators) == 8 and {a.vendor.value for a in p.accelerators} == {"hygon"}
    assert all(a.memory_bytes is None for a in p.accelerators)  # the recorded set has no VRAM size
    assert {p.link(a, b).label for a in range(8) for b in range(8) if a != b} == {"PCIE"}
    assert {a.numa_node for a in p.accelerators} == {0}


@pytest.mark.shared
def test_bundle_4x_mi300x():
    p = _replay({("rocm-smi",): _text("rocm/gls-mi300x-x4-rocm-smi.txt")}, ("rocm-smi",))
    assert [a.product for a in p.accelerators] == ["AMD Instinct MI300X"] * 4
    assert {a.partition for a in p.accelerators} == {"NPS1, SPX"}
    assert any("--showtopo" in n for n in p.notes)  # not in the set: links unknown, said so


@pytest.mark.shared
def test_bundle_8x_ascend_910b():
    p = _replay(
        {("npu-smi", "info"): _text("ascend/vllm-ascend-6512-910b3-x8-npu-smi-info.txt")},
        ("npu-smi",),
    )
    assert len(p.accelerators) == 8
    assert p.total_accelerator_memory_bytes() == 8 * 65536 * 2**20


@pytest.mark.shared
def test_bundle_h200_topology_with_10_nics_keeps_nics_in_parse():
    from nodeledger.machine.parsers import nvidia_topo

    t = nvidia_topo.parse(_text("nvidia-topo/glm52-8x-h200-10nic.txt"))
    assert len(t.nics) == 10 and len(t.cards) == 8


@pytest.mark.shared
@pytest.mark.parametrize(
    ("topo", "label", "numa"),
    [
        ("nvidia-topo/gengwg-dgx-a100-12mlx5-nps4.txt", "NV12", [3, 3, 1, 1, 7, 7, 5, 5]),
        ("nvidia-topo/glm52-8x-h200-10nic.txt", "NV18", [0, 0, 0, 0, 1, 1, 1, 1]),
    ],
)
def test_bundle_topo_only_sets(topo, label, numa):
    """8 x A100 (NV12) and 8 x H200 with 10 NICs: the recorded sets hold topo -m only, so cards,
    links and NUMA replay and memory stays unknown (said in a note), never guessed."""
    p = _replay({("nvidia-smi", "topo", "-m"): _text(topo)}, ("nvidia-smi",))
    assert len(p.accelerators) == 8
    assert {p.link(a, b).label for a in range(8) for b in range(8) if a != b} == {label}
    assert [a.numa_node for a in p.accelerators] == numa
    assert all(a.memory_bytes is None for a in p.accelerators)
    assert any("known only from nvidia-smi topo -m" in n for n in p.notes)


def _write_bundle(path, manifest):
    data = json.dumps(manifest).encode()
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize(
    ("manifest", "field"),
    [
        ({"commands": 5}, "commands"),
        ({"commands": [{"stdout": "x"}]}, "commands.0.argv"),
        ({"commands": [{"argv": ["a"], "stdout": ["x"]}]}, "commands.0.stdout"),
        ({"files": {"/proc/meminfo": 3}}, "files./proc/meminfo"),
        ({"tools": ["nvidia-smi"]}, "tools"),
        ({"globs": {"/sys/*": [1, 2]}}, "globs"),
    ],
)
def test_malformed_manifest_fields_are_named(tmp_path, manifest, field):
    b = tmp_path / "b.tar.gz"
    _write_bundle(b, {"format": FORMAT, **manifest})
    proc = run_cli("machine", "probe", "--from", str(b))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert f"field {field} is malformed" in proc.stderr


def test_odd_numa_globs_and_duplicate_cards_still_give_a_profile():
    from nodeledger.machine.probe.bundle import manifest_from_outputs

    query = ("nvidia-smi", "--query-gpu=index,name,memory.total,pci.bus_id,mig.mode.current",
             "--format=csv,noheader,nounits")  # fmt: skip
    b = manifest_from_outputs({query: "0, A, 100, 0:1:0.0, Disabled\n0, A, 100, 0:1:0.0, Disabled\n"},
                              tools=("nvidia-smi",))  # fmt: skip
    b["manifest"]["globs"] = {"/sys/devices/system/node/node[0-9]*": [
        "/sys/devices/system/node/nodeX", "/sys/devices/system/node/node0", "/sys/devices/system/node/node0"]}  # fmt: skip
    p = probe_machine(ReplayRunner(b["manifest"], b["blobs"], "t"))
    assert [a.index for a in p.accelerators] == [0]
    assert any("listed twice" in n for n in p.notes)
    assert [n.id for n in p.host.numa_nodes] == [0]


def test_query_csv_with_header_and_units():
    from nodeledger.machine.parsers.nvidia_query import parse_query_csv

    rows = parse_query_csv(
        "index, name, memory.total [MiB], pci.bus_id\n0, NVIDIA H200, 143771 MiB, 00000000:06:00.0\n"
    )
    assert len(rows) == 1
    assert {k: v for k, v in rows[0].items() if v is not None} == {
        "index": 0,
        "name": "NVIDIA H200",
        "memory_mib": 143771,
        "pci_bus_id": "00000000:06:00.0",
    }


# NIC rows of topo -m in the profile's network (cards at PIX/PXB, NUMA node of the cards on the
# NIC's side of the host), read off each recording's matrix
H200_NEAR = [[3], [3], [3], [0], [2], [1], [7], [4], [6], [5]]  # NIC0-2 all PIX to GPU3
DGX_A100_NEAR = [[0, 1], [0, 1], [2, 3], [2, 3], [], [], [4, 5], [4, 5], [6, 7], [6, 7], [], []]


@pytest.mark.shared
@pytest.mark.parametrize(
    ("topo", "near", "numa"),
    [
        ("nvidia-topo/glm52-8x-h200-10nic.txt", H200_NEAR, [0] * 6 + [1] * 4),
        # NPS4: GPUs on NUMA 3/1/7/5; mlx5_4/5 and mlx5_10/11 are SYS to every card
        ("nvidia-topo/gengwg-dgx-a100-12mlx5-nps4.txt", DGX_A100_NEAR,
         [3, 3, 1, 1, None, None, 7, 7, 5, 5, None, None]),
    ],
)  # fmt: skip
def test_bundle_topo_nics_in_network(topo, near, numa):
    p = _replay({("nvidia-smi", "topo", "-m"): _text(topo)}, ("nvidia-smi",))
    nics = p.network.nics
    assert [n.name for n in nics] == [f"mlx5_{i}" for i in range(len(near))]
    assert {n.kind for n in nics} == {"rdma"}  # the bundle has no /sys/class/infiniband
    assert [n.near_cards for n in nics] == near
    assert [n.numa_node for n in nics] == numa
    assert all(n.source.startswith("nvidia-smi topo -m") for n in nics)


@pytest.mark.shared
def test_bundle_topo_nics_merge_with_sysfs():
    """The same 8 x H200 set with sysfs facts for two of its NICs: InfiniBand mlx5_0 is listed
    once (sysfs kind and speed, topo's near cards); RoCE mlx5_6 under its netdev."""
    ib, files = "/sys/class/infiniband", {}
    files[f"{ib}/mlx5_0/ports/1/link_layer"] = "InfiniBand\n"
    files[f"{ib}/mlx5_0/ports/1/rate"] = "400 Gb/sec (4X NDR)\n"
    files[f"{ib}/mlx5_6/ports/1/link_layer"] = "Ethernet\n"
    files["/sys/class/net/ens7np0/type"] = "1\n"
    files["/sys/class/net/ens7np0/speed"] = "200000\n"
    b = manifest_from_outputs(
        {("nvidia-smi", "topo", "-m"): _text("nvidia-topo/glm52-8x-h200-10nic.txt")},
        files=files,
        tools=("nvidia-smi",),
    )
    b["manifest"]["globs"] = {
        f"{ib}/*": [f"{ib}/mlx5_0", f"{ib}/mlx5_6"],
        f"{ib}/mlx5_6/device/net/*": [f"{ib}/mlx5_6/device/net/ens7np0"],
        "/sys/class/net/*": ["/sys/class/net/ens7np0"],
        "/sys/class/net/ens7np0/device": ["/sys/class/net/ens7np0/device"],
    }
    p = probe_machine(ReplayRunner(b["manifest"], b["blobs"], "t"))
    nics = {n.name: n for n in p.network.nics}
    assert len(nics) == 10 and "mlx5_6" not in nics
    assert (nics["mlx5_0"].kind, nics["mlx5_0"].speed_gbit, nics["mlx5_0"].near_cards) == (
        "infiniband", 400.0, [3])  # fmt: skip
    assert (nics["ens7np0"].kind, nics["ens7np0"].speed_gbit, nics["ens7np0"].near_cards) == (
        "roce", 200.0, [7])  # fmt: skip
    assert nics["ens7np0"].numa_node == 1  # sysfs did not say: that of GPU7 (PIX)
    assert nics["mlx5_1"].kind == "rdma"


@pytest.mark.shared
def test_bundle_topo_nics_without_legend_are_not_invented():
    p = _replay({("nvidia-smi", "topo", "-m"): _text("nvidia-topo/gpuallocator17-8x-rtx4090-sys.txt")},
                ("nvidia-smi",))  # fmt: skip
    assert p.network.nics == []
    assert any("without a NIC Legend (NIC0, NIC1)" in n for n in p.notes)


@pytest.mark.shared
def test_bundle_8x_h100_table_health_and_processes():
    """The table fallback also gives persistence, used memory, the ECC cell and processes."""
    p = _replay({("nvidia-smi",): _text("nvidia-smi-table/gpuexporter-h100-drv590-load-processes.txt")},
                ("nvidia-smi",))  # fmt: skip
    (a,) = p.accelerators
    assert (a.persistence_mode, a.ecc_mode, a.ecc_errors_uncorrected) == ("enabled", "enabled", 0)
    assert a.memory_used_bytes == 19818 * 2**20
    assert [(x.pid, x.kind, x.name, x.used_bytes) for x in a.processes] == [
        (11327, "C", "/root/tools/memhog", 2566 * 2**20),
        (11328, "C", "/root/tools/memhog", 1542 * 2**20),
        (11345, "C", "./gpu_burn", 15690 * 2**20),
    ]
    assert a.sources["processes"] == "nvidia-smi table Processes"
