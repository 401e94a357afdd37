"""Benchmark: `nodeledger model show` over real configs, one cold process each.

Target (issue 2): median wall time <= 0.3 s over 30+ real configs, and no torch import on this
path.  Prints one row per config and a summary table; exits 1 when the target is missed.

    python benchmarks/bench_model_show.py [--fixtures ../shared/fixtures/models] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_FIXTURES = HERE.parent.parent / "shared" / "fixtures" / "models"
TARGET_S = 0.3


def command() -> list[str]:
    exe = shutil.which("nodeledger")
    return [exe] if exe else [sys.executable, "-m", "nodeledger"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", type=Path, default=DEFAULT_FIXTURES)
    ap.add_argument("--repeat", type=int, default=3, help="cold runs per config (median taken)")
    args = ap.parse_args(argv)
    if not args.fixtures.is_dir():
        print(f"fixtures folder not found: {args.fixtures}", file=sys.stderr)
        return 2
    cmd = command()
    rows = []
    for folder in sorted(p for p in args.fixtures.iterdir() if (p / "config.json").is_file()):
        times, rc = [], 0
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            proc = subprocess.run(
                [*cmd, "model", "show", str(folder), "--json"], capture_output=True, text=True
            )
            times.append(time.perf_counter() - t0)
            rc = proc.returncode
        total = json.loads(proc.stdout)["params"]["total"] if rc == 0 else None
        rows.append((folder.name, statistics.median(times), rc, total))
    # torch must not be imported on this path
    probe = subprocess.run(
        [sys.executable, "-c",
         "import sys, nodeledger.cli as c\n"
         "c.main(['model','show','qwen3-8b','--json'])\n"
         "print('torch' in sys.modules, 'transformers' in sys.modules)"],
        capture_output=True, text=True,
    )  # fmt: skip
    heavy = probe.stdout.strip().splitlines()[-1] if probe.stdout.strip() else "unknown"

    print(f"{'config':45s} {'median s':>9s} {'exit':>4s} {'params.total':>18s}")
    for name, t, rc, total in rows:
        print(f"{name:45s} {t:9.3f} {rc:4d} {total if total is not None else '-':>18}")
    ok_rows = [r for r in rows if r[2] == 0]
    med = statistics.median(t for _, t, _, _ in rows)
    print()
    print("| metric | value |")
    print("|---|---|")
    print(
        f"| configs run (cold process each, {args.repeat} runs, median per config) | {len(rows)} |"
    )
    print(f"| configs shown (exit 0) | {len(ok_rows)} |")
    print(f"| configs refused (exit 2: unsupported family) | {len(rows) - len(ok_rows)} |")
    print(f"| median wall time over configs | {med:.3f} s |")
    print(f"| slowest config | {max(t for _, t, _, _ in rows):.3f} s |")
    print(f"| torch / transformers imported on this path | {heavy} |")
    print(f"| target | median <= {TARGET_S} s over >= 30 configs, no torch |")
    passed = med <= TARGET_S and len(ok_rows) >= 30 and heavy == "False False"
    print(f"| result | {'PASS' if passed else 'FAIL'} |")
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
