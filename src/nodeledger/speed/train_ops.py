"""Training micro-batch time from the operator model: the same kernel tables as serving
(speed/kernels.py, speed/operators.py), the forward, the backward and the recomputation as the
kernels they run, on one card of the slowest pipeline stage.

Per micro-batch of M = micro_batch x seq tokens, on one card of a TP group (the stage holding
ceil(layers / pp) layers and the LM head: a step is as slow as its slowest stage):

  GEMMs       every linear weight of the config as the engines fuse it (operators.gemms, split
              by TP): the forward (M x k) @ (k x n), and in backward the input gradient
              (M x n) @ (n x k) and the weight gradient (n x M) @ (M x k): each timed as its own
              shape in the table (a frozen LoRA base computes no weight gradient; the adapters'
              own GEMMs are r wide, counted as their FLOPs at the table's small-N rate).
  experts     routed experts run as one grouped kernel: the E experts each take M x top_k / E
              rows (the benchmarks force-balance the routing), at the rate a GEMM of that many
              rows reaches in the table; backward the same two gradients.  With expert
              parallelism (--ep) a card runs E / ep whole experts on the M x top_k rows routed
              to it (balanced: as many as it sends), M x top_k x ep / E rows each (the
              all-to-alls that move them are train.py's).
  attention   causal forward + backward at the rate the table's fused SDPA forward + backward
              reaches at that depth and parallelism (FLOPs 3.5 x the forward, the table's own
              convention; flash-attention's backward recomputes the scores).
  elementwise norms, residual adds, rotary, the gated activation: bytes per token per layer
              at the card's copy rate, backward twice the forward's bytes.  Eager PyTorch runs
              RMSNorm in fp32 as 7 kernels (HF modeling_llama.py / torchtitan RMSNorm:
              x.float(), pow, mean, rsqrt, mul, type_as, weight mul): 36 B per element; a fused
              stack (Megatron + Transformer Engine, or torch.compile) reads and writes each
              tensor once: 4 B per element.
  LM head     the logits GEMM (forward, input and weight gradients) and the cross-entropy on
              fp32 logits: logits.float() (2 + 4 B), log_softmax (4 + 4), its backward (4 + 4),
              the cast back (4 + 2): 28 B per logit.
  recompute   full: the forward of every layer again in backward; selective: the attention
              forward again (Korthikanti et al. 2022, 5; the ledger saves the same);
              selective_op (torchtitan's op-level checkpointing, ledger/activations.py
              op_sac_saved): the linears whose outputs it does not keep (their share of the
              layer's weight FLOPs, at the forward GEMMs' time) and every elementwise forward
              (and an eager attention's forward) again.
  fp8         (--fp8: Transformer Engine / torchao float8 linears): the three GEMMs from the
              table's fp8 rows, and per GEMM the quantisation of its input and, in backward, of
              its output gradient: amax read (2 B), cast (2 + 1 B), transposed copy (1 + 1 B):
              7 B per element (current scaling; Hopper's fp8 GEMM takes both operands K-major).
  host        eager PyTorch dispatches every call while the card runs the previous ones: the
              micro-batch takes the longer of the card's time and calls x the table's dispatch
              (a small model at a small micro-batch waits on the host).

The optimizer step (per step, not per micro-batch) is memory-bound: AdamW reads the parameter,
its gradient and two states and writes the parameter and the states (+ an fp32 master copy
where the layout keeps one), at the card's copy rate.
"""

from __future__ import annotations

import math

from nodeledger.ledger import frameworks, model_state
from nodeledger.ledger.activations import op_sac_saved
from nodeledger.ledger.dims import Dims, dims_of
from nodeledger.ledger.jobs import TrainJob
from nodeledger.model.spec import ModelSpec
from nodeledger.speed import operators as O
from nodeledger.speed import work as W
from nodeledger.speed.kernels import KERNEL_FLOOR_S, REF_HEAD_DIM

# elementwise bytes per element (read + write) of one forward pass, eager vs fused
EAGER_NORM_B, FUSED_NORM_B = 36, 4  # RMSNorm in fp32, 7 kernels | one fused kernel
RESIDUAL_B = 6  # read 2 x 2 B, write 2 B
EAGER_ROPE_B, FUSED_ROPE_B = 20, 4  # mul cos, rotate_half (slice, neg, cat), mul sin, add | once
EAGER_ACT_B, FUSED_ACT_B = 10, 6  # silu(gate) then x up | SwiGLU in one kernel
BACKWARD_BYTES = 2.0  # an elementwise backward reads the saved input and the incoming gradient
CE_BYTES_PER_LOGIT = 28
FP8_CAST_B = 7
ADAPTER_FLOP_RATE_M = 64  # the LoRA adapters' r-wide GEMMs run at the table's M=64 rate
EAGER_SOURCE = ("eager elementwise: RMSNorm in fp32 as 7 kernels (36 B per element; HF "
                "modeling_llama.py, torchtitan RMSNorm), rotary 20 B, SiLU x up 10 B")  # fmt: skip
FUSED_SOURCE = ("fused elementwise (Transformer Engine / torch.compile): each tensor read and "
                "written once")  # fmt: skip
FUSED_FRAMEWORKS = ("megatron",)  # Megatron-LM runs Transformer Engine's fused kernels


def fused(job: TrainJob) -> bool:
    """Whether the job's elementwise work runs fused (--fused-kernels: torch.compile, Transformer
    Engine or Liger layers), or a framework whose layers are fused kernels (Megatron with
    Transformer Engine)."""
    return job.fused_kernels or job.framework in FUSED_FRAMEWORKS


def _elementwise_bytes_per_token(spec: ModelSpec, tp: int, inter: float, is_fused: bool) -> float:
    """Forward bytes per token of one layer's elementwise kernels on one card."""
    h = spec.hidden_size
    heads = spec.num_attention_heads
    kv = max((a.kv_heads for a in spec.attention if a.kind != "linear"), default=heads)
    qk = (heads + kv) * REF_HEAD_DIM / tp
    if is_fused:
        return 2 * FUSED_NORM_B * h + 2 * RESIDUAL_B * h + FUSED_ROPE_B * qk + FUSED_ACT_B * inter
    return 2 * EAGER_NORM_B * h + 2 * RESIDUAL_B * h + EAGER_ROPE_B * qk + EAGER_ACT_B * inter


def op_sac_recomputed_share(d: Dims) -> float:
    """The share of a dense layer's weight FLOPs that op-level checkpointing recomputes: the
    linears whose outputs it does not keep (out x in each)."""
    mats = d.layer_matmuls
    total = sum(o * i for o, i, _ in mats)
    redo = sum(o * i for (o, i, _), keep in zip(mats, op_sac_saved(d), strict=True) if not keep)
    return redo / total if total else 0.0


def _copy_s(ck: O.CardKernels, nbytes: float) -> float:
    return ck.scale(ck.table.copy_s(nbytes) or 0.0, 0.0, nbytes) if nbytes > 0 else 0.0


def _g(ck, m, n, k, kind, wb) -> float:
    return max(KERNEL_FLOOR_S, O.gemm_kernel_s(ck, m, n, k, kind, wb))


def micro_batch_seconds(spec: ModelSpec, job: TrainJob, ck: O.CardKernels) -> dict:
    # long: one micro-batch, one operator kind after another into parts, sharing m, frac, recompute
    """One micro-batch's forward + backward on one card of the slowest pipeline stage: seconds
    per operator kind, the host's dispatch, and the two together (module docstring)."""
    tp, pp = job.parallel.tp, job.parallel.pp
    m = job.micro_batch * job.seq
    layers = spec.num_layers
    here = math.ceil(layers / pp)
    frac = here / layers
    scheme = W.scheme(spec, "fp8") if job.fp8 else None
    all_g = O.gemms(spec, tp, scheme)
    dense = [g for g in all_g if not g.expert and not g.name.startswith("lm_head")]
    ep = job.ep
    # under EP the experts are whole on their card (expert tensor parallel 1)
    experts = [g for g in (O.gemms(spec, 1, scheme) if ep > 1 else all_g) if g.expert]
    frozen = job.is_lora
    parts = {"gemm": 0.0, "experts": 0.0, "attention": 0.0, "elementwise": 0.0, "lm_head": 0.0,
             "fp8_casts": 0.0, "recompute": 0.0}  # fmt: skip
    recompute = job.checkpointing
    casts = 0.0
    fwd_gemm = 0.0
    # fp8 weights: Transformer Engine (Megatron) casts them once per step and keeps them across
    # the micro-batches; torchao float8 casts them at every call
    wcast = job.grad_accum if job.framework == "megatron" else 1
    for g in dense:
        n_l = g.layers * frac
        fwd = _g(ck, m, g.n, g.k, g.kind, g.wbytes)
        dgrad = _g(ck, m, g.k, g.n, g.kind, 2.0)
        wgrad = 0.0 if frozen else _g(ck, g.n, g.k, m, g.kind, 2.0)
        parts["gemm"] += n_l * (fwd + dgrad + wgrad)
        fwd_gemm += n_l * fwd
        if recompute == "full":
            parts["recompute"] += n_l * fwd
        if g.kind == "fp8":
            casts += n_l * FP8_CAST_B * (m * g.k + m * g.n + g.n * g.k / wcast)
    moe = spec.moe
    if moe is not None and experts:
        local = moe.num_experts / ep
        # under EP with TP, each TP rank routes its 1/tp share of the tokens (Megatron-Core
        # requires sequence parallelism for MoE with TP: the dispatcher sees the shard)
        routed = m * moe.top_k / (tp if ep > 1 else 1)
        rows = routed / local  # force-balanced routing
        for g in experts:
            n_l = g.layers * frac
            fwd = _g(ck, rows, g.n, g.k, g.kind, g.wbytes)
            dgrad = _g(ck, rows, g.k, g.n, g.kind, 2.0)
            wgrad = 0.0 if frozen else _g(ck, g.n, g.k, rows, g.kind, 2.0)
            parts["experts"] += n_l * local * (fwd + dgrad + wgrad)
            if recompute == "full":
                parts["recompute"] += n_l * local * fwd
            if g.kind == "fp8":
                casts += n_l * FP8_CAST_B * (routed * (g.k + g.n) + local * g.n * g.k / wcast)
    if frozen:  # the adapters: A (r x in) and B (out x r) per target, 3 GEMMs each way
        adapter_flops = 6.0 * m * model_state.trainable_params(spec, job) * frac / tp
        rate = 2 * ADAPTER_FLOP_RATE_M * 4096 * 4096 / O.gemm_kernel_s(
            ck, ADAPTER_FLOP_RATE_M, 4096, 4096)  # fmt: skip
        parts["gemm"] += adapter_flops / rate
    # attention: causal forward + backward at the table's rate for this depth
    attn_fwd = W.attention_flops_prompt(spec, job.seq) * job.micro_batch * frac / tp
    rows = job.micro_batch * max(1, spec.num_attention_heads // tp)
    if attn_fwd > 0:
        both = ck.table.attn_prefill_s(3.5 * attn_fwd, job.seq, rows, backward=True)
        fwd = ck.table.attn_prefill_s(attn_fwd, job.seq, rows)
        if both is not None and fwd is not None:
            parts["attention"] = ck.scale(both, 3.5 * attn_fwd, 0.0)
            if recompute in ("full", "selective") or (
                recompute == "selective_op" and job.attention != "sdpa"
            ):
                parts["recompute"] += ck.scale(fwd, attn_fwd, 0.0)
    # elementwise: the active intermediate width per token (dense gate/up, or top_k experts')
    inter = sum(g.n / 2 * g.layers for g in dense if g.name == "gate_up")
    if moe is not None:
        inter += sum(g.n / 2 * g.layers * moe.top_k for g in experts if g.name == "gate_up")
    inter /= max(1, layers)
    is_fused = fused(job)
    elem_fwd = m * here * _elementwise_bytes_per_token(spec, tp, inter, is_fused)
    parts["elementwise"] = _copy_s(ck, elem_fwd * (1 + BACKWARD_BYTES))
    if recompute in ("full", "selective_op"):
        parts["recompute"] += _copy_s(ck, elem_fwd)
    if recompute == "selective_op":
        parts["recompute"] += fwd_gemm * op_sac_recomputed_share(dims_of(spec))
    # the LM head on the last stage: logits GEMM both ways and the fp32 cross-entropy
    vocab = max(1, spec.vocab_size // tp)
    h = spec.hidden_size
    parts["lm_head"] = (_g(ck, m, vocab, h, "bf16", 2.0) + _g(ck, m, h, vocab, "bf16", 2.0)
                        + (0.0 if frozen else _g(ck, vocab, h, m, "bf16", 2.0))
                        + _copy_s(ck, m * vocab * CE_BYTES_PER_LOGIT))  # fmt: skip
    parts["fp8_casts"] = _copy_s(ck, casts)
    gpu = sum(parts.values())
    # host: every call dispatched (eager), forward once, backward about twice as many calls
    per_layer = (O.ENGINE_CALLS_PER_LAYER if is_fused else O.EAGER_CALLS_PER_LAYER) + len(
        {g.name for g in dense}) + 1  # fmt: skip
    fwd_calls = here * per_layer + 3
    calls = fwd_calls * (3 + (1 if recompute in ("full", "selective_op") else 0))
    dispatch = calls * ck.table.dispatch_s
    return {
        "seconds": max(gpu, dispatch),
        "gpu_s": gpu,
        "dispatch_s": dispatch,
        "host_bound": dispatch > gpu,
        "parts": parts,
        "calls": calls,
        "elementwise": FUSED_SOURCE if is_fused else EAGER_SOURCE,
        "source": ck.source,
    }


def optimizer_seconds(spec: ModelSpec, job: TrainJob, ck: O.CardKernels) -> float:
    """One optimizer step on one card: memory-bound (module docstring).  AdamW / AdamW 8-bit
    touch two states, SGD (momentum) one, Adafactor its factored rows and columns (~none)."""
    lay = frameworks.layout(job)
    p = job.parallel
    if job.offload in ("optimizer", "params"):
        return 0.0  # the step runs on the host's CPU Adam (train.py says so)
    if job.ep > 1:
        params = model_state.ep_card_params(spec, job, "optimizer")
    else:
        params = model_state.trainable_params(spec, job) / (p.tp * p.pp)
        if frameworks.STAGE[job.shard] >= 1:
            params /= p.dp
    states = {"adamw": 2, "adamw8bit": 2, "sgd": 1, "adafactor": 0}.get(job.optimizer, 2)
    state_elem = 1 if job.optimizer == "adamw8bit" else lay.state_elem
    per = (2 * lay.param + lay.grad + 2 * states * state_elem
           + (8 if lay.master else 0))  # fmt: skip
    return _copy_s(ck, params * per)
