"""The kernel table and the operator-level step time (issue 28), derived by hand."""

from __future__ import annotations

import json

import pytest

from nodeledger.errors import InputError
from nodeledger.model import load_model
from nodeledger.speed import operators as O
from nodeledger.speed.kernels import parse_table, table_for


@pytest.fixture(scope="module")
def h200():
    t = table_for("NVIDIA H200")
    assert t is not None and t.card == "NVIDIA H200"
    return t


def _rows(part: str) -> list[dict]:
    from importlib import resources

    text = resources.files("nodeledger.speed").joinpath("kernels", "h200.jsonl").read_text()
    return [r for r in map(json.loads, text.splitlines()) if r["part"] == part]


def test_a_measured_4096_gemm_is_read_back_as_measured_then_without_dispatch(h200):
    rows = sorted((r["m"], r["s"]) for r in _rows("gemm_bf16") if (r["n"], r["k"]) == (4096, 4096))
    big = [(m, s) for m, s in rows if m >= 1024]
    for m, s in big:  # large M: the measured time (monotone already), eager and in a graph
        assert h200.gemm_s(m, 4096, 4096, graphs=False) == pytest.approx(s)
        assert h200.gemm_s(m, 4096, 4096) == pytest.approx(s - h200.dispatch_s)
    # between two measured M the time lies between theirs
    assert big[0][1] < h200.gemm_s(1500, 4096, 4096, graphs=False) < big[1][1]
    # an unmeasured shape: the nearest measured one by N x K, scaled by N x K
    near = h200.gemm_s(4096, 4096, 4096, graphs=False) * (4200 * 4096) / (4096 * 4096)
    assert h200.gemm_s(4096, 4200, 4096, graphs=False) == pytest.approx(near)


def test_the_table_states_its_streaming_bandwidth_and_dispatch(h200):
    # a single row through 151936 x 4096 bf16 weights: ~1.2 GB at the best measured rate
    assert 3000 < h200.stream_gbps < 4800  # below the 4,800 GB/s datasheet, as measured
    assert 600 < h200.peak_tflops < 989.5
    assert 5e-6 < h200.dispatch_s < 40e-6  # one eager PyTorch call's host time


def test_an_8b_decode_at_batch_1_in_a_graph_is_its_weights_over_the_bandwidth(h200):
    spec, _ = load_model("llama-3.1-8b")
    ck = O.card_kernels("NVIDIA H200", None, None)
    st = O.step_seconds(spec, ck, decode_seqs=1, decode_ctx=1024)
    weights = sum(g.n * g.k * g.layers for g in O.gemms(spec)) * 2 + spec.vocab_size * 4096 * 2
    by_hand = weights / (h200.stream_gbps * 1e9)
    assert st["seconds"] == pytest.approx(by_hand, rel=0.15)
    assert not st["host_bound"] and st["parts"]["dispatch"] == 0


def test_eager_decode_of_a_small_model_is_bound_by_the_host(h200):
    spec, _ = load_model("qwen3-0.6b")
    ck = O.card_kernels("NVIDIA H200", None, None)
    graph = O.step_seconds(spec, ck, decode_seqs=1, decode_ctx=512)
    eager = O.step_seconds(spec, ck, decode_seqs=1, decode_ctx=512, graphs=False)
    assert eager["host_bound"]
    assert eager["seconds"] == pytest.approx(eager["calls"] * h200.dispatch_s)
    assert eager["seconds"] > 5 * graph["seconds"]  # the card sits idle most of the step


def test_another_card_moves_through_its_mamf_and_bandwidth(h200):
    spec, _ = load_model("llama-3.1-8b")
    ref = O.step_seconds(spec, O.card_kernels("NVIDIA H200", None, None), decode_seqs=1,
                         decode_ctx=1024)  # fmt: skip
    ck = O.card_kernels("NVIDIA H100 80GB HBM3", 989.4, 3350.0)
    h100 = O.step_seconds(spec, ck, decode_seqs=1, decode_ctx=1024)
    assert h100["seconds"] == pytest.approx(ref["seconds"] * 4800 / 3350, rel=0.02)
    assert "MAMF 794.5 TFLOPS" in h100["source"] and "datasheets' bandwidth" in h100["source"]
    # compute-bound work moves by the measured best matmul rates (MAMF), not the datasheets:
    # an MI300X (1,307 TFLOPS on paper, 668 achieved) is slower than the H200 table at prefill
    mi = O.card_kernels("AMD Instinct MI300X", 1307.4, 5300.0)
    pre = {
        n: O.step_seconds(spec, k, prefill_tokens=8192, prefill_seqs=2)["seconds"]
        for n, k in (("h200", O.card_kernels("NVIDIA H200", None, None)), ("mi300x", mi))
    }
    assert pre["mi300x"] > pre["h200"]
    assert O.card_kernels("K100_AI", None, None) is None  # no datasheet: unknown, not guessed


def test_moe_decode_streams_only_the_touched_experts(h200):
    spec, _ = load_model("qwen3-30b-a3b")
    ck = O.card_kernels("NVIDIA H200", None, None)
    one = O.step_seconds(spec, ck, decode_seqs=1, decode_ctx=1024)["parts"]["experts"]
    many = O.step_seconds(spec, ck, decode_seqs=256, decode_ctx=1024)["parts"]["experts"]
    # batch 1 touches top_k = 8 of 128 experts per layer; 256 sequences touch nearly all
    per_expert = 3 * 768 * 2048 * 2 * spec.moe.moe_layers / (h200.stream_gbps * 1e9)
    assert one == pytest.approx(8 * per_expert, rel=0.05)
    assert many > 10 * one


@pytest.mark.parametrize("line", ['{"part": "gemm_bf16", "m": -1, "n": 4, "k": 4, "s": 1}',
                                  "not json", '{"part": "nonsense"}'])  # fmt: skip
def test_a_bad_table_line_is_one_input_error(line):
    with pytest.raises(InputError, match=r"kernel table t\.jsonl"):
        parse_table(line + "\n", "t.jsonl")
