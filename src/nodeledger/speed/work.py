"""What one token or one step of a model costs: FLOPs and bytes read, from the model spec and
the ledger's weight and KV terms (so speed and memory cannot disagree on the model).

  * attention FLOPs per (query, key) pair and layer: 2 x heads x (k_head_dim + v_head_dim)
    (QK^T then AV; speed/terms.py (1)); MLA layers, as engines run them absorbed: 2 x heads x
    (2 x latent_dim) (DeepSeek-V2, 2.1.2: attention over the cached latent); linear-attention
    layers: none per pair (their state update is part of the dense FLOPs).
  * sliding-window layers attend to at most ``window`` keys.
  * bytes a decode step reads (speed/terms.py (3), (4)): every weight except the input
    embedding table (a lookup reads one row per token) and the vision tower; routed experts
    only as far as the batch touches them.
"""

from __future__ import annotations

from nodeledger.ledger import kv_cache as kv
from nodeledger.ledger.weights import config_scheme, scheme_for, weight_bytes
from nodeledger.model.spec import ModelSpec
from nodeledger.speed import terms as T


def scheme(spec: ModelSpec, dtype: str | None):
    return scheme_for(dtype, spec) if dtype else config_scheme(spec)


def _pair_flops(spec: ModelSpec) -> list[tuple[float, int | None]]:
    """(FLOPs per query-key pair, window) per softmax / MLA layer."""
    h = spec.num_attention_heads
    out = []
    for layer in spec.attention:
        if layer.kind in ("full", "sliding"):
            out.append((2.0 * h * (layer.k_head_dim + layer.v_head_dim),
                        layer.window if layer.kind == "sliding" else None))  # fmt: skip
        elif layer.kind == "mla":
            out.append((2.0 * h * 2 * layer.latent_dim, None))
    return out


def attention_flops_decode(spec: ModelSpec, context: float) -> float:
    """Attention FLOPs of one decode token with ``context`` keys, all layers."""
    return sum(f * T.keys_attended(context, w) for f, w in _pair_flops(spec))


def attention_flops_prompt(spec: ModelSpec, tokens: int) -> float:
    """Causal attention FLOPs of a whole prompt of ``tokens`` (T(T+1)/2 pairs, or window-capped)."""
    return sum(f * T.causal_pairs(tokens, w) for f, w in _pair_flops(spec))


def lm_head_params(spec: ModelSpec) -> int:
    """The output projection: vocab x hidden (tied or not)."""
    return spec.vocab_size * spec.hidden_size


def body_params(spec: ModelSpec) -> int:
    """Active parameters a token multiplies through, without the input embedding table (a
    lookup, no FLOPs) and without the output projection (counted where logits are computed):
    Kaplan et al. 2020, 2.1, count non-embedding parameters for the same reason."""
    parts = spec.params_by_part()
    return max(0, spec.params_active() - parts["embeddings"] - parts["lm_head"])


def flops_per_token_forward(spec: ModelSpec, context: float, sampled: bool = True) -> float:
    """2 x body parameters + attention at ``context`` keys, + 2 x vocab x hidden when the token's
    logits are computed (every decode token; in a prefill only the last token of each prompt:
    vLLM and SGLang compute logits for the sampled positions only)."""
    head = T.dense_flops_per_token(lm_head_params(spec)) if sampled else 0.0
    return T.dense_flops_per_token(body_params(spec)) + head + attention_flops_decode(spec, context)


def prefill_flops(spec: ModelSpec, tokens: int) -> float:
    """A prompt of ``tokens``: body FLOPs per token, causal attention, logits of the last token."""
    return (T.dense_flops_per_token(body_params(spec)) * tokens + attention_flops_prompt(spec, tokens)
            + T.dense_flops_per_token(lm_head_params(spec)))  # fmt: skip


def decode_weight_bytes(spec: ModelSpec, dtype: str | None, tokens: float) -> dict:
    """Bytes of weights one decode step of ``tokens`` tokens reads (whole replica), and why."""
    wb = weight_bytes(spec, scheme(spec, dtype))
    parts = wb.by_part_bytes
    skip = parts["vision"] + (0 if spec.tied_embeddings else parts["embeddings"])
    dense = wb.total_bytes - skip - parts["routed_experts"]
    experts = 0.0
    touched = None
    if spec.moe is not None and parts["routed_experts"]:
        m = spec.moe
        per_expert_layer = parts["routed_experts"] / (m.moe_layers * m.num_experts)
        touched = T.experts_touched(m.num_experts, m.top_k, tokens)
        experts = m.moe_layers * touched * per_expert_layer
    return {
        "bytes": dense + experts,
        "dense_bytes": dense,
        "expert_bytes": experts,
        "experts_touched_per_layer": touched,
        "checkpoint_bytes": wb.total_bytes,
        "scheme": wb.scheme.name,
    }


def kv_bytes_per_sequence(spec: ModelSpec, context: float, kv_dtype: str) -> float:
    """KV bytes one sequence of ``context`` tokens holds (and a decode step reads), all cards."""
    return float(kv.kv_bytes_per_sequence(spec, round(context), kv.KV_DTYPE_BYTES[kv_dtype]))


def tp_allreduce_bytes(spec: ModelSpec, tokens: float, elem_bytes: int = 2) -> float:
    """Buffer of one tensor-parallel all-reduce: tokens x hidden x element bytes (Megatron-LM:
    two per layer forward, after attention and after the MLP)."""
    return tokens * spec.hidden_size * elem_bytes
