"""KV cache bytes, per token and per sequence, for each attention layer type.

Derivations (elements per token per layer; multiply by the cache dtype width):
  1. MHA / GQA / MQA (Vaswani et al. 2017; Ainslie et al. 2023, GQA):
       2 * kv_heads * head_dim       (K and V; ``head_dim`` from the config when given)
  2. Sliding-window layers (Mistral 7B, Gemma 2): same per token, but only the last
     ``window`` tokens are kept -> per sequence min(context, window) tokens.
  3. MLA (DeepSeek-V2 paper, sec. 2.1): the cache holds the compressed latent c_KV
     (kv_lora_rank) and the decoupled rope key (qk_rope_head_dim):
       kv_lora_rank + qk_rope_head_dim   (as vLLM/SGLang store it; transformers 5's DynamicCache
       for DeepSeek-V3 keeps the same latent: measured 1,152 B per token and layer in bf16)
  4. Linear attention / gated DeltaNet (Qwen3-Next): no per-token cache; a fixed state per
     sequence: num_v_heads * k_head_dim * v_head_dim (recurrent, kept in fp32 by the kernels)
     + conv_dim * (kernel - 1) (short-convolution state, model dtype).
"""

from __future__ import annotations

from nodeledger.model.spec import AttentionLayer, ModelSpec

KV_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1, "int8": 1}


def kv_elements_per_token(layer: AttentionLayer) -> int:
    """Cache elements one token adds to one layer (0 for linear-attention layers)."""
    if layer.kind in ("full", "sliding"):
        return layer.kv_heads * (layer.k_head_dim + layer.v_head_dim)
    if layer.kind == "mla":
        return layer.latent_dim
    return 0


def kv_bytes_per_token(spec: ModelSpec, dtype_bytes: int = 2) -> int:
    """Bytes one token adds to the cache over all softmax/MLA layers while the context is
    within every sliding window (the figure engines use to size KV blocks)."""
    return sum(kv_elements_per_token(layer) for layer in spec.attention) * dtype_bytes


def kv_bytes_per_token_beyond_window(spec: ModelSpec, dtype_bytes: int = 2) -> int:
    """Bytes one more token adds once the context exceeds the sliding windows (full/MLA only)."""
    return (
        sum(
            kv_elements_per_token(layer)
            for layer in spec.attention
            if layer.kind in ("full", "mla")
        )
        * dtype_bytes
    )


def linear_state_bytes_per_sequence(
    spec: ModelSpec, dtype_bytes: int = 2, state_bytes: int = 4
) -> int:
    """Fixed per-sequence state of linear-attention layers (recurrent state fp32 + conv state)."""
    return sum(
        layer.state_elements * state_bytes + layer.conv_state_elements * dtype_bytes
        for layer in spec.attention
        if layer.kind == "linear"
    )


def kv_bytes_per_sequence(
    spec: ModelSpec, context_tokens: int, dtype_bytes: int = 2, cap_window: bool = True
) -> int:
    """Cache bytes of one sequence of ``context_tokens`` tokens, all layer types.

    ``cap_window=False``: sliding layers hold the whole prompt, as transformers'
    DynamicSlidingWindowLayer does right after prefill (it trims at the next update)."""
    total = 0
    for layer in spec.attention:
        per = kv_elements_per_token(layer) * dtype_bytes
        if layer.kind == "sliding" and layer.window and cap_window:
            total += per * min(context_tokens, layer.window)
        else:
            total += per * context_tokens
    return total + linear_state_bytes_per_sequence(spec, dtype_bytes)


def layer_counts(spec: ModelSpec) -> dict[str, int]:
    out: dict[str, int] = {}
    for layer in spec.attention:
        out[layer.kind] = out.get(layer.kind, 0) + 1
    return out
