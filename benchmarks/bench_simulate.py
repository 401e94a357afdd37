"""Speed of the serving simulator (speed/simulate.py).  Prints a table; exits 1 when a target is
missed.

Target: 1,000 requests (input 1000, output 256, rate inf, max_num_seqs 256) simulated in
<= 50 ms.  Each row is the median of --runs simulations (time.perf_counter), requests made once
beforehand.  The step cost is a roofline max(compute, memory) of affine terms (convex piecewise
affine in kv_tokens_read, the case the event skipping sums exactly); "calls" counts step_time
calls of one simulation (event skipping: far fewer than steps).

    python benchmarks/bench_simulate.py [--runs 5]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

from nodeledger.speed.simulate import Scheduler, make_requests, simulate

TARGET_MS = 50.0  # 1,000 requests, vllm, rate inf


def roofline(p: int, d: int, kv: int) -> float:
    """A decode/prefill step of an 8B-class model on one H100-class card, roughly: compute
    (2 x 8e9 FLOPs per token at ~400 TFLOP/s) against memory (16 GB of weights + 128 KiB of KV
    per token at ~2.6 TB/s), plus a fixed 1 ms of launch overhead."""
    compute = (p + d) * 2 * 8e9 / 4e14
    memory = (16e9 + kv * 131072) / 2.6e12
    return max(compute, memory) + 1e-3


CASES = [
    # (label, scheduler, request rate)
    ("vllm, pool unbounded", Scheduler("vllm", 256, 8192, None), math.inf),
    ("vllm, pool 200k tokens", Scheduler("vllm", 256, 8192, 200_000), math.inf),
    ("sglang, pool 200k tokens", Scheduler("sglang", 256, 8192, 200_000, block_size=1), math.inf),
    ("static, batch 64", Scheduler("static", 256, 8192, None, static_batch=64), math.inf),
    ("vllm, Poisson 20 req/s", Scheduler("vllm", 256, 8192, 200_000), 20.0),
]


def one(sched: Scheduler, n: int, rate: float, runs: int) -> tuple[float, int, int, int]:
    """Median ms per simulation, steps, step_time calls, completed requests."""
    reqs = make_requests(n, rate, 1000, 256)
    calls = [0]

    def cost(p: int, d: int, kv: int) -> float:
        calls[0] += 1
        return roofline(p, d, kv)

    times = []
    res = None
    for _ in range(runs):
        calls[0] = 0
        t0 = time.perf_counter()
        res = simulate(sched, reqs, cost)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), res.steps, calls[0], res.completed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="simulations per row (median)")
    args = ap.parse_args(argv)
    head = f"{'case':<26} {'requests':>8} {'steps':>8} {'calls':>7} {'done':>6} {'ms/sim':>8}"
    print(head)
    print("-" * len(head))
    ok = True
    for label, sched, rate in CASES:
        for n in (100, 1000, 5000):
            ms, steps, calls, done = one(sched, n, rate, args.runs)
            mark = ""
            if label.startswith("vllm, pool unbounded") and n == 1000:
                ok = ms <= TARGET_MS
                mark = f"  (target <= {TARGET_MS:.0f} ms: {'met' if ok else 'MISSED'})"
            print(f"{label:<26} {n:>8,} {steps:>8,} {calls:>7,} {done:>6,} {ms:>8.1f}{mark}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
