"""Issue 4, non-NVIDIA parts: `npu-smi info -t topo` (Ascend HCCS matrix, CPU affinity -> NUMA),
amd-smi as a live backend (`static --json` / `static`, `topology`), their fault modes, and
bundle replays.  Fixtures: tests/fixtures/ascend and tests/fixtures/amd (see PROVENANCE.md)."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, SHARED, cli_json, run_cli
from nodeledger.machine.parsers import amd_smi, npu_smi
from nodeledger.machine.parsers.common import ParseError
from nodeledger.machine.probe import Runner, probe_machine
from nodeledger.machine.probe.bundle import ReplayRunner, manifest_from_outputs
from nodeledger.machine.probe.others import apply_npu_topology

ASC = FIXTURES / "ascend"
AMD = FIXTURES / "amd"
TOPO_910B = ASC / "msswift-910b3-x8-npu-smi-info-t-topo.txt"
INFO_910B = ASC / "msswift-910b3-x8-npu-smi-info.txt"
# Kunpeng 920 (4 sockets x 48 cores, no SMT) as 8 NUMA nodes of 24 CPUs: the layout the 910B3
# box's affinities (0-23, 48-71, 96-119, 144-167) fall into; built for these tests, not recorded
KUNPENG_8X24 = {n: f"{24 * n}-{24 * n + 23}" for n in range(8)}
NUMA_910B = [6, 6, 4, 4, 0, 0, 2, 2]


def _pairs(n):
    return [(a, b) for a in range(n) for b in range(n) if a < b]


# -- npu-smi info -t topo parser ----------------------------------------------------------------


def test_910b3_hccs_full_mesh_with_cpu_affinity():
    t = npu_smi.parse_topo(TOPO_910B.read_text())
    assert t.id_kind == "npu" and [c.index for c in t.cards] == list(range(8))
    assert [c.cpu_affinity for c in t.cards] == ["144-167"] * 2 + ["96-119"] * 2 + ["0-23"] * 2 + [
        "48-71"
    ] * 2
    assert all(c.numa_node is None for c in t.cards)  # npu-smi does not print it
    assert [(lk.a, lk.b) for lk in t.links] == _pairs(8)
    assert {(lk.label, lk.kind, lk.lanes) for lk in t.links} == {("HCCS", "hccs", None)}
    assert t.notes == [] and t.nics == []


@pytest.mark.parametrize(
    ("name", "labels", "affinity0", "note"),
    [
        ("huaweidoc-950-pcie-x8-npu-smi-info-t-topo.txt", {("SYS", "sys")}, "0-63,128-191", None),
        ("huaweidoc-950-ub-pairs-x8-npu-smi-info-t-topo.txt", {("SYS", "sys"), ("UB", "unknown")},
         "0-63,128-191", "UB"),
        ("sglang30453-a3-2chip-sio-npu-smi-info-t-topo.txt", {("SIO", "hccs")}, None, "SIO"),
    ],
)  # fmt: skip
def test_other_topo_variants(name, labels, affinity0, note):
    t = npu_smi.parse_topo((ASC / name).read_text())
    assert {(lk.label, lk.kind) for lk in t.links} == labels
    assert t.cards[0].cpu_affinity == affinity0
    if note:
        assert any(note in n for n in t.notes), t.notes


def test_ub_pairs_and_a3_phy_ids():
    ub = npu_smi.parse_topo((ASC / "huaweidoc-950-ub-pairs-x8-npu-smi-info-t-topo.txt").read_text())
    assert sorted((lk.a, lk.b) for lk in ub.links if lk.label == "UB") == [
        (0, 1),
        (2, 3),
        (4, 5),
        (6, 7),
    ]
    a3 = npu_smi.parse_topo((ASC / "sglang30453-a3-2chip-sio-npu-smi-info-t-topo.txt").read_text())
    assert a3.id_kind == "phy_id" and [(c.index, c.name) for c in a3.cards] == [
        (12, "Phy-ID12"),
        (13, "Phy-ID13"),
    ]
    assert any("no CPU Affinity column" in n for n in a3.notes)


def test_nic_columns_between_npus_and_affinity():
    # layout of npu-smi's print_npu_topo_info (newer drivers): NIC columns after the NPU columns,
    # NIC rows after the NPU rows, then "NICn: name" lines; values made up for the test
    text = (
        "\t   NPU0       NPU1       NIC0        CPU Affinity\n"
        "NPU0       X          HCCS       PIX        0-23\n"
        "NPU1       HCCS       X          SYS        24-47\n"
        "NIC0       PIX        SYS        X          \n\n"
        "NIC0: eth0\n\nLegend:\n\n  X    = Self\n"
    )
    t = npu_smi.parse_topo(text)
    assert [c.cpu_affinity for c in t.cards] == ["0-23", "24-47"]
    assert t.nics == [{"name": "NIC0", "device": "eth0", "links": {0: "PIX", 1: "SYS"}}]


@pytest.mark.parametrize(
    ("text", "msg"),
    [
        ("This device does not support querying topo.\n", "no header row"),  # npu-smi's own words
        ("", "no header row"),
        (
            "\t   NPU0       NPU1       CPU Affinity\nNPU0       X          HCCS       0-23\n",
            "NPU1 is missing",
        ),
        ("\t   NPU0       NPU1\nNPU0       X\nNPU1       HCCS       X\n", "truncated"),
        ("\t   NPU0       NPU1\nNPU0       HCCS       HCCS\nNPU1       HCCS       X\n", "diagonal"),
        ("\t   NPU0       Phy-ID1\nNPU0       X          HCCS\nPhy-ID1    HCCS       X\n", "mixes"),
    ],
)
def test_garbage_topo_is_a_parse_error(text, msg):
    with pytest.raises(ParseError, match=msg):
        npu_smi.parse_topo(text)


def test_asymmetric_matrix_and_odd_affinity_are_noted():
    text = "NPU0  NPU1  CPU Affinity\nNPU0  X     HCCS  0-23\nNPU1  SYS   X     oops\n"
    t = npu_smi.parse_topo(text)
    assert t.links[0].label == "HCCS" and t.cards[1].cpu_affinity is None
    assert any("not symmetric" in n for n in t.notes) and any("oops" in n for n in t.notes)


def test_numa_node_of_cpus():
    assert npu_smi.numa_node_of_cpus("144-167", KUNPENG_8X24) == 6
    assert npu_smi.numa_node_of_cpus("20-30", KUNPENG_8X24) is None  # spans nodes 0 and 1
    assert npu_smi.numa_node_of_cpus("0-63,128-191", {0: "0-63,128-191", 1: "64-127,192-255"}) == 0
    assert npu_smi.numa_node_of_cpus("0-23", {}) is None
    assert npu_smi.numa_node_of_cpus(None, KUNPENG_8X24) is None
    assert npu_smi.numa_node_of_cpus("0-23", {0: "0-23", 1: "0-47"}) is None  # ambiguous map


def test_apply_topology_maps_phy_ids_of_a3_chips():
    from nodeledger.machine.profile import Accelerator

    chips = [
        npu_smi.NpuChip(6, c, 12 + c, "Ascend910", "OK", None, 0, 65536 * 2**20, None)
        for c in (0, 1)
    ]
    cards = [Accelerator(index=i, vendor="huawei", product="Ascend 910") for i in range(2)]
    topo = npu_smi.parse_topo(
        (ASC / "sglang30453-a3-2chip-sio-npu-smi-info-t-topo.txt").read_text()
    )
    notes: list[str] = []
    inter = apply_npu_topology(cards, chips, topo, {}, notes)
    assert [(p.a, p.b, p.label, p.kind.value) for p in inter.pairs] == [(0, 1, "SIO", "hccs")]
    assert all(c.numa_node is None for c in cards)


def test_parse_cli_kinds(tmp_path):
    data = cli_json("parse", "npu-smi-topo", str(TOPO_910B))
    assert set(data) >= {"cards", "links", "nics", "notes"} and len(data["links"]) == 28
    topo = cli_json("parse", "amd-smi-topology", str(AMD / "oci-mi355x-x8-amd-smi-topology.txt"))
    assert len(topo["cards"]) == 8 and {lk["label"] for lk in topo["links"]} == {"XGMI"}
    static = cli_json(
        "parse", "amd-smi-static-json", str(AMD / "rdme-mi210-amd-smi-static-json.txt")
    )
    assert static["cards"][0]["name"] == "AMD Instinct MI210"
    bad = tmp_path / "x.txt"
    bad.write_text("garbage\n")
    for kind in ("npu-smi-topo", "amd-smi-topology", "amd-smi-static-json", "amd-smi-static"):
        proc = run_cli("parse", kind, str(bad))
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, (
            kind,
            proc.stderr,
        )


# -- amd-smi parsers --------------------------------------------------------------------------------


def test_amd_smi_topology_mi355x_all_xgmi():
    t = amd_smi.parse_amd_smi_topology((AMD / "oci-mi355x-x8-amd-smi-topology.txt").read_text())
    assert (
        t.devices[0] == "0000:0d:00.0" and t.devices[-1] == "0000:f4:00.0" and len(t.devices) == 8
    )
    assert [(lk["a"], lk["b"]) for lk in t.links] == _pairs(8)
    assert {
        (lk["label"], lk["kind"], lk["weight"], lk["hops"], lk["access"]) for lk in t.links
    } == {("XGMI", "xgmi", 0, 1, "ENABLED")}
    assert t.notes == []


def test_amd_smi_topology_two_radeons_over_pcie():
    t = amd_smi.parse_amd_smi_topology(
        (AMD / "rocm6074-2x-rx7900xtx-amd-smi-topology.txt").read_text()
    )
    assert t.links == [{"a": 0, "b": 1, "a_bdf": "0000:03:00.0", "b_bdf": "0000:0c:00.0", "label": "PCIE",
                        "kind": "pcie", "weight": 40, "hops": 2, "access": "DISABLED"}]  # fmt: skip
    assert any("PCIE links" in n for n in t.notes) and any("DISABLED" in n for n in t.notes)


def test_amd_smi_static_json_and_text():
    j = amd_smi.parse_amd_smi_static_json((AMD / "rdme-mi210-amd-smi-static-json.txt").read_text())
    assert j == [{"index": 0, "name": "AMD Instinct MI210", "pci_bus": None, "slot": "OAM", "pcie": "Gen 4",
                  "vram_total_bytes": 65520 * 2**20, "numa_node": 1, "partition": None, "fields": 15}]  # fmt: skip
    t = amd_smi.parse_amd_smi_static(
        (AMD / "rocmsystems-doc-mi300a-amd-smi-static.txt").read_text()
    )
    assert len(t) == 1  # the CPU block before it is not a GPU
    c = t[0]
    assert (c["index"], c["name"], c["pci_bus"], c["numa_node"]) == (
        0,
        "AMD Instinct MI300A",
        "0000:01:00.0",
        0,
    )
    assert c["vram_total_bytes"] == 96432 * 2**20 and c["partition"] == "NPS1, SPX"


def test_amd_smi_static_json_rocm6_list_shape():
    # ROCm 6.x prints a bare list; vram as in AMD's blog (`amd-smi static --json | jq '.[0]["vram"]'`)
    text = json.dumps([{"gpu": 0, "asic": {"market_name": "MI300X-O"}, "bus": {"bdf": "0000:05:00.0"},
                        "vram": {"type": "HBM", "vendor": "N/A", "size": {"value": 196592, "unit": "MB"}}}])  # fmt: skip
    (c,) = amd_smi.parse_amd_smi_static_json("WARNING: some banner\n" + text)
    assert (c["name"], c["pci_bus"], c["vram_total_bytes"], c["numa_node"]) == (
        "MI300X-O", "0000:05:00.0", 196592 * 2**20, None)  # fmt: skip


@pytest.mark.parametrize(
    ("fn", "text", "msg"),
    [
        (amd_smi.parse_amd_smi_static_json, "not json", "no JSON"),
        (amd_smi.parse_amd_smi_static_json, '{"gpu_data": [{"asic": {}}]}', "integer 'gpu'"),
        (amd_smi.parse_amd_smi_static_json, "[]", "no GPU"),
        (amd_smi.parse_amd_smi_static_json, '[{"gpu": 0', "not valid JSON"),
        (amd_smi.parse_amd_smi_static, "CPU: 0\n    SMU:\n        FW_VERSION: 1\n", "no 'GPU: n'"),
        (amd_smi.parse_amd_smi_topology, "garbage\n", "TABLE"),
        (amd_smi.parse_amd_smi_topology, "LINK TYPE TABLE:\nGPU0 GPU1\n", "BDFs"),
    ],
)
def test_amd_smi_garbage_is_a_parse_error(fn, text, msg):
    with pytest.raises(ParseError, match=msg):
        fn(text)


# -- live probe with fake tools ----------------------------------------------------------------------


def _tool(bindir: Path, name: str, script: str) -> None:
    p = bindir / name
    p.write_text("#!/bin/sh\n" + script)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)


def _box(tmp_path, numa: dict[int, str], timeout=0.5) -> Runner:
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    (root / "proc/meminfo").write_text(
        "MemTotal:       131072000 kB\nMemAvailable:   100000000 kB\n"
    )
    for n, cpus in numa.items():
        d = root / f"sys/devices/system/node/node{n}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    return Runner(timeout=timeout, root=root, path=str(bindir))


def _ascend_box(tmp_path, topo_script: str, numa=KUNPENG_8X24) -> Runner:
    r = _box(tmp_path, numa)
    _tool(
        Path(r.path),
        "npu-smi",
        f'if [ "$2" = "-t" ]; then {topo_script}; else cat {INFO_910B}; fi\n',
    )
    return r


def test_fake_ascend_box_reads_hccs_and_numa(tmp_path):
    p = probe_machine(_ascend_box(tmp_path, f"cat {TOPO_910B}"))
    assert len(p.accelerators) == 8 and {a.memory_bytes for a in p.accelerators} == {65536 * 2**20}
    assert {(p.link(a, b).label, p.link(a, b).kind.value) for a, b in _pairs(8)} == {
        ("HCCS", "hccs")
    }
    assert len(p.interconnect.pairs) == 28 and p.link(0, 7).source == "npu-smi info -t topo"
    assert [a.numa_node for a in p.accelerators] == NUMA_910B
    assert "144-167" in p.accelerators[0].sources["numa_node"]
    assert [a.pci_bus_id for a in p.accelerators][:3] == [
        "0000:C1:00.0",
        "0000:C2:00.0",
        "0000:81:00.0",
    ]


def test_affinity_spanning_numa_nodes_is_left_to_sysfs(tmp_path):
    r = _ascend_box(tmp_path, f"cat {TOPO_910B}", numa={0: "0-99", 1: "100-191"})
    p = probe_machine(r)
    assert len(p.interconnect.pairs) == 28  # links kept
    assert [a.numa_node for a in p.accelerators] == [1, 1, None, None, 0, 0, 0, 0]
    assert any("NPU2 (96-119)" in n and "not within one host NUMA node" in n for n in p.notes), (
        p.notes
    )


@pytest.mark.parametrize(
    ("topo_script", "note"),
    [
        ("sleep 30", "npu-smi info -t topo: timed out after 0.5 s"),
        ("echo 'This device does not support querying topo.'; exit 1",
         "npu-smi info -t topo: exit 1: This device does not support querying topo."),
        ("echo 'This device does not support querying topo.'", "npu-smi info -t topo not understood"),
        ("head -c 300 /dev/urandom | base64", "npu-smi info -t topo not understood"),
        (f"head -n 3 {TOPO_910B}", "truncated"),
    ],
)  # fmt: skip
def test_failing_topo_keeps_the_cards(tmp_path, topo_script, note):
    t0 = time.perf_counter()
    p = probe_machine(_ascend_box(tmp_path, topo_script))
    assert time.perf_counter() - t0 < 5
    assert len(p.accelerators) == 8 and p.total_accelerator_memory_bytes() == 8 * 65536 * 2**20
    assert p.interconnect.pairs == [] and p.link(0, 1).kind.value == "unknown"
    assert any(note in n and "HCCS links unknown" in n for n in p.notes), p.notes


MI355X_BDFS = ["0000:0d:00.0", "0000:26:00.0", "0000:5d:00.0", "0000:75:00.0", "0000:8e:00.0",
               "0000:a7:00.0", "0000:dc:00.0", "0000:f4:00.0"]  # fmt: skip
# `amd-smi static --json` of the OCI MI355X box, assembled from what its recorded default view
# prints (BDF, name, 294896 MB per GPU; NUMA from its numactl: 2 nodes) -- not a recording
MI355X_STATIC = json.dumps({"gpu_data": [
    {"gpu": i, "asic": {"market_name": "AMD Instinct MI355X"}, "bus": {"bdf": bdf},
     "vram": {"size": {"value": 294896, "unit": "MB"}}, "numa": {"node": i // 4},
     "partition": {"memory_partition": "NPS1", "accelerator_partition": "SPX"}}
    for i, bdf in enumerate(MI355X_BDFS)]})  # fmt: skip
ROCM_CONCISE = (  # the columns of rocm-smi's concise table; one made-up card
    "Device  Node  IDs              Temp    Power  Partitions          SCLK    MCLK    Fan  Perf  PwrCap  VRAM%  GPU%\n"
    "0       2     0x74a1,   55354  35.0C   133.0W  NPS1, SPX, 0        131Mhz  900Mhz  0%   auto  750.0W  0%     0%\n"
    "        AMD Instinct MI300X\n"
)


def _amd_box(tmp_path, amd_script: str | None, rocm: bool = False) -> Runner:
    r = _box(tmp_path, {0: "0-63,128-191", 1: "64-127,192-255"})
    (tmp_path / "static.json").write_text(MI355X_STATIC)
    if amd_script is not None:
        _tool(Path(r.path), "amd-smi", amd_script)
    if rocm:
        (tmp_path / "concise.txt").write_text(ROCM_CONCISE)
        _tool(
            Path(r.path),
            "rocm-smi",
            f'case "$1" in "") cat {tmp_path}/concise.txt;; *) exit 2;; esac\n',
        )
    return r


def _good_amd(tmp_path) -> str:
    return (f'case "$1" in static) cat {tmp_path}/static.json;; '
            f'topology) cat {AMD / "oci-mi355x-x8-amd-smi-topology.txt"};; *) exit 2;; esac\n')  # fmt: skip


def test_fake_mi355x_box_with_amd_smi(tmp_path):
    r = _amd_box(tmp_path, None, rocm=True)
    _tool(Path(r.path), "amd-smi", _good_amd(tmp_path))
    p = probe_machine(r)
    assert [a.product for a in p.accelerators] == [
        "AMD Instinct MI355X"
    ] * 8  # amd-smi wins over rocm-smi
    assert {a.memory_bytes for a in p.accelerators} == {294896 * 2**20}
    assert [a.pci_bus_id for a in p.accelerators] == MI355X_BDFS
    assert [a.numa_node for a in p.accelerators] == [0] * 4 + [1] * 4
    assert {a.partition for a in p.accelerators} == {"NPS1, SPX"}
    assert {(p.link(a, b).label, p.link(a, b).kind.value) for a, b in _pairs(8)} == {
        ("XGMI", "xgmi")
    }
    assert p.link(2, 5).source == "amd-smi topology (weight 0, hops 1)"
    assert not any("rocm-smi" in n for n in p.notes)


def test_amd_smi_text_static_fallback_and_positional_topology(tmp_path):
    # static --json fails; the text static has no bus ids: the 2-GPU topology maps by position
    (tmp_path / "static.txt").write_text(
        "GPU: 0\n    ASIC:\n        MARKET_NAME: Radeon RX 7900 XTX\n    VRAM:\n        SIZE: 24560 MB\n"
        "GPU: 1\n    ASIC:\n        MARKET_NAME: Radeon RX 7900 XTX\n    VRAM:\n        SIZE: 24560 MB\n"
    )
    script = (f'if [ "$2" = "--json" ]; then echo "unrecognized arguments: --json" >&2; exit 2; fi\n'
              f'case "$1" in static) cat {tmp_path}/static.txt;; '
              f'topology) cat {AMD / "rocm6074-2x-rx7900xtx-amd-smi-topology.txt"};; esac\n')  # fmt: skip
    p = probe_machine(_amd_box(tmp_path, script))
    assert [a.memory_bytes for a in p.accelerators] == [24560 * 2**20] * 2
    assert p.link(0, 1).label == "PCIE" and "peer access DISABLED" in p.link(0, 1).source
    assert any("amd-smi static --json: exit 2" in n for n in p.notes)
    assert any("matched to cards by position" in n for n in p.notes)


@pytest.mark.parametrize(
    ("script", "note"),
    [
        ("sleep 30\n", "amd-smi static --json: timed out after 0.5 s"),
        ("echo 'AMDSMI_STATUS_DRIVER_NOT_LOADED' >&2; exit 1\n", "amd-smi static: exit 1: AMDSMI_STATUS_DRIVER_NOT_LOADED"),
        ("head -c 300 /dev/urandom | base64\n", "amd-smi static not understood"),
        (None, None),
    ],
)  # fmt: skip
@pytest.mark.parametrize("rocm", [False, True])
def test_failing_amd_smi(tmp_path, script, note, rocm):
    t0 = time.perf_counter()
    p = probe_machine(_amd_box(tmp_path, script, rocm=rocm))
    assert time.perf_counter() - t0 < 5
    assert p.host.ram_bytes == 131072000 * 1024 and len(p.host.numa_nodes) == 2
    if note:
        assert any(note in n for n in p.notes), p.notes
    if rocm:  # rocm-smi takes over
        assert [a.product for a in p.accelerators] == ["AMD Instinct MI300X"]
        assert (script is None) or any("falling back to rocm-smi" in n for n in p.notes)
    else:
        assert p.accelerators == [] and any("no accelerator found" in n for n in p.notes)


def test_failing_amd_smi_topology_keeps_cards(tmp_path):
    script = f'case "$1" in static) cat {tmp_path}/static.json;; *) sleep 30;; esac\n'
    p = probe_machine(_amd_box(tmp_path, script))
    assert len(p.accelerators) == 8 and p.interconnect.pairs == []
    assert any("amd-smi topology: timed out" in n for n in p.notes)


def test_hung_amd_smi_leaves_the_ascend_backend_alone(tmp_path):
    r = _ascend_box(tmp_path, f"cat {TOPO_910B}")
    _tool(Path(r.path), "amd-smi", "sleep 30\n")
    p = probe_machine(r)
    assert len(p.accelerators) == 8 and {a.vendor.value for a in p.accelerators} == {"huawei"}
    assert any("amd-smi static --json: timed out" in n for n in p.notes)
    assert p.link(3, 4).label == "HCCS"


# -- bundle replays ---------------------------------------------------------------------------------


def _replay(commands: dict, tools: tuple[str, ...], numa: dict[int, str] | None = None):
    numa = numa or {}
    files = {f"/sys/devices/system/node/node{n}/cpulist": c + "\n" for n, c in numa.items()}
    b = manifest_from_outputs(commands, files, tools=tools)
    b["manifest"]["globs"] = {
        "/sys/devices/system/node/node[0-9]*": [f"/sys/devices/system/node/node{n}" for n in numa]
    }
    return probe_machine(ReplayRunner(b["manifest"], b["blobs"], "fixture set"))


def test_bundle_8x_ascend_910b3_with_hccs_topology():
    p = _replay({("npu-smi", "info"): INFO_910B.read_text(),
                 ("npu-smi", "info", "-t", "topo"): TOPO_910B.read_text()},
                ("npu-smi",), KUNPENG_8X24)  # fmt: skip
    assert len(p.accelerators) == 8 and p.total_accelerator_memory_bytes() == 8 * 65536 * 2**20
    assert {p.link(a, b).label for a, b in _pairs(8)} == {"HCCS"}
    assert {p.link(a, b).kind.value for a, b in _pairs(8)} == {"hccs"}
    assert [a.numa_node for a in p.accelerators] == NUMA_910B
    assert [n.id for n in p.host.numa_nodes] == list(range(8))


def test_bundle_8x_ascend_910b3_without_host_numa_map():
    p = _replay({("npu-smi", "info"): INFO_910B.read_text(),
                 ("npu-smi", "info", "-t", "topo"): TOPO_910B.read_text()}, ("npu-smi",))  # fmt: skip
    assert {p.link(a, b).label for a, b in _pairs(8)} == {"HCCS"}
    assert all(a.numa_node is None for a in p.accelerators)
    assert any("no host NUMA map" in n for n in p.notes)


@pytest.mark.shared
def test_bundle_shared_910b3_info_with_own_topo():
    info = SHARED / "fixtures/real/ascend/vllm-ascend-6512-910b3-x8-npu-smi-info.txt"
    if not info.is_file():
        pytest.skip("../shared ascend fixture absent")
    p = _replay({("npu-smi", "info"): info.read_text(errors="replace"),
                 ("npu-smi", "info", "-t", "topo"): TOPO_910B.read_text()},
                ("npu-smi",), KUNPENG_8X24)  # fmt: skip
    assert len(p.accelerators) == 8 and {p.link(a, b).kind.value for a, b in _pairs(8)} == {"hccs"}
    assert [a.numa_node for a in p.accelerators] == NUMA_910B


def test_bundle_8x_mi355x_with_amd_smi():
    p = _replay({("amd-smi", "static", "--json"): MI355X_STATIC,
                 ("amd-smi", "topology"): (AMD / "oci-mi355x-x8-amd-smi-topology.txt").read_text()},
                ("amd-smi",), {0: "0-63,128-191", 1: "64-127,192-255"})  # fmt: skip
    assert len(p.accelerators) == 8 and {p.link(a, b).label for a, b in _pairs(8)} == {"XGMI"}
    assert p.total_accelerator_memory_bytes() == 8 * 294896 * 2**20
    assert [a.numa_node for a in p.accelerators] == [0] * 4 + [1] * 4
