"""Memory terms of families first measured in issue 30's round (benchmarks/accuracy), each
derived by hand from the transformers code it follows."""

from __future__ import annotations

import dataclasses

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
