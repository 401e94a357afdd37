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

import dataclasses
from math import ceil

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


def hf_cache_view(spec: ModelSpec) -> ModelSpec:
    """The spec as transformers' DynamicCache sees it: layers whose implementation caches more
    heads than the model's KV heads (AttentionLayer.hf_cache_heads) counted with those."""
    if not any(a.hf_cache_heads for a in spec.attention):
        return spec
    layers = [dataclasses.replace(a, kv_heads=a.hf_cache_heads) if a.hf_cache_heads else a
              for a in spec.attention]  # fmt: skip
    return dataclasses.replace(spec, attention=layers)


def kv_split_across_tp(spec: ModelSpec, tp: int) -> int:
    """Ways one layer's cache is split over ``tp`` cards: KV heads split across tp; fewer KV
    heads than tp are replicated (vLLM), MLA's latent is not split (1)."""
    layer = next((x for x in spec.attention if x.kind != "linear"), None)
    if layer is None or layer.kind == "mla":
        return 1
    return min(tp, layer.kv_heads) if layer.kv_heads else tp


def kv_cache_bytes_per_card(
    spec: ModelSpec,
    context_tokens: int,
    dtype_bytes: int,
    sequences: int,
    split: int,
    cap_window: bool = True,
) -> int:
    """HF DynamicCache on one card: ceil(kv_bytes_per_sequence(context) x sequences / split),
    ``split`` = kv_split_across_tp x pp (each card holds its heads of its layers)."""
    per_sequence = kv_bytes_per_sequence(spec, context_tokens, dtype_bytes, cap_window=cap_window)
    return ceil(per_sequence * sequences / split)


def cache_growth_bytes_per_card(
    spec: ModelSpec, context_tokens: int, dtype_bytes: int, sequences: int, tp: int
) -> int:
    """DynamicCache grows by torch.cat: the grown K and V of one layer coexist with the old ones
    during a decode step: ceil(max per-layer elements per token x dtype x context x sequences /
    tp)."""
    widest_layer = max((kv_elements_per_token(layer) for layer in spec.attention), default=0)
    return ceil(widest_layer * dtype_bytes * context_tokens * sequences / tp)


def paged_page_bytes_per_layer(
    spec: ModelSpec, block_size: int, dtype_bytes: int, split: int
) -> float:
    """vLLM paged cache: one block of one attention layer on one card
    (``AttentionSpec.page_size_bytes``: 2 x block x kv heads x head dim x dtype; MLA 1 x block x
    latent), averaged over the layers that hold a paged cache, / split (fractional)."""
    layers = [a for a in spec.attention if a.kind != "linear"]
    if not layers:
        return 0.0
    elems = sum(kv_elements_per_token(a) for a in layers) / len(layers)
    return elems * dtype_bytes * block_size / split


def vllm_state_elements(layer: AttentionLayer, tp: int = 1) -> tuple[int, int]:
    """(conv state, SSM / recurrent state) elements one sequence holds in one Mamba-2 or Gated
    DeltaNet layer on one TP rank, as vLLM's MambaSpec sizes them
    (``MambaStateShapeCalculator``, model_executor/layers/mamba/mamba_utils.py):
      Mamba-2: conv (kernel - 1) x (intermediate + 2 x groups' x state) / tp, where groups' =
               n_groups, or tp when n_groups does not divide over tp (replicated to the head
               shards); SSM (heads / tp) x head_dim x state
      GDN:     conv (kernel - 1) x (2 x key_dim + value_dim) / tp; recurrent (v_heads / tp) x
               v_head_dim x k_head_dim
    vLLM keeps kernel - 1 columns of the convolution (transformers' Mamba-2 cache keeps all
    ``kernel``).  (0, 0) for a layer without a state (an MLP-only layer, softmax attention)."""
    if layer.kind != "linear" or layer.ssm not in ("mamba2", "gdn") or not layer.conv_kernel:
        return 0, 0
    width = layer.conv_kernel - 1
    if layer.ssm == "mamba2":
        groups = layer.latent_dim or 1
        if groups % tp:
            groups = tp  # extra_groups_for_head_shards: tp - n_groups more
        conv_dim = layer.kv_heads * layer.v_head_dim + 2 * groups * layer.k_head_dim
    else:
        conv_dim = layer.conv_state_elements // width
    ssm = (layer.kv_heads // tp) * layer.v_head_dim * layer.k_head_dim
    return (conv_dim // tp) * width, ssm


def paged_kv_bytes_per_sequence(per_token: float, context_tokens: int, block_size: int) -> float:
    """vLLM allocates whole blocks: per_token x ceil(context / block) x block."""
    blocks_per_sequence = ceil(context_tokens / block_size)
    return per_token * blocks_per_sequence * block_size


def layer_counts(spec: ModelSpec) -> dict[str, int]:
    """Layers by token mixer: full, sliding, mla, linear (Gated DeltaNet), mamba2, and mlp-only
    (a hybrid's layers without a token mixer)."""
    names = {"mamba2": "mamba2", "none": "mlp-only"}
    out: dict[str, int] = {}
    for layer in spec.attention:
        kind = names.get(layer.ssm, layer.kind) if layer.kind == "linear" else layer.kind
        out[kind] = out.get(kind, 0) + 1
    return out
