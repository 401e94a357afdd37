"""nccl-tests output parser, field by field against the real recordings in
../shared/fixtures/real/nccl-tests (old and new formats), and the comparison with nodeledger."""

from __future__ import annotations

import pytest

from conftest import SHARED, run_cli
from nodeledger.bench.nccl import compare, parse_nccl_tests, read_nccl_tests
from nodeledger.bench.suite import judge_nccl
from nodeledger.errors import InputError
from nodeledger.machine import resolve_machine

NCCL = SHARED / "fixtures" / "real" / "nccl-tests"


def _file(name: str):
    p = NCCL / name
    if not p.is_file():
        pytest.skip(f"../shared nccl-tests recordings not present at {NCCL}")
    return p


def test_new_format_2x_2080ti():
    d = read_nccl_tests(_file("autodl-2x-2080ti-pcie-allreduce.txt"))
    assert d["params"] == {"nThread": 1, "nGpus": 2, "minBytes": 8, "maxBytes": 1073741824,
                           "step": "2(factor)", "warmup_iters": 5, "iters": 20, "agg_iters": 1,
                           "validation": 1, "graph": 0}  # fmt: skip
    assert d["n"] == 2 and d["hosts"] == ["autodl-container-xxxxx"]
    assert d["ranks"][1] == {"rank": 1, "group": 0, "pid": 31706, "host": "autodl-container-xxxxx",
                             "device": 1, "bus_id": "0000:b5:00", "name": "NVIDIA GeForce RTX 2080 Ti"}  # fmt: skip
    assert d["collective"] == "all_reduce" and d["collective_from"] == "file name"
    assert d["columns"][:5] == ["size", "count", "type", "redop", "root"]
    assert len(d["rows"]) == 28
    first, last = d["rows"][0], d["rows"][-1]
    assert first == {"size_bytes": 8, "count": 2, "type": "float", "redop": "sum", "root": -1,
                     "out_of_place": {"time_us": 12.25, "algbw": 0.0, "busbw": 0.0, "wrong": 0.0},
                     "in_place": {"time_us": 12.0, "algbw": 0.0, "busbw": 0.0, "wrong": 0.0}}  # fmt: skip
    assert last["size_bytes"] == 1073741824 and last["count"] == 268435456
    assert last["out_of_place"] == {"time_us": 268588.0, "algbw": 4.0, "busbw": 4.0, "wrong": 0.0}
    assert last["in_place"]["time_us"] == 268461.0
    row = next(r for r in d["rows"] if r["size_bytes"] == 65536)
    assert row["out_of_place"]["time_us"] == 40.10 and row["in_place"]["busbw"] == 1.64
    assert d["avg_busbw"] == pytest.approx(2.05774)
    assert d["out_of_bounds"] == {"count": 0, "status": "OK"}
    assert d["peak"]["busbw_gbps"] == 4.0


def test_new_format_two_nodes_16x_h100():
    d = read_nccl_tests(_file("gcp-a3mega-2node-16x-h100-allreduce.txt"))
    assert d["params"]["nGpus"] == 1 and d["params"]["maxBytes"] == 8589934592
    assert d["n"] == 16 and d["hosts"] == ["ztan-mig-235z", "ztan-mig-gq73"]
    assert d["ranks"][8]["pid"] == 6733 and d["ranks"][8]["device"] == 0
    assert (
        d["ranks"][15]["bus_id"] == "0000:8c:00"
        and d["ranks"][15]["name"] == "NVIDIA H100 80GB HBM3"
    )
    assert len(d["rows"]) == 31
    last = d["rows"][-1]
    assert last["size_bytes"] == 8589934592 and last["count"] == 2147483648
    assert last["out_of_place"] == {
        "time_us": 47535.0,
        "algbw": 180.71,
        "busbw": 338.82,
        "wrong": 0.0,
    }
    assert last["in_place"] == {"time_us": 47743.0, "algbw": 179.92, "busbw": 337.35, "wrong": 0.0}
    # the recorded busbw is nccl-tests' algbw x 2(n-1)/n with n = 16
    assert last["out_of_place"]["busbw"] / last["out_of_place"]["algbw"] == pytest.approx(
        1.875, abs=0.001
    )
    assert d["avg_busbw"] == pytest.approx(70.742)
    assert d["peak"] == {
        "size_bytes": 8589934592,
        "busbw_gbps": 338.82,
        "in_place_busbw_gbps": 337.35,
    }


def test_old_format_8x_a100_with_interleaved_log_lines():
    d = read_nccl_tests(_file("superbench-8x-a100-sxm4-40gb-allreduce-oldformat.txt"))
    assert d["params"] == {"nThread": 1, "nGpus": 8, "minBytes": 1, "maxBytes": 8589934592,
                           "step": "2(factor)", "warmup_iters": 5, "iters": 20, "validation": 0}  # fmt: skip
    assert d["n"] == 8 and d["hosts"] == ["localhost"]
    assert d["ranks"][3] == {"rank": 3, "group": None, "pid": 112424, "host": "localhost", "device": 3,
                             "bus_id": "0x00", "name": "A100-SXM4-40GB"}  # fmt: skip
    assert d["columns"] == ["size", "count", "type", "redop", "time", "algbw", "busbw", "error",
                            "time", "algbw", "busbw", "error"]  # fmt: skip
    assert len(d["rows"]) == 34  # the "NCCL INFO Launch mode" line is skipped
    first = d["rows"][0]
    assert first["size_bytes"] == 0 and first["root"] is None and first["redop"] == "sum"
    assert first["out_of_place"] == {"time_us": 35.20, "algbw": 0.0, "busbw": 0.0, "wrong": None}
    r = next(r for r in d["rows"] if r["size_bytes"] == 1073741824)
    assert r["out_of_place"] == {"time_us": 8159.5, "algbw": 131.59, "busbw": 230.29, "wrong": None}
    assert r["in_place"] == {"time_us": 8176.5, "algbw": 131.32, "busbw": 229.81, "wrong": None}
    assert d["avg_busbw"] == pytest.approx(68.4048)
    assert d["peak"]["busbw_gbps"] == 235.26


def test_collective_from_the_bus_factor_when_the_name_says_nothing():
    text = _file("superbench-8x-a100-sxm4-40gb-allreduce-oldformat.txt").read_text()
    d = parse_nccl_tests(text, "run.txt")
    assert d["collective"] == "all_reduce" and "1.750" in d["collective_from"]
    d = parse_nccl_tests(text, "run.txt", op="all_gather")
    assert d["collective"] == "all_gather" and d["collective_from"] == "given"


def test_all_gather_old_layout_without_redop():
    text = """# nThread 1 nGpus 4 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid  1 on h device  0 [0x1a] Tesla V100
#   Rank  1 Pid  1 on h device  1 [0x1b] Tesla V100
#   Rank  2 Pid  1 on h device  2 [0x1c] Tesla V100
#   Rank  3 Pid  1 on h device  3 [0x1d] Tesla V100
#
#                                             out-of-place                       in-place
#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)             (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576         65536   float    40.00   26.21   19.66  0e+00    39.00   26.89   20.16  0e+00
     2097152        131072   float    70.00   29.96   22.47  0e+00    69.00   30.39   22.79  0e+00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 21.27
"""
    d = parse_nccl_tests(text, "x.txt")  # factor 0.75 without a reduction: all_gather or alltoall
    assert d["n"] == 4 and d["collective"] is None
    assert "ambiguous" in d["collective_from"] and "all_gather, alltoall" in d["collective_from"]
    d = parse_nccl_tests(text, "logs/all_gather_perf.txt")
    assert d["collective"] == "all_gather" and d["collective_from"] == "file name"
    assert d["rows"][1]["redop"] is None and d["rows"][1]["out_of_place"]["busbw"] == 22.47
    assert d["rows"][0]["out_of_place"]["wrong"] == 0.0


def test_not_nccl_tests_output_is_bad_input(tmp_path):
    with pytest.raises(InputError, match="no nccl-tests result rows"):
        parse_nccl_tests("hello\nworld\n", "x.txt")
    with pytest.raises(InputError, match="not found"):
        read_nccl_tests(tmp_path / "none.txt")
    with pytest.raises(InputError, match="--op"):
        parse_nccl_tests(_file("autodl-2x-2080ti-pcie-allreduce.txt").read_text(), "x", op="gossip")


def test_compare_and_judge_against_presets():
    d = read_nccl_tests(_file("superbench-8x-a100-sxm4-40gb-allreduce-oldformat.txt"))
    mine = [{"op": "all_reduce", "n": 8, "size_bytes": 268435456, "busbw_gbps": 220.0, "in_place": True},
            {"op": "all_gather", "n": 8, "size_bytes": 268435456, "busbw_gbps": 200.0}]  # fmt: skip
    cmp = compare(d, mine)
    assert len(cmp) == 1  # the file is an all-reduce
    c = cmp[0]
    assert c["nccl_tests_busbw_gbps"] == 222.45 and c["comparable"] and c["within_5pct"]
    assert c["ratio"] == pytest.approx(220 / 222.45)
    other = compare(d, [{"op": "all_reduce", "n": 4, "size_bytes": 268435456, "busbw_gbps": 1.0}])
    assert (
        not other[0]["comparable"]
        and other[0]["within_5pct"] is None
        and "8 ranks" in other[0]["note"]
    )
    # the recording judged against the machines it could have come from
    assert judge_nccl(d, resolve_machine("dgx-a100-80g"))["verdict"] == "ok"  # 235 of NV12 300
    assert judge_nccl(d, resolve_machine("dgx-h100"))["verdict"] == "low"  # 235 of NV18 450
    assert (
        judge_nccl(d, resolve_machine("k100-ai-8x64g"))["verdict"] == "unknown"
    )  # xGMI figure unpublished
    two = read_nccl_tests(_file("gcp-a3mega-2node-16x-h100-allreduce.txt"))
    f = judge_nccl(two, resolve_machine("dgx-h100"))
    assert f["verdict"] == "unknown" and "spans 2 hosts" in f["expected"]
    pcie = read_nccl_tests(_file("autodl-2x-2080ti-pcie-allreduce.txt"))
    assert judge_nccl(pcie, resolve_machine("8x-rtx4090"))["verdict"] == "bad"  # 4 GB/s: no P2P


def test_cli_compare_nccl_missing_file_is_bad_input(tmp_path):
    proc = run_cli("bench", "--no-cards", "--compare-nccl", str(tmp_path / "none.txt"))
    assert (
        proc.returncode == 2 and "not found" in proc.stderr and len(proc.stderr.splitlines()) == 1
    )
