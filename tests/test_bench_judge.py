"""bench judging: pure functions, thresholds and their sources."""

from __future__ import annotations

import pytest

from nodeledger.bench import judge as J
from nodeledger.machine import resolve_machine
from nodeledger.machine.parsers.common import parse_link_speed


def test_expect_verdicts_both_directions():
    hi = J.Expect(100, 40, "MB/s")
    assert [hi.verdict(v) for v in (100, 99.9, 40, 39.9, None)] == [
        "ok",
        "low",
        "low",
        "bad",
        "unknown",
    ]
    lo = J.Expect(15, 30, "ms", higher=False)
    assert [lo.verdict(v) for v in (15, 15.1, 30, 30.1)] == ["ok", "low", "low", "bad"]
    assert hi.describe() == "ok >= 100 MB/s, bad < 40 MB/s"
    assert lo.describe() == "ok <= 15 ms, bad > 30 ms"


@pytest.mark.parametrize(
    ("kind", "seq_ok", "seq_bad", "lat_ok", "lat_bad"),
    [
        ("nvme", 1000, 300, 0.3, 1.0),
        ("ssd", 400, 150, 0.5, 2.0),
        ("hdd", 100, 40, 15.0, 30.0),
        ("network", 300, 100, 2.0, 10.0),
        ("unknown", 300, 100, 2.0, 10.0),
        ("floppy", 300, 100, 2.0, 10.0),  # anything else is judged as unknown
    ],
)
def test_disk_classes(kind, seq_ok, seq_bad, lat_ok, lat_bad):
    s, lat = J.disk_seq_expect(kind), J.disk_latency_expect(kind)
    assert (s.ok, s.bad, s.higher) == (seq_ok, seq_bad, True)
    assert (lat.ok, lat.bad, lat.higher) == (lat_ok, lat_bad, False)
    assert s.source and lat.source
    par = J.disk_parallel_expect(kind)
    assert par.ok == pytest.approx(4096 / 1e6 / (lat_ok / 1000))
    assert par.bad == pytest.approx(4096 / 1e6 / (lat_bad / 1000))


def test_disk_sources_cite_the_documented_figures():
    assert "600 MB/s" in J.disk_seq_expect("ssd").source  # SATA III line rate
    assert "4.17 ms" in J.disk_latency_expect("hdd").source  # 7200 rpm rotational latency
    assert "tens of ms" in J.disk_latency_expect("network").source  # MISSION.md
    # MISSION.md's dataset on a network filesystem at tens of ms per random read: bad
    assert J.disk_latency_expect("network").verdict(30.0) == "bad"
    assert J.disk_latency_expect("nvme").verdict(0.08) == "ok"
    assert J.disk_seq_expect("hdd").verdict(180) == "ok"


def test_pcie_rates():
    assert J.pcie_raw_gbps(16.0, 16) == pytest.approx(31.51, abs=0.01)  # Gen4 x16
    assert J.pcie_raw_gbps(8.0, 16) == pytest.approx(15.75, abs=0.01)  # Gen3 x16
    assert J.pcie_raw_gbps(32.0, 16) == pytest.approx(63.02, abs=0.01)  # Gen5 x16
    assert J.pcie_raw_gbps(5.0, 16) == pytest.approx(8.0)  # Gen2: 8b/10b
    assert J.pcie_label(16.0, 16) == "Gen4 x16" and J.pcie_label(None, 16) == "unknown"
    assert parse_link_speed("16.0 GT/s PCIe") == 16.0
    assert parse_link_speed("8 GT/s") == 8.0
    assert parse_link_speed("Unknown") is None and parse_link_speed(None) is None


def test_host_card_expectation_gen4_x16_and_a_trained_down_link():
    e = J.host_card_expect(16.0, 16, pinned=True)
    # 31.5 GB/s raw x the measured Gen4 fraction in the speed model's hardware data (0.78,
    # RTX 4090 P2P copies): one physics for bench and speed
    assert e.typical == "~24.6 GB/s" and "pcie4x16 achievable 0.78" in e.source
    assert e.verdict(24.0) == "ok"
    # a Gen4 x16 card running at Gen3 x8: a quarter of the link
    assert e.verdict(J.achievable(8.0) * J.pcie_raw_gbps(8.0, 8)) == "bad"
    # Gen4 x8: half
    assert e.verdict(J.achievable(16.0) * J.pcie_raw_gbps(16.0, 8)) == "low"
    pageable = J.host_card_expect(16.0, 16, pinned=False)
    # pageable is bounded by the host's staging memcpy: capped at 5 (ok) and 2 GB/s (bad)
    assert pageable.verdict(10.0) == "ok" and pageable.verdict(3.0) == "low"
    assert pageable.verdict(1.5) == "bad"
    assert J.host_card_expect(None, 16) is None


def test_nvlink_and_peer_expectations():
    g, why = J.link_gbps("nvlink", 18, None, "NVIDIA H100 80GB HBM3", None, None, "NV18")
    assert g == 450 and "25 GB/s" in why
    g, _ = J.link_gbps("nvlink", 18, None, "NVIDIA B200", None, None, "NV18")
    assert g == 900
    g, why = J.link_gbps("nvlink", 12, 300.0, "A100", None, None, "NV12", "datasheet")
    assert g == 300 and "datasheet" in why
    g, why = J.link_gbps("xgmi", None, None, "K100_AI", None, None)
    assert g is None and "not in the machine profile" in why
    g, _ = J.link_gbps("pxb", None, None, "A40", 25.2, 12.6)
    assert g == 12.6  # the slower card's PCIe
    e = J.peer_expect("nvlink", 450, "NV18")
    assert e.ok == pytest.approx(315) and e.verdict(390) == "ok" and e.verdict(100) == "bad"
    s = J.peer_expect("sys", 25.2, "SYS")
    assert s.ok == pytest.approx(12.6) and "staged through host memory" in s.source
    assert J.peer_expect("nvlink", None, "x") is None


def test_bus_bandwidth_is_nccl_tests_definition():
    assert J.bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert J.bus_factor("all_reduce", 2) == 1.0
    assert J.bus_factor("all_gather", 8) == pytest.approx(0.875)
    # superbench A100 row: 8589934592 B in 63896 us -> algbw 134.44, busbw 235.26
    alg, bus = J.busbw("all_reduce", 8589934592, 63896e-6, 8)
    assert alg == pytest.approx(134.44, abs=0.01) and bus == pytest.approx(235.26, abs=0.01)
    with pytest.raises(ValueError):
        J.bus_factor("all_reduce", 0)
    e = J.collective_expect(300.0, "NV12")
    assert e.verdict(235.26) == "ok" and e.verdict(100) == "low" and e.verdict(80) == "bad"


def test_memory_numa_and_ratio_verdicts():
    assert J.MEMORY.verdict(0.95) == "ok" and J.MEMORY.verdict(0.8) == "low"
    assert J.MEMORY.verdict(0.5) == "bad"
    assert J.numa_verdict(25.0, 20.0)[0] == "ok"
    assert J.numa_verdict(19.0, 20.0)[0] == "ok"  # within 5 %
    v, why = J.numa_verdict(15.0, 20.0)
    assert v == "low" and "NUMA node" in why
    assert J.numa_verdict(None, 20.0)[0] == "unknown"
    assert [J.ratio_verdict(r) for r in (1.0, 0.96, 1.05, 0.9, 1.3, None)] == [
        "ok", "ok", "ok", "low", "bad", "unknown"]  # fmt: skip


def test_figure_and_unavailable_shapes():
    f = J.figure("disk", "d", "m", 1.23456, "MB/s", J.Expect(1, 0.5, "MB/s"), evidence="e")
    assert f["verdict"] == "ok" and f["value"] == 1.2346 and f["source"] == ""
    f = J.figure("disk", "d", "m", 1.0, "MB/s", None, expected_text="needs x")
    assert f["verdict"] == "unknown" and f["expected"] == "needs x"
    u = J.unavailable("peer", "cards", "peer copy", "needs torch")
    assert u["verdict"] == "unavailable" and u["value"] is None and u["evidence"] == "needs torch"
    with pytest.raises(ValueError):
        J.figure("disk", "d", "m", 1.0, "", None, verdict="fine")


def test_collective_expectation_on_presets():
    from nodeledger.bench.suite import _weakest, profile_link

    h100 = resolve_machine("dgx-h100")
    w, why = _weakest(list(range(8)), lambda a, b: profile_link(h100, a, b))
    assert w == 450 and "NV18" in why
    k100 = resolve_machine("k100-ai-8x64g")
    w, why = _weakest([0, 1], lambda a, b: profile_link(k100, a, b))
    assert w is None and "not in the machine profile" in why


def test_bench_judges_with_the_speed_models_link_figures():
    """One physics: the link rates bench judges against are the hardware data's."""
    from nodeledger.speed import figures as F
    from nodeledger.speed import hardware as H

    assert J.pcie_raw_gbps is F.pcie_raw_gbps
    gen5 = H.link("pcie5x16")
    raw = J.pcie_raw_gbps(32.0, 16)
    assert J.host_card_expect(32.0, 16).typical == f"~{gen5['achievable_fraction'] * raw:.1f} GB/s"
    per, why = J.nvlink_lane_gbps("NVIDIA B200")
    assert per == H.link("nvlink5")["per_link_gbps"] and why.startswith("nvlink5")
    per, _ = J.nvlink_lane_gbps("NVIDIA H100 80GB HBM3")
    assert per == H.link("nvlink4")["per_link_gbps"]
