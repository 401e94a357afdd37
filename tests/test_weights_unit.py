"""Weight-byte formulas on hand-computed examples (no ../shared needed)."""

from __future__ import annotations

from nodeledger.ledger import weights as w
from nodeledger.model.spec import TensorGroup


def lin(out, inp, count=1, module="mlp"):
    return TensorGroup("x.weight", "dense_mlp", "linear", (out, inp), count, module=module)


def test_fp8_block_scales_round_up():
    t = lin(300, 200)
    # 300*200 fp8 bytes + ceil(300/128)=3 x ceil(200/128)=2 fp32 scales
    assert w.bytes_fp8(t, (128, 128)) == 60000 + 6 * 4
    assert w.bytes_fp8(t, None) == 60000 + 4


def test_int4_gptq_group_layout():
    t = lin(256, 512)
    groups = 512 // 128
    expected = 256 * 512 // 2 + groups * 256 * 2 + groups * 256 // 2 + 512 * 4
    assert w.bytes_int4_grouped(t, 128, 4, g_idx=True) == expected
    assert w.bytes_int4_grouped(t, 128, 4, g_idx=False) == expected - 512 * 4


def test_mxfp4_is_17_bytes_per_32_values():
    assert w.bytes_mxfp4(lin(64, 64)) == 64 * 2 * 17


def test_nf4_double_quant():
    t = lin(64, 64 * 256)  # 1,048,576 values -> 16,384 blocks -> 64 second-level fp32 scales
    assert w.bytes_nf4(t) == 1048576 // 2 + 16384 + 64 * 4


def test_int8_per_channel_scale():
    assert w.bytes_int8(lin(10, 20, count=3)) == 3 * (200 + 20)


def test_router_and_vectors_are_not_quantised():
    router = TensorGroup("gate.weight", "router", "linear", (8, 64), 1, module="router")
    scheme = w.Scheme("int8")
    assert w.tensor_bytes(router, scheme) == 8 * 64 * 2


def test_modules_to_not_convert_skips():
    t = TensorGroup(
        "layers.*.self_attn.q_proj.weight", "attention", "linear", (64, 64), 1, module="attn"
    )
    skip = w.Scheme("mxfp4", skip=("layers.*.self_attn",))
    assert w.tensor_bytes(t, skip) == 64 * 64 * 2
    assert w.tensor_bytes(t, w.Scheme("mxfp4")) == 64 * 2 * 17


def test_keep_fp32_tensor_stays_fp32_in_bf16():
    t = TensorGroup("gate.weight", "router", "linear", (8, 64), 2, keep_fp32=True, module="router")
    assert w.bytes_plain(t, "bf16") == 2 * 8 * 64 * 4


def _spec_with_quant(q):
    from nodeledger.model import build_spec

    cfg = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
           "intermediate_size": 512, "vocab_size": 1000, "torch_dtype": "bfloat16", "quantization_config": q}  # fmt: skip
    return build_spec(cfg, "q")


def test_bnb_double_quant_flag_is_honoured():
    on = _spec_with_quant(
        {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_use_double_quant": True}
    )
    off = _spec_with_quant({"quant_method": "bitsandbytes", "load_in_4bit": True})
    s_on, s_off = w.config_scheme(on), w.config_scheme(off)
    assert s_on.double_quant and not s_off.double_quant
    t = lin(256, 512)
    assert w.tensor_bytes(t, s_off) - w.tensor_bytes(t, s_on) == 2048 * 3 - 4 * 8


def test_gptq_8bit_keeps_group_layout():
    spec = _spec_with_quant({"quant_method": "gptq", "bits": 8, "group_size": 128})
    s = w.config_scheme(spec)
    t = lin(256, 512)
    assert w.tensor_bytes(t, s) == 256 * 512 + 4 * 256 * 2 + 4 * 256 + 512 * 4


def test_fp8_config_without_block_size_uses_transformers_default():
    s = w.config_scheme(_spec_with_quant({"quant_method": "fp8"}))
    assert s.block == (128, 128) and "default" in s.source


def test_both_bnb_flags_is_an_error():
    import pytest

    from nodeledger.errors import ConfigError

    with pytest.raises(ConfigError, match="both true"):
        w.config_scheme(
            _spec_with_quant(
                {"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": True}
            )
        )
