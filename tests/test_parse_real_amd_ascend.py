"""rocm-smi / hy-smi / npu-smi parsers against every recorded file in ../shared
(expectations read off each file and its PROVENANCE.tsv row)."""

from __future__ import annotations

import pytest

from conftest import SHARED, run_cli
from nodeledger.machine.parsers import amd_smi, npu_smi

REAL = SHARED / "fixtures" / "real"


def _real(path):
    if not (REAL / path).is_file():
        pytest.skip(f"../shared fixture {path} absent")
    return (REAL / path).read_text(errors="replace")


# file: (device label, card count, first index, first name, VRAM% of first card, power cap W)
CONCISE = {
    "rocm/gls-mi300x-x4-rocm-smi.txt": ("Device", 4, 0, "AMD Instinct MI300X", 0.0, 750.0),
    "rocm/mlengineering-8x-mi300x-rocm-smi.txt": ("Device", 8, 0, "AMD Instinct MI300X", 0.0, 750.0),
    "rocm/rocsmi90-rocm33-legacy-concise-vega10.txt": ("GPU", 1, 1, None, None, 170.0),
    "dcu/flyaibox-k100ai-8x-rocm-smi.txt": ("HCU", 8, 0, None, 85.0, 400.0),
    "dcu/paddlenlp-k100ai-hy-smi.txt": ("DCU", 4, 0, None, 0.0, 800.0),
    "dcu/wangjunjian-8dcu-hy-smi-manual.txt": ("DCU", 8, 0, None, 87.0, 600.0),
}  # fmt: skip


@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(CONCISE))
def test_concise(name):
    label, n, first, card_name, vram, cap = CONCISE[name]
    r = amd_smi.parse_concise(_real(name))
    assert r.device_label == label and len(r.cards) == n
    c = r.cards[0]
    assert (c.index, c.name, c.power_cap_w) == (first, card_name, cap)
    assert c.vram_used_pct == vram  # legacy ROCm 3.3 prints VRAM% as N/A: unknown, not the fan %


@pytest.mark.shared
def test_mi300x_partitions():
    r = amd_smi.parse_concise(_real("rocm/mlengineering-8x-mi300x-rocm-smi.txt"))
    assert {c.partitions for c in r.cards} == {"NPS1, SPX"}
    assert r.cards[3].vram_used_pct == 17.0


# file: (cards, {(a, b): (label, weight, hops)}, numa map)
TOPO = {
    "dcu/flyaibox-k100ai-8x-rocm-smi-showtopo.txt": (8, {(0, 7): ("PCIE", 40, 2), (3, 4): ("PCIE", 40, 2)}, {i: 0 for i in range(8)}),
    "rocm/rocmsmilib108-4gpu-pcie-showtopo.txt": (4, {(0, 1): ("PCIE", 52, 3), (2, 3): ("PCIE", 52, 3)}, {}),
    "rocm/legacyrocm4740-8gpu-showtoponuma.txt": (8, {}, {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1}),
}  # fmt: skip


@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(TOPO))
def test_showtopo(name):
    n, pairs, numa_map = TOPO[name]
    t = amd_smi.parse_showtopo(_real(name))
    assert t.cards == list(range(n))
    assert len(t.links) == n * (n - 1) // 2
    links = {(lk["a"], lk["b"]): (lk["label"], lk["weight"], lk["hops"]) for lk in t.links}
    for k, v in pairs.items():
        assert links[k] == v
    if pairs:
        assert {lk["kind"] for lk in t.links} == {"pcie"}
    assert t.numa == numa_map


@pytest.mark.shared
def test_rocm_json_and_csv_agree():
    j = amd_smi.parse_json(_real("rocm/marimo9237-rx7900xt-rocm-smi-json.txt"))
    c = amd_smi.parse_csv(_real("rocm/marimo9237-rx7900xt-rocm-smi-csv.txt"))
    for cards in (j, c):
        assert len(cards) == 1
        assert cards[0]["name"] == "Radeon RX 7900 XT"
        assert cards[0]["vram_total_bytes"] == 21458059264  # 20 GiB class card, bytes as printed
    two = amd_smi.parse_json(_real("rocm/rocmsmilib120-2x-rx6800-showmemuse-json.txt"))
    assert [x["index"] for x in two] == [0, 1] and two[0]["vram_total_bytes"] is None


# file: (version, chips, NPUs, first chip name, HBM total MiB, processes, phy ids present)
NPU = {
    "ascend/vllm-ascend-6512-910b3-x8-npu-smi-info.txt": ("25.2.0", 8, 8, "910B3", 65536, 1, False),
    "ascend/vllm-ascend-4930-a3-npu-smi-info.txt": ("25.2.3", 16, 8, "Ascend910", 65536, 14, True),
    "ascend/llmaction-910prob-1npu-python-process.txt": ("23.0.rc1", 1, 1, "910ProB", 32768, 1, False),
}  # fmt: skip


@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(NPU))
def test_npu_smi(name):
    version, chips, npus, chip_name, hbm, procs, phy = NPU[name]
    info = npu_smi.parse(_real(name))
    assert info.version == version and len(info.chips) == chips
    assert len({c.npu for c in info.chips}) == npus
    assert info.chips[0].name == chip_name and info.chips[0].hbm_total_bytes == hbm * 2**20
    assert len(info.processes) == procs
    assert all((c.phy_id is not None) == phy for c in info.chips)


@pytest.mark.shared
def test_910prob_ddr_and_process():
    info = npu_smi.parse(_real("ascend/llmaction-910prob-1npu-python-process.txt"))
    assert info.chips[0].ddr_total_bytes == 15137 * 2**20
    assert info.processes[0] == {
        "npu": 0,
        "chip": 0,
        "pid": 55115,
        "name": "python",
        "memory_bytes": 30784 * 2**20,
    }


def test_parse_cli_kinds_listed(tmp_path):
    f = tmp_path / "x.txt"
    f.write_text("garbage\n")
    for kind in (
        "rocm-smi",
        "rocm-smi-showtopo",
        "rocm-smi-json",
        "rocm-smi-csv",
        "hy-smi",
        "npu-smi",
    ):
        proc = run_cli("parse", kind, str(f))
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, (
            kind,
            proc.stderr,
        )


@pytest.mark.shared
def test_rocm_smi_all_and_amd_smi_static():
    cards = amd_smi.parse_all(_real("rocm/gls-mi300x-x4-rocm-smi-a.txt"))
    assert [c["index"] for c in cards] == [0, 1, 2, 3]
    assert cards[0]["name"] == "AMD Instinct MI300X OAM" and cards[0]["pci_bus"] == "0000:26:00.0"
    assert [c["pci_bus"] for c in cards][1:] == ["0000:46:00.0", "0000:65:00.0", "0000:85:00.0"]
    assert cards[0]["memory_partition"] == "NPS1" and cards[0]["max_power_w"] == 750.0
    static = amd_smi.parse_amd_smi_static(
        _real("rocm/rocmsystems2987-mi350x-amd-smi-static-gpu0.txt")
    )
    assert static[0]["name"] == "AMD Instinct MI350X" and static[0]["pci_bus"] == "0000:05:00.0"
    assert static[0]["pcie"] == "Gen 5" and static[0]["slot"] == "OAM"


@pytest.mark.shared
@pytest.mark.parametrize("cell", ["0x10%", "nan%", "9" * 400 + "%"])
def test_hy_smi_one_bad_vram_cell_keeps_the_other_cards(cell):
    text = _real("dcu/wangjunjian-8dcu-hy-smi-manual.txt")
    bad = text.replace("87%", cell, 1)
    r = amd_smi.parse_concise(bad)
    assert len(r.cards) == 8 and r.cards[0].vram_used_pct is None
    assert r.cards[1].vram_used_pct == 85.0
    assert any(n.startswith("hy-smi: card 0 VRAM%") for n in r.notes), r.notes


def test_amd_smi_sizes_are_binary_units():
    """amd-smi prints "7.3 GB" for 7,889,485,824 B (its --csv of the same process, same blog
    post): binary units; the text figure is that rounded to 0.1 GiB."""
    from conftest import FIXTURES
    from nodeledger.machine.parsers import parse_kind

    amd = FIXTURES / "amd"
    text = parse_kind(
        "amd-smi-process", (amd / "rocmblogs-8x-mi300x-amd-smi-process.txt").read_text()
    )
    csv = parse_kind(
        "amd-smi-process", (amd / "rocmblogs-8x-mi300x-amd-smi-process-csv.txt").read_text()
    )
    t0, c0 = text["processes"][0], csv["processes"][0]
    assert t0["pid"] == c0["pid"] == 207590
    assert abs(t0["vram_bytes"] - c0["vram_bytes"]) <= 0.05 * 2**30  # within the printed rounding
    mon = parse_kind(
        "amd-smi-monitor", (amd / "amdsmi130-mi300x-amd-smi-monitor-process.txt").read_text()
    )
    assert mon["cards"][0]["vram_total_bytes"] == round(191.7 * 2**30)  # an MI300X's 192 GiB
    assert mon["processes"][0]["pid"] == 2266127 and mon["processes"][0]["name"] is None
