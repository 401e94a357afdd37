"""Kernel tables: what one card's kernels take, measured, and the times the operator model
(speed/operators.py) reads from them.

A table is JSON Lines, one measurement a line, in the format ``bench --kernels`` writes and the
first shipped table (``kernels/h200.jsonl``, measured on a real H200) uses:

  {"part": "meta", "card": "NVIDIA H200", "source": "...", "date": "...", "torch": "..."}
  {"part": "gemm_bf16", "m": M, "n": N, "k": K, "s": seconds}         x @ w.t(), x (M, K), w (N, K)
  {"part": "gemm_fp8", ...}                                             the same, e4m3 -> bf16
  {"part": "attn_prefill_causal", "b": B, "s": S, "fwd_s": s, "fwd_bwd_s": s}
        causal SDPA, 32 query heads, 8 KV heads, head_dim 128 (FLOPs 2 B H S^2 d)
  {"part": "attn_decode", "b": B, "kv_len": L, "s": seconds, "kv_gbps": GB/s}
        one query token per sequence against L keys: K and V bytes read / s
  {"part": "d2d_copy", "mib": MiB, "s": s, "read_plus_write_gbps": GB/s}

Each time was taken with CUDA events around one eager PyTorch call, so it holds the host's
dispatch of that call as well as the kernel: an idle card waits for the launch after the start
event.  The dispatch is read from the table itself (``dispatch_s``: the smallest GEMM's time
less its bytes at the table's own streaming bandwidth) and taken off when a kernel runs inside a
CUDA / HIP graph replay, where nothing is dispatched per kernel (the replay's own cost is the
engine's, speed/engines).  A shape the table lacks is read from its nearest measured shape (by
N x K) scaled by N x K, and a card without a table gets a measured table transferred through
the two datasheets' rooflines (the measured efficiency at that shape kept): the output says
which.  Pure functions of the rows; no I/O beyond reading a table once.
"""

from __future__ import annotations

import itertools
import json
import math
from bisect import bisect_left
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from importlib import resources

from nodeledger.errors import InputError

PARTS = ("meta", "gemm_bf16", "gemm_fp8", "attn_prefill_causal", "attn_decode", "d2d_copy",
         "launch",
         "h2d_d2h")  # fmt: skip
TABLE_LIMIT = 8 * 2**20  # bytes of one table file; the shipped one is ~40 KiB
MAX_ROWS = 100_000
# the shipped tables: (product substrings as the vendor names the card, file)
SHIPPED = ((("H200",), "h200.jsonl"),)
REF_HEADS, REF_HEAD_DIM = 32, 128  # the attention shapes the tables time
# What a kernel takes on the card however little it does, inside a CUDA / HIP graph replay (no
# host dispatch): the smallest kernels of a vLLM decode step on an H100, profiled inside its
# graph, ran 2 us (scaled_fp8_quant, 128 calls), 3 us (rotary_embedding) and 4 us (rms_norm)
# (neuralmagic/nm-vllm PR 332, layerwise profiler); the middle one is taken.  An eager call's
# time in the tables holds its dispatch, so the tables cannot show this floor themselves.
KERNEL_FLOOR_S = 3e-6
KERNEL_FLOOR_SOURCE = ("in-graph kernel floor 3 us: vLLM decode on H100 profiled inside its CUDA "
                       "graph, scaled_fp8_quant 2 us, rotary 3 us, rms_norm 4 us per call "
                       "(neuralmagic/nm-vllm PR 332)")  # fmt: skip
# Paged decode attention per call at a small batch: FlashInfer 12.3 us, FlashAttention 14.8 us
# (one sequence of 1,024 keys, Qwen-32B heads at TP 2, Hopper; vllm-project/flash-attention PR
# 63, 'main' before the change); the tables' SDPA decode rows are unpaged and hold a dispatch.
DECODE_ATTN_FLOOR_S = 12e-6
# A block-scaled fp8 GEMM (DeepSeek-V3's 128 x 128 weight blocks) as the engines' triton kernel
# runs it (vLLM / SGLang w8a8_block_fp8_matmul: BLOCK_SIZE_N = 128, BLOCK_SIZE_M = 64, no split
# over K): ceil(M / 64) x ceil(N / 128) programs, each streaming its N-tile's weights.  With
# fewer programs than the card has SMs the weight read is bound by what one program pulls:
# N=2112 K=7168 at M=1 (17 programs) ran at 1.298 TFLOP/s = 23.3 us on an H100 (vLLM PR 23280,
# tuned config), 15.1 MB / 17 / 23.3 us = 38 GB/s per program.
BLOCK_FP8_TILE_N, BLOCK_FP8_TILE_M = 128, 64
BLOCK_FP8_PROGRAM_GBPS = 38.0
BLOCK_FP8_SOURCE = ("block-fp8 GEMM: ceil(M/64) x ceil(N/128) programs (vLLM/SGLang "
                    "w8a8_block_fp8_matmul), 38 GB/s of weights per program (N=2112 K=7168 M=1: "
                    "23.3 us on H100, vLLM PR 23280)")  # fmt: skip
# The same kernels' rate where the math binds (vLLM PR 23280, H100 80GB HBM3, DeepSeek-V3's
# N=2112 K=7168, block (128, 128), TFLOP/s by M): the Triton w8a8_block_fp8_matmul the engines
# ran until vLLM 0.11 and the CUTLASS kernel that PR made vLLM's default on SM90.  From M =
# 1,024 the grid fills the card (272+ programs); below it the program count bounds this shape,
# not the kernel, so a block-fp8 GEMM of any shape is held to the curve at max(M, 1,024): at
# most its large-M rate (about 0.6 of a bf16 GEMM, 0.3 of the card's fp8 rate).  The H100's
# tensor peak is the H200's (the same GH100 die), so the figures move with the H200 table.
BLOCK_FP8_GEMM_TFLOPS = {
    "triton": ((1024, 366.839772), (2048, 396.032348), (4096, 402.982983), (8192, 406.51136)),
    "cutlass": ((1024, 350.64902), (2048, 426.640953), (4096, 456.931446), (8192, 489.655688)),
}
BLOCK_FP8_GEMM_MIN_M = 1024
BLOCK_FP8_GEMM_SOURCE = ("block-fp8 GEMM math at most the engine's kernel's large-M rate "
                         "(vLLM PR 23280, H100, N=2112 K=7168: Triton 367-407, CUTLASS 351-490 "
                         "TFLOP/s at M 1,024-8,192)")  # fmt: skip


def block_fp8_gemm_tflops(kernel: str, m: float) -> float | None:
    """The block-fp8 GEMM rate (TFLOP/s) of ``kernel`` at max(M, 1,024), log-interpolated in M
    between the measured rows, the last row beyond them; None for an unknown kernel."""
    rows = BLOCK_FP8_GEMM_TFLOPS.get(kernel)
    if not rows:
        return None
    m = max(float(m), BLOCK_FP8_GEMM_MIN_M)
    if m >= rows[-1][0]:
        return rows[-1][1]
    for (m0, r0), (m1, r1) in itertools.pairwise(rows):
        if m0 <= m <= m1:
            w = math.log(m / m0) / math.log(m1 / m0)
            return math.exp(math.log(r0) + w * math.log(r1 / r0))
    return rows[0][1]


def _num(row: dict, key: str, lo: float = 0.0) -> float:
    v = row.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= lo:
        raise InputError(f"kernel table row {row.get('part')!r}: {key!r} is not a positive number")
    return float(v)


@dataclass(frozen=True)
class KernelTable:
    """One card's measured kernels (see the module docstring for the rows)."""

    card: str
    source: str
    gemm: dict = field(default_factory=dict)  # dtype -> {(n, k): ((m, s), ...) by m}
    prefill: tuple = ()  # ((b, seq, fwd_s, fwd_bwd_s), ...)
    decode: tuple = ()  # ((kv_bytes, s), ...) by bytes
    copy: tuple = ()  # ((bytes, s), ...) by bytes

    # -- what the table says about the card and its host --

    @cached_property
    def stream_gbps(self) -> float | None:
        """The weight-streaming bandwidth (GB/s): the best bytes / s of the single-row GEMMs
        (m <= 8 reads the weight matrix once; the largest matrices reach the plateau)."""
        best = None
        for (n, k), rows in self.gemm.get("bf16", {}).items():
            for m, s in rows:
                if m <= 8:
                    gbps = (m * k + n * k + m * n) * 2 / s / 1e9
                    best = gbps if best is None or gbps > best else best
        return best

    @cached_property
    def peak_tflops(self) -> float | None:
        """The best bf16 GEMM rate the table shows (TFLOP/s)."""
        rates = [2 * m * n * k / s / 1e12 for (n, k), rows in self.gemm.get("bf16", {}).items()
                 for m, s in rows]  # fmt: skip
        return max(rates) if rates else None

    @cached_property
    def _peak_rates(self) -> dict:
        d = self.dispatch_s
        out = {}
        for dt, table in self.gemm.items():
            calls = [(m, n, k, s) for (n, k), rows in table.items() for m, s in rows]
            # kernels long enough that the dispatch taken off them is under a tenth
            big = [2 * m * n * k / (s - d) for m, n, k, s in calls if s >= 10 * d and s > d]
            out[dt] = max(big or [2 * m * n * k / s for m, n, k, s in calls] or [0.0])
        return out

    def peak_flops(self, dtype: str = "bf16") -> float:
        """The best kernel rate (FLOP/s) the table's GEMMs of ``dtype`` reached, read from the
        calls whose dispatch is under a tenth of their time: no kernel of that dtype is
        credited more on this card."""
        return self._peak_rates.get(dtype, 0.0)

    @cached_property
    def dispatch_s(self) -> float:
        """Host dispatch of one eager PyTorch call (s), as the table's smallest GEMM shows it:
        its time less its bytes at the streaming bandwidth (never below 0)."""
        bw = self.stream_gbps
        rows = [(s, m, n, k) for (n, k), ms in self.gemm.get("bf16", {}).items() for m, s in ms]
        if not rows or not bw:
            return 0.0
        s, m, n, k = min(rows)
        return max(0.0, s - (m * k + n * k + m * n) * 2 / (bw * 1e9))

    # -- times --

    def gemm_s(self, m: float, n: int, k: int, dtype: str = "bf16", graphs: bool = True) -> float:
        """Seconds of one (m x k) @ (k x n) product; ``graphs``: inside a graph replay (no
        per-call dispatch).  KeyError when the table has no GEMM of that dtype."""
        m = max(1.0, float(m))
        bw = (self.stream_gbps or 1e3) * 1e9
        # bytes per element of the operands the kernel reads (fp8: e4m3 weights and inputs,
        # 1 B) and of the bf16 output it writes
        eb = 1.0 if dtype == "fp8" else 2.0
        # the measured call = one dispatch + the kernel: a shape the table lacks runs at the
        # rate its measured neighbours' kernels reach at this M (the dispatch taken off each
        # first: it does not grow with n x k), log-interpolated in n x k between the two that
        # bracket it, or the nearest one's beyond the table; never faster than its bytes at
        # the streaming rate.  Outside a graph the call's one dispatch is added back.
        # A call whose time is mostly its dispatch (small n x k at mid M: 23-30 us measured
        # for 6-13 us of math) leaves a kernel too short to read once the dispatch is taken
        # off: no kernel is credited more than the best rate the table measured (``peak``).
        peak = self.peak_flops(dtype) or math.inf
        log_rate = 0.0
        for (kn, kk), w in self._bracket(dtype, n, k):
            kernel = max(_interp_loglog(self.gemm[dtype][(kn, kk)], m) - self.dispatch_s,
                         ((kn * kk + m * kk) * eb + m * kn * 2) / bw,
                         2 * m * kn * kk / peak)  # fmt: skip
            log_rate += w * math.log(2 * m * kn * kk / kernel)
        t = max(2 * m * n * k / math.exp(log_rate), ((n * k + m * k) * eb + m * n * 2) / bw)
        return t if graphs else t + self.dispatch_s

    @cached_property
    def _near_memo(self) -> dict:
        return {}

    def _bracket(self, dtype: str, n: int, k: int) -> tuple[tuple[tuple[int, int], float], ...]:
        """The measured shapes a GEMM of (n, k) is read from, with their log weights: itself;
        else the nearest smaller and larger weight (n x k) the table has, weighted by where
        n x k lies between them on a log scale; else (beyond the table) the nearest one
        (memoised per table)."""
        memo = self._near_memo
        hit = memo.get(("bracket", dtype, n, k))
        if hit is None:
            table = self.gemm[dtype]
            if (n, k) in table:
                hit = (((n, k), 1.0),)
            else:
                size = n * k
                below = [nk for nk in table if nk[0] * nk[1] <= size]
                above = [nk for nk in table if nk[0] * nk[1] > size]
                if below and above:
                    lo = max(
                        below, key=lambda nk: (nk[0] * nk[1], -abs(math.log(nk[0] / max(n, 1))))
                    )
                    hi = min(
                        above, key=lambda nk: (nk[0] * nk[1], abs(math.log(nk[0] / max(n, 1))))
                    )
                    a, b = math.log(lo[0] * lo[1]), math.log(hi[0] * hi[1])
                    w = 0.0 if b - a < 1e-12 else (math.log(size) - a) / (b - a)
                    hit = ((lo, 1.0 - w), (hi, w))
                else:
                    hit = ((self._nearest(dtype, n, k)[0], 1.0),)
            memo[("bracket", dtype, n, k)] = hit
        return hit

    def _nearest(self, dtype: str, n: int, k: int) -> tuple[tuple[int, int], float]:
        """The measured shape read for (n, k): itself, else the nearest by weight size, with
        the n x k scale (memoised per table)."""
        memo = self._near_memo
        hit = memo.get((dtype, n, k))
        if hit is None:
            table = self.gemm[dtype]
            if (n, k) in table:
                hit = ((n, k), 1.0)
            else:
                key = min(table, key=lambda nk: abs(math.log((nk[0] * nk[1]) / (n * k))))
                hit = (key, (n * k) / (key[0] * key[1]))
            memo[(dtype, n, k)] = hit
        return hit

    def attn_prefill_s(self, flops: float, seq: float, rows: float, backward: bool = False,
                       graphs: bool = True) -> float | None:  # fmt: skip
        """Seconds of causal attention doing ``flops`` (forward, 2 b h S^2 d convention) for
        queries of ``seq`` keys deep, ``rows`` = sequences x query heads in flight; None when
        the table has no prefill rows."""
        if not self.prefill or flops <= 0:
            return 0.0 if flops <= 0 else None
        curves = self._prefill_curves[1 if backward else 0]
        rates = {b: _interp_loglog(points, max(seq, 1.0)) for b, points in curves}
        x = rows / REF_HEADS  # sequences of the table's 32 heads with the same parallelism
        rate = _interp_x(sorted(rates.items()), x)
        t = flops / (rate * 1e12)
        return max(0.0, t - self.dispatch_s) if graphs else t

    @cached_property
    def _prefill_curves(self) -> tuple:
        """(forward, forward + backward): per batch size, the TFLOP/s over sequence length."""
        out = []
        for backward in (False, True):
            by_b: dict[int, list[tuple[float, float]]] = {}
            for b, s, fwd, fwdbwd in self.prefill:
                f = 2 * b * REF_HEADS * s * s * REF_HEAD_DIM * (3.5 if backward else 1.0)
                by_b.setdefault(b, []).append((s, f / ((fwdbwd if backward else fwd) * 1e12)))
            out.append(tuple((b, sorted(by_b[b])) for b in sorted(by_b)))
        return tuple(out)

    def attn_decode_s(self, kv_bytes: float, graphs: bool = True) -> float | None:
        """Seconds of one decode attention call reading ``kv_bytes`` of K and V; None when
        the table has no decode rows."""
        if not self.decode or kv_bytes <= 0:
            return 0.0 if kv_bytes <= 0 else None
        t = _interp_loglog(self.decode, kv_bytes)
        if graphs:
            t = max(t - self.dispatch_s, kv_bytes / self._best_decode)
        return t

    @cached_property
    def _best_decode(self) -> float:
        return max(b / s for b, s in self.decode)

    @cached_property
    def _best_copy(self) -> float:
        return max(b / s for b, s in self.copy)

    @property
    def best_copy_gbps(self) -> float:
        """The table's device-copy plateau (GB/s, read + write bytes)."""
        return self._best_copy / 1e9

    def copy_s(self, nbytes: float, graphs: bool = True) -> float | None:
        """Seconds of moving ``nbytes`` through the card's memory once (read + write), as its
        device-to-device copies run; None without copy rows."""
        if not self.copy or nbytes <= 0:
            return 0.0 if nbytes <= 0 else None
        t = _interp_loglog(self.copy, nbytes)
        return max(t - self.dispatch_s, nbytes / self._best_copy) if graphs else t


def _interp_loglog(points: list[tuple[float, float]], x: float) -> float:
    """y at x on the log-log polyline through ``points`` (sorted by x); beyond the last point
    y grows in proportion to x (throughput-bound), before the first it stays the first y."""
    xs = [p[0] for p in points]
    if x <= xs[0]:
        return points[0][1]
    if x >= xs[-1]:
        return points[-1][1] * x / xs[-1]
    i = bisect_left(xs, x)
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    span = math.log(x1) - math.log(x0)
    if span < 1e-12:  # two measurements at (nearly) the same x
        return y1
    w = (math.log(x) - math.log(x0)) / span
    return math.exp(math.log(y0) + w * (math.log(y1) - math.log(y0)))


def _interp_x(points: list[tuple[float, float]], x: float) -> float:
    """y at x, log-linear in x between points, clamped to the end values (a rate)."""
    if x <= points[0][0]:
        return points[0][1]
    if x >= points[-1][0]:
        return points[-1][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x0 <= x <= x1:
            w = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return y0 + w * (y1 - y0)
    return points[-1][1]


def parse_table(text: str, where: str) -> KernelTable:
    """A table from its JSON Lines; one bad line is InputError naming it."""
    if len(text) > TABLE_LIMIT:
        raise InputError(f"kernel table {where}: larger than {TABLE_LIMIT // 2**20} MiB")
    meta: dict = {}
    gemm: dict = {}
    prefill, decode, copy = [], [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if n > MAX_ROWS:
            raise InputError(f"kernel table {where}: more than {MAX_ROWS:,} rows")
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            raise InputError(f"kernel table {where} line {n}: not JSON") from None
        if not isinstance(row, dict) or row.get("part") not in PARTS:
            raise InputError(f"kernel table {where} line {n}: no known 'part'")
        part = row["part"]
        try:
            if part == "meta":
                meta = {k: str(v)[:300] for k, v in row.items() if isinstance(v, (str, int, float))}
            elif part.startswith("gemm_"):
                m, nn, k = (int(_num(row, x)) for x in ("m", "n", "k"))
                gemm.setdefault(part[5:], {}).setdefault((nn, k), []).append((m, _num(row, "s")))
            elif part == "attn_prefill_causal":
                prefill.append((int(_num(row, "b")), int(_num(row, "s")), _num(row, "fwd_s"),
                                _num(row, "fwd_bwd_s")))  # fmt: skip
            elif part == "attn_decode":
                s = _num(row, "s")
                decode.append((_num(row, "kv_gbps") * 1e9 * s, s))
            elif part == "d2d_copy":
                s = _num(row, "s")
                copy.append((_num(row, "mib") * 2**20 * 2, s))  # read + write bytes
        except InputError as exc:
            raise InputError(f"{exc} (kernel table {where} line {n})") from None
    for shapes in gemm.values():
        for key in shapes:
            # fewer rows never take longer than more (the library may pick a slower algorithm
            # for a few rows, or a timing is noisy): each time is at most any larger-M time
            rows = sorted(shapes[key])
            low = float("inf")
            for i in range(len(rows) - 1, -1, -1):
                low = min(low, rows[i][1])
                rows[i] = (rows[i][0], low)
            shapes[key] = tuple(rows)
    return KernelTable(
        card=meta.get("card", "unknown card"),
        source=meta.get("source", where),
        gemm=gemm,
        prefill=tuple(prefill),
        decode=tuple(sorted(decode)),
        copy=tuple(sorted(copy)),
    )


def table_from_rows(rows: list[dict], where: str) -> KernelTable:
    """A table from a profile's rows (``MachineProfile.kernels[product]``), as from its file."""
    return parse_table("\n".join(json.dumps(r) for r in rows[: MAX_ROWS + 1]), where)


@lru_cache(maxsize=8)
def shipped(name: str) -> KernelTable:
    text = resources.files("nodeledger.speed").joinpath("kernels", name).read_text("utf-8")
    return parse_table(text, f"nodeledger/speed/kernels/{name}")


def table_for(product: str | None) -> KernelTable | None:
    """The shipped table measured on this card model, else None."""
    p = (product or "").upper()
    for needles, name in SHIPPED:
        if any(x in p for x in needles) and "NVL" not in p:
            return shipped(name)
    return None
