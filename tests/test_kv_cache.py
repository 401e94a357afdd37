"""KV bytes per token, hand-derived for each layer type."""

from __future__ import annotations

import json

from conftest import FIXTURES
from nodeledger.ledger import kv_cache as kv
from nodeledger.model import build_spec, load_model


def test_gqa_llama_3_1_8b():
    spec, _ = load_model("meta-llama/Llama-3.1-8B")
    # 32 layers x 2 (K,V) x 8 kv heads x 128 head_dim x 2 bytes
    assert kv.kv_bytes_per_token(spec) == 32 * 2 * 8 * 128 * 2 == 131072


def test_head_dim_from_config_is_used():
    spec, _ = load_model("Qwen/Qwen3-0.6B")  # hidden 1024 / 16 heads = 64, but head_dim = 128
    assert kv.kv_bytes_per_token(spec) == 28 * 2 * 8 * 128 * 2


def test_mla_deepseek_v3_latent_cache():
    spec, _ = load_model("deepseek-ai/DeepSeek-V3")
    # 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 bytes
    assert kv.kv_bytes_per_token(spec) == 61 * 576 * 2 == 70272
    assert kv.kv_bytes_per_sequence(spec, 1000) == 70272 * 1000


def test_sliding_window_layers_are_capped():
    spec, _ = load_model("openai/gpt-oss-120b")  # 18 sliding (window 128) + 18 full layers
    per_layer = 2 * 8 * 64 * 2
    assert kv.kv_bytes_per_token(spec) == 36 * per_layer
    assert kv.kv_bytes_per_token_beyond_window(spec) == 18 * per_layer
    ctx = 10_000
    assert kv.kv_bytes_per_sequence(spec, ctx) == 18 * per_layer * ctx + 18 * per_layer * 128


def test_gemma3_pattern_five_sliding_one_global():
    cfg = json.loads((FIXTURES / "configs" / "tiny-gemma3-text" / "config.json").read_text())
    spec = build_spec(cfg, "tiny")
    kinds = [a.kind for a in spec.attention]
    assert kinds == ["sliding"] * 5 + ["full"] + ["sliding"]


def test_linear_attention_fixed_state():
    cfg = {
        "model_type": "qwen3_next", "hidden_size": 64, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "intermediate_size": 96, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
        "num_experts": 4, "num_experts_per_tok": 2, "vocab_size": 300, "full_attention_interval": 4,
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
        "linear_value_head_dim": 8, "linear_conv_kernel_dim": 4,
    }  # fmt: skip
    spec = build_spec(cfg, "tiny-next")
    assert [a.kind for a in spec.attention] == ["linear"] * 3 + ["full"]
    assert kv.kv_bytes_per_token(spec) == 1 * 2 * 2 * 16 * 2  # only the full layer grows
    # per linear layer: recurrent 4 v-heads x 8 x 8 fp32 + conv (2*16 + 32) x 3 bf16
    per = 4 * 8 * 8 * 4 + (2 * 16 + 32) * 3 * 2
    assert kv.linear_state_bytes_per_sequence(spec) == 3 * per
    assert kv.kv_bytes_per_sequence(spec, 100) == 100 * 128 + 3 * per
