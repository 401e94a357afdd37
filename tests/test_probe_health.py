"""Card health and NIC placement (issue 4, NVIDIA): the nvidia-smi query with its health fields
and its fallback, --query-compute-apps, the health parts of the -q / -q -x / table parsers on
the recorded outputs (expectations read off each file), and topo -m NIC rows merged with the
NICs sysfs lists.  NVML's side is in test_nvml.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, SHARED
from nodeledger.machine.parsers import nvidia_smi
from nodeledger.machine.parsers.common import pci_address
from nodeledger.machine.parsers.nvidia_query import QUERY, QUERY_BASE, parse_query_csv
from nodeledger.machine.probe import Runner, probe_machine
from test_probe import _fake_root, _tool

REAL = SHARED / "fixtures" / "real"


def _real(rel: str) -> str:
    if not (REAL / rel).is_file():
        pytest.skip(f"../shared fixture {rel} absent")
    return (REAL / rel).read_text(errors="replace")


def _own(name: str) -> str:
    """A recording in tests/fixtures/h200 without its "$ command" and "[exit N]" lines."""
    lines = (FIXTURES / "h200" / name).read_text().split("\n")
    return "\n".join(ln for ln in lines if not ln.startswith(("$ ", "[exit ")))


# -- the query CSV -------------------------------------------------------------------------------

HEALTH_KEYS = ("memory_used_mib", "persistence", "ecc_mode", "ecc_corrected", "ecc_uncorrected",
               "retired_sbe", "retired_dbe", "retired_pending", "remapped_pending", "remapped_failed")  # fmt: skip


def test_query_fields_ask_for_health():
    assert QUERY.startswith(QUERY_BASE + ",")
    for field in ("persistence_mode", "ecc.mode.current", "ecc.errors.corrected.volatile.total",
                  "ecc.errors.uncorrected.volatile.total", "retired_pages.pending", "memory.used",
                  "remapped_rows.pending", "remapped_rows.failure"):  # fmt: skip
        assert field in QUERY.split(",")


def test_query_csv_health_row_and_unknowns():
    text = ("0, NVIDIA H100 80GB HBM3, 81559, 00000000:18:00.0, Disabled, 1024, Enabled, Enabled, 3, 0, "
            "[N/A], [N/A], [N/A], No, No\n"
            "1, NVIDIA GeForce RTX 4090, 24564, 00000000:41:00.0, [N/A], 0, Disabled, [Not Supported], "
            "[Not Supported], [Not Supported], [Not Supported], [Not Supported], [Not Supported], "
            "[Not Supported], [Not Supported]\n")  # fmt: skip
    a, b = parse_query_csv(text)
    assert [a[k] for k in HEALTH_KEYS] == [
        1024,
        "enabled",
        "enabled",
        3,
        0,
        None,
        None,
        None,
        "no",
        "no",
    ]
    assert a["mig"] == "Disabled" and b["mig"] is None
    assert [b[k] for k in HEALTH_KEYS] == [0, "disabled"] + [None] * 8
    # the base field list (old drivers, old bundles) still parses
    (c,) = parse_query_csv("0, A100, 81920, 00000000:07:00.0, Enabled\n")
    assert c["memory_mib"] == 81920 and all(c[k] is None for k in HEALTH_KEYS)


def test_query_csv_own_h200_with_header():
    (row,) = parse_query_csv(
        _own("nvidia_smi___query_gpu_index_name_pci_bus_id_uuid_memory_tot.txt")
    )
    assert (row["index"], row["name"], row["memory_mib"], row["pci_bus_id"]) == (
        0, "NVIDIA H200", 143771, "00000000:00:06.0")  # fmt: skip
    assert (row["memory_used_mib"], row["persistence"], row["mig"], row["ecc_mode"]) == (
        0, "enabled", "Disabled", "enabled")  # fmt: skip


@pytest.mark.shared
def test_query_csv_recorded_all_fields_h100():
    (row,) = parse_query_csv(
        _real("nvidia-query/gpuexporter-h100-load-query-gpu-all-fields.csv.txt")
    )
    assert (row["index"], row["memory_mib"], row["pci_bus_id"]) == (0, 81559, "00000000:00:09.0")
    # memory.used 19818 MiB; Enabled; Enabled; volatile totals 0 / 0; retired pages [N/A] x3;
    # remapped_rows.pending No, .failure No
    assert [row[k] for k in HEALTH_KEYS] == [
        19818,
        "enabled",
        "enabled",
        0,
        0,
        None,
        None,
        None,
        "no",
        "no",
    ]


# -- --query-compute-apps ------------------------------------------------------------------------


@pytest.mark.shared
def test_compute_apps_recorded():
    apps = nvidia_smi.parse_compute_apps(
        _real("nvidia-query/gpuexporter-h100-load-query-compute-apps.csv.txt")
    )
    assert [(a["gpu_bus_id"], a["pid"], a["process_name"], a["used_bytes"]) for a in apps] == [
        ("00000000:00:09.0", 11327, "/root/tools/memhog", 2566 * 2**20),
        ("00000000:00:09.0", 11328, "/root/tools/memhog", 1542 * 2**20),
        ("00000000:00:09.0", 11345, "./gpu_burn", 15690 * 2**20),
    ]


def test_compute_apps_empty_na_and_commas():
    assert (
        nvidia_smi.parse_compute_apps(
            _own("nvidia_smi___query_compute_apps_pid_process_name_used_memory.txt")
        )
        == []
    )
    assert nvidia_smi.parse_compute_apps("") == []
    apps = nvidia_smi.parse_compute_apps(
        "00000000:18:00.0, 7, python train.py --a=1,2, 100\n00000000:18:00.0, 8, [N/A], [N/A]\n"
    )
    assert [(a["pid"], a["process_name"], a["used_bytes"]) for a in apps] == [
        (7, "python train.py --a=1,2", 100 * 2**20), (8, None, None)]  # fmt: skip
    with pytest.raises(nvidia_smi.ParseError, match="numeric pid"):
        nvidia_smi.parse_compute_apps("00000000:18:00.0, x, y, 1\n")


@pytest.mark.parametrize(
    "spelling",
    [
        "00000000:18:00.0",
        "0000:18:00.0",
        "18:00.0",
        "0000:18:00",
        "0000:18:00.0 ",
        "00000000:18:00",
    ],
)
def test_one_pci_bus_id_spelling(spelling):
    """The spellings the old normalisers disagreed on ("18:00.0" -> "18:00.0" in one of them,
    "0000:18:00" -> None / "0000:18:00" / "0000:18:00.0") all become the one key every match
    (probe, watch, doctor, bench) uses."""
    assert pci_address(spelling) == "0000:18:00.0"


@pytest.mark.parametrize("text", [None, "", "N/A", "[Not Supported]", "18:00.9", "zz:00.0"])
def test_not_a_pci_bus_id(text):
    assert pci_address(text) is None


def test_pci_bus_id_hex_case():
    assert pci_address("00000000:9A:00.0") == pci_address("0000:9a:00.0") == "0000:9a:00.0"


# -- -q text, -q -x XML, table: health read off each recording -----------------------------------

# per card: (ecc mode, volatile corrected, volatile uncorrected, retired single, double, pending,
#            remapped correctable, uncorrectable, pending, failure)
A100_OK = ("enabled", 0, 0, None, None, None, 0, 0, "no", "no")
Q_HEALTH = {
    "gls-a100-sxm4-x4-q.txt": [
        A100_OK,
        ("enabled", 353, 0, None, None, None, 1, 0, "yes", "no"),  # DRAM Correctable 353
        ("enabled", 0, 0, None, None, None, 1, 0, "no", "no"),
        A100_OK,
    ],
    # aggregate DRAM Uncorrectable 1, volatile 0; one uncorrectable remapped row
    "gls-gh200-q.txt": [("enabled", 0, 0, None, None, None, 0, 1, "no", "no")],
    # MIG on: "Remapped Rows : N/A"; the MIG devices' own ECC blocks are not the card's
    "gpuexporter-h200-mig-load-q.txt": [
        ("enabled", 0, 0, None, None, None, None, None, None, None)
    ],
    "jdh4-della-h100-q.txt": [A100_OK],
}
XML_HEALTH = {
    # volatile counters N/A under MIG, <remapped_rows>N/A</remapped_rows>
    "netdata-a100-sxm4-40gb-mig-q-x.xml.txt": (
        "enabled",
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
    ),
    "netdata-rtx3060-laptop-q-x-processes.xml.txt": (None,) * 10,  # every field N/A
    "netdata-rtx4090-drv535-q-x.xml.txt": (
        "disabled",
        None,
        None,
        None,
        None,
        None,
        0,
        0,
        "no",
        "no",
    ),
}


def _health(c) -> tuple:
    return (c.ecc_mode, c.ecc_corrected_volatile, c.ecc_uncorrected_volatile, c.retired_pages_single_bit,
            c.retired_pages_double_bit, c.retired_pages_pending, c.remapped_rows_correctable,
            c.remapped_rows_uncorrectable, c.remapped_rows_pending, c.remapped_rows_failed)  # fmt: skip


@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(Q_HEALTH))
def test_q_text_health(name):
    info = nvidia_smi.parse_q_text(_real(f"nvidia-query/{name}"))
    assert [_health(c) for c in info.cards] == Q_HEALTH[name]


@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(XML_HEALTH))
def test_xml_health(name):
    info = nvidia_smi.parse_xml(_real(f"nvidia-query/{name}"))
    assert _health(info.cards[0]) == XML_HEALTH[name]


def test_own_h200_health_in_q_text_and_xml():
    h200 = ("enabled", 0, 0, None, None, None, 0, 0, "no", "no")
    assert _health(nvidia_smi.parse_q_text(_own("nvidia_smi__q_.txt")).cards[0]) == h200
    assert _health(nvidia_smi.parse_xml(_own("nvidia_smi__q__x_.txt")).cards[0]) == h200
    table = nvidia_smi.parse_table(_own("nvidia_smi_.txt")).cards[0]
    assert (table.ecc_mode, table.ecc_uncorrected_volatile) == ("enabled", 0)  # cell "0"


@pytest.mark.shared
def test_q_text_processes_h200_mig():
    info = nvidia_smi.parse_q_text(_real("nvidia-query/gpuexporter-h200-mig-load-q.txt"))
    assert [(p.gpu, p.pid, p.type, p.name, p.used_bytes) for p in info.processes] == [
        (0, 12249, "C", "/root/tools/memhog", 2194 * 2**20),
        (0, 12250, "C", "/root/tools/memhog", 1170 * 2**20),
        (0, 12267, "C", "./gpu_burn", 13526 * 2**20),
    ]
    assert nvidia_smi.parse_q_text(_real("nvidia-query/jdh4-della-h100-q.txt")).processes == []


# the table's "Volatile Uncorr. ECC" cell of card 0: (ecc mode, uncorrected)
TABLE_ECC = {
    "gengwg-10x-quadro-rtx8000-drv470-legacy.txt": ("disabled", None),  # Off
    "gls-h100-sxm-x8.txt": ("enabled", 0),  # 0
    "gls-rtx4090-x8.txt": ("disabled", None),  # Off
    "gpuexporter-h100-drv590-load-processes.txt": ("enabled", 0),
    "gpuexporter-h200-mig-drv590-load.txt": ("enabled", None),  # On (MIG)
    "gpuexporter-rtx2080super-linux-drv610-kmd-umd.txt": (None, None),  # N/A
    "gpuexporter-rtx4080super-drv595-desktop-mixed-procs.txt": (None, None),
    "gpuexporter-windows-rtx2080super-drv610-wddm-processes.txt": (None, None),
    "stelline-asus-esc8000a-4x-rtx6000ada.txt": ("disabled", None),
}


@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(TABLE_ECC))
def test_table_ecc_cell(name):
    c = nvidia_smi.parse_table(_real(f"nvidia-smi-table/{name}")).cards[0]
    assert (c.ecc_mode, c.ecc_uncorrected_volatile) == TABLE_ECC[name]


# -- a fake box: nvidia-smi with health, processes and NICs; sysfs with IB and RoCE --------------

FULL_ROWS = (
    "0, NVIDIA H200, 143771, 00000000:18:00.0, Disabled, 1024, Enabled, Enabled, 3, 0, [N/A], [N/A], [N/A], No, No\n"
    "1, NVIDIA H200, 143771, 00000000:9A:00.0, Disabled, 0, Disabled, Enabled, 0, 1, [N/A], [N/A], [N/A], Yes, No\n"
)  # fmt: skip
BASE_ROWS = "0, NVIDIA H200, 143771, 00000000:18:00.0, Disabled\n1, NVIDIA H200, 143771, 00000000:9A:00.0, Disabled\n"
APPS_OUT = "00000000:18:00.0, 4242, /usr/bin/python3, 1000\n0000:9a:00.0, 4343, vllm, [N/A]\n"
TOPO_NICS = (
    "\tGPU0\tGPU1\tNIC0\tNIC1\tNIC2\tCPU Affinity\tNUMA Affinity\n"
    "GPU0\t X \tNV18\tPIX\tSYS\tNODE\t0-15,32-47\t0\n"
    "GPU1\tNV18\t X \tSYS\tPXB\tSYS\t16-31,48-63\t1\n"
    "NIC0\tPIX\tSYS\t X \tSYS\tNODE\n"
    "NIC1\tSYS\tPXB\tSYS\t X \tSYS\n"
    "NIC2\tNODE\tSYS\tNODE\tSYS\t X \n\n"
    "Legend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n\n"
    "NIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n  NIC2: mlx5_2\n"
)


def _write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def _rdma_sysfs(root: Path) -> None:
    """mlx5_0: InfiniBand NDR on NUMA 0; mlx5_1: RoCE under netdev ens2np0 on NUMA 1."""
    ib = "sys/class/infiniband"
    _write(root, f"{ib}/mlx5_0/ports/1/link_layer", "InfiniBand\n")
    _write(root, f"{ib}/mlx5_0/ports/1/rate", "400 Gb/sec (4X NDR)\n")
    _write(root, f"{ib}/mlx5_0/device/numa_node", "0\n")
    _write(root, f"{ib}/mlx5_0/device/uevent", "DRIVER=mlx5_core\nPCI_SLOT_NAME=0000:1a:00.0\n")
    _write(root, f"{ib}/mlx5_1/ports/1/link_layer", "Ethernet\n")
    _write(root, f"{ib}/mlx5_1/ports/1/rate", "200 Gb/sec (4X HDR)\n")
    (root / f"{ib}/mlx5_1/device/net/ens2np0").mkdir(parents=True)
    _write(root, f"{ib}/mlx5_1/device/numa_node", "1\n")
    net = "sys/class/net/ens2np0"
    (root / net / "device").mkdir(parents=True)
    _write(root, f"{net}/type", "1\n")
    _write(root, f"{net}/speed", "200000\n")
    _write(root, f"{net}/device/numa_node", "1\n")
    _write(root, f"{net}/device/uevent", "PCI_SLOT_NAME=0000:9a:00.0\n")


def _box(tmp_path: Path, refuse_health: bool = False, rdma: bool = True) -> Runner:
    root = tmp_path / "root"
    _fake_root(root)
    if rdma:
        _rdma_sysfs(root)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (
        ("full", FULL_ROWS),
        ("base", BASE_ROWS),
        ("apps", APPS_OUT),
        ("topo", TOPO_NICS),
    ):
        (tmp_path / f"{name}.txt").write_text(text)
    refuse = ("--query-gpu=*remapped_rows*) echo 'Field \"remapped_rows.pending\" is not a valid field "
              "to query.' >&2; exit 2;;\n" if refuse_health else "")  # fmt: skip
    _tool(bindir, "nvidia-smi", f'case "$1" in\n{refuse}'
          f'--query-gpu=*remapped_rows*) cat {tmp_path}/full.txt;;\n'
          "--query-gpu=index,uuid) printf '0, GPU-5f3c1e2a-0000\\n1, [N/A]\\n';;\n"
          f'--query-gpu=*) cat {tmp_path}/base.txt;;\n'
          f'--query-compute-apps=*) cat {tmp_path}/apps.txt;;\n'
          f'topo) cat {tmp_path}/topo.txt;;\nesac\n')  # fmt: skip
    return Runner(timeout=2, root=root, path=str(bindir))


def test_fake_box_health_processes_and_nics(tmp_path):
    p = probe_machine(_box(tmp_path))
    a, b = p.accelerators
    assert (a.persistence_mode, a.ecc_mode, a.ecc_errors_corrected, a.ecc_errors_uncorrected) == (
        "enabled", "enabled", 3, 0)  # fmt: skip
    assert (b.persistence_mode, b.ecc_errors_uncorrected, b.remapped_rows_pending) == (
        "disabled",
        1,
        "yes",
    )
    assert (a.retired_pages, a.retired_pages_pending, a.remapped_rows_failed) == (None, None, "no")
    assert (a.memory_used_bytes, b.memory_used_bytes) == (1024 * 2**20, 0)
    assert (
        a.sources["ecc_errors_uncorrected"]
        == "nvidia-smi --query-gpu ecc.errors.uncorrected.volatile.total"
    )
    assert "retired_pages" not in a.sources
    assert [(x.pid, x.name, x.used_bytes, x.kind) for x in a.processes] == [
        (4242, "/usr/bin/python3", 1000 * 2**20, "C")
    ]
    assert [(x.pid, x.name, x.used_bytes) for x in b.processes] == [
        (4343, "vllm", None)
    ]  # bus id spelled otherwise
    assert a.sources["processes"].startswith("nvidia-smi --query-compute-apps")
    nics = {n.name: n for n in p.network.nics}
    assert list(nics) == ["mlx5_0", "ens2np0", "eth0", "mlx5_2"]  # no duplicate of mlx5_0 / mlx5_1
    ib, roce, eth, extra = nics["mlx5_0"], nics["ens2np0"], nics["eth0"], nics["mlx5_2"]
    assert (ib.kind, ib.speed_gbit, ib.numa_node, ib.pci_bus_id, ib.near_cards) == (
        "infiniband", 400.0, 0, "0000:1a:00.0", [0])  # fmt: skip
    assert (roce.kind, roce.speed_gbit, roce.numa_node, roce.pci_bus_id, roce.near_cards) == (
        "roce", 200.0, 1, "0000:9a:00.0", [1])  # RoCE: matched through mlx5_1/device/net  # fmt: skip
    assert (eth.kind, eth.near_cards, eth.numa_node) == ("ethernet", [], None)
    # only in topo -m: an RDMA device, no card at PIX/PXB, NUMA node of GPU0 (NODE)
    assert (extra.kind, extra.near_cards, extra.numa_node, extra.speed_gbit) == (
        "rdma",
        [],
        0,
        None,
    )
    assert "near_cards from nvidia-smi topo -m" in ib.source and extra.source.startswith(
        "nvidia-smi topo -m"
    )


def test_fake_box_uuid_from_the_vendor_tool_with_its_source(tmp_path):
    """The probe kept uuid null although nvidia-smi gives it (seen on a real H200)."""
    a, b = probe_machine(_box(tmp_path, rdma=False)).accelerators
    assert (a.uuid, a.sources["uuid"]) == ("GPU-5f3c1e2a-0000", "nvidia-smi --query-gpu=uuid")
    assert b.uuid is None and "uuid" not in b.sources  # [N/A] stays unknown


def test_fake_box_old_driver_refusing_health_fields(tmp_path):
    r = _box(tmp_path, refuse_health=True)
    p = probe_machine(r)
    assert [a.memory_bytes for a in p.accelerators] == [143771 * 2**20] * 2
    assert all(a.ecc_mode is None and a.persistence_mode is None for a in p.accelerators)
    assert any(
        "with health fields exit 2" in n and "retrying with the base fields" in n for n in p.notes
    )
    queries = [res.argv[1] for res in r.log if res.argv[1].startswith("--query-gpu")]
    assert queries == [
        f"--query-gpu={QUERY}",
        f"--query-gpu={QUERY_BASE}",
        "--query-gpu=index,uuid",
    ]
    assert [x.pid for x in p.accelerators[0].processes] == [4242]


def test_fake_box_hung_query_is_not_retried(tmp_path):
    r = _box(tmp_path, rdma=False)
    _tool(Path(r.path), "nvidia-smi", "sleep 30\n")
    r.timeout = 0.3
    p = probe_machine(r)
    assert p.accelerators == []
    assert len([res for res in r.log if res.argv[1].startswith("--query-gpu")]) == 1


def test_compute_apps_failure_leaves_processes_unknown(tmp_path):
    r = _box(tmp_path, rdma=False)
    (tmp_path / "apps.txt").write_text("garbage line without commas\n")
    p = probe_machine(r)
    assert all(a.processes == [] and "processes" not in a.sources for a in p.accelerators)
    assert any(n.startswith("NVIDIA processes unknown") for n in p.notes)


def test_nvml_probe_runs_topo_for_rdma_devices_or_a_numa_node_nvml_lacks(monkeypatch, tmp_path):
    """NVML's NUMA query is unsupported on many drivers and VMs (sysfs says -1 there): topo -m's
    NUMA Affinity fills it, said as such (a real H200 VM: NVML none, topo -m 0).  Where NVML
    knows every card's node and the host has no RDMA device, topo -m is not run."""
    from test_nvml import fake_nvml

    for rdma, nvml_numa in ((True, False), (False, False), (False, True)):
        fake = fake_nvml(n=2, nvlinks={0: [1], 1: [0]})
        if nvml_numa:
            fake.nvmlDeviceGetNumaNodeId = lambda h: 1
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        r = _box(tmp_path / f"{rdma}-{nvml_numa}", rdma=rdma)
        r.live = True
        p = probe_machine(r)
        assert len(p.accelerators) == 2 and p.link(0, 1).label == "NV1"  # NVML's links kept
        ran_topo = any(res.argv[1:] == ["topo", "-m"] for res in r.log)
        assert ran_topo is (rdma or not nvml_numa)
        assert not any(res.argv[1].startswith("--query") for res in r.log)
        a = p.accelerators[0]
        if nvml_numa:
            assert (a.numa_node, a.sources["numa_node"]) == (1, "NVML nvmlDeviceGetNumaNodeId")
        else:
            assert (a.numa_node, a.sources["numa_node"]) == (0, "nvidia-smi topo -m NUMA Affinity")
        if not rdma:
            assert p.network.nics == [] or all(n.kind != "rdma" for n in p.network.nics)
        if rdma:
            nics = {n.name: n for n in p.network.nics}
            assert nics["mlx5_0"].near_cards == [0] and nics["ens2np0"].near_cards == [1]
