"""``bench --kernels``: the card's own kernel table, in the format the speed model reads
(speed/kernels.py; the same as the H200 table it ships), measured through the vendor's PyTorch
build (CUDA, ROCm / DTK, torch_npu: whichever the bench backend found).

Measured per card kind (the first card of each product; a card holding a job is skipped
unless ``--cards`` names it), each time the median of ``reps`` calls after warm-up with the
backend's events around one call, as the shipped table was:
  * ``gemm_bf16``: ``x @ w.t()`` over M for the (N, K) shapes of the models asked for (the
    default: Llama-3.1-8B's and a 70B's, as the shipped table), and ``gemm_fp8``
    (``torch._scaled_mm``) where the card has fp8 and the build exposes it;
  * ``attn_prefill_causal``: SDPA causal, 32 query / 8 KV heads, head_dim 128, forward and
    forward + backward, over the sequence length;
  * ``attn_decode``: the same with one query token over batch x KV length;
  * ``d2d_copy``: ``y.copy_(x)`` over the size (memory bandwidth, read + write);
  * ``launch``: the wall time of eager launches of tiny kernels (the host's dispatch).
The quick set keeps to about a minute per card kind; the full set widens the sweeps.  Without
torch or a card, every part is unavailable with what it needs (the caller says so)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from nodeledger.units import MiB

DEFAULT_SHAPES = ((4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336), (128256, 4096),
                  (10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672))  # fmt: skip


@dataclass(frozen=True)
class KernelSizes:
    gemm_m: tuple[int, ...]
    prefill_s: tuple[int, ...]
    decode: tuple[tuple[int, int], ...]  # (batch, kv_len)
    copy_mib: tuple[int, ...]
    reps: int
    budget_s: float  # per card kind: the sweep stops (and says so) past it


QUICK = KernelSizes((1, 8, 64, 256, 1024, 4096), (512, 2048, 8192), ((1, 1024), (32, 4096),
                    (128, 4096)), (16, 256, 1024), 8, 60.0)  # fmt: skip
FULL = KernelSizes((1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384),
                   (512, 1024, 2048, 4096, 8192, 16384), ((1, 1024), (8, 1024), (32, 1024),
                   (1, 4096), (32, 4096), (128, 4096), (8, 16384), (32, 16384)),
                   (1, 16, 64, 256, 1024, 4096), 12, 300.0)  # fmt: skip


def _median_s(be, i: int, fn, reps: int) -> float:
    return statistics.median(be.time_each(i, fn, reps, warmup=3))


def measure(be, i: int, product: str, sizes: KernelSizes, shapes=DEFAULT_SHAPES,
            date: str = "", clock=time.monotonic) -> tuple[list[dict], list[str]]:  # fmt: skip
    # long: one sweep under one time budget (GEMM, fp8, attention, copy, launch); any part may end
    # it early via over() and return the rows measured so far
    """(rows, notes) for card ``i``: the meta row first (its source names the card, the date,
    the torch build), then every measurement; a part the build lacks is a note."""
    t = be.torch
    dev = be.device(i)
    notes: list[str] = []
    start = clock()
    rows: list[dict] = [{"part": "meta", "card": product, "date": date,
                         "torch": str(getattr(t, "__version__", "?")),
                         "source": f"measured by bench, {date}, {product}, {be.label}: median of "
                         f"{sizes.reps} calls after 3 warm-ups, events around each call"}]  # fmt: skip

    def over() -> bool:
        if clock() - start > sizes.budget_s:
            notes.append(f"kernel sweep stopped at its {sizes.budget_s:g} s budget; the rows "
                         "measured so far are kept")  # fmt: skip
            return True
        return False

    bf16 = getattr(t, "bfloat16", None)
    for n, k in shapes:
        w = t.empty(n, k, dtype=bf16, device=dev)
        for m in sizes.gemm_m:
            if over():
                return rows, notes
            x = t.empty(m, k, dtype=bf16, device=dev)
            s = _median_s(be, i, lambda x=x, w=w: x @ w.t(), sizes.reps)
            rows.append({"part": "gemm_bf16", "m": m, "n": n, "k": k, "s": s,
                         "tflops": 2 * m * n * k / s / 1e12})  # fmt: skip
        del w
    scaled = getattr(t, "_scaled_mm", None)
    f8 = getattr(t, "float8_e4m3fn", None)
    if scaled is None or f8 is None:
        notes.append("gemm_fp8 not measured: this torch build has no _scaled_mm / float8")
    else:
        try:
            one = t.ones((), device=dev, dtype=getattr(t, "float32", None))
            for n, k in shapes[:4]:
                a = t.empty(max(sizes.gemm_m), k, device=dev).to(f8)
                b = t.empty(n, k, device=dev).to(f8).t()
                for m in sizes.gemm_m[-3:]:
                    if over():
                        return rows, notes
                    s = _median_s(be, i, lambda a=a[:m], b=b: scaled(a, b, scale_a=one,
                                  scale_b=one, out_dtype=bf16), sizes.reps)  # fmt: skip
                    rows.append({"part": "gemm_fp8", "m": m, "n": n, "k": k, "s": s,
                                 "tflops": 2 * m * n * k / s / 1e12})  # fmt: skip
        except Exception as exc:  # no fp8 on this card or build
            notes.append(f"gemm_fp8 not measured: {type(exc).__name__}: {str(exc)[:120]}")
    sdpa = getattr(getattr(getattr(t, "nn", None), "functional", None),
                   "scaled_dot_product_attention", None)  # fmt: skip
    if sdpa is None:
        notes.append("attention not measured: no scaled_dot_product_attention in this torch")
    else:
        for seq in sizes.prefill_s:
            if over():
                return rows, notes
            q = t.empty(1, 32, seq, 128, dtype=bf16, device=dev, requires_grad=True)
            kv = t.empty(1, 8, seq, 128, dtype=bf16, device=dev, requires_grad=True)

            def fwd(q=q, kv=kv):
                return sdpa(q, kv, kv, is_causal=True, enable_gqa=True)

            f = _median_s(be, i, fwd, sizes.reps)
            fb = _median_s(be, i, lambda: fwd().sum().backward(), sizes.reps)
            flops = 2 * 32 * seq * seq * 128
            rows.append({"part": "attn_prefill_causal", "b": 1, "s": seq, "fwd_s": f,
                         "fwd_bwd_s": fb, "fwd_tflops": flops / f / 1e12,
                         "fwd_bwd_tflops": 3.5 * flops / fb / 1e12})  # fmt: skip
        for b, kv_len in sizes.decode:
            if over():
                return rows, notes
            q = t.empty(b, 32, 1, 128, dtype=bf16, device=dev)
            kv = t.empty(b, 8, kv_len, 128, dtype=bf16, device=dev)
            s = _median_s(be, i, lambda q=q, kv=kv: sdpa(q, kv, kv, enable_gqa=True), sizes.reps)
            rows.append({"part": "attn_decode", "b": b, "kv_len": kv_len, "s": s,
                         "kv_gbps": 2 * b * 8 * kv_len * 128 * 2 / s / 1e9})  # fmt: skip
    for mib in sizes.copy_mib:
        if over():
            return rows, notes
        src = t.empty(mib * MiB, dtype=getattr(t, "uint8", None), device=dev)
        dst = t.empty(mib * MiB, dtype=getattr(t, "uint8", None), device=dev)
        s = _median_s(be, i, lambda src=src, dst=dst: dst.copy_(src), sizes.reps)
        rows.append({"part": "d2d_copy", "mib": mib, "s": s,
                     "read_plus_write_gbps": 2 * mib * MiB / s / 1e9})  # fmt: skip
        del src, dst
    tiny = t.empty(1, device=dev)
    n = 200
    t0 = clock()
    for _ in range(n):
        tiny.add_(1)
    be.sync(i)
    rows.append({"part": "launch", "calls": n, "s": (clock() - t0) / n})
    return rows, notes


def plateaus(rows: list[dict]) -> dict[str, float | None]:
    """The card's best measured bf16 GEMM rate (TFLOP/s) and copy rate (GB/s, read + write):
    the figures a profile takes where the datasheet is unknown."""
    gemm = [r["tflops"] for r in rows if r.get("part") == "gemm_bf16" and r.get("tflops")]
    copy = [r["read_plus_write_gbps"] for r in rows if r.get("part") == "d2d_copy"
            and r.get("read_plus_write_gbps")]  # fmt: skip
    return {"bf16_tflops": max(gemm) if gemm else None, "memory_gbps": max(copy) if copy else None}
