"""Parsers against every recorded nvidia-smi topo, numactl and lscpu output in ../shared.

Expectations were derived by reading each file (and its PROVENANCE.tsv row)."""

from __future__ import annotations

import pytest

from conftest import SHARED, run_cli
from nodeledger.machine.parsers import numa, nvidia_topo

REAL = SHARED / "fixtures" / "real"
N4 = [0, 0, 0, 0, 1, 1, 1, 1]

# file: (cards, numa per card, link labels, NIC count, NIC devices, CPU affinity of GPU0,
#        {(a, b): label}, {(nic name, gpu): label})
TOPO = {
    "autodl-2x-2080ti-pix.txt": (2, [1, 1], {"PIX"}, 0, [], "24-47,72-95", {(0, 1): "PIX"}, {}),
    "gengwg-dgx-a100-12mlx5-nps4.txt": (8, [3, 3, 1, 1, 7, 7, 5, 5], {"NV12"}, 12,
        [f"mlx5_{i}" for i in range(12)], "48-63,176-191", {(0, 7): "NV12"},
        {("mlx5_0", 0): "PXB", ("mlx5_4", 0): "SYS", ("mlx5_8", 6): "PXB"}),
    "gengwg-dgx1-topo-mp-pcie-only.txt": (8, N4, {"PIX", "PHB", "SYS"}, 4,
        ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"], "0-19,40-59",
        {(0, 1): "PIX", (0, 2): "PHB", (0, 4): "SYS"}, {("mlx5_1", 2): "PIX"}),
    "glm52-8x-h200-10nic.txt": (8, N4, {"NV18"}, 10, [f"mlx5_{i}" for i in range(10)],
        "0-63,128-191", {(3, 4): "NV18"}, {("NIC3", 0): "PIX", ("NIC0", 3): "PIX", ("NIC6", 7): "PIX"}),
    "gpuallocator17-8x-rtx4090-sys.txt": (8, N4, {"SYS"}, 2, [None, None], "0-55,112-167",
        {(0, 7): "SYS"}, {("NIC0", 6): "PHB", ("NIC1", 0): "SYS"}),
    "gpuexporter-h100-1gpu-ansi-escape.txt": (1, [0], set(), 0, [], "0-19", {}, {}),
    "jdh4-della-2x-a100-mlx5-old.txt": (2, [0, 1], {"SYS"}, 2, ["mlx5_0", "mlx5_1"], "0-63",
        {(0, 1): "SYS"}, {("mlx5_0", 0): "NODE", ("mlx5_1", 1): "NODE"}),
    "jdh4-traverse-4x-v100-power9.txt": (4, [0, 0, 8, 8], {"NV3", "SYS"}, 4,
        ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"], "0-63", {(0, 1): "NV3", (0, 2): "SYS", (2, 3): "NV3"},
        {("mlx5_2", 2): "NODE"}),
    "llmaction-8x-a800-nv8-4nic.txt": (8, N4, {"NV8"}, 4, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"],
        "0-31,64-95", {(0, 7): "NV8"}, {("NIC0", 1): "PIX", ("NIC3", 7): "PIX", ("NIC2", 0): "SYS"}),
    "mlengineering-8x-a100-nv12-compact.txt": (8, N4, {"NV12"}, 0, [], "0-23", {(1, 6): "NV12"}, {}),
    "mlengineering-8x-h100-nv18-compact.txt": (8, N4, {"NV18"}, 0, [], "0-51", {(2, 5): "NV18"}, {}),
    "stelline-asus-esc8000a-4x-rtx6000ada.txt": (4, [0, 0, 1, 1], {"NODE", "SYS"}, 4,
        ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"], "0-31", {(0, 1): "NODE", (0, 2): "SYS", (2, 3): "NODE"},
        {("NIC2", 3): "NODE", ("NIC0", 2): "SYS"}),
    "stelline-puget-wrx90-2x-rtx6000ada.txt": (2, [0, 0], {"PHB"}, 2, ["mlx5_0", "mlx5_1"], "0-23",
        {(0, 1): "PHB"}, {("NIC1", 1): "NODE"}),
}  # fmt: skip


def _real(path):
    if not (REAL / path).is_file():
        pytest.skip(f"../shared fixture {path} absent")
    return (REAL / path).read_text(errors="replace")


def test_every_topo_fixture_has_expectations():
    folder = REAL / "nvidia-topo"
    if not folder.is_dir():
        pytest.skip("../shared absent")
    assert {p.name for p in folder.glob("*.txt")} == set(TOPO)


@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(TOPO))
def test_topo(name):
    cards, numa_nodes, labels, n_nics, devices, cpu0, pairs, nic_pairs = TOPO[name]
    t = nvidia_topo.parse(_real(f"nvidia-topo/{name}"))
    assert len(t.cards) == cards
    assert [c.numa_node for c in t.cards] == numa_nodes
    assert {lk.label for lk in t.links} == labels
    assert len(t.links) == cards * (cards - 1) // 2
    assert len(t.nics) == n_nics
    assert [n.device for n in t.nics] == devices
    assert t.cards[0].cpu_affinity == cpu0
    for (a, b), label in pairs.items():
        assert t.label(a, b) == label
    nics = {n.name: n for n in t.nics}
    for (nic, gpu), label in nic_pairs.items():
        assert nics[nic].links[gpu] == label
    for lk in t.links:
        assert lk.kind in ("nvlink", "pix", "pxb", "phb", "node", "sys")
        if lk.kind == "nvlink":
            assert lk.lanes == int(lk.label[2:])


@pytest.mark.shared
def test_topo_mp_is_noted():
    t = nvidia_topo.parse(_real("nvidia-topo/gengwg-dgx1-topo-mp-pcie-only.txt"))
    assert any("topo -mp" in n for n in t.notes)


# file: (nodes [(id, cpu count, memory MiB or None)], distance 0->last, memoryless ids)
NUMACTL = {
    "numactl165-threadripper3960x-nps4-memoryless.txt": ([(0, 12, 0), (1, 12, 64307), (2, 12, 64472), (3, 12, 0)], 12, [0, 3]),
    "stelline-asus-esc8000a-numactl-H.txt": ([(0, 32, 193129), (1, 32, 193477)], 32, []),
    "stelline-puget-wrx90-numactl-H-1node.txt": ([(0, 24, 128295)], 10, []),
    "awscs3-403-c5n18xlarge-2node.txt": ([(0, 36, 94590), (1, 36, 94710)], 21, []),
}  # fmt: skip


@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(NUMACTL))
def test_numactl(name):
    nodes, dist, memoryless = NUMACTL[name]
    info = numa.parse_numactl(_real(f"numa/{name}"))
    assert [(n.id, n.cpu_count, n.memory_bytes // 2**20) for n in info.nodes] == nodes
    last = info.nodes[-1].id
    assert info.distances[0][last] == dist
    assert [n.id for n in info.nodes if n.memory_bytes == 0] == memoryless
    for i in memoryless:
        assert any(f"node {i} is memoryless" in note for note in info.notes)


# file: (arch, cpus, sockets, cores, threads/core, [(node, cpu count)], first node's cpulist)
LSCPU = {
    "jdh4-della-h100-xeon8468-interleaved-lscpu.txt": ("x86_64", 96, 2, 96, 1, [(0, 48), (1, 48)], "0,2,4,6"),
    "jdh4-stellar-4socket-xeon8268-lscpu.txt": ("x86_64", 96, 4, 96, 1, [(0, 24), (1, 24), (2, 24), (3, 24)], "0,4,8"),
    "jdh4-stellar-epyc7h12-nps4-lscpu.txt": ("x86_64", 128, 2, 128, 1, [(i, 16) for i in range(8)], "0-15"),
    "jdh4-traverse-power9-lscpu.txt": ("ppc64le", 128, 2, 32, 4, [(0, 64), (8, 64), (252, 0), (253, 0), (254, 0), (255, 0)], "0-63"),
    "vllm-ascend-4930-kunpeng920-4socket-lscpu.txt": ("aarch64", 640, 4, 320, 2, [(i, 80) for i in range(8)], "0-79"),
}  # fmt: skip


@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(LSCPU))
def test_lscpu(name):
    arch, cpus, sockets, cores, tpc, nodes, first = LSCPU[name]
    info = numa.parse_lscpu(_real(f"numa/{name}"))
    assert (info.architecture, info.cpus, info.sockets, info.cores, info.threads_per_core) == (
        arch, cpus, sockets, cores, tpc,
    )  # fmt: skip
    assert [(n.id, n.cpu_count) for n in info.numa.nodes] == nodes
    assert info.numa.nodes[0].cpus.startswith(first)


@pytest.mark.shared
def test_lscpu_kunpeng_model_name_falls_back_to_bios():
    info = numa.parse_lscpu(_real("numa/vllm-ascend-4930-kunpeng920-4socket-lscpu.txt"))
    assert info.model_name.startswith("Kunpeng 920")


def test_parse_cli_json_and_errors(tmp_path):
    f = tmp_path / "topo.txt"
    f.write_text(
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV4\t0-7\t0\nGPU1\tNV4\t X \t8-15\t1\n"
    )
    proc = run_cli("parse", "nvidia-smi-topo", str(f), "--json")
    assert proc.returncode == 0, proc.stderr
    import json

    d = json.loads(proc.stdout)
    assert [c["numa_node"] for c in d["cards"]] == [0, 1]
    assert d["links"] == [{"a": 0, "b": 1, "label": "NV4", "kind": "nvlink", "lanes": 4}]
    f.write_text("\tGPU0\tGPU1\nGPU0\t X \n")  # truncated row
    bad = run_cli("parse", "nvidia-smi-topo", str(f))
    assert (
        bad.returncode == 2
        and "truncated" in bad.stderr
        and len(bad.stderr.strip().splitlines()) == 1
    )
    unknown = run_cli("parse", "nvidia-smi-q-xmlz", str(f))
    assert unknown.returncode == 2 and "parsers available" in unknown.stderr


# nvidia-smi table: (driver, cards, first name, first total MiB, persistence, MIG, processes, MIG devices)
SMI_TABLE = {
    "gengwg-10x-quadro-rtx8000-drv470-legacy.txt": ("470.63.01", 10, "Quadro RTX 8000", 48601, "On", "N/A", 0, 0),
    "gls-h100-sxm-x8.txt": ("565.57.01", 8, "NVIDIA H100 80GB HBM3", 81559, "On", "Disabled", 0, 0),
    "gls-rtx4090-x8.txt": ("550.127.05", 8, "NVIDIA GeForce RTX 4090", 24564, "On", "N/A", 0, 0),
    "gpuexporter-h100-drv590-load-processes.txt": ("590.48.01", 1, "NVIDIA H100 80GB HBM3", 81559, "On", "Disabled", 3, 0),
    "gpuexporter-h200-mig-drv590-load.txt": ("590.48.01", 1, "NVIDIA H200", 143771, "On", "Enabled", 3, 5),
    "gpuexporter-rtx2080super-linux-drv610-kmd-umd.txt": ("610.57.04", 1, "NVIDIA GeForce RTX 2080 ...", 8192, "Off", "N/A", 4, 0),
    "gpuexporter-rtx4080super-drv595-desktop-mixed-procs.txt": ("595.71.05", 1, "NVIDIA GeForce RTX 4080 ...", 16376, "Off", "N/A", 7, 0),
    "gpuexporter-windows-rtx2080super-drv610-wddm-processes.txt": ("610.62", 1, "NVIDIA GeForce RTX 2080 ...", 8192, "WDDM", "N/A", 21, 0),
    "stelline-asus-esc8000a-4x-rtx6000ada.txt": ("575.51.03", 4, "NVIDIA RTX 6000 Ada Gene...", 49140, "Off", "N/A", 0, 0),
}  # fmt: skip


@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(SMI_TABLE))
def test_nvidia_smi_table(name):
    from nodeledger.machine.parsers import nvidia_smi

    driver, cards, first, mib, pers, mig, procs, migs = SMI_TABLE[name]
    info = nvidia_smi.parse_table(_real(f"nvidia-smi-table/{name}"))
    assert info.driver == driver and len(info.cards) == cards
    c = info.cards[0]
    assert (c.name, c.memory_total_bytes, c.persistence, c.mig) == (first, mib * 2**20, pers, mig)
    assert [x.index for x in info.cards] == list(range(cards))
    assert len(info.processes) == procs and info.mig_devices == migs


def test_every_smi_table_fixture_has_expectations():
    folder = REAL / "nvidia-smi-table"
    if not folder.is_dir():
        pytest.skip("../shared absent")
    assert {p.name for p in folder.glob("*.txt")} == set(SMI_TABLE)


SMI_XML = {
    "netdata-a100-sxm4-40gb-mig-q-x.xml.txt": ("510.47.03", "NVIDIA A100-SXM4-40GB", 40960, "00000000:00:04.0", "Enabled", 0, 2),
    "netdata-rtx3060-laptop-q-x-processes.xml.txt": ("515.65.01", "NVIDIA GeForce RTX 3060 Laptop GPU", 6144, "00000000:01:00.0", "N/A", 1, 0),
    "netdata-rtx4090-drv535-q-x.xml.txt": ("535.86.05", "NVIDIA GeForce RTX 4090", 24564, "00000000:84:00.0", "N/A", 0, 0),
}  # fmt: skip


@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(SMI_XML))
def test_nvidia_smi_xml(name):
    from nodeledger.machine.parsers import nvidia_smi

    driver, gpu, mib, bus, mig, procs, migs = SMI_XML[name]
    info = nvidia_smi.parse_xml(_real(f"nvidia-query/{name}"))
    c = info.cards[0]
    assert (info.driver, c.name, c.memory_total_bytes, c.pci_bus_id, c.mig) == (
        driver,
        gpu,
        mib * 2**20,
        bus,
        mig,
    )
    assert len(info.processes) == procs and info.mig_devices == migs


def test_own_h200_table_and_xml():
    from conftest import FIXTURES
    from nodeledger.machine.parsers import nvidia_smi

    t = nvidia_smi.parse_table((FIXTURES / "h200" / "nvidia_smi_.txt").read_text())
    x = nvidia_smi.parse_xml((FIXTURES / "h200" / "nvidia_smi__q__x_.txt").read_text())
    for info in (t, x):
        assert info.driver == "580.159.04"
        assert info.cards[0].name == "NVIDIA H200"
        assert info.cards[0].memory_total_bytes == 143771 * 2**20
    assert t.cards[0].pci_bus_id == "00000000:00:06.0"


# nvidia-smi -q text: (driver, cards, name, total MiB, first bus id, persistence, MIG)
SMI_Q = {
    "gls-a100-sxm4-x4-q.txt": ("555.42.02", 4, "NVIDIA A100-SXM4-80GB", 81920, "00000000:68:00.0", "Enabled", "Disabled"),
    "gls-gh200-q.txt": ("550.127.05", 1, "NVIDIA GH200 480GB", 97871, "00000000:DD:00.0", "Enabled", "Disabled"),
    "gpuexporter-h200-mig-load-q.txt": ("590.48.01", 1, "NVIDIA H200", 143771, "00000000:83:00.0", "Enabled", "Enabled"),
    "jdh4-della-h100-q.txt": ("560.35.03", 1, "NVIDIA H100 80GB HBM3", 81559, "00000000:DB:00.0", "Enabled", "Disabled"),
}  # fmt: skip


@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(SMI_Q))
def test_nvidia_smi_q_text(name):
    from nodeledger.machine.parsers import nvidia_smi

    driver, n, gpu, mib, bus, pers, mig = SMI_Q[name]
    info = nvidia_smi.parse_q_text(_real(f"nvidia-query/{name}"))
    assert info.driver == driver and len(info.cards) == n
    c = info.cards[0]
    assert (c.name, c.memory_total_bytes, c.pci_bus_id, c.persistence, c.mig) == (
        gpu,
        mib * 2**20,
        bus,
        pers,
        mig,
    )
    assert [x.index for x in info.cards] == list(range(n))
    assert not info.notes


def test_own_h200_q_text():
    from conftest import FIXTURES
    from nodeledger.machine.parsers import nvidia_smi

    info = nvidia_smi.parse_q_text((FIXTURES / "h200" / "nvidia_smi__q_.txt").read_text())
    assert info.cards[0].memory_total_bytes == 143771 * 2**20 and info.cards[0].mig == "Disabled"


@pytest.mark.shared
def test_nvidia_smi_query_csvs():
    from nodeledger.machine.parsers import nvidia_smi

    p100 = nvidia_smi.parse_query_any(_real("nvidia-query/netdata-tesla-p100-query-gpu.csv.txt"))
    row = p100["rows"][0]
    assert row["name"] == "Tesla P100-PCIE-16GB" and row["fan.speed"] is None
    assert (row["memory.used"], row["memory.free"], row["power.draw"]) == (0, 16280, 28.16)
    assert {"name": "memory.free", "unit": "MiB"} in p100["columns"]
    apps = nvidia_smi.parse_query_any(
        _real("nvidia-query/gpuexporter-h100-load-query-compute-apps.csv.txt")
    )
    assert [r["pid"] for r in apps["rows"]][:3] == ["11327", "11328", "11345"]
    assert [r["used_gpu_memory"] for r in apps["rows"]][:3] == [2566, 1542, 15690]
    allf = nvidia_smi.parse_query_any(
        _real("nvidia-query/gpuexporter-h100-load-query-gpu-all-fields.csv.txt")
    )
    assert (
        allf["rows"][0]["name"] == "NVIDIA H100 80GB HBM3"
        and allf["rows"][0]["pci.bus_id"] == "00000000:00:09.0"
    )


@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(NUMACTL))
def test_numactl_cpu_compress_reads_as_the_plain_listing(name):
    """``numactl --hardware --cpu-compress`` prints "node 0 cpus: 0-15 (16)": the same nodes."""
    import re

    text = _real(f"numa/{name}")
    plain = numa.parse_numactl(text)

    def compress(m):
        ids = [int(x) for x in m.group(2).split()]
        return f"{m.group(1)}{numa.compress_cpus(ids)} ({len(ids)})" if ids else m.group(0)

    squeezed = re.sub(r"^(node \d+ cpus: )(.*)$", compress, text, flags=re.M)
    info = numa.parse_numactl(squeezed)
    assert [(n.id, n.cpus, n.cpu_count) for n in info.nodes] == [
        (n.id, n.cpus, n.cpu_count) for n in plain.nodes
    ]


@pytest.mark.shared
def test_lscpu_with_an_absurd_numa_cpulist_is_refused_quickly():
    import time

    text = _real("numa/jdh4-stellar-epyc7h12-nps4-lscpu.txt")
    bad = text.replace("NUMA node0 CPU(s):", "NUMA node0 CPU(s): 0-99999999999,", 1)
    t0 = time.perf_counter()
    with pytest.raises(numa.ParseError, match="not a cpulist"):
        numa.parse_lscpu(bad)
    assert time.perf_counter() - t0 < 0.5
