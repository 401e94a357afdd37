"""Speed of the ledger (issue 3): one estimate in the library, the cold `nodeledger fit` CLI,
and a sweep of >= 10,000 configurations.  Prints a table; exits 1 when a target is missed.

    python benchmarks/bench_fit.py
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import shutil
import statistics
import subprocess
import sys
import time

from nodeledger.errors import InputError
from nodeledger.ledger.jobs import Parallel, ServeJob, TrainJob
from nodeledger.machine import resolve_machine
from nodeledger.model import load_model
from nodeledger.verdict.fit import fit

TARGETS = {"estimate_ms": 1.0, "cli_s": 0.3, "sweep_s": 5.0}


def one_estimate_ms(spec, machine) -> float:
    jobs = [
        TrainJob(
            micro_batch=2, seq=4096, shard="zero3", checkpointing="full", parallel=Parallel(dp=8)
        ),
        ServeJob(context=8192, concurrency=8, parallel=Parallel(tp=2)),
        ServeJob(engine="vllm", context=32768, concurrency=None, parallel=Parallel(tp=4)),
    ]
    n = 3000
    t0 = time.perf_counter()
    for i in range(n):
        fit(spec, jobs[i % 3], machine, suggest=False)
    return (time.perf_counter() - t0) / n * 1e3


def sweep_s(spec, machine) -> tuple[float, int]:
    base = TrainJob(seq=2048)
    combos = itertools.product(
        (1, 2, 4, 8), (1, 2, 4, 8), ("none", "zero1", "zero2", "zero3"), (1, 2, 4, 8, 16, 32),
        ("none", "selective", "full"), ("bf16", "mixed"), ("adamw", "adamw8bit", "sgd"), (1024, 4096),
    )  # fmt: skip
    n = 0
    t0 = time.perf_counter()
    for tp, dp, shard, mb, ckpt, prec, opt, seq in combos:
        if shard != "none" and dp == 1:
            shard = "none"
        job = dataclasses.replace(base, micro_batch=mb, seq=seq, checkpointing=ckpt, shard=shard, precision=prec,
                                  optimizer=opt, parallel=Parallel(tp=tp, dp=dp))  # fmt: skip
        # invalid layouts (more cards than the machine) raise JobError and count as tried
        with contextlib.suppress(InputError):
            fit(spec, job, machine, suggest=False)
        n += 1
    return time.perf_counter() - t0, n


def cli_s() -> float:
    exe = shutil.which("nodeledger")
    cmd = [exe] if exe else [sys.executable, "-m", "nodeledger"]
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        subprocess.run([*cmd, "fit", "qwen3-32b", "--job", "train", "--dp", "8", "--shard", "zero3", "--json"],
                       capture_output=True, check=True)  # fmt: skip
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    spec, _ = load_model("qwen3-32b")
    machine = resolve_machine(None)
    est = one_estimate_ms(spec, machine)
    sw, n = sweep_s(spec, machine)
    cli = cli_s()
    rows = [
        ("one estimate in the library (fit, no suggestions)", f"{est:.3f} ms", f"<= {TARGETS['estimate_ms']} ms", est <= TARGETS["estimate_ms"]),
        ("`nodeledger fit` cold CLI, median of 7", f"{cli:.3f} s", f"<= {TARGETS['cli_s']} s", cli <= TARGETS["cli_s"]),
        (f"sweep of {n:,} configurations", f"{sw:.2f} s", f"<= {TARGETS['sweep_s']} s", sw <= TARGETS["sweep_s"] and n >= 10000),
    ]  # fmt: skip
    print("| measure | value | target | result |")
    print("|---|---|---|---|")
    for name, val, tgt, ok in rows:
        print(f"| {name} | {val} | {tgt} | {'PASS' if ok else 'FAIL'} |")
    return 0 if all(r[3] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
