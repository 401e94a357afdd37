"""vLLM's pool for hybrid models (Mamba-2 / Gated DeltaNet layers beside attention): the state
page per sequence, the attention block raised to hold it, one page per sequence per state
group — each figure derived by hand from the config and vLLM's arithmetic
(HybridAttentionMambaModelConfig, MambaStateShapeCalculator, kv_cache_utils)."""

from __future__ import annotations

import dataclasses
from math import ceil
from pathlib import Path

import pytest

from nodeledger.ledger import engines as eng
from nodeledger.ledger import kv_cache as kv
from nodeledger.ledger.build import serve_ledger
from nodeledger.ledger.jobs import Parallel, ServeJob
from nodeledger.machine import resolve_machine
from nodeledger.model import load_model

HERE = Path(__file__).resolve().parent
NEMOTRON = HERE / "fixtures" / "models" / "Nemotron-H-8B-Base-8K"
QWEN3_NEXT = HERE.parents[1] / "shared" / "fixtures" / "models" / "Qwen3-Next-80B-A3B-Instruct"


@pytest.fixture(scope="module")
def nemotron():
    return load_model(str(NEMOTRON))[0]


def test_mamba2_state_elements_by_hand(nemotron):
    # Nemotron-H-8B: 128 heads x 64 head_dim, state 128, 8 groups, conv kernel 4
    layer = eng.state_layers(nemotron)[0]
    conv_dim = 128 * 64 + 2 * 8 * 128  # intermediate + 2 x groups x state = 10,240
    assert kv.vllm_state_elements(layer, 1) == (3 * conv_dim, 128 * 64 * 128)
    assert kv.vllm_state_elements(layer, 2) == (3 * conv_dim // 2, 64 * 64 * 128)
    # one group over TP 2 does not divide: replicated to the head shards (tp groups)
    one = dataclasses.replace(layer, latent_dim=1)
    assert kv.vllm_state_elements(one, 2) == (3 * (128 * 64 + 2 * 2 * 128) // 2, 64 * 64 * 128)
    assert kv.vllm_state_elements(one, 1) == (3 * (128 * 64 + 2 * 128), 128 * 64 * 128)


def test_nemotron_block_raised_by_release(nemotron):
    # attention: 8 KV heads x 128 x 2 (K, V) x 2 B = 4,096 B per token per layer
    conv, ssm = 3 * 10_240, 128 * 64 * 128
    # bf16 state (0.11: both 'auto'; 0.13-0.19: float16 default): 16 x ceil(2,158,592 / 65,536)
    for version in ("0.11.0", "0.15.0"):
        p = eng.vllm_hybrid_pages(nemotron, version, 16, 2, 1, 1)
        assert p.state_page_bytes == conv * 2 + ssm * 2 == 2_158_592
        assert p.block_size == 16 * ceil(2_158_592 / (16 * 4096)) == 528
        assert p.page_bytes == 528 * 4096
    # float32 SSM state from 0.20 (PR 39032): 16 x ceil(4,255,744 / 65,536) = 1,040
    p = eng.vllm_hybrid_pages(nemotron, "0.33.0", 16, 2, 1, 1)
    assert (p.ssm_dtype_bytes, p.block_size) == (4, 1040)
    # the config's own mamba_ssm_cache_dtype wins over the release default
    fp16 = dataclasses.replace(nemotron, ssm_cache_dtype="float16")
    assert eng.vllm_hybrid_pages(fp16, "0.33.0", 16, 2, 1, 1).block_size == 528
    # a larger block asked stays; releases before the hybrid manager read: not modelled
    assert eng.vllm_hybrid_pages(nemotron, "0.15.0", 1024, 2, 1, 1).block_size == 1024
    assert eng.vllm_hybrid_pages(nemotron, "0.10.1", 16, 2, 1, 1) is None


def test_groups_and_concurrency(nemotron):
    # 4 attention + 24 Mamba layers: groups of min(4, 24) = 4 layers, 1 attention + 6 state
    groups = eng.kv_groups(nemotron, with_state=True)
    assert [g.kind for g in groups] == ["full"] + ["state"] * 6
    assert {g.layers for g in groups} == {4}
    # a request of 8,192 tokens: ceil(8192 / 528) = 16 attention blocks + 6 state pages
    assert eng.blocks_per_request(groups, 8192, 528, 8192) == 16 + 6
    # without the state the old single group stands
    assert [g.kind for g in eng.kv_groups(nemotron)] == ["full"]


def test_ledger_counts_the_state(nemotron):
    m = resolve_machine("hgx-h200")
    job = ServeJob(engine="vllm", engine_version="0.15.0", context=8192, concurrency=1,
                   parallel=Parallel(tp=1))  # fmt: skip
    ex = serve_ledger(nemotron, job, m).extras
    e = ex["engine"]
    assert e["block_size"] == 528 and e["kv_state_groups"] == 6 and e["kv_groups"] == 7
    page = 528 * 4096
    blocks = ex["kv_blocks"]
    assert blocks == int(e["kv_available_bytes"] // page // 4)
    assert ex["max_concurrency_printed"] == pytest.approx(blocks / (16 + 6))
    # each sequence holds 6 state pages of 4 layers
    assert ex["kv_state_bytes_per_sequence"] == 6 * page * 4
    # the simulator's pool: attention blocks once the running sequences' state pages are held
    held = 6 * min(e["max_num_seqs"], int(ex["max_concurrency_printed"]))
    assert ex["sim_pool_tokens"] == (blocks - held) * 528
    # an older release: the state is not counted, and the ledger says so
    old = serve_ledger(nemotron, dataclasses.replace(job, engine_version="0.10.1"), m)
    assert (
        "kv_state_groups" in old.extras["engine"] and old.extras["engine"]["kv_state_groups"] == 0
    )
    assert any("not in this ledger" in n for n in old.notes)


@pytest.mark.skipif(not QWEN3_NEXT.is_dir(), reason="../shared fixtures absent")
def test_qwen3_next_tp4_block():
    spec = load_model(str(QWEN3_NEXT))[0]
    # GDN: conv (2 x 16 x 128 + 32 x 128) / 4 x 3, recurrent 32 / 4 x 128 x 128, bf16
    layer = eng.state_layers(spec)[0]
    assert kv.vllm_state_elements(layer, 4) == (8192 // 4 * 3, 8 * 128 * 128)
    split = kv.kv_split_across_tp(spec, 4)
    p = eng.vllm_hybrid_pages(spec, "0.11.0", 16, 2, split, 4)
    # attention: 2 KV heads over TP 4 -> one per rank: 2 x 256 x 2 B = 1,024 B per token
    assert p.state_page_bytes == (2048 * 3 + 8 * 128 * 128) * 2 == 274_432
    assert p.block_size == 16 * ceil(274_432 / (16 * 1024)) == 272
    groups = eng.kv_groups(spec, with_state=True)
    assert [g.kind for g in groups] == ["full", "state", "state", "state"]


@pytest.mark.skipif(not QWEN3_NEXT.is_dir(), reason="../shared fixtures absent")
def test_qwen3_next_pool_as_a_real_0_10_2_log_printed_it():
    # vLLM 0.10.2, Qwen3-Next-80B-A3B bf16, TP 2 on H200 (benchmarks/engines/cases.toml
    # vllm-0.10.2-qwen3-next-80b-h200-tp2): 'Setting attention block size to 544 tokens',
    # 'Padding mamba page size by 1.49%', 'Current kv cache memory in use is 47878721024
    # bytes', num_gpu_blocks 7162, 'GPU KV cache size: 973,760 tokens', 'Maximum concurrency
    # for 262,144 tokens per request: 14.77x'
    spec = load_model(str(QWEN3_NEXT))[0]
    p = eng.vllm_hybrid_pages(spec, "0.10.2", 16, 2, kv.kv_split_across_tp(spec, 2), 2)
    assert p.block_size == 544
    assert round(100 * (p.page_bytes - p.state_page_bytes) / p.state_page_bytes, 2) == 1.49
    groups = eng.kv_groups(spec, with_state=True)
    blocks = eng.num_blocks(47_878_721_024, p.page_bytes, groups[0].layers)
    assert blocks == 7162
    fam = eng.vllm_family("0.10.2")
    tokens, conc = eng.printed_pool(fam, blocks, groups, 544, 262_144, 8192)
    assert tokens == 973_760
    assert round(conc, 2) == 14.77


@pytest.mark.skipif(not QWEN3_NEXT.is_dir(), reason="../shared fixtures absent")
def test_qwen3_next_fp8_kv_block_as_a_real_0_13_log_printed_it():
    # vLLM 0.13.0, Qwen3-Next-80B-A3B (a 4-bit weight quant: the state and KV shapes are the
    # config's), --kv-cache-dtype fp8, TP 2: 'Setting attention block size to 1072 tokens' and
    # no padding line (the pages are equal: 1072 x 512 B = 548,864 B = the state page)
    spec = load_model(str(QWEN3_NEXT))[0]
    p = eng.vllm_hybrid_pages(spec, "0.13.0", 16, 1, kv.kv_split_across_tp(spec, 2), 2)
    assert p.block_size == 1072
    assert p.page_bytes == p.state_page_bytes == 548_864
    # 'Available KV cache memory: 17.58 GiB', 'GPU KV cache size: 767,552 tokens', 'Maximum
    # concurrency for 32,768 tokens per request: 84.29x' (17.58 is rounded: 2,865-2,866 blocks)
    groups = eng.kv_groups(spec, with_state=True)
    blocks = eng.num_blocks(int(17.58 * 2**30), p.page_bytes, groups[0].layers)
    tokens, conc = eng.printed_pool(eng.vllm_family("0.13.0"), blocks, groups, 1072, 32_768, 8192)
    assert tokens == 767_552
    assert conc == pytest.approx(84.29, abs=0.05)


NANO30 = HERE / "fixtures" / "models" / "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"


def test_nemotron3_nano_moe_layers_load():
    # transformers 5.24 NemotronHForCausalLM.from_config(meta): 31,577,937,344 parameters, the
    # router weight created fp32 (NemotronHTopkRouter)
    spec = load_model(str(NANO30))[0]
    assert spec.params_total() == 31_577_937_344
    assert spec.moe.num_experts == 128 and spec.moe.top_k == 6 and spec.moe.moe_layers == 23
    assert spec.moe.expert_params == 2 * 2688 * 1856  # up + down, no gate
    router = [t for t in spec.tensors if t.module == "router"]
    assert router and all(t.keep_fp32 for t in router)
    assert spec.ssm_cache_dtype == "float32"


def test_nemotron_cascade2_pool_as_a_real_0_19_1_log_printed_it():
    # vLLM 0.19.1 on an H100, chankhavu/Nemotron-Cascade-2-30B-A3B-NVFP4 (the Nemotron-3-Nano-30B-
    # A3B shapes), --kv-cache-dtype fp8, max_model_len 220,000 (dt-lindberg/asp-arc, a committed
    # job log): 'Setting attention block size to 4176 tokens', 'Padding mamba page size by
    # 0.19%', 'Add 1 padding layers, may waste at most 4.35% KV cache memory', 'Available KV
    # cache memory: 62.4 GiB', 'GPU KV cache size: 4,359,744 tokens', 'Maximum concurrency for
    # 220,000 tokens per request: 91.61x'
    spec = load_model(str(NANO30))[0]
    p = eng.vllm_hybrid_pages(spec, "0.19.1", 16, 1, kv.kv_split_across_tp(spec, 1), 1)
    # SSM state fp32 (the config's mamba_ssm_cache_dtype): 64 x 64 x 128 x 4 B + conv 3 x 6,144 x 2 B
    assert p.state_page_bytes == 64 * 64 * 128 * 4 + 3 * (64 * 64 + 2 * 8 * 128) * 2 == 2_134_016
    assert p.block_size == 16 * ceil(2_134_016 / (16 * 512)) == 4176
    assert round(100 * (p.page_bytes - p.state_page_bytes) / p.state_page_bytes, 2) == 0.19
    groups = eng.kv_groups(spec, with_state=True)
    # 6 attention + 23 Mamba layers: groups of 6, the Mamba ones in 4 (24 slots: 1 padding layer)
    assert [g.kind for g in groups] == ["full"] + ["state"] * 4 and groups[0].layers == 6
    blocks = eng.num_blocks(int(62.4 * 2**30), p.page_bytes, 6)
    tokens, conc = eng.printed_pool(eng.vllm_family("0.19.1"), blocks, groups, 4176, 220_000, 8192)
    assert tokens == 4_359_744
    assert round(conc, 2) == 91.61


def test_sglang_says_the_state_pool_is_not_sized(nemotron):
    m = resolve_machine("hgx-h200")
    job = ServeJob(engine="sglang", context=8192, concurrency=1, parallel=Parallel(tp=1))
    notes = serve_ledger(nemotron, job, m).notes
    assert any("24 Mamba-2 / Gated DeltaNet layers" in n and "separate pool" in n for n in notes)


def test_batched_mm_experts_gather_every_pairs_weights():
    """transformers' batched_mm experts path: S = tokens x top_k pairs each gather gate_up
    (S x 2I x h) and down (S x h x I) weights, both alive at the down gather; Qwen3-30B-A3B at
    4 x 2,048 tokens measured 576.47 GiB above its weights (FakeTensor, benchmarks/accuracy)."""
    from conftest import shared_models_or_skip
    from nodeledger.ledger import activations as act
    from nodeledger.ledger.dims import dims_of
    from nodeledger.ledger.jobs import JobError

    d = dims_of(load_model(str(shared_models_or_skip() / "Qwen3-30B-A3B"))[0])
    s = 8192 * 8
    want = 2 * s * (1536 * 2048 + 2048 * 768 + 2048 + 1536) + 8192 * 8 * 128
    assert act.batched_mm_experts_bytes(d, 8192) == want
    assert want / 2**30 == pytest.approx(576.47, rel=0.002)
    assert act.inference_layer_transient_bytes(d, 8192, experts="batched_mm") == want
    assert act.inference_layer_transient_bytes(d, 8192) < want / 100  # grouped_mm
    # non-gated experts (Nemotron 3 Nano) gather up alone
    nano = dims_of(load_model(str(NANO30))[0])
    assert not nano.experts_gated and nano.moe_intermediate == 1856
    assert (
        act.batched_mm_experts_bytes(nano, 1) == 2 * 6 * (2 * 1856 * 2688 + 2688 + 1856) + 8 * 128
    )
    with pytest.raises(JobError, match="--engine hf"):
        ServeJob(engine="vllm", experts="batched_mm")


def test_review_fixes_pp_resolve_v0_and_short_requests(nemotron):
    """Pipeline stages keep vLLM's block (the pages do not depend on pp) and hold half the
    state each; a resolved job re-resolved at another TP raises the block from what was asked;
    V0 (VLLM_USE_V1=0) is not modelled; the simulator's pool sets aside the state of the
    sequences that run at the job's own request length."""
    from nodeledger.ledger.build import resolve_job

    m = resolve_machine("hgx-h200")
    base = ServeJob(engine="vllm", engine_version="0.15.0", context=8192, concurrency=1)
    one = serve_ledger(nemotron, base, m).extras
    two = serve_ledger(nemotron, dataclasses.replace(base, parallel=Parallel(pp=2)), m).extras
    assert one["engine"]["block_size"] == two["engine"]["block_size"] == 528
    assert two["kv_state_bytes_per_sequence"] * 2 == one["kv_state_bytes_per_sequence"]
    nano = load_model(str(NANO30))[0]
    j, _ = resolve_job(base, m, nano)
    assert (j.block_size, j.block_size_asked) == (2096, 16)
    j4, _ = resolve_job(dataclasses.replace(j, parallel=Parallel(tp=4)), m, nano)
    assert j4.block_size == 1056  # what a fresh TP-4 job gets
    assert resolve_job(j4, m, nano)[0] == j4  # idempotent
    assert eng.vllm_hybrid_pages(nemotron, "0.10.2-v0", 16, 2, 1, 1) is None
    # 2,000-token requests: each holds 4 attention blocks + 6 state pages
    blocks = 2737
    running = min(1024, blocks // (4 + 6))
    assert eng.hybrid_sim_pool_tokens(blocks, 1, 6, 528, 2000, 1024) == (blocks - 6 * running) * 528


def test_vllm_recomputes_a_preempted_hybrid(nemotron):
    """vLLM turns prefix caching off for hybrids: the simulator does not resume them from
    cached blocks (it does for a plain model on the same release)."""
    from nodeledger.speed.engines import engine_speed
    from nodeledger.speed.serving import scheduler_for

    job = ServeJob(engine="vllm", engine_version="0.15.0", context=8192, max_num_seqs=256,
                   max_num_batched_tokens=8192)  # fmt: skip
    eng15 = engine_speed("vllm", "0.15.0")
    assert scheduler_for(job, eng15, 10**6).resume_cached
    assert not scheduler_for(job, eng15, 10**6, hybrid=True).resume_cached
