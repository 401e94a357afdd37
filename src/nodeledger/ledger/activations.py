"""Activation memory of HF transformers decoders under PyTorch eager autograd.

Derivations are of the tensors autograd saves for backward (``torch.autograd.graph``'s
saved-tensor hooks list them) in transformers' Llama-style decoder layer with bf16 activations,
T = micro_batch x seq tokens, a = 2 bytes:

  1. RMSNorm (x.float(); x * rsqrt(mean(x^2) + eps); weight * x.to(bf16)):  fp32 input 4h,
     rsqrt 4 (one fp32 per token), bf16 recast 2h; the normed output 2h is saved by the linears
     that read it (q/k/v share one).  Two norms + their consumers: 14h + 8 per token (a shared
     recast is saved once; measured by saved-tensor hooks, transformers 5.24).
  2. Attention, SDPA (flash/memory-efficient path): q and k after RoPE (2q, 2kv), v (2kv),
     output (2q), logsumexp fp32 (4 per head), and the contiguous output fed to o_proj (2q):
     6q + 4kv + 4*heads per token.  RoPE multiplies by cos/sin, which do not need grad, so the
     pre-RoPE q/k are not kept.
  3. Eager attention adds the probabilities: softmax(dtype=fp32) 4*B*heads*S^2 and its bf16
     cast 2*B*heads*S^2 (both saved): 6*B*heads*S^2.
  4. Gated MLP (down(act(gate(x)) * up(x))): gate out, act out, up out, product: 8*I per token.
     Classic MLP (GPT-2/OPT/BLOOM/Falcon): fc1 out (saved by GELU) and GELU out: 4*I.
  5. q/k norm (Qwen3, Gemma3, GLM): RMSNorm over heads: 6q + 4*heads + 6kv + 4*kv_heads.
  6. MoE block (transformers >= 5 grouped experts): router logits and probabilities fp32 (8E per
     token) and per routed (token, expert) pair: gathered input 2h, fused gate_up 4I, act 2I,
     product 2I, weighted output 2h: k*(4h + 8I) per token.
  7. Loss (ForCausalLMLoss: logits.float(); cross_entropy): log_softmax output fp32 4V saved
     per token; while the loss is computed the bf16 logits 2V, their fp32 copy 4V and the
     log_softmax 4V are live together (10V per token).
Activation checkpointing "full" (transformers gradient_checkpointing, non-reentrant) keeps each
layer's input (2h per token) and recomputes one layer at a time in backward.
Reference: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models", sec. 4 (the same accounting, for Megatron's layer); the coefficients above are HF's.
"""

from __future__ import annotations

from nodeledger.ledger.dims import Dims


def saved_norms_bytes_per_token(d: Dims) -> int:
    """Derivation 1 (RMSNorm) or LayerNorm: input 2h + mean/rstd 8 per norm, output 2h."""
    if d.layernorm_bias:
        return 2 * (2 * d.hidden + 8) + 2 * 2 * d.hidden
    return 14 * d.hidden + 8


def saved_attention_bytes_per_token(d: Dims) -> int:
    """Derivation 2 (SDPA) and 5 (q/k norm)."""
    b = 6 * d.q_dim + 4 * d.kv_dim + 4 * d.heads
    if d.qk_norm:
        head_dim = max(1, d.q_dim // max(1, d.heads))
        b += 6 * d.q_dim + 4 * d.heads + 6 * d.kv_dim + 4 * (d.kv_dim // head_dim)
    return b


def eager_attention_bytes_per_layer(d: Dims, micro_batch: int, seq: int) -> int:
    """Derivation 3: fp32 softmax + bf16 copy of the B x heads x S x S probabilities."""
    return 6 * micro_batch * d.heads * seq * seq


def saved_dense_mlp_bytes_per_token(d: Dims, intermediate: int | None = None) -> int:
    """Derivation 4."""
    inter = d.intermediate if intermediate is None else intermediate
    return (8 if d.gated else 4) * inter


def saved_moe_bytes_per_token(d: Dims) -> int:
    """Derivation 6, plus the shared expert as a dense MLP of its own width."""
    b = 8 * d.experts + d.top_k * (4 * d.hidden + 8 * d.moe_intermediate)
    if d.shared_intermediate:
        b += 8 * d.shared_intermediate + 2 * d.hidden
    return b


def saved_layer_bytes(d: Dims, micro_batch: int, seq: int, attention: str, moe: bool) -> int:
    """Bytes one decoder layer saves for backward."""
    tokens = micro_batch * seq
    per_token = saved_norms_bytes_per_token(d) + saved_attention_bytes_per_token(d)
    per_token += saved_moe_bytes_per_token(d) if moe else saved_dense_mlp_bytes_per_token(d)
    total = per_token * tokens
    if attention == "eager":
        total += eager_attention_bytes_per_layer(d, micro_batch, seq)
    return total


def saved_activations_bytes(
    d: Dims,
    micro_batch: int,
    seq: int,
    attention: str,
    checkpointing: str,
    layers_fraction: float = 1.0,
) -> tuple[int, int]:
    """(bytes held at the end of forward, extra bytes of one recomputed layer in backward).

    ``layers_fraction``: share of the layers on this card (pipeline stages).
    """
    tokens = micro_batch * seq
    dense = round(d.dense_layers * layers_fraction)
    moe = round(d.moe_layers * layers_fraction)
    if d.dense_layers + d.moe_layers == 0:
        dense = round(d.layers * layers_fraction)
    per_dense = saved_layer_bytes(d, micro_batch, seq, attention, moe=False)
    per_moe = saved_layer_bytes(d, micro_batch, seq, attention, moe=True) if d.moe_layers else 0
    if checkpointing == "full":
        held = (dense + moe) * 2 * d.hidden * tokens
        return held, max(per_dense, per_moe)
    if checkpointing == "selective":
        # attention core recomputed (Korthikanti et al. sec. 4.2): drop q/k/v/out and probabilities
        attn = saved_attention_bytes_per_token(d) * tokens
        if attention == "eager":
            attn += eager_attention_bytes_per_layer(d, micro_batch, seq)
        return dense * (per_dense - attn) + moe * (per_moe - attn), attn
    return dense * per_dense + moe * per_moe, 0


def loss_saved_bytes(d: Dims, tokens: int) -> int:
    """Derivation 7: log_softmax output kept for backward (fp32)."""
    return 4 * d.vocab * tokens


def loss_transient_bytes(d: Dims, tokens: int) -> int:
    """Derivation 7: bf16 logits + fp32 copy + log_softmax live at once while the loss is taken."""
    return 10 * d.vocab * tokens


def inference_layer_transient_bytes(d: Dims, tokens: int) -> int:
    """No-grad forward of one layer: the widest moment is the gated MLP, where act(gate(x)),
    up(x) and their product coexist (3 x 2I per token) beside the residual stream, its normed
    copy and the layer output (3 x 2h).  MoE: the routed pairs' gate_up (4I) and act (2I) for the
    tokens of the busiest expert plus the fp32 router probabilities (4E per token) — bounded
    here by all k pairs of every token."""
    if d.moe_layers and not d.intermediate:
        return tokens * (
            6 * d.hidden + 4 * d.experts + d.top_k * (2 * d.hidden + 6 * d.moe_intermediate)
        )
    inter = d.intermediate or d.moe_intermediate
    return tokens * (6 * d.hidden + (6 if d.gated else 4) * inter)


def inference_logits_bytes(d: Dims, rows: int) -> int:
    """lm_head output for ``rows`` positions: bf16 logits + the fp32 copy generate() takes."""
    return rows * d.vocab * 6
