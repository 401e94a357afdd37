"""Operator-level step time: one engine step (a prefill chunk, a decode step, a mixed batch) as
the sum over layers of its operators, each timed from a kernel table (speed/kernels.py).

A step of ``tokens`` = prefill tokens + decoding sequences, on one card of a TP group:
  * GEMMs: every linear weight of the config (model/spec.py tensors), q/k/v and gate/up fused as
    engines load them (vLLM QKVParallelLinear, MergedColumnParallelLinear), column-parallel ones
    split in N and row-parallel ones (o_proj, down_proj) in K across ``tp``; M = the step's tokens.
  * routed experts (MoE): the experts the step touches (speed/terms.py experts_touched), each a
    GEMM of its share of the routed rows (tokens x top_k / touched), run as one grouped kernel
    in an engine; in eager PyTorch (transformers) each touched expert is its own call.
  * attention: decode reads each sequence's K and V at its context (the table's decode curve);
    a prefill chunk does its causal FLOPs at the rate the table shows for that depth.
  * memory-bound operators (norms, rotary, activation, residual adds): the bytes they move at
    the card's copy rate.
  * the LM head for the rows that sample, and 2 all-reduces per layer at TP > 1 (the caller
    adds those: speed/serving.py, from the link figures).
  * host time: eager PyTorch dispatches every call (``dispatch_s`` from the table, per call
    counted below); in a CUDA / HIP graph replay nothing is dispatched per kernel and the
    engine's own per-step time is the caller's (its engine plug-in).
Every figure says whether it came from a table measured on this card, a table of another card
moved through the two datasheet rooflines, or is unknown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nodeledger.model.spec import ModelSpec
from nodeledger.speed import hardware as H
from nodeledger.speed import terms as T
from nodeledger.speed import work as W
from nodeledger.speed.kernels import REF_HEAD_DIM, KernelTable, table_for, table_from_rows

ROW_PARALLEL = re.compile(r"(o_proj|down_proj|out_proj|dense_4h_to_h|\.dense\.|wo|w2|c_proj)")
FUSE = (("qkv", re.compile(r"\.(q_proj|k_proj|v_proj)\.")),
        ("gate_up", re.compile(r"\.(gate_proj|up_proj|w1|w3)\.")))  # fmt: skip
# transformers' eager decoder layer, counted from modeling_llama.py (4.57): RMSNorm 7 calls
# (to fp32, pow, mean, add, rsqrt, mul, to + weight mul) x 2, q/k/v/o 4, rotary 12 (q and k:
# mul cos, rotate_half slice/neg/cat, mul sin, add), cache update 2, SDPA 1, residual adds 2,
# gate/up/act/mul/down 5: calls per layer beside the matmuls already counted one each
EAGER_CALLS_PER_LAYER = 14 + 12 + 2 + 2 + 2  # + one per GEMM and attention call (counted apart)
# a serving engine's decoder layer (vLLM model_executor/models/llama.py LlamaDecoderLayer; SGLang
# the same layout): fused add + RMSNorm, rotary, fused add + RMSNorm, SiluAndMul, beside the GEMMs
# and the attention call
ENGINE_CALLS_PER_LAYER = 4
EAGER_SOURCE = (
    "transformers modeling_llama.py (4.57) decoder layer, calls counted: RMSNorm 7 x 2, "
    "rotary 12, cache update 2, SDPA 1, residual 2, act + mul 2, + one per matmul"
)


@dataclass(frozen=True)
class Gemm:
    name: str
    n: int  # output features on one card
    k: int  # input features on one card
    layers: int  # how many layers run it
    expert: bool = False  # a routed expert (per layer: one of num_experts)


def gemms(spec: ModelSpec, tp: int = 1) -> list[Gemm]:
    """The step's matmuls on one card of a TP group, fused as engines load them."""
    groups: dict[tuple, list] = {}
    for t in spec.tensors:
        if t.kind != "linear" or t.part in ("vision",) or len(t.shape) != 2:
            continue
        n, k = t.shape
        expert = t.part == "routed_experts"
        layers = t.count
        if expert and spec.moe is not None:
            layers = spec.moe.moe_layers
        fused = next((name for name, rx in FUSE if rx.search("." + t.name)), None)
        key = (t.module, fused or t.name, k, layers, expert)
        groups.setdefault(key, []).append((n, t.name))
    out = []
    for (_module, name, k, layers, expert), parts in groups.items():
        n = sum(p[0] for p in parts)
        row = bool(ROW_PARALLEL.search(parts[0][1]))
        if tp > 1 and name != "router":
            n, k = (n, max(1, k // tp)) if row else (max(1, n // tp), k)
        out.append(Gemm(name, n, k, layers, expert))
    return out


@dataclass(frozen=True)
class CardKernels:
    """A kernel table for one card: measured on it, or another card's moved through the two
    datasheet rooflines (``ratio_compute`` / ``ratio_memory`` = table card / this card)."""

    table: KernelTable
    source: str
    ratio_compute: float = 1.0
    ratio_memory: float = 1.0

    def scale(self, t: float, flops: float, nbytes: float) -> float:
        """A time on the table's card as a time on this one: the measured efficiency at that
        shape kept, the roofline moved (compute- or memory-bound, whichever the shape is)."""
        if self.ratio_compute == 1.0 and self.ratio_memory == 1.0:
            return t
        # which bound the shape sits at on the table's card decides the ratio that moves it
        f_time = flops / max(self.table.peak_tflops or 1.0, 1e-9) / 1e12
        b_time = nbytes / max(self.table.stream_gbps or 1.0, 1e-9) / 1e9
        return t * (self.ratio_compute if f_time >= b_time else self.ratio_memory)


def card_kernels(product: str | None, bf16_tflops: float | None,
                 memory_gbps: float | None, measured: list[dict] | None = None) -> CardKernels | None:  # fmt: skip
    """The kernel table the operator model reads for a card, in this order of trust: measured
    on this box (``measured``: the profile's rows, from ``bench --kernels``), a table shipped for
    the card model, the H200's moved through both cards' figures (None when this card's peak or
    bandwidth is unknown: nothing to move it by)."""
    if measured:
        mine = table_from_rows(measured, f"the profile's kernels for {product}")
        return CardKernels(mine, f"kernel table measured on this box: {mine.source}")
    own = table_for(product)
    if own is not None:
        return CardKernels(own, f"kernel table measured on {own.card}: {own.source}")
    ref = table_for("NVIDIA H200")
    ref_card = H.card("NVIDIA H200") or {}
    if ref is None or not bf16_tflops or not memory_gbps:
        return None
    rc = (ref_card.get("bf16_dense_tflops") or 0) / bf16_tflops
    rm = (ref_card.get("memory_bandwidth_gbps") or 0) / memory_gbps
    if not rc or not rm:
        return None
    how = "datasheet"
    mine = H.card(product) or {}
    mamf = H._num(mine.get("mamf_bf16_tflops"))
    if mamf and ref.peak_tflops:
        # the card's measured best matmul rate (MAMF) against the table's own best: a card whose
        # kernels reach less of their datasheet peak (MI300X: 51 %) is not credited the H200's 81 %
        rc, how = ref.peak_tflops / mamf, f"MAMF {mamf:g} TFLOPS ({mine.get('mamf_source')})"
    return CardKernels(ref, f"{ref.card} kernel table moved to this card (compute x {1 / rc:.2f} "
                       f"by {how}; memory x {1 / rm:.2f} by the datasheets' bandwidth)", rc, rm)  # fmt: skip


def _table_dtype(ck: CardKernels, dtype: str) -> tuple[str, int]:
    """(the table's GEMM kind for weights of ``dtype``, bytes per weight): fp8 GEMMs where the
    table has them, else bf16."""
    return ("fp8", 1) if dtype == "fp8" and "fp8" in ck.table.gemm else ("bf16", 2)


def _gemm(ck: CardKernels, m: float, g: Gemm, dtype: str) -> float:
    """The kernel's time on the card (no host dispatch: that is counted per call apart)."""
    table_dtype, wb = _table_dtype(ck, dtype)
    t = ck.table.gemm_s(m, g.n, g.k, table_dtype, graphs=True)
    return ck.scale(t, 2 * m * g.n * g.k, g.n * g.k * wb + 2 * m * (g.n + g.k))


def round_128th(x: float) -> int:
    """``x`` rounded down to a step of 1/128 of itself (exact up to 256): a memo key for
    contexts, within ~1 % of the figure it stands for."""
    c = int(x)
    if c <= 256:
        return c
    step = c >> 7
    return c // step * step


class OpPlan:
    """The step model of one replica (model, card kernels, TP, dtypes), with the per-M matmul
    times and per-context KV bytes memoised: the simulator asks for thousands of steps."""

    def __init__(self, spec: ModelSpec, ck: CardKernels, tp: int, dtype: str, kv_dtype: str):
        self.spec, self.ck, self.tp, self.dtype, self.kv_dtype = spec, ck, tp, dtype, kv_dtype
        all_g = gemms(spec, tp)
        self.dense = [g for g in all_g if not g.expert and not g.name.startswith("lm_head")]
        self.experts = [g for g in all_g if g.expert]
        self.n_attn = max(1, len([a for a in spec.attention if a.kind != "linear"]))
        self.kv_split = max(1, min(tp, max((a.kv_heads for a in spec.attention), default=1)))
        h = spec.hidden_size
        inter = sum(g.n for g in self.dense if g.name == "gate_up") / 2
        # memory-bound operators: 2 norms, 2 residual adds (read 2, write 1), rotary on q and k,
        # the activation (read gate and up, write one): bytes per token per layer on one card
        self.elem = 2 * (2 * 2 * h + 2 * 3 * h + 2 * spec.num_attention_heads * REF_HEAD_DIM / tp
                         + 3 * inter)  # fmt: skip
        self.head = Gemm("lm_head", max(1, spec.vocab_size // tp), h, 1)
        self.dense_calls = sum(g.layers for g in self.dense)
        self._mm: dict[float, tuple[float, int, float, float]] = {}
        self._kv: dict[int, float] = {}

    def matmuls(self, m: float) -> tuple[float, int, float, float]:
        """(dense GEMM seconds, their calls, expert seconds, touched experts x layers) at M."""
        hit = self._mm.get(m)
        if hit is not None:
            return hit
        ck, dtype = self.ck, self.dtype
        dense = sum(g.layers * _gemm(ck, m, g, dtype) for g in self.dense)
        calls = self.dense_calls
        experts = touched_layers = 0.0
        moe = self.spec.moe
        touched = T.experts_touched(moe.num_experts, moe.top_k, m) if moe and m else 0.0
        table_dtype, wb = _table_dtype(ck, dtype)
        for g in self.experts if touched else ():
            # one grouped kernel over the touched experts (vLLM fused_moe, SGLang): it streams
            # their weights once and multiplies each expert's rows at the rate a dense GEMM of
            # that many rows reaches (the table's small-M efficiency, not the large-GEMM peak)
            rows = m * moe.top_k / touched
            wbytes = touched * g.n * g.k * wb
            base = max(rows, 64.0)
            rate = 2 * base * g.n * g.k / ck.table.gemm_s(base, g.n, g.k, table_dtype, graphs=True)
            flops = 2 * m * moe.top_k * g.n * g.k
            t = max(wbytes / ((ck.table.stream_gbps or 1e3) * 1e9), flops / rate)
            experts += g.layers * ck.scale(t, flops, wbytes)
            touched_layers += g.layers * touched
        if len(self._mm) > 100_000:
            self._mm.clear()
        self._mm[m] = out = (dense, calls, experts, touched_layers)
        return out

    def kv_bytes(self, ctx: float) -> float:
        """KV bytes of one sequence of ``ctx`` tokens (all layers, whole replica), memoised on
        the context rounded to 1/128 of itself."""
        key = round_128th(ctx)
        v = self._kv.get(key)
        if v is None:
            if len(self._kv) > 100_000:
                self._kv.clear()
            v = self._kv[key] = W.kv_bytes_per_sequence(self.spec, key, self.kv_dtype)
        return v

    def step(self, *, prefill_tokens: float = 0.0, prefill_seqs: float = 0.0,
             prefill_ctx: float = 0.0, decode_seqs: float = 0.0, decode_ctx: float = 0.0,
             graphs: bool = True, calls_per_layer: int = EAGER_CALLS_PER_LAYER,
             expert_loop: bool = True) -> dict:  # fmt: skip
        """``graphs``: replayed from a graph (no host dispatch); else every call is dispatched,
        ``calls_per_layer`` of them beside the GEMMs and attention (transformers' unfused layer
        by default, ENGINE_CALLS_PER_LAYER for a serving engine's fused one).  ``expert_loop``:
        routed experts run one call each (transformers' eager MoE), not as one grouped kernel
        (an engine's fused MoE, graphs or not)."""
        spec, ck, tp = self.spec, self.ck, self.tp
        m = prefill_tokens + decode_seqs
        parts = {"gemm": 0.0, "experts": 0.0, "attention": 0.0, "elementwise": 0.0,
                 "lm_head": 0.0, "dispatch": 0.0}  # fmt: skip
        dense, calls, experts, touched_layers = self.matmuls(m)
        parts["gemm"], parts["experts"] = dense, experts
        if not graphs and expert_loop:  # transformers' eager MoE: a call per touched expert
            calls += round(touched_layers)
        # attention: decode reads K and V of each sequence; a prefill chunk its causal FLOPs
        n_attn = self.n_attn
        if decode_seqs:
            per_layer = decode_seqs * self.kv_bytes(decode_ctx) / n_attn / self.kv_split
            t = ck.table.attn_decode_s(per_layer)
            t = ck.scale(t, 0.0, per_layer)
            # an attention whose FLOPs per cached byte are high (MLA absorbed: 2 x heads x
            # 2 x latent per key, on a 576-element latent) is bound by compute, not by the KV
            # read: at least its FLOPs at the rate the table's causal attention reaches at that
            # depth (FlashMLA: 580 TFLOPS compute-bound vs 3,000 GB/s memory-bound on H800)
            flops = decode_seqs * W.attention_flops_decode(spec, decode_ctx) / n_attn / tp
            if flops:
                rate_t = ck.table.attn_prefill_s(flops, max(decode_ctx, 1.0),
                                                 decode_seqs * spec.num_attention_heads / tp)  # fmt: skip
                if rate_t is not None:
                    t = max(t, ck.scale(rate_t, flops, 0.0))
            parts["attention"] += n_attn * t
            calls += n_attn
        if prefill_tokens and prefill_seqs:
            per_seq = prefill_tokens / prefill_seqs
            flops = (W.attention_flops_prompt(spec, round(prefill_ctx + per_seq))
                     - W.attention_flops_prompt(spec, round(prefill_ctx))) * prefill_seqs  # fmt: skip
            heads = max(1, spec.num_attention_heads // tp)
            depth = prefill_ctx + per_seq
            # the table's FLOPs convention (2 b h S^2 d, head_dim 128): like with like
            t = ck.table.attn_prefill_s(
                flops / tp, depth, prefill_seqs * heads * REF_HEAD_DIM / 128
            )
            parts["attention"] += 0.0 if t is None else ck.scale(t, flops / tp, 0.0)
            calls += n_attn
        moved = m * self.elem * spec.num_layers
        parts["elementwise"] = ck.scale(ck.table.copy_s(moved / 2) or 0.0, 0.0, moved)
        # LM head: the rows that sample (decoding sequences, and a prompt's last token)
        head_rows = decode_seqs + prefill_seqs
        if head_rows:
            parts["lm_head"] = _gemm(ck, head_rows, self.head, "bf16")
            calls += 1
        if not graphs:
            calls += spec.num_layers * calls_per_layer
            parts["dispatch"] = calls * ck.table.dispatch_s
        gpu = sum(v for k, v in parts.items() if k != "dispatch")
        # eager: the host dispatches each call while the card runs the previous one; the step
        # takes the longer of the two (a small model at batch 1 waits on the host)
        seconds = max(gpu, parts["dispatch"]) if not graphs else gpu
        return {"seconds": seconds, "gpu_s": gpu, "parts": parts, "calls": calls,
                "host_bound": (not graphs) and parts["dispatch"] > gpu, "source": ck.source}  # fmt: skip


_PLANS: dict[tuple, tuple] = {}


def plan_for(spec: ModelSpec, ck: CardKernels, tp: int = 1, dtype: str = "bf16",
             kv_dtype: str = "bf16") -> OpPlan:  # fmt: skip
    """The memoised OpPlan of a replica (keyed by the objects themselves, held alive)."""
    key = (id(spec), id(ck), tp, dtype, kv_dtype)
    hit = _PLANS.get(key)
    if hit is not None and hit[0] is spec and hit[1] is ck:
        return hit[2]
    if len(_PLANS) > 64:
        _PLANS.clear()
    plan = OpPlan(spec, ck, tp, dtype, kv_dtype)
    _PLANS[key] = (spec, ck, plan)
    return plan


def step_seconds(spec: ModelSpec, ck: CardKernels, *, prefill_tokens: float = 0.0,
                 prefill_seqs: float = 0.0, prefill_ctx: float = 0.0, decode_seqs: float = 0.0,
                 decode_ctx: float = 0.0, tp: int = 1, kv_dtype: str = "bf16",
                 dtype: str = "bf16", graphs: bool = True,
                 calls_per_layer: int = EAGER_CALLS_PER_LAYER,
                 expert_loop: bool = True) -> dict:  # fmt: skip
    """One step on one card of the TP group, without the TP all-reduces: seconds per operator
    kind and in all.  ``prefill_ctx``: the keys already cached before the chunk (0 = a prompt
    from its start); ``decode_ctx``: the mean context of the decoding sequences."""
    return plan_for(spec, ck, tp, dtype, kv_dtype).step(
        prefill_tokens=prefill_tokens, prefill_seqs=prefill_seqs, prefill_ctx=prefill_ctx,
        decode_seqs=decode_seqs, decode_ctx=decode_ctx, graphs=graphs,
        calls_per_layer=calls_per_layer, expert_loop=expert_loop,
    )  # fmt: skip
