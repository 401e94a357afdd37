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
    from nodeledger.machine.probe.nvidia import parse_query_csv

    rows = parse_query_csv(
        "index, name, memory.total [MiB], pci.bus_id\n0, NVIDIA H200, 143771 MiB, 00000000:06:00.0\n"
    )
    assert rows == [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "memory_mib": 143771,
            "pci_bus_id": "00000000:06:00.0",
            "mig": None,
        }
    ]
