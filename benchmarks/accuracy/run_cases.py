"""Run the cases of cases.json with harness.py and write measured.json (id -> record).

Usage::

    python benchmarks/accuracy/run_cases.py [--cases cases.json] [--out measured.json]
        [--device fake|cuda|cpu] [--only ID ...] [--isolate | --no-isolate] [--no-tracker]
        [--fixtures DIR]

* ``--device fake`` (default): FakeTensorMode on the cpu device, no real memory, no GPU.
* ``--device cuda``: real tensors (random weights) on the current GPU; each case runs in its own
  subprocess by default (``--isolate``) so allocator pools / driver-used memory start clean.
  The tracker runs alongside unless ``--no-tracker`` (then only torch.cuda statistics).
* A case with its own ``"device"`` (``"cpu"``: the eager experts' loop, which FakeTensor cannot
  run) runs there when ``--device fake`` is asked.
* ``--only``: run just these ids; existing records for other ids in ``--out`` are kept.
* A failing case is recorded as {"case", "error", "traceback", "device", "versions", "seconds"} --
  never dropped.  The file is rewritten after every case, so an interrupted run keeps its results.

Imports only torch / transformers / peft (via harness.py), never nodeledger.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _quiet() -> None:
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import transformers

        transformers.logging.set_verbosity_error()
    except Exception:
        pass


def run_one(case: dict, device: str, fixtures: str | None, track: bool) -> dict:
    import harness

    t0 = time.time()
    try:
        return harness.measure_case(case, device=device, fixtures=fixtures, track=track)
    except Exception as exc:  # recorded, never dropped
        rec = {
            "case": case,
            "error": f"{type(exc).__name__}: {exc}"[:2000],
            "traceback": traceback.format_exc()[-6000:],
            "device": {"fake": "fake-cpu", "cpu": "real-cpu", "cuda": "cuda"}[device],
            "versions": harness.versions(),
            "seconds": round(time.time() - t0, 3),
        }
        if device == "cuda":
            try:
                import torch

                rec["max_memory_allocated_at_failure"] = int(torch.cuda.max_memory_allocated())
                rec["max_memory_reserved"] = int(torch.cuda.max_memory_reserved())
                rec["driver_used_bytes"] = harness.driver_used_bytes()
            except Exception:
                pass
        return rec


def run_isolated(
    case: dict, device: str, fixtures: str | None, track: bool, timeout: float | None
) -> dict:
    with tempfile.TemporaryDirectory() as td:
        cpath, opath = Path(td) / "case.json", Path(td) / "out.json"
        cpath.write_text(json.dumps(case))
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--_child",
            str(cpath),
            str(opath),
            "--device",
            device,
        ]
        if fixtures:
            cmd += ["--fixtures", fixtures]
        if not track:
            cmd.append("--no-tracker")
        t0 = time.time()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            if opath.exists():
                return json.loads(opath.read_text())
            err = f"child exited with {proc.returncode} and no result"
            tail = proc.stdout[-3000:] + "\n" + proc.stderr[-6000:]
        except subprocess.TimeoutExpired as exc:
            err = f"timeout after {timeout}s"
            tail = str(exc)[-3000:]
        return {
            "case": case,
            "error": err,
            "traceback": tail,
            "device": device,
            "seconds": round(time.time() - t0, 3),
        }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="measure the cases of cases.json")
    ap.add_argument("--cases", default=str(HERE / "cases.json"))
    ap.add_argument(
        "--out", default=None, help="default: measured.json (fake/cpu) or measured_cuda.json (cuda)"
    )
    ap.add_argument("--device", default="fake", choices=["fake", "cuda", "cpu"])
    ap.add_argument(
        "--only", nargs="*", default=None, help="case ids to run (others kept from --out)"
    )
    ap.add_argument(
        "--fixtures",
        default=None,
        help="folder of model configs (default ../shared/fixtures/models)",
    )
    ap.add_argument(
        "--isolate",
        dest="isolate",
        action="store_true",
        default=None,
        help="one subprocess per case (default for --device cuda)",
    )
    ap.add_argument("--no-isolate", dest="isolate", action="store_false")
    ap.add_argument("--no-tracker", action="store_true", help="cuda: torch.cuda statistics only")
    ap.add_argument(
        "--timeout", type=float, default=None, help="per-case timeout with --isolate (s)"
    )
    ap.add_argument("--_child", nargs=2, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    _quiet()
    track = not args.no_tracker

    if args._child:
        case = json.loads(Path(args._child[0]).read_text())
        rec = run_one(case, args.device, args.fixtures, track)
        Path(args._child[1]).write_text(json.dumps(rec))
        return 0

    out = (
        Path(args.out)
        if args.out
        else HERE / ("measured_cuda.json" if args.device == "cuda" else "measured.json")
    )
    cases = json.loads(Path(args.cases).read_text())
    if args.only:
        wanted = set(args.only)
        unknown = wanted - {c["id"] for c in cases}
        if unknown:
            print(f"unknown ids: {sorted(unknown)}", file=sys.stderr)
            return 2
        by_id = {c["id"]: c for c in cases}
        cases = [by_id[i] for i in dict.fromkeys(args.only)]  # in the order given
    isolate = args.isolate if args.isolate is not None else args.device == "cuda"

    results: dict = {}
    if out.exists() and args.only:
        try:
            results = json.loads(out.read_text())
        except Exception:
            results = {}
    t_all = time.time()
    n_err = 0
    for i, case in enumerate(cases, 1):
        # a case that names its device runs there (FakeTensor cannot run the eager experts'
        # data-dependent loop: those cases run on the real CPU)
        device = case.get("device", args.device) if args.device == "fake" else args.device
        if isolate:
            rec = run_isolated(case, device, args.fixtures, track, args.timeout)
        else:
            rec = run_one(case, device, args.fixtures, track)
        results[case["id"]] = rec
        out.write_text(json.dumps(results, indent=1, sort_keys=False) + "\n")
        if "error" in rec:
            n_err += 1
            print(f"[{i:2d}/{len(cases)}] {case['id']:52s} ERROR {rec['error'][:150]}", flush=True)
        else:
            extra = ""
            if rec.get("prefill_peak_bytes") is not None:
                extra = f" prefill {rec['prefill_peak_bytes'] / 2**30:7.3f} decode " + (
                    f"{rec['decode_peak_bytes'] / 2**30:7.3f}"
                    if rec.get("decode_peak_bytes") is not None
                    else "   -   "
                )
            elif rec.get("peak_phase"):
                extra = f" peak in {rec['peak_phase']}"
            print(
                f"[{i:2d}/{len(cases)}] {case['id']:52s} peak {rec['torch_peak_bytes'] / 2**30:8.3f} GiB"
                f" held {rec['held_bytes'] / 2**30:8.3f}{extra}  {rec['seconds']:6.1f}s",
                flush=True,
            )
    print(f"{len(cases)} cases, {n_err} errors, {time.time() - t_all:.1f}s -> {out}", flush=True)
    return 0 if n_err == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
