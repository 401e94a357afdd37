"""Activation memory of HF transformers decoders under PyTorch eager autograd.

Derivations are of the tensors autograd saves for backward (``torch.autograd.graph``'s
saved-tensor hooks list them) in transformers' Llama-style decoder layer with bf16 activations,
T = micro_batch x seq tokens, a = 2 bytes:

  1. RMSNorm (x.float(); x * rsqrt(mean(x^2) + eps); weight * x.to(bf16)):  fp32 input 4h,
     rsqrt 4 (one fp32 per token), bf16 recast 2h; the normed output 2h is saved by the linears
     that read it (q/k/v share one).  Two norms + their consumers: 14h + 8 per token (a shared
     recast is saved once; measured by saved-tensor hooks, transformers 5.24).
  2. Attention, SDPA (flash/memory-efficient path): q and k after RoPE (2q, 2kv), v (2kv),
     output (2q, fed to o_proj as it is), logsumexp fp32 (4 per head), and one more q-sized
     tensor a rotary family keeps (2q; OPT and GPT-2, without rotary, do not):
     6q + 4kv + 4*heads per token (saved_attention_bytes_per_token).
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

from math import ceil

from nodeledger.ledger.dims import Dims


def saved_norms_bytes_per_token(d: Dims) -> int:
    """Derivation 1 (RMSNorm) or LayerNorm: input 2h + mean/rstd 8 per norm, output 2h."""
    if d.layernorm_bias:
        return 2 * (2 * d.hidden + 8) + 2 * 2 * d.hidden
    return 14 * d.hidden + 8


def saved_attention_bytes_per_token(d: Dims, backend: str = "sdpa") -> int:
    """Derivation 2 (SDPA) and 5 (q/k norm).

    The kernel keeps q, k, v, its output (fed to o_proj as it is: the flash / cuDNN /
    memory-efficient kernels write it in the [B, S, H, D] layout the projection reads) and the
    logsumexp: 4q + 4kv + 4 x heads (OPT and Nemotron-H's attention, neither rotary).  A rotary
    family keeps one more q-sized tensor (Llama / Qwen / Mistral: 6q + 4kv + 4 x heads,
    derivation 2).  GPT-2 (learned positions and one fused c_attn) hands q to the kernel as a
    view of the fused output, so the fused output's k and v parts stay saved too beside the
    cache's copies of k and v: 4kv more (the tracker's live set, GPT-2 train on an H200 with
    cuDNN attention and on the CPU with CUDA's flash kernel emulated:
    benchmarks/accuracy/gpu_h200/gpt2_cuda_oplog.tsv; OPT's 4q + 4kv fitted over two sequence
    lengths on the CPU).

    SDPA's math composite (``backend="math"``) upcasts q, k and v to fp32 and its two bmm's
    keep them (4 x (q + k + v)), and the output, written [B, H, S, D], is copied in bf16 for
    o_proj (2 x out); no logsumexp.  k is as wide as q under MLA, v and the output are kv wide:
    6q + 8kv, MLA 8q + 6kv (GPT-2 train, fake CPU: 14h per token over two sequence lengths)."""
    if backend == "math":
        b = 8 * d.q_dim + 6 * d.kv_dim if d.mla else 6 * d.q_dim + 8 * d.kv_dim
    else:
        b = 4 * d.q_dim + 4 * d.kv_dim + 4 * d.heads
        if not d.learned_positions:
            b += 2 * d.q_dim
        elif d.fused_qkv:
            b += 4 * d.kv_dim
    if d.qk_norm:
        head_dim = max(1, d.q_dim // max(1, d.heads))
        b += 6 * d.q_dim + 4 * d.heads + 6 * d.kv_dim + 4 * (d.kv_dim // head_dim)
    return b


def dropout_mask_bytes(device_type: str = "cuda", itemsize: int = 2) -> int:
    """Bytes per element a training-mode dropout keeps for backward: CUDA's native_dropout a
    bool mask (1 B), the CPU's decomposition (bernoulli noise, then a multiply) its noise in the
    input's dtype (``itemsize``)."""
    return 1 if device_type != "cpu" else itemsize


def eager_attention_bytes_per_layer(d: Dims, micro_batch: int, seq: int, backend: str = "eager",
                                    device_type: str = "cuda") -> int:  # fmt: skip
    """Derivation 3: fp32 softmax + bf16 copy of the B x heads x S x S probabilities.
    SDPA's math fallback keeps only the fp32 probabilities (4: softmax's output, which the
    second bmm keeps too), and with attention dropout also the dropout's mask and the dropped
    fp32 probabilities: 4 + mask + 4 (fitted over two sequence lengths on the fake CPU: 4.0 B per
    score element for DeepSeek-V3 without dropout, 12.0 for GPT-2 with the CPU's fp32 noise).
    gpt-oss's attention with sinks (cat of the sink column, max-subtract, a bf16 softmax) saves
    only the softmax output, S + 1 columns of 2 B (the tracker's live set after the forward)."""
    if d.family == "gpt_oss" and backend == "eager":
        return 2 * micro_batch * d.heads * seq * (seq + 1)
    per = 6
    if backend == "math":
        per = 4 + (4 + dropout_mask_bytes(device_type, 4) if d.attention_dropout > 0 else 0)
    return per * micro_batch * d.heads * seq * seq


# tanh-GELU written as Python arithmetic (0.5*x*(1+tanh(...))): autograd and the no-grad
# forward see each step as its own tensor (dims.py names BLOOM's gelu "bloom_gelu")
PY_TANH_GELU = ("gelu_new", "bloom_gelu", "gelu_fast")


def saved_dense_mlp_bytes_per_token(d: Dims, intermediate: int | None = None,
                                    fp32_pow: bool = False) -> int:  # fmt: skip
    """Derivation 4.  ``fp32_pow``: autocast on a card (the CUDA policy) runs ``pow`` in fp32,
    and gelu_new's chain with it: pow keeps an fp32 copy of fc1's output, tanh its fp32 output,
    the last product 0.5*x (bf16) and 1+tanh (fp32), fc2 its bf16 input: 2 + 4 + 4 + 4 + 2 =
    16I (GPT-2 mixed on an H200, benchmarks/accuracy/gpu_h200/gpt2_cuda_oplog.tsv)."""
    inter = d.intermediate if intermediate is None else intermediate
    if d.gated:
        return 8 * inter
    # ReLU backward uses its output, which is also fc2's saved input: one 2I tensor; GELU keeps
    # its input (fc1 out) and fc2 keeps the GELU output: 4I.  tanh-GELU written as Python
    # arithmetic (gelu_new: 0.5*x*(1+tanh(...))) saves x, tanh's output, 0.5*x, 1+tanh and the
    # product: 10I.  BLOOM wraps the same arithmetic in a custom autograd function
    # (modeling_bloom.py GeLUFunction: ctx.save_for_backward(input)), so it saves what GELU
    # does: 4I.
    if d.activation == "gelu_new" and fp32_pow:
        return 16 * inter
    if d.activation in PY_TANH_GELU and d.activation != "bloom_gelu":
        return 10 * inter
    return (2 if d.activation == "relu" else 4) * inter


# gpt-oss's experts gate with a clamped SwiGLU (GptOssExperts._apply_gate: gate.clamp,
# up.clamp, gate * sigmoid(gate * alpha), (up + 1) * glu): autograd keeps the clamped gate, the
# sigmoid, up + 1, glu and their product, 5 x 2I per routed pair, where SiLU(gate) * up keeps 2
CLAMPED_SWIGLU_EXTRA = 6  # x I bytes per routed pair beyond a SwiGLU's


def saved_moe_bytes_per_token(d: Dims) -> int:
    """Derivation 6, plus the shared expert as a dense MLP of its own width."""
    inter = 8 * d.moe_intermediate + (CLAMPED_SWIGLU_EXTRA * d.moe_intermediate
                                      if d.family == "gpt_oss" else 0)  # fmt: skip
    b = 8 * d.experts + d.top_k * (4 * d.hidden + inter)
    if d.shared_intermediate:
        b += 8 * d.shared_intermediate + 2 * d.hidden
    return b


def residual_dropout_bytes_per_token(d: Dims, device_type: str = "cuda") -> int:
    """Dropout on the two residual branches of a layer (GPT-2 resid_pdrop, OPT dropout) keeps
    its mask for backward, h elements per branch: 2h bytes on a card (bool masks), 4h on the
    CPU (the bf16 noise; dropout_mask_bytes)."""
    return 2 * d.hidden * dropout_mask_bytes(device_type) if d.hidden_dropout > 0 else 0


def layernorm_autocast_bytes_per_token(d: Dims, autocast: bool) -> int:
    """Under torch.autocast with fp32 parameters a LayerNorm reads the fp32 residual stream
    and its bf16-cast output is what the next linear keeps: each of the two norms saves a 4h
    input where derivation 1's bf16 count has 2h, + 2 x 2h per token (GPT-2 mixed: the
    tracker's saved set, 2 fp32 inputs of 4h and 2 bf16 casts of 2h per layer)."""
    return 4 * d.hidden if autocast and d.layernorm_bias else 0


def saved_layer_bytes(d: Dims, micro_batch: int, seq: int, attention: str, moe: bool,
                      autocast: bool = False, device_type: str = "cuda") -> int:  # fmt: skip
    """Bytes one decoder layer saves for backward (``autocast``: the job's layout computes in
    bf16 through torch.autocast on fp32 parameters, under ``device_type``'s policy)."""
    tokens = micro_batch * seq
    per_token = saved_norms_bytes_per_token(d) + saved_attention_bytes_per_token(d, attention)
    per_token += residual_dropout_bytes_per_token(d, device_type)
    per_token += layernorm_autocast_bytes_per_token(d, autocast)
    fp32_pow = autocast and device_type != "cpu"
    per_token += (saved_moe_bytes_per_token(d) if moe
                  else saved_dense_mlp_bytes_per_token(d, fp32_pow=fp32_pow))  # fmt: skip
    total = per_token * tokens
    if attention in ("eager", "math"):
        total += eager_attention_bytes_per_layer(d, micro_batch, seq, attention, device_type)
    return total


def saved_lora_layer_bytes(
    d: Dims, micro_batch: int, seq: int, attention: str, targets: tuple[str, ...], rank: int
) -> int:
    """One decoder layer's saved tensors when the base is frozen and LoRA adapters train.

    A frozen linear saves nothing (its weight grad is not needed; the input grad needs only the
    weight).  A LoRA'd linear (peft >= 0.14, adapters kept in fp32 by autocast_adapter_dtype)
    saves the fp32 cast of its input (4 x in) and lora_A's fp32 output (4r).  RMSNorm with a
    frozen weight keeps its fp32 input and rsqrt (4h + 4).  SDPA saves q, k, v, output and the
    logsumexp (4q + 4kv + 4 x heads); o_proj's input is kept only if o_proj is adapted.  The
    gated MLP keeps gate out, act out and up out (6I) for the input gradient."""
    tokens = micro_batch * seq
    inter = d.intermediate or d.moe_intermediate
    # the input width of each adaptable linear, under the names the families use (Llama's
    # split projections, Phi-3/4's fused qkv_proj / gate_up_proj, BLOOM / Falcon's
    # query_key_value, dense, dense_h_to_4h, dense_4h_to_h)
    ins = {"q_proj": d.hidden, "k_proj": d.hidden, "v_proj": d.hidden, "o_proj": d.q_dim,
           "gate_proj": d.hidden, "up_proj": d.hidden, "down_proj": inter,
           "qkv_proj": d.hidden, "gate_up_proj": d.hidden, "query_key_value": d.hidden,
           "dense": d.q_dim, "dense_h_to_4h": d.hidden, "dense_4h_to_h": inter}  # fmt: skip
    # frozen norms: RMSNorm keeps its fp32 input and rsqrt (4h + 4); LayerNorm its bf16 input
    # and the fp32 mean and rstd (2h + 8)
    norm = 2 * d.hidden + 8 if d.layernorm_bias else 4 * d.hidden + 4
    per = 2 * norm + 4 * d.q_dim + 4 * d.kv_dim + 4 * d.heads
    if d.moe_layers and not d.intermediate:
        # frozen experts: router softmax/top-k in fp32 (8E), per routed pair the act input and
        # output and up (6I; gpt-oss's clamped SwiGLU 6I more) and the weighted expert output (2h)
        extra = CLAMPED_SWIGLU_EXTRA * d.moe_intermediate if d.family == "gpt_oss" else 0
        per += 8 * d.experts + d.top_k * (2 * d.hidden + 6 * d.moe_intermediate + extra)
    elif d.gated:
        per += 6 * inter
    else:
        # a frozen classic MLP: the activation keeps its input (GELU, BLOOM's GeLUFunction) or
        # output (ReLU), 2I; a Python tanh-GELU chain its intermediates, 8I
        per += (
            8 * inter
            if d.activation in PY_TANH_GELU and d.activation != "bloom_gelu"
            else 2 * inter
        )
    if d.qk_norm:
        head_dim = max(1, d.q_dim // max(1, d.heads))
        per += 4 * d.q_dim + 4 * d.heads + 4 * d.kv_dim + 4 * (d.kv_dim // head_dim)
    for t in targets:
        if t in ins:
            per += 4 * ins[t] + 4 * rank
    per += residual_dropout_bytes_per_token(d)
    total = per * tokens
    if attention == "eager":
        total += eager_attention_bytes_per_layer(d, micro_batch, seq)
    return total


def op_sac_saved(d: Dims) -> tuple[bool, ...]:
    """Per linear of a dense layer (Dims.layer_matmuls, in call order): whether torchtitan's
    op-level selective activation checkpointing keeps its output.  Its policy
    (torchtitan models/llama/parallelize_llama.py, _save_list and _get_custom_policy): save the
    outputs of aten.mm, SDPA and reduce_scatter, except every second aten.mm of the layer (the
    mm count restarts for each checkpointed layer).  A linear with a bias runs aten.addmm: not
    in the list, not counted, recomputed."""
    out, count = [], 0
    for _, _, bias in d.layer_matmuls:
        if bias:
            out.append(False)
            continue
        count += 1
        out.append(count % 2 == 1)
    return tuple(out)


def op_sac_bytes_per_token(d: Dims, attention: str) -> int:
    """What one dense layer keeps per token under op-level checkpointing: the checkpoint's
    input (2h), the saved matmul outputs (op_sac_saved: 2 x out each; Llama: q_proj, v_proj,
    gate_proj, down_proj) and the fused SDPA's output and logsumexp (2q + 4 x heads; the eager
    or math attention is built from bmm and softmax, neither in the list: recomputed)."""
    mm = sum(
        2 * o for (o, _, _), keep in zip(d.layer_matmuls, op_sac_saved(d), strict=True) if keep
    )
    sdpa = 2 * d.q_dim + 4 * d.heads if attention == "sdpa" else 0
    return 2 * d.hidden + mm + sdpa


def op_sac_supported(d: Dims) -> str | None:
    """None where op-level checkpointing is modelled for this model, else why not."""
    if d.moe_layers or d.mla or d.linear_layers or d.mamba_layers or d.mlp_only_layers:
        return ("modelled for dense decoder layers only (MoE, MLA, linear-attention and Mamba "
                "layers run other ops)")  # fmt: skip
    if not d.layer_matmuls:
        return "the model's decoder-layer linears were not found"
    return None


def checkpointed_inputs_bytes(d: Dims, layers: int, tokens: int) -> int:
    """Full activation checkpointing keeps each layer's input: layers x 2h x tokens (bf16)."""
    return layers * 2 * d.hidden * tokens


def tp_replicated_bytes(
    d: Dims,
    micro_batch: int,
    seq: int,
    checkpointing: str,
    layers: int,
    lora_targets: tuple[str, ...] | None = None,
) -> tuple[int, int]:
    """(held, one recomputed layer): the part of the saved activations that tensor parallelism
    without sequence parallelism keeps whole on every TP rank (Korthikanti et al. 2022,
    "Reducing activation recomputation", 4.1, Table 2: the 10 s b h of the 34 s b h per layer
    that TP alone does not divide).  Column-parallel q/k/v/gate/up split their outputs and
    row-parallel o/down their inputs, but the layer input, the norms (derivation 1: 14h + 8
    per token) and the full-width input each column-parallel linear keeps are whole:
      full checkpointing  every checkpointed layer input (2h per token, all of it)
      otherwise           the norms' share of each layer; LoRA: 2 (4h + 4) plus the fp32 input
                          cast (4h) of each adapted q/k/v/gate/up projection."""
    tokens = micro_batch * seq
    if lora_targets is not None:
        per = 2 * (4 * d.hidden + 4) + sum(
            4 * d.hidden
            for t in lora_targets
            if t in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
        )
    else:
        per = saved_norms_bytes_per_token(d)
    layer = per * tokens
    if checkpointing == "full":
        return checkpointed_inputs_bytes(d, layers, tokens), layer
    if checkpointing == "selective_op":  # the layer input is kept; the norms are recomputed
        return checkpointed_inputs_bytes(d, layers, tokens), layer
    return layers * layer, 0


def sp_gathered_inputs_bytes(
    d: Dims, micro_batch: int, seq: int, checkpointing: str, layers: int
) -> int:
    """Sequence parallelism as DTensor runs it (ColwiseParallel(input_layouts=Shard(1))): the
    input of q/k/v and of gate/up is all-gathered to the whole sequence and the matmul saves
    that gathered tensor, 2h per token each, on every TP rank: layers x 4h x tokens; none with
    full or op-level checkpointing (the layer inputs are all that is kept of them: an all-gather
    is not in torchtitan's save list)."""
    if checkpointing in ("full", "selective_op"):
        return 0
    return layers * 4 * d.hidden * micro_batch * seq


def saved_lora_activations_bytes(
    d: Dims,
    micro_batch: int,
    seq: int,
    attention: str,
    checkpointing: str,
    targets: tuple[str, ...],
    rank: int,
    pipeline_stages: int = 1,
) -> tuple[int, int]:
    """LoRA: (bytes held at the end of forward, extra bytes of one recomputed layer).

    Each of the round(layers / pp) layers on the card saves ``saved_lora_layer_bytes``; with
    "full" checkpointing only the layer inputs are held (``checkpointed_inputs_bytes``) and
    one layer is recomputed at a time.  "selective" is counted as "none" here."""
    layers = round(d.layers / pipeline_stages)
    if d.mlp_only_layers:
        return _saved_one_mixer_hybrid_lora(d, micro_batch, seq, attention, checkpointing,
                                            targets, rank, pipeline_stages)  # fmt: skip
    per_layer = saved_lora_layer_bytes(d, micro_batch, seq, attention, targets, rank)
    if checkpointing == "full":
        return checkpointed_inputs_bytes(d, layers, micro_batch * seq), per_layer
    return layers * per_layer, 0


def _gdn_widths(d: Dims) -> tuple[int, int, int]:
    """(H x dk, H, conv) of a Gated DeltaNet layer: the key width (key heads x key head dim,
    from its fused projection in_proj_qkvz = 2 H dk + 2 HV dv), the key heads, and the short
    convolution's channels 2 H dk + HV dv."""
    hk = max(0, (d.lin_proj - 2 * d.lin_heads * d.lin_dv) // 2)
    return hk, hk // max(1, d.lin_dk), 2 * hk + d.lin_heads * d.lin_dv


def saved_gated_deltanet_bytes_per_token(d: Dims, kernels: str = "torch") -> int:
    """What one Gated DeltaNet mixer (Qwen3NextGatedDeltaNet, transformers 5.24) saves for
    backward per token, its layer's norms and MLP apart.  H key heads, HV value heads, dk / dv
    head dims, C = 64 the chunk, conv = 2 H dk + HV dv the short convolution's channels.

    Both paths: the in_proj input (2h), out_proj's input (2 HV dv) and the gated RMSNorm
    (Qwen3NextRMSNormGated, torch in both): its fp32 input, gate and SiLU(gate) and two bf16
    operands, 16 HV dv.

    ``kernels="torch"`` (transformers' pure-torch fallback, fla / causal-conv1d not installed):
    F.conv1d keeps its padded input and SiLU its input (2 x 2 conv); torch_chunk_gated_delta_rule
    11 fp32 HV x d tensors (q, k, v in fp32 and chunked, k·beta, v·beta, the decayed keys, the
    UT solutions, per chunk), 5 fp32 HV x C (the pairwise decay, the UT system, the intra-chunk
    attention), the per-chunk states (4 HV dk dv / C) and 38 B per value head of gates and
    decays.  Read off saved_tensors_hooks on one layer (Qwen3-Next, bf16, 256 and 512 tokens:
    365,971 and 365,867 B per token; this gives 365,760).

    ``kernels="fused"`` (fla's chunk_gated_delta_rule and causal-conv1d installed): derived from
    their source, not measured (fla bc3b101d, chunk.py ChunkGatedDeltaRuleFunction: ctx saves the
    l2-normalised q and k, v, the cumulative gate, beta and A = (I + A)^-1, 2 (2 H dk + HV dv +
    HV C) + 4 (2H + HV); CausalConv1dFn saves its input, 2 conv)."""
    if not d.linear_layers or not d.lin_heads:
        return 0
    hv, dk, dv, c = d.lin_heads, d.lin_dk, d.lin_dv, GDN_CHUNK
    hk, k_heads, conv = _gdn_widths(d)
    both = 2 * d.hidden + 2 * hv * dv + 16 * hv * dv
    if kernels == "fused":
        return both + 2 * conv + 2 * (2 * hk + hv * dv + hv * c) + 4 * (2 * k_heads + hv)
    dkv = (dk + dv) / 2
    return both + 4 * conv + int(11 * 4 * hv * dkv + 5 * 4 * hv * c + 4 * hv * dk * dv / c
                                 + 38 * hv)  # fmt: skip


def saved_activations_bytes(
    d: Dims,
    micro_batch: int,
    seq: int,
    attention: str,
    checkpointing: str,
    layers_fraction: float = 1.0,
    autocast: bool = False,
    device_type: str = "cuda",
    kernels: str = "torch",
) -> tuple[int, int]:
    """(bytes held at the end of forward, extra bytes of one recomputed layer in backward).

    ``layers_fraction``: share of the layers on this card (pipeline stages); ``autocast`` and
    ``device_type``: see saved_layer_bytes; ``kernels``: the Gated DeltaNet path
    (saved_gated_deltanet_bytes_per_token).  A Gated DeltaNet layer saves its mixer's set where
    an attention layer saves the attention's.
    """
    tokens = micro_batch * seq
    if d.mlp_only_layers:
        return _saved_one_mixer_hybrid(d, micro_batch, seq, attention, checkpointing,
                                       layers_fraction, kernels)  # fmt: skip
    dense = round(d.dense_layers * layers_fraction)
    moe = round(d.moe_layers * layers_fraction)
    if d.dense_layers + d.moe_layers == 0:
        dense = round(d.layers * layers_fraction)
    per_dense = saved_layer_bytes(d, micro_batch, seq, attention, moe=False, autocast=autocast,
                                  device_type=device_type)  # fmt: skip
    per_moe = (saved_layer_bytes(d, micro_batch, seq, attention, moe=True, autocast=autocast,
                                 device_type=device_type)
               if d.moe_layers else 0)  # fmt: skip
    # Mamba-2 mixers of a hybrid (one mixer per layer, beside the MLP and attention layers)
    mamba = round(d.mamba_layers * layers_fraction)
    per_mamba = saved_mamba2_bytes_per_token(d, kernels) * tokens
    attn = saved_attention_bytes_per_token(d, attention) * tokens
    if attention in ("eager", "math"):
        attn += eager_attention_bytes_per_layer(d, micro_batch, seq, attention, device_type)
    # Gated DeltaNet layers (Qwen3-Next): their MLP is the model's (MoE where it has one)
    lin = round(d.linear_layers * layers_fraction)
    swap = (saved_gated_deltanet_bytes_per_token(d, kernels) * tokens - attn) if lin else 0
    per_lin = (per_moe if moe >= lin else per_dense) + swap
    if checkpointing == "full":
        return (checkpointed_inputs_bytes(d, dense + moe + mamba, tokens),
                max(per_dense, per_moe, per_mamba, per_lin if lin else 0))  # fmt: skip
    if checkpointing == "selective_op":  # dense layers only (op_sac_supported)
        return dense * op_sac_bytes_per_token(d, attention) * tokens, per_dense
    held = (dense * per_dense + moe * per_moe + mamba * per_mamba
            + lin * swap)  # fmt: skip
    if checkpointing == "selective":
        # attention core recomputed (Korthikanti et al. sec. 4.2): drop q/k/v/out and
        # probabilities of the attention layers
        return held - (dense + moe - lin) * attn, attn
    return held, 0


def _saved_mixer_attention_bytes_per_token(d: Dims) -> int:
    """A one-mixer hybrid's attention layer (Nemotron-H, no rotary): q, k, v, the output and
    the logsumexp saved for backward, 4q + 4kv + 4 x heads bytes per token."""
    return 4 * d.q_dim + 4 * d.kv_dim + 4 * d.heads


def _saved_one_mixer_hybrid(d: Dims, micro_batch: int, seq: int, attention: str,
                            checkpointing: str, layers_fraction: float,
                            kernels: str = "torch") -> tuple[int, int]:  # fmt: skip
    """A hybrid whose layers each hold one norm and ONE mixer (Nemotron-H: Mamba-2, attention
    or MLP): per layer its RMSNorm (fp32 input 4h, rsqrt 4, bf16 output 2h), then the mixer's
    own saved set — Mamba-2 (saved_mamba2_bytes_per_token), attention without rotary (q, k, v,
    output, logsumexp: 4q + 4kv + 4 x heads), MLP (saved_dense_mlp_bytes_per_token).  Full
    checkpointing keeps one input per layer."""
    tokens = micro_batch * seq
    layers = round(d.layers * layers_fraction)
    n_attn = round(d.mixer_attn_layers * layers_fraction)
    n_mlp = round(d.mlp_only_layers * layers_fraction)
    n_mamba = round(d.mamba_layers * layers_fraction)
    norm = 6 * d.hidden + 4
    attn = _saved_mixer_attention_bytes_per_token(d)
    per = {"attention": (norm + attn) * tokens,
           "mlp": (norm + saved_dense_mlp_bytes_per_token(d)) * tokens,
           "mamba": (norm + saved_mamba2_bytes_per_token(d, kernels)) * tokens}  # fmt: skip
    if attention in ("eager", "math"):
        per["attention"] += eager_attention_bytes_per_layer(d, micro_batch, seq, attention)
    if checkpointing == "full":
        return checkpointed_inputs_bytes(d, layers, tokens), max(per.values())
    held = n_attn * per["attention"] + n_mlp * per["mlp"] + n_mamba * per["mamba"]
    if checkpointing == "selective":  # the attention core recomputed
        return held - n_attn * attn * tokens, attn * tokens
    return held, 0


def _saved_one_mixer_hybrid_lora(d: Dims, micro_batch: int, seq: int, attention: str,
                                 checkpointing: str, targets: tuple[str, ...], rank: int,
                                 stages: int) -> tuple[int, int]:  # fmt: skip
    """LoRA on a one-mixer hybrid (Nemotron-H), the frozen base's saved set read off the
    tracker (Nemotron-H, in_proj + q/k/v/o adapted): per layer its RMSNorm's fp32 input and
    rsqrt (4h + 4; the bf16 output only feeds frozen weights); a Mamba-2 mixer the scan's input-
    gradient set (saved_mamba2_bytes_per_token less what only its weights' gradients need: 2 of
    the 11 fp32 H x head_dim tensors and the 6.5 B per intermediate element, 4 B per head less);
    an MLP layer its activation (ReLU²: the ReLU output, 2I; a gated MLP 6I); attention q, k, v,
    output and logsumexp; each adapted linear its fp32 input cast and lora_A output (4 x in + 4r
    per token)."""
    tokens = micro_batch * seq
    frac = 1 / stages
    layers = round(d.layers * frac)
    if checkpointing == "full":
        full, recompute = _saved_one_mixer_hybrid(d, micro_batch, seq, attention, "full", frac)
        return full, recompute
    mamba = (
        saved_mamba2_bytes_per_token(d) - 4 * 2 * d.m_inter - 13 * d.m_inter // 2 - 4 * d.m_heads
    )
    mlp = 6 * d.intermediate if d.gated else 2 * d.intermediate
    attn = _saved_mixer_attention_bytes_per_token(d)
    per_token = (layers * (4 * d.hidden + 4) + round(d.mamba_layers * frac) * mamba
                 + round(d.mlp_only_layers * frac) * mlp + round(d.mixer_attn_layers * frac) * attn)  # fmt: skip
    ins = {"in_proj": (d.hidden, d.mamba_layers), "q_proj": (d.hidden, d.mixer_attn_layers),
           "k_proj": (d.hidden, d.mixer_attn_layers), "v_proj": (d.hidden, d.mixer_attn_layers),
           "o_proj": (d.q_dim, d.mixer_attn_layers), "up_proj": (d.hidden, d.mlp_only_layers),
           "down_proj": (d.intermediate, d.mlp_only_layers)}  # fmt: skip
    for t in targets:
        if t in ins:
            width, count = ins[t]
            per_token += round(count * frac) * (4 * width + 4 * rank)
    held = per_token * tokens
    if attention in ("eager", "math"):
        held += round(d.mixer_attn_layers * frac) * eager_attention_bytes_per_layer(
            d, micro_batch, seq, attention
        )
    return held, 0


def saved_mamba2_bytes_per_token(d: Dims, kernels: str = "torch") -> int:
    """What one Mamba-2 mixer saves for backward on transformers' pure-torch path (autograd
    through NemotronHMamba2Mixer.torch_forward's chunked SSD einsums), per token, read off the
    fake-tensor tracker's live set at the end of the forward (Nemotron-H): fp32 4 x H x state
    (B, C repeated to the heads, B·decay, C for the state readout) and 4 x H x chunk (the
    segment-sum decays, G, M), 11 fp32 H x head_dim (x, D·x, x·dt, the outputs and chunk
    states), 6.5 B per intermediate element in bf16 (gate, x, the gated norm's input and
    output), the in_proj output (intermediate + conv_dim + H), x / B / C after the conv
    (2 x intermediate + groups x state), the conv output (conv_dim), and 36 B per head.  Its
    layer's norm is counted apart (_saved_one_mixer_hybrid).

    ``kernels="fused"`` (mamba_ssm installed: transformers trains through
    mamba_split_conv1d_scan_combined, conv, scan, gated norm and out_proj in one function),
    derived from its source, not measured (mamba e9594ce1, MambaSplitConv1dScanCombinedFn: ctx
    saves the in_proj output, the scan output before the norm and the norm's rstd; the rest is
    recomputed in backward): 2 (intermediate + conv_dim + H) + 2 x intermediate + 4 x groups."""
    if not d.mamba_layers:
        return 0
    h, p, n, g, chunk = d.m_heads, d.m_dim, d.m_state, d.m_groups, d.m_chunk
    inter, conv = d.m_inter, d.m_conv
    if kernels == "fused":
        return 2 * (inter + conv + h) + 2 * inter + 4 * g
    return (4 * (4 * h * n + 4 * h * chunk + 11 * h * p) + 13 * inter // 2
            + 2 * (inter + conv + h) + 2 * (2 * inter + g * n) + 2 * conv + 36 * h)  # fmt: skip


def loss_saved_bytes(d: Dims, tokens: int) -> int:
    """Derivation 7: log_softmax output kept for backward (fp32)."""
    return 4 * d.vocab * tokens


def loss_transient_bytes(d: Dims, tokens: int) -> int:
    """Derivation 7: bf16 logits + fp32 copy + log_softmax live at once while the loss is taken."""
    return 10 * d.vocab * tokens


def loss_backward_bytes(loss_saved: int, recompute: int, d: Dims, tokens: int) -> int:
    """The widest moment of the backward beyond the held activations: the loss backward
    (saved log_softmax + its incoming and outgoing fp32 grads: 3 x ``loss_saved``) or, with
    checkpointing, the recompute of the last layer once the loss tensors are freed, beside
    4h per token: max(3 x loss_saved, recompute + 4h x tokens).  ``loss_saved`` and
    ``recompute`` are per card; the coefficients were calibrated against measured peaks
    (commit de8f874, "checkpointed backward moments")."""
    return max(3 * loss_saved, recompute + 4 * d.hidden * tokens)


def embedding_grad_transient_bytes(d: Dims) -> int:
    """End of backward: the embedding's dense gradient is built in fp32 and cast
    (embedding_dense_backward; measured on the tied Gemma-2 table): 4 x vocab x h."""
    return 4 * d.vocab * d.hidden


def lm_head_autocast_copy_bytes(d: Dims) -> int:
    """Mixed precision with full checkpointing: checkpointed layers run their forward without
    saving, so autocast's bf16 weight copies stay alive only for the lm_head, which is outside
    the checkpoints: vocab x h x 2."""
    return d.vocab * d.hidden * 2


# Bytes per attention-score element (B x heads x S_q x S_k) live at the widest moment of a
# no-grad attention that materialises its scores, measured with benchmarks/accuracy (fake
# tensors, transformers 5.24):
#   eager (eager_attention_forward): bf16 scores, masked scores, fp32 softmax, bf16 cast: 10
#   sdpa "math" fallback (fp32 upcast of q/k/v, fp32 scores and softmax): 8
#   BLOOM (alibi baddbmm + masked_fill + fp32 copy + fp32 softmax: 12) + the previous layer's
#   bf16 probabilities, which BloomAttention returns and the model holds until the next layer
#   returns (2): 14
#   Gemma-2 (eager + tanh soft-capping of the scores): 12
#   gpt-oss (eager with attention sinks: cat, max-subtract, bf16 softmax): 6
SCORE_BYTES = {"eager": 10, "math": 8, "bloom": 14, "gemma2": 12, "gpt_oss": 6}


def attention_backend(d: Dims, requested: str) -> str:
    """Which attention path transformers takes: eager-only families ignore the request."""
    if not d.sdpa_supported:  # model/attention_path.py; each such family has a SCORE_BYTES entry
        return d.family
    if d.family == "gpt_oss" and requested == "eager":
        return "gpt_oss"
    return requested


def training_attention(d: Dims, requested: str) -> str:
    """The attention path a training step takes: an eager-only family (no SDPA path in its
    transformers class) runs eager whatever was asked; otherwise the request."""
    return requested if d.sdpa_supported else "eager"


def inference_attention_transient_bytes(
    d: Dims, batch: int, q_len: int, k_len: int, backend: str
) -> int:
    """Score matrices of one layer's no-grad attention (0 for flash/memory-efficient SDPA),
    plus the additive bf16 mask (B x S_q x S_k) and the fp32 q/k/v copies of the math path."""
    if backend == "sdpa":
        return 0
    elements = batch * d.heads * q_len * k_len
    extra = 2 * batch * q_len * k_len
    if backend == "math":
        extra += 4 * batch * (q_len * d.q_dim + k_len * (d.q_dim + d.kv_dim))
    return SCORE_BYTES[backend] * elements + extra


def batched_mm_experts_bytes(d: Dims, tokens: int) -> int:
    """transformers 5's batched_mm experts path (integrations/moe.py batched_mm_experts_forward):
    every routed (token, expert) pair gathers its expert's weights, gate_up_proj[expert_ids]
    (S x rows x h, rows = 2I gated or I) and, while those are still named, down_proj[expert_ids]
    (S x h x I), beside the repeated input (S x h) and the up projection's output (S x rows);
    S = tokens x top_k, 2 B each.  Measured (benchmarks/accuracy, FakeTensor): Qwen3-30B-A3B
    prefill of 4 x 2,048 tokens 576.47 GiB above the weights, this gives 576.4; gpt-oss-20b 8,192
    tokens 1,528 against 1,519 (+ its biases and clamped-SwiGLU temporaries)."""
    if not d.moe_layers:
        return 0
    s = tokens * d.top_k
    rows = (2 if d.experts_gated else 1) * d.moe_intermediate  # gate + up, or up alone
    return (
        2 * s * (rows * d.hidden + d.hidden * d.moe_intermediate + d.hidden + rows)
        + tokens * 8 * d.experts
    )


def eager_experts_bytes(d: Dims, tokens: int) -> int:
    """transformers 5's eager experts path (e.g. Qwen3MoeExperts.forward, no grad): a loop over
    the experts hit.  Alive through it: the one-hot expert mask, int64, tokens x top_k x
    (experts + 1) x 8 B; the output buffer (zeros_like, 2h per token); and for the expert in
    hand, per token routed to it: its gathered input (2h), gate_up (4I), act (2I) and their
    product (2I), and the int64 token and slot indices (16 B).  The loop holds one expert at a
    time, so the widest expert decides: with balanced routing ceil(tokens x top_k / experts)
    tokens -- the assumption this figure makes (a skewed router sends up to every token to one
    expert: tokens x (2h + 8I + 16) at most)."""
    if not d.moe_layers:
        return 0
    widest = -(-tokens * d.top_k // max(1, d.experts))
    inter = (2 if d.experts_gated else 1) * d.moe_intermediate  # gate_up's width
    pair = 2 * d.hidden + 2 * inter + 2 * inter + 16  # input, gate_up, act and product, indices
    return tokens * (8 * d.top_k * (d.experts + 1) + 2 * d.hidden) + widest * pair


def eager_experts_backward_bytes(d: Dims, grad_bytes: int, split: int = 1) -> int:
    """Training through transformers' eager experts loop: each expert reads its weights as
    ``gate_up_proj[e]`` / ``down_proj[e]``, so autograd's select_backward returns a full
    [experts, rows, h] gradient per expert, which is added to the one accumulated so far: two
    more copies of the layer's widest expert weight are alive at that moment, 2 x experts x h x
    rows x ``grad_bytes`` (rows = 2I gated) / ``split`` (the ranks the experts are split over).
    Measured on the real CPU (benchmarks/accuracy oplog, a 2-layer 32-expert Qwen3-MoE: the
    backward peak is the add of a [32, 768, 1024] bf16 gradient, 0.093 GiB above the same
    config under grouped_mm = 2 x 50.3 MB)."""
    if not d.moe_layers:
        return 0
    rows = (2 if d.experts_gated else 1) * d.moe_intermediate
    return ceil(2 * d.experts * d.hidden * rows * grad_bytes / split)


def inference_layer_transient_bytes(d: Dims, tokens: int, transformers: bool = True,
                                    experts: str = "grouped_mm") -> int:  # fmt: skip
    """No-grad forward of one layer, the widest moment (bytes beyond weights and KV cache).

    Gated MLP (SwiGLU/GeGLU, one-kernel activations): act(gate(x)), up(x) and their product
    coexist (3 x 2I per token) beside four h-wide tensors (4 x 2h): the model's input embeddings
    (a local name of the model's forward, alive through its loop over the layers), the layer's
    input (the loop variable, alive until the layer returns), the post-attention residual and
    its normed copy: 8h + 6I (the first layer's input is the embeddings themselves: 6h there;
    benchmarks/accuracy/oplog.py on a two-layer TinyLlama at 64 x 256 tokens: the second
    layer's MLP moment holds 67.1 MB = one B x S x h bf16 tensor more than the first's, beside
    its 16.8 MB of new KV).  Classic MLP: fc1 out and the activation output (2 x 2I) + 8h; tanh-GELU
    written as Python arithmetic (gelu_new, BLOOM's gelu) keeps fc1 out, 0.5*x, two chain
    temporaries and the result (5 x 2I) + 4h; GPT-2's gelu_new, measured, 4 x 2I + 10h.  MoE
    (grouped experts, transformers >= 5): the
    widest of two moments per routed (token, expert) pair — the activation (the sorted input
    2h, gate_up 4I, act 2I, product 2I: 2h + 8I) or, once those are freed, the un-permute (the
    sorted input, the expert output, its weighted copy and the un-permuted copy: 8h) — plus
    fp32 router logits and probabilities (8E) and 8h per token the block holds through its
    experts (measured: Qwen3-30B-A3B and Mixtral prefill peaks, where the residual stream, the
    normed input and the block's output buffers stay alive), 2h more for a shared expert's
    output (ERNIE-4.5: the peak at the un-permute, oplog).  A router whose top-k weights stay
    fp32 (DeepSeek-V2/V3, GLM-4.5) promotes the weighted and un-permuted copies to fp32
    (integrations/moe.py: proj_out * sample_weights, then [inv_perm]): 4h more per pair.
    Measured against benchmarks/accuracy within 0.3 % for these families (ERNIE-4.5 +2.1 %
    when every pair's activation and output were counted together).

    ``transformers`` False: a serving engine's own model code (vLLM, SGLang: their profile
    run), whose loop holds no input embeddings and whose fused MoE kernels keep no per-pair
    copies of this kind: 6h + 6I for a gated MLP and k x (6h + 8I) (+ 4h for an fp32 router)
    per routed pair, the sums their start-up logs were checked against
    (benchmarks/engines/compare.py)."""
    moe = 0
    if d.moe_layers:
        fp32 = 4 * d.hidden if d.router_fp32 else 0
        if transformers and experts == "batched_mm":
            moe = batched_mm_experts_bytes(d, tokens)
        elif transformers and experts == "eager":
            base = 8 * d.hidden + (2 * d.hidden if d.shared_intermediate else 0)
            moe = tokens * (base + 8 * d.experts) + eager_experts_bytes(d, tokens)
        elif transformers:
            act = 2 * d.hidden + 8 * d.moe_intermediate
            out = 8 * d.hidden + fp32
            base = 8 * d.hidden + (2 * d.hidden if d.shared_intermediate else 0)
            moe = tokens * (base + d.top_k * max(act, out) + 8 * d.experts)
        else:
            pair = 6 * d.hidden + 8 * d.moe_intermediate + fp32
            moe = tokens * (d.top_k * pair + 8 * d.experts)
        if not d.intermediate:
            return moe
    inter = d.intermediate or d.moe_intermediate
    if d.gated:
        dense = tokens * ((8 if transformers else 6) * d.hidden + 6 * inter)
    elif d.activation == "gelu_new":
        # GPT-2's block (the one family in the data with transformers' NewGELUActivation):
        # 0.5*x*(1+tanh(c*(x+0.044715*x**3))) is widest at 0.044715*pow, with fc out, 0.5*x and
        # pow alive (4 x 2I), beside five h-wide tensors: the model's inputs_embeds, the
        # layer's input, c_proj's attention output (still a local of the block), the residual
        # sum and ln_2's output (benchmarks/accuracy/oplog.py, gpt2 prefill 8 x 1000 tokens,
        # two layers: the second layer's MLP moment)
        dense = tokens * (10 * d.hidden + 8 * inter)
    elif d.activation in PY_TANH_GELU:
        dense = tokens * (4 * d.hidden + 10 * inter)
    else:
        dense = tokens * (8 * d.hidden + 4 * inter)
    return max(dense, moe)


def inference_logits_bytes(d: Dims, rows: int) -> int:
    """lm_head output for ``rows`` positions: bf16 logits + the fp32 copy generate() takes."""
    return rows * d.vocab * 6


# transformers' pure-torch chunked gated delta rule (torch_chunk_gated_delta_rule, used when
# flash-linear-attention is not installed), chunk 64
GDN_CHUNK = 64


def gated_deltanet_prefill_bytes_per_token(d: Dims, kernels: str = "torch") -> int:
    """Widest moment of a Gated DeltaNet layer's no-grad prefill on transformers' pure-torch path
    (Qwen3NextGatedDeltaNet.forward + torch_chunk_gated_delta_rule, transformers 5.24), per
    token, the live tensors read off the fake-tensor tracker at that moment (Qwen3-Next):
    11 fp32 head x head-dim tensors (q, k repeated to the value heads, v, k·beta, v·beta, the
    decayed k·beta, the UT solutions for v and k, the output buffer and the rebound copies),
    3 fp32 head x chunk tensors (pairwise decay, UT system, intra-chunk attention), the bf16 z
    gate and fused q/k/v/z projection, 3 hidden-sized bf16 tensors (residual, normed input,
    their sum) and the per-head gates and decays (10 fp32 + 5 bf16 per head).

    ``kernels="fused"`` (fla's chunk_gated_delta_rule and causal-conv1d installed), derived from
    their source, not measured (fla bc3b101d chunk_gated_delta_rule_fwd, widest inside
    chunk_fwd_o): the contiguous copies of q, k, v, the l2-normalised q and k and their rstd,
    the cumulative gate, A = (I + A)^-1, w, u, the per-chunk states h (bf16, HV dk dv / C per
    token), v_new and the output: 2 [4 H dk + HV (3 dv + dk + C + dk dv / C) + HV dv] + 4 (2H +
    HV); beside the projection (2 x in_proj_qkvz), the concatenated q/k/v and the conv output (2
    x 2 conv), the z gate, 3 hidden-sized tensors and the gates (50 B per value head)."""
    if not d.linear_layers or not d.lin_heads:
        return 0
    if kernels == "fused":
        hv, dk, dv, c = d.lin_heads, d.lin_dk, d.lin_dv, GDN_CHUNK
        hk, k_heads, conv = _gdn_widths(d)
        kernel = (2 * (4 * hk + hv * (4 * dv + dk + c) + hv * dk * dv // c)
                  + 4 * (2 * k_heads + hv))  # fmt: skip
        return kernel + 2 * d.lin_proj + 4 * conv + 2 * hv * dv + 6 * d.hidden + 50 * hv
    h, dkv = d.lin_heads, (d.lin_dk + d.lin_dv) / 2
    return int(11 * 4 * h * dkv + 3 * 4 * h * GDN_CHUNK + 2 * h * d.lin_dv + 2 * d.lin_proj
               + 3 * 2 * d.hidden + 10 * 4 * h + 5 * 2 * h)  # fmt: skip


def mamba2_prefill_bytes_per_token(d: Dims, kernels: str = "torch") -> int:
    """Widest moment of a Mamba-2 layer's no-grad prefill on transformers' pure-torch path
    (NemotronHMamba2Mixer.torch_forward: the chunked SSD scan, mamba_ssm not installed),
    transformers 5.24, per token, the live tensors read off the fake-tensor tracker at that
    moment (Nemotron-H): fp32 B, C (repeated from the groups to the H heads) and B·decay, 3 x
    H x state; the segment-sum decays L, G = C·B, M = G·L and a segment-sum temporary, 4 x H x
    chunk; x, D·x, x·dt, the diagonal output and the chunk states, 5 x H x head_dim; the bf16
    in_proj output (intermediate + conv_dim + H), conv output (conv_dim), gate and x (2 x
    intermediate + H); 3 hidden-sized bf16 tensors; ~62 B per head of gates and decays.

    ``kernels="fused"`` (mamba_ssm's mamba_chunk_scan_combined and causal-conv1d installed),
    derived from their source, not measured (mamba e9594ce1, _mamba_chunk_scan_combined_fwd):
    beside the in_proj output and the conv output, 3 hidden-sized tensors, the wider of the
    state passing (dt and dA_cumsum fp32, 8H; the chunk states in fp32 and bf16, 6 H x head_dim
    x state / chunk) and the gated RMSNorm after it (torch: the scan output 2 x intermediate,
    its fp32 copy, SiLU(gate) in fp32 and their product, 3 x 4 x intermediate)."""
    if not d.mamba_layers:
        return 0
    if kernels == "fused":
        h, p, n, chunk = d.m_heads, d.m_dim, d.m_state, d.m_chunk
        inter, conv = d.m_inter, d.m_conv
        common = 2 * (inter + conv + h) + 2 * conv + 3 * 2 * d.hidden
        return common + max(8 * h + 6 * h * p * n // chunk, 14 * inter)
    h, p, n, chunk = d.m_heads, d.m_dim, d.m_state, d.m_chunk
    inter, conv = d.m_inter, d.m_conv
    return (4 * (3 * h * n + 4 * h * chunk + 5 * h * p) + 2 * (inter + conv + h) + 2 * conv
            + 4 * inter + 2 * h + 3 * 2 * d.hidden + 62 * h)  # fmt: skip


def sliding_window_sdpa_prefill_bytes(d: Dims, batch: int, prompt: int) -> int:
    """A prompt longer than a sliding window, through SDPA: SDPA's is_causal cannot express the
    window, so transformers builds the 4D mask (masking_utils sdpa_mask: bool, 1 B per
    query-key pair) and SDPA converts it to an additive mask of the query dtype (2 B) before
    its kernel; at that call the layer holds 7 hidden-sized bf16 tensors per token (residual,
    normed input, q before and after rotary, its contiguous copy, the output and its
    transpose).  Read off the tracker for Mistral-7B at 1 x 32,760 tokens (window 4,096):
    3 S^2 B + 14 h per token.  The bool mask is built once per forward and lives through every
    layer (at 2 x 16,384 the MLP moment holds it: B S^2 bytes beside the MLP's transient)."""
    return batch * prompt * prompt * 3 + 14 * d.hidden * batch * prompt


def inference_prefill_transient_bytes(d: Dims, batch: int, prompt: int, backend: str,
                                      experts: str = "grouped_mm", kernels: str = "torch") -> int:  # fmt: skip
    """Widest moment of one layer's no-grad prefill of ``batch`` x ``prompt`` tokens: the larger
    of ``inference_layer_transient_bytes(B x prompt)`` and, for a backend that materialises its
    scores, ``inference_attention_transient_bytes`` + B x prompt x (6h + 4q) (calibrated against
    measured peaks, commit de8f874), and a Gated DeltaNet / Mamba-2 layer's on ``kernels``'
    path."""
    mlp = inference_layer_transient_bytes(d, batch * prompt, experts=experts)
    attention = inference_attention_transient_bytes(d, batch, prompt, prompt, backend)
    if attention:
        attention += batch * prompt * (6 * d.hidden + 4 * d.q_dim)
    linear = batch * prompt * max(gated_deltanet_prefill_bytes_per_token(d, kernels),
                                  mamba2_prefill_bytes_per_token(d, kernels))  # fmt: skip
    return max(mlp, attention, linear, batch * prompt * qk_norm_moment_bytes_per_token(d))


def qk_norm_moment_bytes_per_token(d: Dims) -> int:
    """A q/k-norm family's (Qwen3) RMSNorm on q in fp32, no grad: q_norm(q_proj(x)) holds q_proj's
    output (2q), its fp32 copy (4q) and the normalised product (4q) beside three hidden-sized
    tensors (the model's input embeddings, the layer's input and its normed copy): 6h + 10q
    (oplog.py, real CPU, a 2-layer Qwen3-MoE at hidden 1,024 and 2 x 2,048 tokens: the peak is at
    the second layer's q_norm multiply, above its eager experts' loop)."""
    return 6 * d.hidden + 10 * d.q_dim if d.qk_norm else 0
