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
    # an unmeasured shape: at the rate of the two measured shapes that bracket its N x K
    # (each call less its one dispatch), log-interpolated; the call adds one dispatch back
    import math

    r1 = 2 * 4096**3 / h200.gemm_s(4096, 4096, 4096)
    r2 = 2 * 4096 * 6144 * 4096 / h200.gemm_s(4096, 6144, 4096)
    w = math.log(4200 / 4096) / math.log(6144 / 4096)
    want = 2 * 4096 * 4200 * 4096 / math.exp((1 - w) * math.log(r1) + w * math.log(r2))
    assert h200.gemm_s(4096, 4200, 4096) == pytest.approx(want)
    assert h200.gemm_s(4096, 4200, 4096, graphs=False) == pytest.approx(want + h200.dispatch_s)
    # a shape far smaller than its nearest measured one keeps the nearest's rate, not more
    # (the dispatch is not scaled down with it)
    small = h200.gemm_s(1024, 2560, 8192)
    rate = 2 * 1024 * 2560 * 8192 / small / 1e12
    assert rate <= h200.peak_tflops * 1.07


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
    # + the kernels that do next to nothing but still take the in-graph floor: 5 per layer
    # (2 fused add + RMSNorm, rotary, SiluAndMul, KV write) at 3 us, and one paged decode
    # attention per layer at its 12 us floor (1,024 keys of 8 KV heads read in ~1 us)
    by_hand += 32 * 5 * 3e-6 + 32 * 12e-6
    assert st["seconds"] == pytest.approx(by_hand, rel=0.05)
    assert st["parts"]["elementwise"] == pytest.approx(32 * 5 * 3e-6)
    assert st["parts"]["attention"] == pytest.approx(32 * 12e-6)
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
    # the weight stream moves by the bandwidths; the fixed in-graph floors do not move
    assert h100["parts"]["gemm"] == pytest.approx(ref["parts"]["gemm"] * 4800 / 3350, rel=0.02)
    assert h100["parts"]["elementwise"] == ref["parts"]["elementwise"]
    assert "MAMF 794.5 TFLOPS" in h100["source"] and "datasheets' bandwidth" in h100["source"]
    # a card with a measured copy plateau moves by it, not by its datasheet bandwidth: the
    # MI300X copies at 4,110 GB/s of its 5,300 (the H200 table's plateau: 4,277)
    mi_src = O.card_kernels("AMD Instinct MI300X", 1307.4, 5300.0)
    assert "copy plateau 4110 GB/s" in mi_src.source
    assert mi_src.ratio_memory == pytest.approx(h200.best_copy_gbps / 4110)
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


def test_block_fp8_gemms_are_bound_by_their_launch_grid(h200):
    """DeepSeek-V3's block-scaled fp8 weights (quantization_config weight_block_size) run the
    engines' block-fp8 triton GEMM: ceil(M/64) x ceil(N/128) programs at 38 GB/s each.  By hand,
    its fused q/kv down-projection (N = 1536 + 576 = 2112, K = 7168) at one row on an H200:
    17 programs, 2112 x 7168 B + scales at 17 x 38 GB/s = 23 us (the H100 measured 23.3 us)."""
    from nodeledger.model import load_model as lm

    spec, _ = lm("deepseek-v3")
    assert O.block_fp8(spec)
    kinds = {g.kind for g in O.gemms(spec, 8, O.W.scheme(spec, None))}
    assert "fp8_block" in kinds
    ck = O.card_kernels("NVIDIA H200", None, None)
    t = O.gemm_kernel_s(ck, 1, 2112, 7168, "fp8_block", 1.0)
    assert t == pytest.approx(2112 * 7168 / (17 * 38e9), rel=0.01)
    # 256 rows re-stream the weights per 64-row tile over 4 x the programs: the same time
    assert O.gemm_kernel_s(ck, 256, 2112, 7168, "fp8_block", 1.0) == pytest.approx(t, rel=0.01)
    # the same weights per tensor (fp8 asked of a 16-bit checkpoint): no grid bound
    assert O.gemm_kernel_s(ck, 1, 2112, 7168, "fp8", 1.0) < t / 2
    llama, _ = lm("llama-3.1-8b")
    assert not O.block_fp8(llama)
    assert {g.kind for g in O.gemms(llama, 1, O.W.scheme(llama, "fp8"))} >= {"fp8"}


def test_weight_only_experts_read_their_packed_bytes(h200):
    """gpt-oss's mxfp4 experts (17 B per 32 weights) are dequantised in the kernel: a memory-
    bound expert GEMV reads 17/64 of the bf16 bytes at the same efficiency."""
    from conftest import shared_models_or_skip

    spec, _ = load_model(str(shared_models_or_skip() / "gpt-oss-20b"))
    ck = O.card_kernels("NVIDIA H200", None, None)
    experts = [g for g in O.gemms(spec, 1, O.W.scheme(spec, None)) if g.expert]
    assert experts and all(g.kind == "marlin" for g in experts)
    assert experts[0].wbytes == pytest.approx(17 / 32)
    g = experts[0]
    bf16 = O.gemm_kernel_s(ck, 1, g.n, g.k, "bf16", 2.0)
    packed = O.gemm_kernel_s(ck, 1, g.n, g.k, g.kind, g.wbytes)
    assert packed == pytest.approx(bf16 * (17 / 32) / 2, rel=0.02)
    # at large M the math binds: a Marlin-family kernel reaches at most 0.61 of the table's best
    # bf16 rate (vLLM PR 2497: 141.1 of 231.4 TFLOP/s), so it is slower than the bf16 GEMM
    big = O.gemm_kernel_s(ck, 8192, g.n, g.k, g.kind, g.wbytes)
    floor = 2 * 8192 * g.n * g.k / (0.61 * ck.table.peak_flops("bf16"))
    assert big >= floor * (1 - 1e-9)
    assert big > O.gemm_kernel_s(ck, 8192, g.n, g.k, "bf16", 2.0)
    # bitsandbytes nf4 dequantises to bf16 and runs the bf16 GEMM: no Marlin ceiling
    nf4 = O.gemm_kernel_s(ck, 8192, g.n, g.k, "weight_only", g.wbytes)
    assert nf4 < big


def test_routers_and_mla_down_projections_stay_whole_under_tp():
    """vLLM / SGLang keep the MoE router and MLA's q_a / kv_a down-projections whole on every TP
    rank (ReplicatedLinear; one fused_qkv_a_proj of 1536 + 576 outputs): not split by tp."""
    spec, _ = load_model("deepseek-v3")
    g8 = {g.name: g for g in O.gemms(spec, 8, O.W.scheme(spec, None))}
    assert (g8["qkv_a"].n, g8["qkv_a"].k) == (1536 + 576, 7168)
    router = next(g for g in O.gemms(spec, 8) if g.name.endswith("mlp.gate.weight"))
    assert router.n == spec.moe.num_experts  # 256 experts' logits on every rank
    q_b = next(g for g in O.gemms(spec, 8) if "q_b_proj" in g.name)
    assert q_b.n == 128 * 192 // 8  # column-parallel as before


def test_an_fp8_gemv_reads_one_byte_per_weight(h200):
    """At one row an fp8 GEMM streams its e4m3 weights: 1 B each, half the bf16 bytes, so it
    is bound near half the bf16 GEMV's time (the bytes floor counts the operands' own width)."""
    fp8 = h200.gemm_s(1, 8192, 8192, "fp8")
    bf16 = h200.gemm_s(1, 8192, 8192, "bf16")
    assert fp8 == pytest.approx(8192 * 8192 / (h200.stream_gbps * 1e9), rel=0.05)
    assert 0.4 < fp8 / bf16 < 0.6


def test_no_gemm_is_credited_more_than_the_tables_best_rate(h200):
    """A dispatch-dominated call (6144 x 1024 at M = 512 measured 29.2 us, 22 us of it the
    dispatch) leaves a kernel too short to be real once the dispatch is taken off: every GEMM
    is held to the best rate the table measured."""
    peak = h200.peak_flops("bf16")
    assert peak >= h200.peak_tflops * 1e12  # kernels, the dispatch taken off long calls
    for m in (64, 256, 400, 512, 1024, 4096):
        for n, k in ((2880, 2880), (6144, 1024), (5760, 2880), (4096, 4096)):
            t = h200.gemm_s(m, n, k, "bf16")
            assert 2 * m * n * k / t <= peak * 1.0001


def test_weight_only_saves_bytes_only_where_the_gemm_is_memory_bound(h200):
    """The bf16 time t at a shape, its memory time t_mem (bytes at the streaming rate over the
    GEMV's efficiency): t <= t_mem keeps the efficiency on the packed bytes, t >= 2 t_mem keeps
    t (the math does not shrink with the weights), linear between."""
    n, k, wb = 2880, 2880, 17 / 32
    bw = h200.stream_gbps * 1e9
    t1 = h200.gemm_s(1, n, k, "bf16")
    eta = min(1.0, (2 * n * k + 2 * (n + k)) / bw / t1)
    for m in (1, 64, 400, 4096):
        t = h200.gemm_s(m, n, k, "bf16")
        act = 2 * m * (n + k)
        t_mem = (2 * n * k + act) / bw / eta
        saved = (2 - wb) * n * k / bw / eta
        share = min(1.0, max(0.0, (2 * t_mem - t) / t_mem))
        want = max(t - saved * share, (wb * n * k + act) / bw, 2 * m * n * k / h200.peak_flops())
        assert O.weight_only_s(h200, t, m, n, k, wb) == pytest.approx(want)
    # compute-bound: nothing saved
    t = h200.gemm_s(4096, n, k, "bf16")
    assert O.weight_only_s(h200, t, 4096, n, k, wb) == pytest.approx(t)


def test_a_moved_table_scales_a_grouped_expert_once(h200):
    """The experts' rate is read on the table's card and moved to this card once: on a card
    with a third of the H200's compute, a compute-bound expert GEMM takes 1 / ratio as long,
    not its square."""
    from conftest import shared_models_or_skip

    spec, _ = load_model(str(shared_models_or_skip() / "Mixtral-8x7B-v0.1"))
    ref = O.card_kernels("NVIDIA H200", None, None)
    slow = O.CardKernels(ref.table, "test: a third of the compute", 3.0, 1.0)
    m = 8192  # 2,048 rows per expert: compute-bound
    fast_t = O.OpPlan(spec, ref, 1, "bf16", "bf16").matmuls(m)[2]
    slow_t = O.OpPlan(spec, slow, 1, "bf16", "bf16").matmuls(m)[2]
    assert slow_t == pytest.approx(3.0 * fast_t, rel=0.02)


def test_block_fp8_fused_moe_streams_at_its_release_share():
    """vLLM 0.7 / SGLang 0.4.0-0.4.3's Triton fused_moe streamed block-fp8 experts at 0.332 of
    the card's rate (PR 13932's H100 benchmark): a DeepSeek-V3 layer at 128 tokens and TP 8,
    every expert touched once, takes 1 / 0.332 as long as at the full rate."""
    from conftest import shared_models_or_skip
    from nodeledger.speed.engines import engine_speed

    spec, _ = load_model(str(shared_models_or_skip() / "DeepSeek-V3"))
    assert engine_speed("vllm", "0.7.3").moe_block_fp8_stream == pytest.approx(0.332)
    assert engine_speed("sglang", "0.4.3").moe_block_fp8_stream == pytest.approx(0.332)
    assert engine_speed("vllm", "0.11.0").moe_block_fp8_stream == 1.0
    assert engine_speed("sglang", "0.4.4").moe_block_fp8_stream == 1.0
    ck = O.card_kernels("NVIDIA H200", None, None)
    full = O.OpPlan(spec, ck, 8, None, "bf16").matmuls(128)[2]
    slow = O.OpPlan(spec, ck, 8, None, "bf16", moe_stream=0.332).matmuls(128)[2]
    assert slow == pytest.approx(full / 0.332, rel=0.01)
    assert any(
        "0.332" in a for a in O.OpPlan(spec, ck, 8, None, "bf16", moe_stream=0.332).assumptions()
    )


def test_a_block_fp8_gemm_is_held_to_its_kernels_large_m_rate():
    """vLLM PR 23280 (H100, N=2112 K=7168): the Triton block-fp8 GEMM reaches 367-407 TFLOP/s at
    M 1,024-8,192; a release running it (vLLM 0.6-0.10, SGLang 0.4.0-0.4.3) gets no more at any
    M, log-interpolated between the rows, the 1,024 row below it."""
    from nodeledger.speed.engines import engine_speed
    from nodeledger.speed.kernels import block_fp8_gemm_tflops

    assert block_fp8_gemm_tflops("triton", 1) == pytest.approx(366.839772)
    assert block_fp8_gemm_tflops("triton", 4096) == pytest.approx(402.982983)
    assert block_fp8_gemm_tflops("triton", 65536) == pytest.approx(406.51136)
    assert 366.8 < block_fp8_gemm_tflops("triton", 1500) < 396.1
    assert block_fp8_gemm_tflops("", 4096) is None
    assert engine_speed("vllm", "0.7.3").block_fp8_gemm == "triton"
    assert engine_speed("vllm", "0.11.0").block_fp8_gemm == ""
    ck = O.card_kernels("NVIDIA H200", None, None)
    m, n, k = 4096, 7168, 2048
    t = O.gemm_kernel_s(ck, m, n, k, "fp8_block", 1.0, "triton")
    assert t == pytest.approx(max(O.gemm_kernel_s(ck, m, n, k, "fp8_block", 1.0),
                                  2 * m * n * k / 402.982983e12))  # fmt: skip
    assert t > O.gemm_kernel_s(ck, m, n, k, "fp8_block", 1.0)


def test_a_moved_gemm_never_beats_the_cards_own_rooflines(h200):
    """Moved to an H100 (same compute, 3,350 / 4,800 of the bandwidth), an fp8 GEMM of Llama
    405B's MLP at TP 8 (N = 6,656, K = 16,384, 109 MB of weights) at M = 128 sits past the bf16
    ridge on the H200 but not past the fp8 one: it reads its weights at no more than the H100's
    moved streaming rate (it had been moved by the compute ratio: 97 % of the datasheet)."""
    ck = O.card_kernels("NVIDIA H100 80GB HBM3", 989.5, 3350.0)
    n, k = 6656, 16384
    for m in (1, 32, 128, 256):
        t = O.gemm_kernel_s(ck, m, n, k, "fp8", 1.0)
        floor = (n * k * 1.0) / (h200.stream_gbps * 1e9 * 3350.0 / 4800.0)
        assert t >= floor * 0.999
        bf16 = O.gemm_kernel_s(ck, m, n, k, "bf16", 2.0)
        assert bf16 >= 2 * floor * 0.999


def test_an_engines_eager_step_dispatches_its_counted_calls(h200):
    """An engine's eager step (SGLang's prefill, vLLM V0's) dispatches, per Llama layer, its 4
    GEMMs, the attention call and the 11 counted calls around them (+ 2 all-reduces under TP):
    Llama-3.1-70B (80 layers) at TP 4 -> 80 x (4 + 1 + 13) + the LM head = 1,441 calls at the
    table's dispatch.  A DeepSeek-V3 layer adds its MLA and MoE small kernels and one grouped
    call per expert GEMM."""
    ck = O.card_kernels("NVIDIA H200", None, None)
    llama, _ = load_model("llama-3.1-70b")
    plan = O.plan_for(llama, ck, tp=4)
    per = O.ENGINE_EAGER_CALLS_PER_LAYER + O.ENGINE_EAGER_TP_CALLS
    st = plan.step(prefill_tokens=512, prefill_seqs=1, graphs=False, calls_per_layer=per,
                   expert_loop=False)  # fmt: skip
    assert st["calls"] == 80 * (4 + 1 + 13) + 1
    assert st["parts"]["dispatch"] == pytest.approx(st["calls"] * h200.dispatch_s)
    ds, _ = load_model("deepseek-v3")
    dplan = O.plan_for(ds, ck, tp=8)
    fused = dplan.step(prefill_tokens=512, prefill_seqs=1, graphs=False, calls_per_layer=per,
                       expert_loop=False)["calls"]  # fmt: skip
    gemm_calls = sum(g.layers for g in dplan.dense)
    extra = 61 * O.MLA_KERNELS + ds.moe.moe_layers * O.MOE_KERNELS
    expert_calls = sum(g.layers for g in dplan.experts)  # one grouped call per expert GEMM
    assert fused == gemm_calls + 61 + 1 + 61 * per + extra + expert_calls


def test_copies_and_attention_move_by_the_memory_ratio_alone(h200):
    """The GEMM floor of a moved table does not apply to copies or decode attention: the H200
    table's copies (4.28 TB/s) and decode attention (4.39 TB/s) stream faster than its GEMMs
    (3.9 TB/s), so on an H100 they take exactly their H200 time x 4,800 / 3,350."""
    ck = O.card_kernels("NVIDIA H100 80GB HBM3", 989.5, 3350.0)
    nbytes = 2 * 2**30
    t = h200.copy_s(nbytes)
    assert ck.scale(t, 0.0, nbytes) == pytest.approx(t * 4800 / 3350)
    kv = 256 * 8192 * 2 * 8 * 128 * 2  # 256 sequences x 8k keys, K and V, 8 KV heads, bf16
    a = h200.attn_decode_s(kv)
    assert ck.scale(a, 0.0, kv) == pytest.approx(a * 4800 / 3350)
    assert ck.scale(a, 0.0, kv) < ck.scale(a, 0.0, kv, gemm=True)  # the GEMM floor would bind


def test_bitsandbytes_nf4_dequantises_beyond_one_row_and_adds_its_calls(h200):
    """bitsandbytes' Linear4bit: one token's row runs the 4-bit GEMV (packed bytes read), more
    rows dequantise the weight to bf16 (read packed, write 2 B a weight) and run the bf16 GEMM;
    its wrapper adds 2 host calls per linear at one row and 5 beyond, in an eager step."""
    ck = O.card_kernels("NVIDIA H200", None, None)
    n, k, wb = 14336, 4096, 0.53
    bf16 = O.gemm_table_s(ck, 8, n, k)
    assert O.gemm_table_s(ck, 8, n, k, "weight_only", wb) == pytest.approx(
        bf16 + h200.copy_s(n * k * (wb + 2.0))
    )
    one = O.gemm_table_s(ck, 1, n, k, "weight_only", wb)
    assert one < O.gemm_table_s(ck, 1, n, k)  # the GEMV reads the packed bytes only
    spec, _ = load_model("llama-3.1-8b")
    linears = 32 * 7  # q, k, v, o, gate, up, down unfused (transformers)
    for seqs, extra in ((1, O.BNB_CALLS_ONE_ROW), (8, O.BNB_CALLS_ROWS)):
        plain = O.plan_for(spec, ck, dtype="bf16").step(decode_seqs=seqs, decode_ctx=128,
                                                         graphs=False)["calls"]  # fmt: skip
        nf4 = O.plan_for(spec, ck, dtype="nf4").step(decode_seqs=seqs, decode_ctx=128,
                                                      graphs=False)["calls"]  # fmt: skip
        dense = O.plan_for(spec, ck, dtype="nf4").dense
        assert sum(g.layers * g.members for g in dense) == linears
        assert nf4 - plain == extra * linears
