"""One rank of the collective bench: ``python -m nodeledger.bench.collective --rank R ...``.

Started by ``cards.run_collectives`` once per card (MASTER_ADDR / MASTER_PORT in the
environment).  Measures as nccl-tests does: float32 sum, ``warmup`` untimed calls, then
``iters`` back-to-back calls between two device synchronizes; the per-call time is averaged
over the ranks (nccl-tests' default ``-a 1``); algbw = size ÷ time where size is the reduced
buffer (all-reduce, in place) or the whole gathered output (all-gather, out of place), and busbw
= algbw x 2(n-1)/n or x (n-1)/n.  Rank 0 prints one JSON line per (op, size).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta


def main(argv: list[str] | None = None) -> int:
    # long: the whole worker process of one rank: options, process group, a timed loop per op x size
    ap = argparse.ArgumentParser(prog="nodeledger.bench.collective")
    ap.add_argument("--kind", default="cuda", choices=("cuda", "npu", "cpu"))
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--device", type=int, required=True)
    ap.add_argument("--ops", default="all_reduce,all_gather")
    ap.add_argument("--sizes", default=str(256 * 2**20))
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--cpus", default="")
    a = ap.parse_args(argv)
    if a.cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in a.cpus.split(",")})

    import torch
    import torch.distributed as dist

    from nodeledger.bench.judge import busbw

    if a.kind == "npu":
        import torch_npu  # noqa: F401

    mod = getattr(torch, a.kind) if a.kind != "cpu" else None
    if mod is not None:
        mod.set_device(a.device)
        dev = torch.device(a.kind, a.device)
    else:
        dev = torch.device("cpu")
    backend = {"cuda": "nccl", "npu": "hccl"}.get(a.kind, "gloo")
    kw = {"device_id": dev} if a.kind == "cuda" else {}
    dist.init_process_group(backend, rank=a.rank, world_size=a.world,
                            timeout=timedelta(seconds=120), **kw)  # fmt: skip
    n = a.world

    def sync() -> None:
        if mod is not None:
            mod.synchronize(a.device)

    try:
        for op in a.ops.split(","):
            for size in (int(s) for s in a.sizes.split(",")):
                numel = max(n, size // 4 // n * n)  # float32, divisible by the ranks
                nbytes = numel * 4
                if op == "all_reduce":
                    buf = torch.ones(numel, dtype=torch.float32, device=dev)

                    def call(buf=buf) -> None:
                        dist.all_reduce(buf)
                elif op == "all_gather":
                    inp = torch.ones(numel // n, dtype=torch.float32, device=dev)
                    out = torch.empty(numel, dtype=torch.float32, device=dev)
                    if hasattr(dist, "all_gather_into_tensor") and backend != "gloo":

                        def call(inp=inp, out=out) -> None:
                            dist.all_gather_into_tensor(out, inp)
                    else:
                        parts = list(out.chunk(n))

                        def call(inp=inp, parts=parts) -> None:
                            dist.all_gather(parts, inp)
                else:
                    raise SystemExit(f"unknown op {op!r}")
                for _ in range(a.warmup):
                    call()
                sync()
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(a.iters):
                    call()
                sync()
                dt = (time.perf_counter() - t0) / a.iters
                t = torch.tensor([dt], dtype=torch.float32, device=dev)
                dist.all_reduce(t)
                mean = float(t.item()) / n
                alg, bus = busbw(op, nbytes, mean, n)
                if a.rank == 0:
                    sys.stdout.write(json.dumps({
                        "op": op, "n": n, "size_bytes": nbytes, "seconds": mean,
                        "algbw_gbps": alg, "busbw_gbps": bus, "iters": a.iters,
                        "in_place": op == "all_reduce", "backend": backend,
                    }) + "\n")  # fmt: skip
                    sys.stdout.flush()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
