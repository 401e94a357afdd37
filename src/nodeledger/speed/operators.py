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

import math
import re
from dataclasses import dataclass

from nodeledger.ledger.weights import converted, tensor_bytes
from nodeledger.model.spec import ModelSpec
from nodeledger.speed import hardware as H
from nodeledger.speed import terms as T
from nodeledger.speed import work as W
from nodeledger.speed.kernels import (
    BLOCK_FP8_GEMM_SOURCE,
    BLOCK_FP8_PROGRAM_GBPS,
    BLOCK_FP8_SOURCE,
    BLOCK_FP8_TILE_M,
    BLOCK_FP8_TILE_N,
    DECODE_ATTN_FLOOR_S,
    KERNEL_FLOOR_S,
    KERNEL_FLOOR_SOURCE,
    REF_HEAD_DIM,
    KernelTable,
    block_fp8_gemm_tflops,
    table_for,
    table_from_rows,
)

ROW_PARALLEL = re.compile(r"(o_proj|down_proj|out_proj|dense_4h_to_h|\.dense\.|wo|w2|c_proj)")
# linears the engines keep whole on every TP rank (ReplicatedLinear): the MoE router, MLA's
# down-projections (q_a_proj, kv_a_proj_with_mqa; fused as one fused_qkv_a_proj in vLLM / SGLang)
REPLICATED = re.compile(r"(q_a_proj|kv_a_proj_with_mqa)")
FUSE = (("qkv", re.compile(r"\.(q_proj|k_proj|v_proj)\.")),
        ("gate_up", re.compile(r"\.(gate_proj|up_proj|w1|w3)\.")),
        ("qkv_a", re.compile(r"\.(q_a_proj|kv_a_proj_with_mqa)\.")))  # fmt: skip
# transformers' eager decoder layer, counted from modeling_llama.py (4.57): RMSNorm 7 calls
# (to fp32, pow, mean, add, rsqrt, mul, to + weight mul) x 2, q/k/v/o 4, rotary 12 (q and k:
# mul cos, rotate_half slice/neg/cat, mul sin, add), cache update 2, SDPA 1, residual adds 2,
# gate/up/act/mul/down 5: calls per layer beside the matmuls already counted one each
EAGER_CALLS_PER_LAYER = 14 + 12 + 2 + 2 + 2  # + one per GEMM and attention call (counted apart)
# a serving engine's decoder layer (vLLM model_executor/models/llama.py LlamaDecoderLayer; SGLang
# the same layout): fused add + RMSNorm, rotary, fused add + RMSNorm, SiluAndMul, beside the GEMMs
# and the attention call
ENGINE_CALLS_PER_LAYER = 4
# kernels a fused engine layer runs besides its GEMMs and attention, each at least the in-graph
# floor (kernels.KERNEL_FLOOR_S): the 4 above and the KV-cache write (reshape_and_cache); an MLA
# layer adds the q_a / kv_a RMSNorms; a routed-expert layer the 12 small kernels a profiled
# vLLM MoE block runs before its first grouped GEMM (shared-expert norm, router GEMM and its
# split-K reduce, sigmoid, top-k, group top-k, casts, activation quantisation, block alignment,
# expert count and sort, index: 39.8 us with their spacing on an H200 at 4 requests,
# vllm-project/vllm issue 28084) — the activation and the weighted sum of the top-k outputs
# take the place of the two that a softmax router does not run; a W8A8 GEMM the quantisation of
# its activations (scaled_fp8_quant / per_token_group_quant), counted with the GEMM
LAYER_KERNELS = ENGINE_CALLS_PER_LAYER + 1
MLA_KERNELS = 2
MOE_KERNELS = 10  # the profiled 12 less the router GEMM and its split-K reduce (a dense GEMM here)
# host calls of a serving engine's decoder layer when its step runs eager (no graph: SGLang's
# prefill and its decode above the captured sizes, vLLM V0's prefill), beside the GEMMs and the
# attention kernel, counted in vLLM's and SGLang's model_executor/models/llama.py (0.4-0.6): the
# two fused add + RMSNorm, the q/k/v split, rotary, the KV-cache write (reshape_and_cache_flash /
# set_kv_buffer), the q/k/v/output views around the attention call (4), SiluAndMul's output
# allocation and its kernel (2): 11; + the two all-reduce calls under tensor parallelism
# (ENGINE_EAGER_TP_CALLS).  At the table's dispatch (22 us a call) a Llama layer of 4 GEMMs and
# one attention call is ~0.35-0.40 ms of host: an eager prefill of Qwen3-4B (36 layers) at 129
# tokens took 16.6 ms where its CUDA graph took 5.7 (wejoncy/sfllm PR 46, 0.46 ms a layer).
# A MoE or MLA layer adds its small kernels (MOE_KERNELS, MLA_KERNELS) and one grouped call per
# expert GEMM.
ENGINE_EAGER_CALLS_PER_LAYER = 11
ENGINE_EAGER_TP_CALLS = 2
# host calls a bitsandbytes 4-bit linear adds to its matmul (weight_only kind, see below): at
# one row and at more (counted in its Linear4bit.forward and matmul_4bit); an H100 measured
# +7.0 ms at batch 1 and +22 ms at batch 8 over bf16 for Llama-3.1-8B's 224 linears
# (bitsandbytes benchmarking/README.md, v0.45.0: 0.0331 / 0.0476 s against 0.0244 / 0.0255 s)
BNB_CALLS_ONE_ROW = 2
BNB_CALLS_ROWS = 5
EAGER_SOURCE = (
    "transformers modeling_llama.py (4.57) decoder layer, calls counted: RMSNorm 7 x 2, "
    "rotary 12, cache update 2, SDPA 1, residual 2, act + mul 2, + one per matmul"
)


# how a weight scheme's matmul runs (the kernel kind the operator model times it as):
#   bf16       16-bit weights and activations (the table's bf16 GEMMs)
#   fp8        W8A8 with per-tensor / per-channel scales (torch._scaled_mm: the table's fp8 GEMMs)
#   fp8_block  W8A8 with 128x128 block scales (DeepSeek-V3 layout): its own kernel rows where
#              a table has them, else the fp8 rows
#   marlin     int8 / int4 / mxfp4 weights dequantised in the kernel and multiplied in bf16 by
#              the serving engines' Marlin-family kernels (AWQ / GPTQ Marlin, fused Marlin MoE;
#              vLLM 0.11 runs gpt-oss's mxfp4 experts through Marlin on Hopper and Ampere unless
#              triton_kernels is installed, vllm/model_executor/layers/quantization/mxfp4.py
#              get_mxfp4_backend): the bf16 GEMM with its weight read shrunk to the packed
#              bytes, its math at most MARLIN_BF16_SHARE of the card's best bf16 GEMM rate
#   weight_only  nf4 (bitsandbytes Linear4bit, bitsandbytes/autograd/_functions.py matmul_4bit):
#              one token's row runs its 4-bit GEMV (gemv_4bit: the packed bytes read, the bf16
#              GEMV's efficiency); more rows dequantise the whole weight to bf16 first
#              (dequantize_4bit: the packed bytes read, 2 B written per weight) and run the bf16
#              GEMM on it (MatMul4Bit.forward)
WEIGHT_ONLY = ("int8", "int4", "nf4", "mxfp4")
MARLIN_SCHEMES = ("int8", "int4", "mxfp4")
# Marlin's math saturates at 141 TFLOP/s from M = 64 up while the fp16 GEMM keeps climbing:
# speedup over torch 0.74 / 0.73 / 0.66 / 0.60 / 0.61 at M = 256 / 512 / 1,024 / 2,048 / 4,000
# (IST-DASLab marlin bench.py, vllm-project/vllm PR 2497, comment of 2024-01-24): at large M it
# runs at 0.61 of the fp16 GEMM's rate on the same card (141.1 of 231.4 TFLOP/s).  Measured on an
# Ampere card; on Hopper Marlin keeps Ampere's mma.sync while cuBLAS uses wgmma, so the share
# there is at most this.
MARLIN_BF16_SHARE = 0.61
MARLIN_SOURCE = (
    "Marlin-family weight-only kernels: math at most 0.61 of the card's best bf16 "
    "GEMM rate (141.1 of 231.4 TFLOP/s at M = 4,000, vllm-project/vllm PR 2497)"
)


@dataclass(frozen=True)
class Gemm:
    name: str
    n: int  # output features on one card
    k: int  # input features on one card
    layers: int  # how many layers run it
    expert: bool = False  # a routed expert (per layer: one of num_experts)
    kind: str = "bf16"  # bf16 | fp8 | fp8_block | marlin | weight_only (see above)
    wbytes: float = 2.0  # bytes per weight element as stored (scales included)
    attn: bool = False  # an attention projection (q/k/v/o, MLA's down/up projections)
    members: int = 1  # the checkpoint's linears fused into it (q/k/v: 3, gate/up: 2)


def block_fp8(spec: ModelSpec) -> bool:
    """Whether the checkpoint's fp8 weights carry block scales (quantization_config
    weight_block_size, DeepSeek-V3): the engines then run block-scaled kernels.  fp8 asked of a
    16-bit checkpoint (vLLM --quantization fp8) is quantised per tensor / channel instead."""
    q = spec.quantization or {}
    return str(q.get("quant_method", "")).lower() == "fp8" and bool(q.get("weight_block_size"))


def _kind(t, scheme, blocks: bool = False) -> tuple[str, float]:
    """(kernel kind, bytes per element) of one weight tensor group under ``scheme``;
    ``blocks``: fp8 with the checkpoint's block scales (block_fp8)."""
    if scheme is None:
        return "bf16", 2.0
    wb = tensor_bytes(t, scheme) / max(1, t.numel)
    if scheme.name in ("bf16", "fp16", "fp32") or not converted(t, scheme):
        return "bf16", wb
    if scheme.name == "fp8":
        return ("fp8_block" if blocks else "fp8"), wb
    if scheme.name in MARLIN_SCHEMES:
        return "marlin", wb
    return ("weight_only" if scheme.name in WEIGHT_ONLY else "bf16"), wb


def gemms(spec: ModelSpec, tp: int = 1, scheme=None) -> list[Gemm]:
    """The step's matmuls on one card of a TP group, fused as engines load them; ``scheme``
    (ledger/weights.py Scheme): how each weight is stored, so how its kernel runs."""
    groups: dict[tuple, list] = {}
    blocks = block_fp8(spec)
    for t in spec.tensors:
        if t.kind != "linear" or t.part in ("vision",) or len(t.shape) != 2:
            continue
        n, k = t.shape
        expert = t.part == "routed_experts"
        layers = t.count
        if expert and spec.moe is not None:
            layers = spec.moe.moe_layers
        fused = next((name for name, rx in FUSE if rx.search("." + t.name)), None)
        kind, wb = _kind(t, scheme, blocks)
        key = (t.module, fused or t.name, k, layers, expert, kind, t.part == "attention")
        groups.setdefault(key, []).append((n, t.name, wb))
    out = []
    for (module, name, k, layers, expert, kind, attn), parts in groups.items():
        n = sum(p[0] for p in parts)
        wb = sum(p[0] * p[2] for p in parts) / max(1, n)
        row = bool(ROW_PARALLEL.search(parts[0][1]))
        whole = module == "router" or bool(REPLICATED.search(parts[0][1]))
        if tp > 1 and not whole:
            n, k = (n, max(1, k // tp)) if row else (max(1, n // tp), k)
        out.append(Gemm(name, n, k, layers, expert, kind, wb, attn, len(parts)))
    return out


@dataclass(frozen=True)
class CardKernels:
    """A kernel table for one card: measured on it, or another card's moved through the two
    datasheet rooflines (``ratio_compute`` / ``ratio_memory`` = table card / this card)."""

    table: KernelTable
    source: str
    ratio_compute: float = 1.0
    ratio_memory: float = 1.0

    def scale(self, t: float, flops: float, nbytes: float, dtype: str = "bf16",
              gemm: bool = False) -> float:  # fmt: skip
        """A time on the table's card as a time on this one: the measured efficiency at that
        shape kept, the roofline moved (compute- or memory-bound, whichever the shape is, its
        math at the table's best rate for ``dtype``).  ``gemm``: a matmul, also never below
        either of this card's own rooflines (its bytes at the moved weight-streaming rate, its
        math at the moved peak): a GEMM just past the ridge on the table's card may sit below
        it on a card of less bandwidth (an fp8 decode GEMM at M = 128 moved from an H200 to an
        H100 by the compute ratio had read its weights at 97 % of the H100's datasheet
        bandwidth).  Copies and attention keep their own measured rates (the table's copies
        and decode attention stream faster than its GEMMs: no GEMM floor for them)."""
        if self.ratio_compute == 1.0 and self.ratio_memory == 1.0:
            return t
        # which bound the shape sits at on the table's card decides the ratio that moves it
        peak = self.table.peak_flops(dtype) if dtype != "bf16" else 0.0
        peak = peak or (self.table.peak_tflops or 1.0) * 1e12
        f_time = flops / max(peak, 1e-9)
        b_time = nbytes / max(self.table.stream_gbps or 1.0, 1e-9) / 1e9
        moved = t * (self.ratio_compute if f_time >= b_time else self.ratio_memory)
        if not gemm:
            return moved
        return max(moved, f_time * self.ratio_compute, b_time * self.ratio_memory)


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
    how, mhow = "datasheet", "the datasheets' bandwidth"
    mine = H.card(product) or {}
    mamf = H._num(mine.get("mamf_bf16_tflops"))
    if mamf and ref.peak_tflops:
        # the card's measured best matmul rate (MAMF) against the table's own best: a card whose
        # kernels reach less of their datasheet peak (MI300X: 51 %) is not credited the H200's 81 %
        rc, how = ref.peak_tflops / mamf, f"MAMF {mamf:g} TFLOPS ({mine.get('mamf_source')})"
    achieved = H._num(mine.get("hbm_achieved_gbps"))
    if achieved and ref.copy:
        # the same for memory: the card's measured copy plateau against the table's own (MI300X
        # reaches 4.1 of its 5.3 TB/s, 78 %; the H200 4.28 of 4.8, 89 %)
        rm = ref.best_copy_gbps / achieved
        mhow = f"copy plateau {achieved:g} GB/s ({mine.get('hbm_achieved_source')})"
    return CardKernels(ref, f"{ref.card} kernel table moved to this card (compute x {1 / rc:.2f} "
                       f"by {how}; memory x {1 / rm:.2f} by {mhow})", rc, rm)  # fmt: skip


def _table_rows(ck: CardKernels, kind: str) -> str:
    """The table's GEMM rows a kernel kind is read from: fp8 kinds from the fp8 rows where the
    table has them, everything else (and fp8 without fp8 rows: weight-only) from bf16."""
    if kind in ("fp8", "fp8_block") and "fp8" in ck.table.gemm:
        return "fp8"
    return "bf16"


def weight_only_s(table: KernelTable, t: float, m: float, n: int, k: int, wbytes: float) -> float:
    """A weight-only GEMM (weights of ``wbytes`` per element, dequantised in the kernel, math in
    bf16) from the bf16 GEMM's time ``t`` at the same shape on the table's card.  What shrinks
    is the weight read, so only the memory-bound share of ``t`` shrinks:
      t_mem = the bf16 GEMM's bytes at the streaming rate / eta, eta = the streaming efficiency
              the table's M = 1 call of this (n, k) reaches (a GEMV is memory-bound);
      memory-bound (t <= t_mem): t x (bytes read weight-only / bytes read bf16), the efficiency
              kept;
      beyond it the byte saving fades linearly to none at t >= 2 t_mem: a GEMM bound by its
              math (or its tiles' latency) takes as long whatever its weights' width (the
              roofline's max model; dequantisation's own cost is not added).
    Never below the weight-only bytes at the streaming rate, nor the math at the table's best
    bf16 rate."""
    bw = (table.stream_gbps or 1e3) * 1e9
    act = 2.0 * m * (n + k)
    b16, bwo = 2.0 * n * k + act, wbytes * n * k + act
    t1 = table.gemm_s(1.0, n, k, "bf16", graphs=True)
    eta = min(1.0, (2.0 * n * k + 2.0 * (n + k)) / bw / t1) if t1 > 0 else 1.0
    t_mem = b16 / bw / eta
    saved = (b16 - bwo) / bw / eta
    share = min(1.0, max(0.0, (2.0 * t_mem - t) / t_mem))
    return max(
        t - saved * share, bwo / bw, 2.0 * m * n * k / (table.peak_flops("bf16") or math.inf)
    )


def gemm_table_s(ck: CardKernels, m: float, n: int, k: int, kind: str = "bf16",
                 wbytes: float = 2.0) -> float:  # fmt: skip
    """One matmul's kernel time on the kernel table's own card (the caller moves it to this
    card once: ``CardKernels.scale``).  A weight-only kind (or fp8 weights on a table without
    fp8 rows) is the bf16 GEMM with its weight read shrunk (``weight_only_s``)."""
    rows = _table_rows(ck, kind)
    t = ck.table.gemm_s(m, n, k, rows, graphs=True)
    if kind == "weight_only" and m > 1:  # bitsandbytes: dequantise, then the bf16 GEMM
        return t + (ck.table.copy_s(n * k * (wbytes + 2.0)) or 0.0)
    if rows == "bf16" and wbytes < 2.0:
        t = weight_only_s(ck.table, t, m, n, k, wbytes)
    if kind == "marlin":  # its math at most MARLIN_BF16_SHARE of the best bf16 rate
        t = max(
            t, 2.0 * m * n * k / (MARLIN_BF16_SHARE * (ck.table.peak_flops("bf16") or math.inf))
        )
    return t


def gemm_kernel_s(ck: CardKernels, m: float, n: int, k: int, kind: str = "bf16",
                  wbytes: float = 2.0, block_kernel: str = "") -> float:  # fmt: skip
    """One matmul's kernel time on the card (no host dispatch: counted per call apart): the
    table card's time (``gemm_table_s``) moved to this card by whichever roofline the shape
    sits at, and for block fp8 at least the triton kernel's weight re-reads and, where the
    engine release's block-fp8 kernel is known (``block_kernel``: triton | cutlass), at most
    its measured large-M rate (kernels.BLOCK_FP8_GEMM_TFLOPS)."""
    t = gemm_table_s(ck, m, n, k, kind, wbytes)
    t = ck.scale(t, 2 * m * n * k, n * k * wbytes + 2 * m * (n + k), _table_rows(ck, kind),
                 gemm=True)  # fmt: skip
    if kind == "fp8_block":
        t = max(t, block_fp8_read_s(ck, m, n, n * k * wbytes))
        rate = block_fp8_gemm_tflops(block_kernel, m)
        if rate:
            t = max(t, 2 * m * n * k / (rate * 1e12) * ck.ratio_compute)
    return t


def block_fp8_read_s(ck: CardKernels, rows: float, n: int, weight_bytes: float,
                     groups: float = 1.0, stream_fraction: float = 1.0,
                     m_tiles: float | None = None) -> float:  # fmt: skip
    """The weight read of a block-fp8 triton GEMM (kernels.BLOCK_FP8_SOURCE) over ``groups``
    weight matrices (the experts of a fused MoE) of ``weight_bytes`` in all, ``rows`` rows each:
    every one of the ceil(rows / 64) row tiles streams its N-tile's weights again, at most the
    table's streaming rate (moved to this card) and 38 GB/s per program.  (H100, N=2112 K=7168:
    23.3 us at M=1 and 35 us at M=256 measured; this gives 23 us at both.)  ``stream_fraction``:
    the share of the streaming rate the engine release's fused MoE kernel reaches (its plug-in's
    ``moe_block_fp8_stream``); ``m_tiles``: the row tiles per weight matrix when not
    ceil(rows / 64) (a fused MoE's experts: their expectation under uniform routing,
    terms.expected_row_tiles)."""
    if m_tiles is None:
        m_tiles = math.ceil(max(rows, 1.0) / BLOCK_FP8_TILE_M)
    programs = groups * m_tiles * math.ceil(n / BLOCK_FP8_TILE_N)
    stream = (ck.table.stream_gbps or 1e3) / ck.ratio_memory * stream_fraction
    return m_tiles * weight_bytes / (min(stream, programs * BLOCK_FP8_PROGRAM_GBPS) * 1e9)


def _gemm(ck: CardKernels, m: float, g: Gemm, block_kernel: str = "") -> float:
    return gemm_kernel_s(ck, m, g.n, g.k, g.kind, g.wbytes, block_kernel)


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

    def __init__(self, spec: ModelSpec, ck: CardKernels, tp: int, dtype: str, kv_dtype: str,
                 dp_attn: int = 1, moe_stream: float = 1.0, block_kernel: str = ""):  # fmt: skip
        self.spec, self.ck, self.tp, self.dtype, self.kv_dtype = spec, ck, tp, dtype, kv_dtype
        # the engine release's dense block-fp8 GEMM kernel (triton | cutlass; "" unknown)
        self.block_kernel = block_kernel
        # the share of the card's streaming rate a block-fp8 fused MoE kernel reaches in the
        # engine release (its plug-in's moe_block_fp8_stream; 1: the table's GEMM streaming)
        self.moe_stream = moe_stream
        # DP attention (SGLang --enable-dp-attention): attention runs data-parallel over the
        # ``dp_attn`` TP ranks, each on its own requests with the attention weights whole
        self.dp_attn = dp_attn
        # the weight scheme: the one asked (--dtype), else the config's own (quantization_config
        # or torch_dtype): DeepSeek-V3's block fp8, gpt-oss's mxfp4 experts
        self.scheme = W.scheme(spec, dtype)
        all_g = gemms(spec, tp, self.scheme)
        if dp_attn > 1:  # the attention projections unsplit, the rest tensor-parallel
            whole = [g for g in gemms(spec, 1, self.scheme) if g.attn]
            all_g = [g for g in all_g if not g.attn] + whole
        self.dense = [g for g in all_g if not g.expert and not g.name.startswith("lm_head")]
        self.experts = [g for g in all_g if g.expert]
        self.n_attn = max(1, len([a for a in spec.attention if a.kind != "linear"]))
        self.kv_split = max(1, min(tp, max((a.kv_heads for a in spec.attention
                                            if a.kind != "linear"), default=1)))  # fmt: skip
        if dp_attn > 1:
            self.kv_split = 1  # a rank holds all heads of its own requests
        h = spec.hidden_size
        inter = sum(g.n for g in self.dense if g.name == "gate_up") / 2
        # memory-bound operators: 2 norms, 2 residual adds (read 2, write 1), rotary on q and k,
        # the activation (read gate and up, write one): bytes per token per layer on one card
        self.elem = 2 * (2 * 2 * h + 2 * 3 * h + 2 * spec.num_attention_heads * REF_HEAD_DIM / tp
                         + 3 * inter)  # fmt: skip
        self.head = Gemm("lm_head", max(1, spec.vocab_size // tp), h, 1)
        self.dense_calls = sum(g.layers for g in self.dense)
        mla = sum(1 for a in spec.attention if a.kind == "mla")
        moe_layers = spec.moe.moe_layers if spec.moe and self.experts else 0
        self.small_kernels = (spec.num_layers * LAYER_KERNELS + mla * MLA_KERNELS
                              + moe_layers * MOE_KERNELS)  # fmt: skip
        # an engine's eager step dispatches the MoE block's and MLA's small kernels and one
        # grouped call per expert GEMM besides its per-layer calls (ENGINE_EAGER_CALLS_PER_LAYER)
        self.fused_extra_calls = (mla * MLA_KERNELS + moe_layers * MOE_KERNELS
                                  + sum(g.layers for g in self.experts))  # fmt: skip
        self._mm: dict[float, tuple[float, int, float, float]] = {}
        self._kv: dict[int, float] = {}

    def matmuls(self, m: float, m_attn: float | None = None) -> tuple[float, int, float, float]:
        """(dense GEMM seconds, their calls, expert seconds, touched experts x layers) at M;
        ``m_attn``: the rows of the busiest rank's attention projections under DP attention
        (default ceil(M / dp))."""
        key = m if m_attn is None else (m, m_attn)
        hit = self._mm.get(key)
        if hit is not None:
            return hit
        ck = self.ck
        floor = KERNEL_FLOOR_S
        if m_attn is None:
            m_attn = math.ceil(m / self.dp_attn) if m else 0.0  # the busiest rank's rows
        bk = self.block_kernel
        dense = sum(g.layers * max(floor, _gemm(ck, m_attn if g.attn and self.dp_attn > 1 else m, g, bk))
                    for g in self.dense)  # fmt: skip
        # W8A8: each fp8 GEMM's activations are quantised first (one kernel: read bf16, write
        # fp8 and the scales: 3 B per element)
        dense += sum(g.layers * max(floor, self._copy(m * g.k * 3))
                     for g in self.dense if g.kind in ("fp8", "fp8_block"))  # fmt: skip
        calls = self.dense_calls
        experts = touched_layers = 0.0
        moe = self.spec.moe
        touched = T.experts_touched(moe.num_experts, moe.top_k, m) if moe and m else 0.0
        for g in self.experts if touched else ():
            # one grouped kernel over the touched experts (vLLM fused_moe, SGLang): it streams
            # their weights once and multiplies each expert's rows at the rate a dense GEMM of
            # that many rows reaches (the table's small-M efficiency, not the large-GEMM peak)
            rows = m * moe.top_k / touched
            wbytes = touched * g.n * g.k * g.wbytes
            base = max(rows, 64.0)
            # (the rate of the rows' math; a block-fp8 grid is bounded below over all experts)
            # (on the table's card, then moved to this one once)
            kind = "fp8" if g.kind == "fp8_block" else g.kind
            rate = 2 * base * g.n * g.k / gemm_table_s(ck, base, g.n, g.k, kind, g.wbytes)
            flops = 2 * m * moe.top_k * g.n * g.k
            share = self.moe_stream if g.kind == "fp8_block" else 1.0
            t = max(wbytes / ((ck.table.stream_gbps or 1e3) * share * 1e9), flops / rate)
            t = ck.scale(t, flops, wbytes, _table_rows(ck, kind), gemm=True)
            if g.kind == "fp8_block":  # the fused MoE kernel's grid: per expert, its tiles
                tiles = max(1.0, T.expected_row_tiles(moe.num_experts, moe.top_k, m,
                                                      BLOCK_FP8_TILE_M))  # fmt: skip
                t = max(t, block_fp8_read_s(ck, rows, g.n, wbytes, touched, share, tiles))
            experts += g.layers * max(floor, t)
            if g.kind in ("fp8", "fp8_block") and "down" in g.name:
                # the gate/up input's quantisation is one of the MoE block's small kernels
                # (MOE_KERNELS); the down projection's input is quantised apart
                experts += g.layers * max(floor, self._copy(m * moe.top_k * g.k * 3))
            touched_layers += g.layers * touched
        if len(self._mm) > 100_000:
            self._mm.clear()
        self._mm[key] = out = (dense, calls, experts, touched_layers)
        return out

    def assumptions(self) -> list[str]:
        """The step terms beyond the kernel table this replica's steps hold, each with its
        source (shown beside the figures they shape)."""
        out = [KERNEL_FLOOR_SOURCE + "; paged decode attention at least 12 us per layer "
               "(FlashInfer 12.3 us, FlashAttention 14.8 us at one sequence, "
               "vllm-project/flash-attention PR 63)"]  # fmt: skip
        kinds = {g.kind for g in self.dense + self.experts}
        if "fp8_block" in kinds:
            out.append(BLOCK_FP8_SOURCE)
            if self.block_kernel:
                out.append(f"{BLOCK_FP8_GEMM_SOURCE}: the release's {self.block_kernel} kernel")
            if self.moe_stream < 1.0 and any(g.kind == "fp8_block" for g in self.experts):
                out.append(f"block-fp8 fused MoE streams its experts at {self.moe_stream:.3g} of "
                           "the card's streaming rate (the engine release's kernel, measured: "
                           "speed/engines.toml moe_source)")  # fmt: skip
        if "weight_only" in kinds or "marlin" in kinds:
            out.append(f"{self.scheme.label()} weights dequantised in the kernel: the bf16 GEMM "
                       "reading the packed bytes")  # fmt: skip
        if "marlin" in kinds:
            out.append(MARLIN_SOURCE)
        if self.dp_attn > 1:
            out.append(f"DP attention over {self.dp_attn} ranks: the attention projections whole "
                       "on each, the busiest rank's share of the sequences")  # fmt: skip
        return out

    def _copy(self, nbytes: float) -> float:
        """Seconds of a memory-bound kernel moving ``nbytes`` (read + write) on this card: the
        table's copy rows are keyed by the bytes a copy reads and writes."""
        ck = self.ck
        return ck.scale(ck.table.copy_s(nbytes) or 0.0, 0.0, nbytes)

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
        # long: one step's seconds, operator kind by kind (GEMMs, attention, elementwise, LM head)
        """``graphs``: replayed from a graph (no host dispatch); else every call is dispatched,
        ``calls_per_layer`` of them beside the GEMMs and attention (transformers' unfused layer
        by default, ENGINE_EAGER_CALLS_PER_LAYER (+ ENGINE_EAGER_TP_CALLS) for a serving engine's
        fused one, whose MoE / MLA small kernels and grouped expert calls come with it).  ``expert_loop``:
        routed experts run one call each (transformers' eager MoE), not as one grouped kernel
        (an engine's fused MoE, graphs or not)."""
        spec, ck, tp = self.spec, self.ck, self.tp
        m = prefill_tokens + decode_seqs
        parts = {"gemm": 0.0, "experts": 0.0, "attention": 0.0, "elementwise": 0.0,
                 "lm_head": 0.0, "dispatch": 0.0}  # fmt: skip
        m_attn = None
        if self.dp_attn > 1 and prefill_tokens and prefill_seqs:
            # a prompt runs whole on one rank: the busiest rank's prompts and decodes
            dp = self.dp_attn
            m_attn = (math.ceil(prefill_seqs / dp) * prefill_tokens / prefill_seqs
                      + math.ceil(decode_seqs / dp))  # fmt: skip
        dense, calls, experts, touched_layers = self.matmuls(m, m_attn)
        parts["gemm"], parts["experts"] = dense, experts
        if not graphs and expert_loop:  # transformers' eager MoE: a call per touched expert
            calls += round(touched_layers)
        if not graphs:
            # bitsandbytes' Linear4bit (nf4, one per checkpoint linear: q, k, v apart) calls
            # around each matmul: the compute-dtype casts
            # of its input and output and the gemv_4bit wrapper at one row (+2); beyond it the
            # MatMul4Bit autograd function, dequantize_4bit's output allocation and kernel and
            # the transposed linear (+5) (bitsandbytes/nn/modules.py Linear4bit.forward,
            # autograd/_functions.py matmul_4bit / MatMul4Bit.forward, counted)
            per = BNB_CALLS_ONE_ROW if m <= 1 else BNB_CALLS_ROWS
            calls += per * sum(g.layers * g.members for g in self.dense
                               if g.kind == "weight_only")  # fmt: skip
        # attention: decode reads K and V of each sequence; a prefill chunk its causal FLOPs
        n_attn = self.n_attn
        dp = self.dp_attn
        if decode_seqs:
            # DP attention: the busiest rank reads and attends its own share of the sequences
            local = math.ceil(decode_seqs / dp) if dp > 1 else decode_seqs
            per_layer = local * self.kv_bytes(decode_ctx) / n_attn / self.kv_split
            t = ck.table.attn_decode_s(per_layer)
            t = ck.scale(t, 0.0, per_layer)
            # an attention whose FLOPs per cached byte are high (MLA absorbed: 2 x heads x
            # 2 x latent per key, on a 576-element latent) is bound by compute, not by the KV
            # read: at least its FLOPs at the rate the table's causal attention reaches at that
            # depth (FlashMLA: 580 TFLOPS compute-bound vs 3,000 GB/s memory-bound on H800)
            heads_tp = 1 if dp > 1 else tp
            flops = local * W.attention_flops_decode(spec, decode_ctx) / n_attn / heads_tp
            if flops:
                rate_t = ck.table.attn_prefill_s(flops, max(decode_ctx, 1.0),
                                                 local * spec.num_attention_heads / heads_tp)  # fmt: skip
                if rate_t is not None:
                    t = max(t, ck.scale(rate_t, flops, 0.0))
            parts["attention"] += n_attn * max(t, DECODE_ATTN_FLOOR_S)
            calls += n_attn
        if prefill_tokens and prefill_seqs:
            per_seq = prefill_tokens / prefill_seqs
            flops = (W.attention_flops_prompt(spec, round(prefill_ctx + per_seq))
                     - W.attention_flops_prompt(spec, round(prefill_ctx))) * prefill_seqs  # fmt: skip
            depth = prefill_ctx + per_seq
            if dp > 1:  # each prompt on one rank, all heads: the busiest rank's share
                seqs = math.ceil(prefill_seqs / dp)
                flops, heads = flops * seqs / prefill_seqs, spec.num_attention_heads
            else:
                flops, heads, seqs = (
                    flops / tp,
                    max(1, spec.num_attention_heads // tp),
                    prefill_seqs,
                )
            # the table's FLOPs convention (2 b h S^2 d, head_dim 128): like with like
            t = ck.table.attn_prefill_s(flops, depth, seqs * heads * REF_HEAD_DIM / 128)
            parts["attention"] += (
                0.0 if t is None else n_attn * max(KERNEL_FLOOR_S, ck.scale(t, flops, 0.0) / n_attn)
            )
            calls += n_attn
        # memory-bound kernels: their bytes at the copy rate, each kernel at least the floor
        moved = m * self.elem * spec.num_layers
        parts["elementwise"] = max(self._copy(moved), self.small_kernels * KERNEL_FLOOR_S)
        # LM head: the rows that sample (decoding sequences, and a prompt's last token)
        head_rows = decode_seqs + prefill_seqs
        if head_rows:
            parts["lm_head"] = _gemm(ck, head_rows, self.head)
            calls += 1
        if not graphs:
            calls += spec.num_layers * calls_per_layer
            if not expert_loop:  # a serving engine's fused MoE / MLA layers
                calls += self.fused_extra_calls
            parts["dispatch"] = calls * ck.table.dispatch_s
        gpu = sum(v for k, v in parts.items() if k != "dispatch")
        # eager: the host dispatches each call while the card runs the previous one; the step
        # takes the longer of the two (a small model at batch 1 waits on the host)
        seconds = max(gpu, parts["dispatch"]) if not graphs else gpu
        return {"seconds": seconds, "gpu_s": gpu, "parts": parts, "calls": calls,
                "host_bound": (not graphs) and parts["dispatch"] > gpu, "source": ck.source}  # fmt: skip


_PLANS: dict[tuple, tuple] = {}


def plan_for(spec: ModelSpec, ck: CardKernels, tp: int = 1, dtype: str | None = "bf16",
             kv_dtype: str = "bf16", dp_attn: int = 1, moe_stream: float = 1.0,
             block_kernel: str = "") -> OpPlan:  # fmt: skip
    """The memoised OpPlan of a replica (keyed by the objects themselves, held alive)."""
    key = (id(spec), id(ck), tp, dtype, kv_dtype, dp_attn, moe_stream, block_kernel)
    hit = _PLANS.get(key)
    if hit is not None and hit[0] is spec and hit[1] is ck:
        return hit[2]
    if len(_PLANS) > 64:
        _PLANS.clear()
    plan = OpPlan(spec, ck, tp, dtype, kv_dtype, dp_attn, moe_stream, block_kernel)
    _PLANS[key] = (spec, ck, plan)
    return plan


def step_seconds(spec: ModelSpec, ck: CardKernels, *, prefill_tokens: float = 0.0,
                 prefill_seqs: float = 0.0, prefill_ctx: float = 0.0, decode_seqs: float = 0.0,
                 decode_ctx: float = 0.0, tp: int = 1, kv_dtype: str = "bf16",
                 dtype: str | None = "bf16", graphs: bool = True,
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
