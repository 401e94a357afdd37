"""Speed of the ledger and of a cold start.  Prints two tables; exits 1 when a target is missed.

1. The library: one estimate, one speed estimate, and a sweep of >= 10,000 configurations.
2. Cold starts, each a new process as a user runs it, interleaved with a bare `python -c pass`
   in the same run (the ratio holds when the machine's speed drifts): `fit` (a real Qwen3-8B
   config.json from ../shared when present, else the catalogue's qwen3-8b) and `model show`
   (median <= 0.3 s and <= 15 x the bare interpreter), `report` on the default catalogue
   (<= 0.5 s), with --machine and with the default machine (probe, then the reference machine).
   One warm-up run of each first, with bytecode writing allowed, so the timed runs import
   compiled modules as an installed package does.

    python benchmarks/bench_fit.py [--runs 15]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from nodeledger.errors import InputError
from nodeledger.ledger.jobs import Parallel, ServeJob, TrainJob
from nodeledger.machine import resolve_machine
from nodeledger.model import load_model
from nodeledger.verdict.fit import fit

# speed_ms: one speed estimate now runs the serving simulator (three benchmarks of up to 4,000
# requests for a serving job); issue 28's budget for it is 1,000 requests in <= 50 ms
TARGETS = {"estimate_ms": 1.0, "speed_ms": 50.0, "sweep_s": 5.0, "cold_s": 0.3, "cold_ratio": 15.0,
           "report_s": 0.5}  # fmt: skip
QWEN3_8B = Path(__file__).resolve().parents[2] / "shared/fixtures/models/Qwen3-8B/config.json"


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


def one_speed_ms(spec) -> float:
    """One speed estimate (speed.job_speed): serving TP2 at 32 sequences, training FSDP8, and one
    collective, on a machine whose figures are known (the reference machine's are unknown, which
    would skip the arithmetic)."""
    from nodeledger.speed.collective import estimate
    from nodeledger.speed.job import job_speed

    m = resolve_machine("dgx-h100")
    serve = ServeJob(engine="vllm", context=4096, concurrency=32, parallel=Parallel(tp=2))
    train = TrainJob(micro_batch=2, seq=4096, shard="fsdp", parallel=Parallel(dp=8))
    extras = {"largest": {"max_concurrency_at_context": 200}}
    n = 1000
    t0 = time.perf_counter()
    for i in range(n):
        k = i % 3
        if k == 0:
            job_speed(spec, serve, m, extras)
        elif k == 1:
            job_speed(spec, train, m)
        else:
            estimate(m, "all_reduce", 2**28)
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


def _cli() -> list[str]:
    exe = shutil.which("nodeledger")
    return [exe] if exe else [sys.executable, "-m", "nodeledger"]


def cold_starts(runs: int) -> tuple[dict[str, float], dict[str, float]]:
    """Median wall seconds per command, and per command the median of its ratio to the bare
    interpreter measured right before it (pair by pair)."""
    model = str(QWEN3_8B) if QWEN3_8B.is_file() else "qwen3-8b"
    cli = _cli()
    cmds = {
        "python -c pass": [sys.executable, "-c", "pass"],
        # --no-fail: the verdict's exit code (1 tight, 3 cannot) is not what is timed
        "fit MODEL --job serve --json": [*cli, "fit", model, "--job", "serve", "--json", "--no-fail"],
        "model show qwen3-8b": [*cli, "model", "show", "qwen3-8b"],
        "report --machine k100-ai-8x64g --format json": [*cli, "report", "--machine", "k100-ai-8x64g", "--format", "json", "--no-fail"],
        "report --format json (probe, then the reference)": [*cli, "report", "--format", "json", "--no-fail"],
    }  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for argv in cmds.values():  # warm-up: bytecode written, page cache warm
        subprocess.run(argv, capture_output=True, check=True, env=env)
    times: dict[str, list[float]] = {k: [] for k in cmds}
    ratios: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(runs):
        for name, argv in cmds.items():
            t0 = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=True, env=env)
            times[name].append(time.perf_counter() - t0)
            ratios[name].append(times[name][-1] / times["python -c pass"][-1])
    med = {k: statistics.median(v) for k, v in times.items()}
    return med, {k: statistics.median(v) for k, v in ratios.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="timed cold runs of each command")
    args = ap.parse_args(argv)
    spec, _ = load_model("qwen3-32b")
    machine = resolve_machine(None)
    est = one_estimate_ms(spec, machine)
    sw, n = sweep_s(spec, machine)
    spd = one_speed_ms(spec)
    rows = [
        ("one estimate in the library (fit, no suggestions)", f"{est:.3f} ms", f"<= {TARGETS['estimate_ms']} ms", est <= TARGETS["estimate_ms"]),
        ("one speed estimate in the library (serve simulated / train / collective)", f"{spd:.3f} ms", f"<= {TARGETS['speed_ms']} ms", spd <= TARGETS["speed_ms"]),
        (f"sweep of {n:,} configurations", f"{sw:.2f} s", f"<= {TARGETS['sweep_s']} s", sw <= TARGETS["sweep_s"] and n >= 10000),
    ]  # fmt: skip
    print("| measure | value | target | result |")
    print("|---|---|---|---|")
    for name, val, tgt, ok in rows:
        print(f"| {name} | {val} | {tgt} | {'PASS' if ok else 'FAIL'} |")
    med, ratio = cold_starts(args.runs)
    print()
    print(
        f"Cold starts ({args.runs} runs each, interleaved; median wall time; ratio to the bare interpreter, pair by pair)"
    )
    print()
    print("| command | median s | x python -c pass | target | result |")
    print("|---|---|---|---|---|")
    results = []
    for name, t in med.items():
        if name == "python -c pass":
            print(f"| {name} | {t:.3f} | 1.0 | - | - |")
            continue
        if name.startswith("report"):
            ok, target = t <= TARGETS["report_s"], f"<= {TARGETS['report_s']} s"
        else:
            ok = t <= TARGETS["cold_s"] and ratio[name] <= TARGETS["cold_ratio"]
            target = f"<= {TARGETS['cold_s']} s and <= {TARGETS['cold_ratio']:.0f} x"
        results.append(ok)
        print(f"| {name} | {t:.3f} | {ratio[name]:.1f} | {target} | {'PASS' if ok else 'FAIL'} |")
    return 0 if all(r[3] for r in rows) and all(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
