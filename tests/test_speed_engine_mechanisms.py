"""Engine mechanisms the serving model follows (issue 28): SGLang's DP attention, vLLM V0's
chunked prefill default, the API server's share of TTFT, the MI300X's measured memory and link
figures.  Each figure is derived by hand from the model's own inputs."""

from __future__ import annotations

import dataclasses
import math

import pytest

from nodeledger.ledger.engines import resolve_serve_job, v0_max_num_batched_tokens
from nodeledger.ledger.jobs import JobError, Parallel, ServeJob
from nodeledger.machine.io import load_preset
from nodeledger.model import load_model
from nodeledger.speed import serving as SV
from nodeledger.speed.engines import engine_speed
from nodeledger.verdict.fit import ledger_for


@pytest.fixture(scope="module")
def dsv3():
    return load_model("deepseek-v3")[0]


@pytest.fixture(scope="module")
def h200x8():
    return load_preset("hgx-h200")


def _job(**kw) -> ServeJob:
    base = dict(engine="sglang", engine_version="0.4.3", context=4096, concurrency=1,
                parallel=Parallel(tp=8))  # fmt: skip
    base.update(kw)
    return ServeJob(**base)


def test_dp_attention_holds_a_kv_pool_per_rank_and_the_attention_weights_whole(dsv3, h200x8):
    plain = ledger_for(dsv3, _job(), h200x8)
    dp = ledger_for(dsv3, _job(dp_attention=True), h200x8)
    # the attention projections are whole on every rank: weights grow by 7/8 of them
    attn = sum(t.numel for t in dsv3.tensors if t.part == "attention")

    def weights(lg):
        return next(i.bytes for i in lg.cards[0].items if i.name == "weights")

    grown = weights(dp) - weights(plain)
    assert grown == pytest.approx(attn * 7 / 8, rel=0.02)  # fp8: ~1 B per weight + scales
    # each rank's pool is smaller (more weights), but the replica holds 8 of them
    per_rank = dp.extras["kv_pool_tokens"] / 8
    assert per_rank < plain.extras["kv_pool_tokens"]
    assert dp.extras["kv_pool_tokens"] > 4 * plain.extras["kv_pool_tokens"]
    assert any("DP attention" in n for n in dp.notes)


def test_dp_attention_is_sglang_only_and_needs_tp():
    with pytest.raises(JobError, match="--dp-attention"):
        _job(engine="vllm", engine_version="0.11.0", dp_attention=True)
    with pytest.raises(JobError, match="--dp-attention"):
        _job(parallel=Parallel(tp=1), dp_attention=True)


def test_dp_attention_steps_read_only_their_rank_s_sequences(dsv3, h200x8):
    """At 64 decoding sequences of 8,192 tokens on TP 8: without DP attention every card reads
    all 64 latent caches (MLA has one KV head, replicated); with it each rank reads its own 8
    (the same attention FLOPs per card: 8 sequences x 128 heads instead of 64 x 16), and the
    layer needs one all-reduce's bytes (gather + scatter around the MLP) instead of two."""
    models = {}
    for dp in (False, True):
        job = _job(dp_attention=dp)
        m, unknown = SV.step_model_for(dsv3, job, h200x8, 1024)
        assert m is not None and not unknown
        models[dp] = m
    assert models[True].dp_attn == 8 and models[False].dp_attn == 1
    a = {dp: m.parts(0, 64, 64 * 8192)["parts"]["attention"] for dp, m in models.items()}
    assert a[True] < a[False] / 3
    tp = {dp: m.allreduce_s(8) for dp, m in models.items()}
    assert tp[True] == pytest.approx(tp[False] / 2)


def test_vllm_v0_chunks_prefill_above_32k_context_on_cuda_only():
    n, why = v0_max_num_batched_tokens("0.6.3", 131072)
    assert n == 512 and "chunked prefill" in why
    assert v0_max_num_batched_tokens("0.6.5", 131072)[0] == 2048
    assert v0_max_num_batched_tokens("0.6.3", 131072, rocm=True)[0] == 131072
    assert v0_max_num_batched_tokens("0.6.3", 4096)[0] == 4096
    job, _ = resolve_serve_job(ServeJob(engine="vllm", engine_version="0.6.3", context=131072))
    sched = SV.scheduler_for(job, engine_speed("vllm", "0.6.3"), 10**6)
    assert sched.policy == "vllm" and sched.max_num_batched_tokens == 512  # chunks mix in
    job, _ = resolve_serve_job(ServeJob(engine="vllm", engine_version="0.6.3", context=131072),
                               rocm=True)  # fmt: skip
    assert SV.scheduler_for(job, engine_speed("vllm", "0.6.3"), 10**6).policy == "sglang"


def test_ttft_holds_the_api_server_s_share(h200x8):
    spec = load_model("llama-3.1-8b")[0]
    job = ServeJob(engine="vllm", engine_version="0.11.0", context=2048, concurrency=1)
    eng = engine_speed("vllm", "0.11.0")
    assert eng.request_overhead_s == pytest.approx(6.9e-3)
    kw = dict(num_prompts=4, request_rate=math.inf, max_concurrency=1, input_len=512,
              output_len=16, pool_tokens=100_000)  # fmt: skip
    res = SV.serving_benchmark(spec, job, h200x8, **kw)
    assert any("API server" in n for n in res["notes"])
    # the same run without the server's share: TTFT exactly 6.9 ms less
    m, _ = SV.step_model_for(spec, job, h200x8, 512)
    bare = dataclasses.replace(m, engine=dataclasses.replace(m.engine, request_overhead_s=0.0))
    sched = SV.scheduler_for(job, bare.engine, 100_000, static_batch=1)
    from nodeledger.speed import simulate as S

    reqs = S.make_requests(4, math.inf, 512, 16, max_concurrency=1)
    raw = SV.run_benchmark(bare, sched, reqs)
    assert res["ttft_median_s"] == pytest.approx(raw["ttft_s"]["median"] + 6.9e-3, rel=1e-6)


def _pp2_and_one(machine, mean_input: int):
    """Llama-3.1-8B step models on vLLM 0.11 at PP 2 and on one card (no TP)."""
    spec = load_model("llama-3.1-8b")[0]
    pp2 = ServeJob(engine="vllm", engine_version="0.11.0", context=4096, concurrency=1,
                   parallel=Parallel(tp=1, pp=2))  # fmt: skip
    one = dataclasses.replace(pp2, parallel=Parallel(tp=1, pp=1))
    return (SV.step_model_for(spec, pp2, machine, mean_input)[0],
            SV.step_model_for(spec, one, machine, mean_input)[0])  # fmt: skip


def test_pipeline_parallel_rounds_are_one_groups_pass(h200x8):
    """PP: the running sequences go through the stages as pp groups; a round (each sequence one
    token) lasts one group's pass through all the layers.  PP 2 decoding 64 sequences costs
    what one card's whole-model step of 32 costs (no TP: no all-reduce), not twice a step of 64
    (the defect a 2 x RTX 4090 PP-2 run exposed: TPOT +156 %, now +1 %)."""
    m2, m1 = _pp2_and_one(h200x8, 512)
    ctx = 2000
    assert m2.parts(0, 64, 64 * ctx)["seconds"] == pytest.approx(
        m1.parts(0, 32, 32 * ctx)["seconds"]
    )
    assert m2.parts(0, 64, 64 * ctx)["seconds"] < m1.parts(0, 64, 64 * ctx)["seconds"]


def test_v0_mla_forces_chunked_prefill_off_in_0_7_1_and_0_7_2():
    """vLLM PR 12642 (0.7.1): 'MLA is enabled; forcing chunked prefill and prefix caching to be
    disabled'; by 0.7.4.dev4 only on non-CUDA platforms (taken from 0.7.3)."""
    for v in ("0.7.1", "0.7.2"):
        n, why = v0_max_num_batched_tokens(v, 163_840, mla=True)
        assert n == 163_840 and "PR 12642" in why
    assert v0_max_num_batched_tokens("0.7.3", 163_840, mla=True)[0] == 2048
    assert v0_max_num_batched_tokens("0.7.2", 163_840, mla=False)[0] == 2048
    assert v0_max_num_batched_tokens("0.7.0", 163_840, mla=True)[0] == 2048


def test_a_lone_prompt_passes_the_pipeline_stages_one_after_another(h200x8):
    """PP 2: one prompt's prefill is not split between the stages' groups (its TTFT is the whole
    model's), four prompts are (two per group)."""
    m2, m1 = _pp2_and_one(h200x8, 1024)
    assert m2.parts(1024, 0, 0)["seconds"] == pytest.approx(m1.parts(1024, 0, 0)["seconds"])
    assert m2.parts(4096, 0, 0)["seconds"] == pytest.approx(m1.parts(2048, 0, 0)["seconds"])
