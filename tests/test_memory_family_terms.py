"""Memory terms of families first measured in issue 30's round (benchmarks/accuracy), each
derived by hand from the transformers code it follows."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from conftest import shared_models_or_skip
from nodeledger.ledger import activations as act
from nodeledger.ledger import kv_cache as kv
from nodeledger.ledger.dims import dims_of
from nodeledger.model import load_model


def test_falcon_new_architecture_caches_kv_broadcast_to_every_head():
    """FalconAttention (new_decoder_architecture) broadcasts K and V to all query heads and
    flattens them before the cache update: transformers' cache holds 2 x heads x head_dim per
    token and layer; engines keep the kv heads."""
    spec, _ = load_model(str(shared_models_or_skip() / "Falcon-180B-chat"))
    a = spec.attention[0]
    assert a.kv_heads == 8 and a.hf_cache_heads == spec.num_attention_heads == 232
    tokens = 2048
    hf = kv.kv_bytes_per_sequence(kv.hf_cache_view(spec), tokens)
    assert hf == spec.num_layers * 2 * 232 * 64 * 2 * tokens
    assert kv.kv_bytes_per_sequence(spec, tokens) == spec.num_layers * 2 * 8 * 64 * 2 * tokens
    llama, _ = load_model("llama-3.1-8b")
    assert kv.hf_cache_view(llama) is llama  # nothing to widen


def test_fp32_router_weights_promote_the_weighted_expert_outputs():
    """DeepSeek-V3 / GLM-4.5 routers keep fp32 top-k weights: integrations/moe.py multiplies the
    bf16 expert outputs by them (fp32, 4h) and un-permutes that copy (4h) — 2 x 2h per routed
    pair more than a bf16 router."""
    spec, _ = load_model("deepseek-v3")
    assert spec.moe.router_fp32
    d = dims_of(spec)
    bf16 = dataclasses.replace(d, router_fp32=False, intermediate=0)
    fp32 = dataclasses.replace(d, intermediate=0)
    tokens = 4096
    extra = act.inference_layer_transient_bytes(fp32, tokens) - act.inference_layer_transient_bytes(
        bf16, tokens
    )
    assert extra == tokens * d.top_k * 4 * d.hidden
    assert not dims_of(load_model("qwen3-30b-a3b")[0]).router_fp32  # its router casts to bf16


def test_bloom_gelu_saves_its_input_only_and_its_scores_hold_the_previous_probabilities():
    """BLOOM's GeLUFunction saves its input (2I) and fc2 its output (2I): 4I, where GPT-2's
    Python gelu_new chain saves 10I.  Its no-grad eager attention holds 12 B per score element
    and the previous layer's bf16 probabilities (2 B) until the next layer returns."""
    bloom = dims_of(load_model(str(shared_models_or_skip() / "bloomz-560m"))[0])
    gpt2 = dims_of(load_model(str(shared_models_or_skip() / "gpt2"))[0])
    assert bloom.activation == "bloom_gelu" and gpt2.activation == "gelu_new"
    assert act.saved_dense_mlp_bytes_per_token(bloom) == 4 * bloom.intermediate
    assert act.saved_dense_mlp_bytes_per_token(gpt2) == 10 * gpt2.intermediate
    assert act.SCORE_BYTES["bloom"] == 14


@pytest.mark.parametrize("target", ["qkv_proj", "gate_up_proj", "query_key_value"])
def test_lora_on_fused_projections_counts_their_adapters(target):
    """A LoRA'd linear saves the fp32 cast of its input (4 x in) and lora_A's fp32 output (4r):
    the fused names (Phi-3/4 qkv_proj, gate_up_proj; BLOOM / Falcon query_key_value) included."""
    d = dims_of(load_model(str(shared_models_or_skip() / "Phi-4"))[0])
    base = act.saved_lora_layer_bytes(d, 1, 100, "sdpa", (), 16)
    with_target = act.saved_lora_layer_bytes(d, 1, 100, "sdpa", (target,), 16)
    assert with_target - base == 100 * (4 * d.hidden + 4 * 16)


def test_gated_deltanet_prefill_keeps_its_fp32_chunk_tensors():
    """Qwen3-Next's linear-attention layers on transformers' pure-torch chunked path: per token
    11 fp32 (value heads x head dim) tensors, 3 fp32 (value heads x chunk 64), the bf16 z gate
    and q/k/v/z projection, 3 bf16 hidden-sized tensors and the per-head gates — 251,456 B for
    Qwen3-Next (32 value heads of 128, projection 12,288, hidden 2,048), which is what the
    fake-tensor tracker held at the layer's widest moment."""
    d = dims_of(load_model(str(shared_models_or_skip() / "Qwen3-Next-80B-A3B-Instruct"))[0])
    assert (d.linear_layers, d.lin_heads, d.lin_dk, d.lin_dv, d.lin_proj) == (
        36,
        32,
        128,
        128,
        12288,
    )
    per = act.gated_deltanet_prefill_bytes_per_token(d)
    assert (
        per
        == 11 * 4 * 32 * 128
        + 3 * 4 * 32 * 64
        + 2 * 32 * 128
        + 2 * 12288
        + 3 * 2 * 2048
        + 10 * 4 * 32
        + 5 * 2 * 32
    )
    assert per == 251_456
    # the widest prefill moment of a 16k prompt is this layer's, not the MoE block's
    assert act.inference_prefill_transient_bytes(d, 1, 16384, "sdpa") == 16384 * per
    llama = dims_of(load_model("llama-3.1-8b")[0])
    assert act.gated_deltanet_prefill_bytes_per_token(llama) == 0


def test_gpt_oss_training_saves_its_sink_softmax_and_clamped_swiglu():
    """gpt-oss's eager attention with sinks saves only the bf16 softmax over S + 1 columns; its
    experts' clamped SwiGLU keeps 5 x 2I per routed pair (clamped gate, sigmoid, up + 1, glu,
    product) where a SwiGLU keeps 2 x 2I."""
    d = dims_of(load_model(str(shared_models_or_skip() / "gpt-oss-20b"))[0])
    assert act.eager_attention_bytes_per_layer(d, 2, 1024) == 2 * 2 * d.heads * 1024 * 1025
    plain = dataclasses.replace(d, family="qwen3_moe")
    extra = act.saved_moe_bytes_per_token(d) - act.saved_moe_bytes_per_token(plain)
    assert extra == d.top_k * 6 * d.moe_intermediate


def _nemotron_h_folder():
    from pathlib import Path

    return Path(__file__).resolve().parent / "fixtures" / "models" / "Nemotron-H-8B-Base-8K"


def _nemotron_h():
    return load_model(str(_nemotron_h_folder()))[0]


def test_nemotron_h_builds_one_mixer_per_layer_from_its_pattern():
    """hybrid_override_pattern: M = Mamba-2, * = attention, - = MLP; 24 / 4 / 24 of 52 layers;
    8.10 B parameters (the published 8B base)."""
    spec = _nemotron_h()
    kinds = [(a.kind, a.ssm) for a in spec.attention]
    assert kinds.count(("linear", "mamba2")) == 24 and kinds.count(("linear", "none")) == 24
    assert sum(1 for a in spec.attention if a.kind == "full") == 4
    assert 8.0e9 < spec.params_total() < 8.2e9
    m = next(a for a in spec.attention if a.ssm == "mamba2")
    # recurrent state H x head_dim x state per sequence, conv state over conv_dim x kernel
    assert m.state_elements == 128 * 64 * 128
    assert m.conv_state_elements == (128 * 64 + 2 * 8 * 128) * 4
    # a sequence's cache: 4 attention layers' K and V + 24 fp32 recurrent and bf16 conv states
    per_seq = kv.kv_bytes_per_sequence(spec, 1000)
    assert per_seq == 4 * 2 * 8 * 128 * 2 * 1000 + 24 * (
        m.state_elements * 4 + m.conv_state_elements * 2
    )


def test_mamba2_prefill_and_training_terms_follow_their_tensors():
    d = dims_of(_nemotron_h())
    assert (d.mamba_layers, d.m_heads, d.m_dim, d.m_state, d.m_groups, d.m_chunk) == (
        24,
        128,
        64,
        128,
        8,
        128,
    )
    h, p, n, g, c = 128, 64, 128, 8, 128
    inter, conv = h * p, h * p + 2 * g * n
    per = act.mamba2_prefill_bytes_per_token(d)
    assert (
        per
        == 4 * (3 * h * n + 4 * h * c + 5 * h * p)
        + 2 * (inter + conv + h)
        + 2 * conv
        + 4 * inter
        + 2 * h
        + 6 * 4096
        + 62 * h
    )
    assert act.inference_prefill_transient_bytes(d, 1, 4096, "sdpa") == 4096 * per
    saved = act.saved_mamba2_bytes_per_token(d)
    assert saved == (4 * (4 * h * n + 4 * h * c + 11 * h * p) + 13 * inter // 2 + 2 * (inter + conv + h)
                     + 2 * (2 * inter + g * n) + 2 * conv + 36 * h)  # fmt: skip
    # training a one-mixer-per-layer hybrid: each layer its norm and its own mixer's saved set;
    # 52 layers of inputs under full checkpointing, not one per mixer kind
    tokens = 2048
    held, _ = act.saved_activations_bytes(d, 1, tokens, "sdpa", "none")
    norm = 6 * 4096 + 4
    attn = 4 * d.q_dim + 4 * d.kv_dim + 4 * d.heads
    mlp = act.saved_dense_mlp_bytes_per_token(d)
    assert mlp == 4 * 21504  # relu2: the relu output (kept for square) and the squared one
    assert held == tokens * (24 * (norm + saved) + 24 * (norm + mlp) + 4 * (norm + attn))
    assert act.saved_activations_bytes(d, 1, tokens, "sdpa", "full")[0] == 52 * 2 * 4096 * tokens
    llama = dims_of(load_model("llama-3.1-8b")[0])
    assert act.mamba2_prefill_bytes_per_token(llama) == act.saved_mamba2_bytes_per_token(llama) == 0


def test_a_nemotron_h_serve_job_fits_with_its_states_per_sequence():
    from nodeledger.ledger.jobs import ServeJob
    from nodeledger.machine.io import load_preset
    from nodeledger.verdict.fit import ledger_for

    lg = ledger_for(
        _nemotron_h(), ServeJob(engine="hf", context=4096, concurrency=8), load_preset("hgx-h200")
    )
    kv_item = next(i for i in lg.cards[0].items if i.name.startswith("KV cache"))
    assert kv_item.bytes > 8 * 24 * 128 * 64 * 128 * 4  # the recurrent states alone


def test_lora_on_a_mamba_hybrid_refuses_what_peft_refuses():
    """PEFT raises on LoRA targets out_proj / conv1d of Mamba-based models: fit says so (exit 2),
    and its list of adaptable names leaves them out."""
    from conftest import run_cli

    folder = str(_nemotron_h_folder())
    bad = run_cli(
        "fit",
        folder,
        "--job",
        "lora",
        "--lora-targets",
        "in_proj,out_proj",
        "--machine",
        "hgx-h200",
    )
    assert (
        bad.returncode == 2 and "PEFT refuses LoRA on out_proj of Mamba-based models" in bad.stderr
    )
    none = run_cli("fit", folder, "--job", "lora", "--machine", "hgx-h200")
    assert none.returncode == 2 and "out_proj" not in none.stderr.split("e.g. from")[1]
    ok = run_cli(
        "fit",
        folder,
        "--job",
        "lora",
        "--lora-targets",
        "in_proj,q_proj",
        "--machine",
        "hgx-h200",
        "--no-fail",
    )
    assert ok.returncode == 0


def test_lora_on_a_mamba_hybrid_keeps_the_scan_set_and_adds_each_adapter():
    d = dims_of(_nemotron_h())
    tokens = 1024
    base, _ = act.saved_lora_activations_bytes(d, 1, tokens, "sdpa", "none", (), 16)
    with_in, _ = act.saved_lora_activations_bytes(d, 1, tokens, "sdpa", "none", ("in_proj",), 16)
    assert with_in - base == 24 * tokens * (4 * 4096 + 4 * 16)  # 24 Mamba layers' in_proj
    full, _ = act.saved_activations_bytes(d, 1, tokens, "sdpa", "none")
    assert base < full  # the frozen base keeps less than full training


def test_a_prompt_past_the_sliding_window_builds_the_sdpa_mask():
    """SDPA cannot express a sliding window with is_causal: transformers builds the bool 4D mask
    and SDPA its additive copy (3 B per query-key pair), with 14h per token alive at that call."""
    from nodeledger.ledger.jobs import ServeJob
    from nodeledger.machine.io import load_preset
    from nodeledger.verdict.fit import ledger_for

    spec = load_model(str(shared_models_or_skip() / "Mistral-7B-v0.1"))[0]
    d = dims_of(spec)
    assert act.sliding_window_sdpa_prefill_bytes(d, 1, 32760) == 32760**2 * 3 + 14 * 4096 * 32760
    machine = load_preset("hgx-h200")
    long = ledger_for(
        spec, ServeJob(engine="hf", context=32764, new_tokens=4, concurrency=1), machine
    )
    item = next(i for i in long.cards[0].items if i.name.startswith("prefill activations"))
    assert item.bytes == max(act.sliding_window_sdpa_prefill_bytes(d, 1, 32760),
                             act.inference_prefill_transient_bytes(d, 1, 32760, "sdpa") + 32760**2)  # fmt: skip
    short = ledger_for(
        spec, ServeJob(engine="hf", context=4000, new_tokens=4, concurrency=1), machine
    )
    item = next(i for i in short.cards[0].items if i.name.startswith("prefill activations"))
    assert item.bytes == act.inference_prefill_transient_bytes(
        d, 1, 3996, "sdpa"
    )  # within the window


def test_gpt2_keeps_its_fused_qkv_and_opt_no_rotary_q_and_dropout_follows_the_device():
    """Per token per layer, read off the fake-tensor tracker over 1 vs 2 layers and two sequence
    lengths (benchmarks/accuracy/README.md): GPT-2's q is a view of c_attn's fused output
    (4q + 8kv + 4 x heads saved), OPT (learned positions, separate projections) 4q + 4kv + 4 x
    heads, a rotary family 6q + 4kv + 4 x heads; the math fallback keeps fp32 q/k/v and a bf16
    output copy (14h for GPT-2) and 4 B per score element, + 4 + the dropout mask with dropout;
    residual dropout keeps 1 B per element on a card, the bf16 noise (2 B) on the CPU."""
    models = shared_models_or_skip()
    gpt2 = dims_of(load_model(str(models / "gpt2"))[0])
    opt = dims_of(load_model(str(models / "OPT-125m"))[0])
    llama = dims_of(load_model("llama-3.1-8b")[0])
    h = gpt2.hidden
    assert (gpt2.fused_qkv, gpt2.learned_positions) == (True, True)
    assert (opt.fused_qkv, opt.learned_positions) == (False, True)
    assert (llama.fused_qkv, llama.learned_positions) == (False, False)
    assert act.saved_attention_bytes_per_token(gpt2) == 12 * h + 4 * gpt2.heads
    assert act.saved_attention_bytes_per_token(opt) == 8 * opt.hidden + 4 * opt.heads
    assert act.saved_attention_bytes_per_token(llama) == (
        6 * llama.q_dim + 4 * llama.kv_dim + 4 * llama.heads
    )
    assert act.saved_attention_bytes_per_token(gpt2, "math") == 14 * h
    b, s = 8, 1024
    elements = b * gpt2.heads * s * s
    assert act.eager_attention_bytes_per_layer(gpt2, b, s, "math", "cpu") == 12 * elements
    assert act.eager_attention_bytes_per_layer(gpt2, b, s, "math", "cuda") == 9 * elements
    no_dropout = dataclasses.replace(gpt2, attention_dropout=0.0)
    assert act.eager_attention_bytes_per_layer(no_dropout, b, s, "math") == 4 * elements
    assert act.residual_dropout_bytes_per_token(gpt2, "cuda") == 2 * h
    assert act.residual_dropout_bytes_per_token(gpt2, "cpu") == 4 * h
    # the whole layer on the CPU, mixed precision, CUDA's flash kernel: 68h + 64 measured
    per_token = act.saved_layer_bytes(gpt2, 1, 1, "sdpa", moe=False, autocast=True,
                                      device_type="cpu")  # fmt: skip
    assert per_token == 68 * h + 64


def test_a_tied_lm_head_keeps_the_bf16_copy_of_the_embedding_table_under_autocast():
    """GPT-2 mixed: the lm_head multiplies by wte, so autocast's [50257, 768] bf16 copy is
    saved for backward beside the layers' linear copies."""
    from nodeledger.ledger import model_state
    from nodeledger.ledger.jobs import TrainJob

    spec = load_model(str(shared_models_or_skip() / "gpt2"))[0]
    assert spec.tied_embeddings
    linear = sum(t.numel for t in spec.tensors if t.kind in ("linear", "lm_head"))
    job = TrainJob(precision="mixed", micro_batch=1, seq=1024)
    assert model_state.autocast_cache_bytes(spec, job) == 2 * (linear + 50257 * 768)


def test_gated_deltanet_training_saves_its_chunk_rule_set_on_the_torch_path():
    """Qwen3-Next's Gated DeltaNet mixer, bf16: saved_tensors_hooks on one layer read 365,971
    and 365,867 B per token (256 / 512 tokens) on transformers' pure-torch path; fla's kernels
    save far less (derived from fla's source)."""
    d = dims_of(load_model(str(shared_models_or_skip() / "Qwen3-Next-80B-A3B-Instruct"))[0])
    assert (d.lin_heads, d.lin_dk, d.lin_dv) == (32, 128, 128)
    assert act._gdn_widths(d) == (2048, 16, 2 * 2048 + 32 * 128)  # H dk, H, conv channels
    assert act.saved_gated_deltanet_bytes_per_token(d) == 365_760
    fused = act.saved_gated_deltanet_bytes_per_token(d, "fused")
    assert fused == 114_944 < 365_760
    # a linear layer saves its mixer where an attention layer saves the attention
    torch_held, _ = act.saved_activations_bytes(d, 1, 1024, "sdpa", "none")
    fused_held, _ = act.saved_activations_bytes(d, 1, 1024, "sdpa", "none", kernels="fused")
    assert torch_held - fused_held == d.linear_layers * (365_760 - fused) * 1024
    assert act.gated_deltanet_prefill_bytes_per_token(d, "fused") < (
        act.gated_deltanet_prefill_bytes_per_token(d)
    )


def test_mamba2_fused_kernels_save_the_in_proj_output_and_the_scan_output():
    """mamba_split_conv1d_scan_combined saves zxbcdt, out_x and the norm's rstd: Nemotron-H-8B
    (128 heads x 64, state 128, 8 groups): 2 x (8,192 + 10,240 + 128) + 2 x 8,192 + 32."""
    d = dims_of(load_model(str(_nemotron_h_folder()))[0])
    assert act.saved_mamba2_bytes_per_token(d, "fused") == 53_536
    assert act.saved_mamba2_bytes_per_token(d) > 5 * 53_536
    fused = act.mamba2_prefill_bytes_per_token(d, "fused")
    assert fused < act.mamba2_prefill_bytes_per_token(d)


def test_the_kernel_path_is_what_is_installed_unless_asked(monkeypatch):
    from nodeledger.model import kernel_path as kp

    monkeypatch.setattr(kp, "_installed", lambda package: package == "fla")
    assert kp.kernel_path("gdn").kernels == "fused"
    assert kp.kernel_path("mamba2").kernels == "torch"
    assert "mamba_ssm is not installed" in kp.kernel_path("mamba2").source
    assert kp.kernel_path("gdn", "torch") == kp.KernelPath("torch", "--ssm-kernels torch")


def test_eager_experts_hold_one_expert_at_a_time_and_qwen3_q_norm_its_fp32_copies():
    """The eager loop: the one-hot mask (8 x k x (E + 1) per token), the output buffer (2h) and
    the widest expert's rows (balanced routing); Qwen3's q_norm moment 6h + 10q per token."""
    d = dims_of(load_model("qwen3-30b-a3b")[0])
    tokens = 8192
    rows = -(-tokens * d.top_k // d.experts)
    per_row = 2 * d.hidden + 8 * d.moe_intermediate + 16
    assert act.eager_experts_bytes(d, tokens) == (
        tokens * (8 * d.top_k * (d.experts + 1) + 2 * d.hidden) + rows * per_row
    )
    eager = act.inference_layer_transient_bytes(d, tokens, experts="eager")
    assert eager < act.inference_layer_transient_bytes(d, tokens)  # grouped holds every pair
    assert act.qk_norm_moment_bytes_per_token(d) == 6 * d.hidden + 10 * d.q_dim


@pytest.mark.parametrize(
    ("version", "model", "mode", "resident"),
    [("0.25.0", "Nemotron-H-8B-Base-8K", "none", 1), ("0.26.0", "Nemotron-H-8B-Base-8K", "all", 1),
     ("0.28.0", "Nemotron-H-8B-Base-8K", "align", 2), ("0.33.0", "Nemotron-H-8B-Base-8K", "align", 3)],
)  # fmt: skip
def test_vllm_prefix_caching_sets_the_state_blocks_per_sequence(version, model, mode, resident):
    """engines.toml [[vllm.hybrid_prefix]]: off for hybrids until 0.25, on from 0.26 ('all' for
    models with SupportsMambaPrefixCaching), 'align' from 0.28 (2 blocks; 3 from 0.29);
    --no-prefix-caching keeps one."""
    from nodeledger.ledger import engines as eng

    spec = load_model(str(Path(__file__).resolve().parent / "fixtures" / "models" / model))[0]
    blocks = eng.vllm_state_blocks(spec, version, None)
    assert (blocks.mode, blocks.resident) == (mode, resident)
    assert eng.vllm_state_blocks(spec, version, False).mode == "none"
    if mode == "all":
        assert blocks.budget(8192, 1152) == 8  # every block's state budgeted
        pages = eng.vllm_hybrid_pages(spec, version, 16, 2, 1.0, 1, "all")
        assert pages.block_size % 128 == 0  # a multiple of the scan's chunk


def test_eager_experts_training_builds_each_experts_weight_gradient_full_size():
    """The eager loop's backward: select_backward returns a full [E, 2I, h] gradient per expert,
    added to the accumulated one: 2 x E x h x 2I x grad bytes more at that moment, in the
    backward phase and as its own item; Megatron refuses the option."""
    from nodeledger.ledger.build import train_ledger
    from nodeledger.ledger.jobs import JobError, TrainJob
    from nodeledger.machine import resolve_machine

    spec = load_model("qwen3-30b-a3b")[0]
    d = dims_of(spec)
    extra = act.eager_experts_backward_bytes(d, 2)
    assert extra == 2 * d.experts * d.hidden * 2 * d.moe_intermediate * 2
    machine = resolve_machine("hgx-h200")
    grouped = train_ledger(spec, TrainJob(micro_batch=1, seq=1024), machine).cards[0]
    eager = train_ledger(spec, TrainJob(micro_batch=1, seq=1024, experts="eager"), machine)
    eager = eager.cards[0]
    assert eager.phases_bytes["backward"] - grouped.phases_bytes["backward"] == extra
    assert any(i.name.startswith("eager experts") and i.bytes == extra for i in eager.items)
    with pytest.raises(JobError, match="Megatron runs its own MoE"):
        TrainJob(micro_batch=1, seq=1024, experts="eager", framework="megatron", shard="none")
