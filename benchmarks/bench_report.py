"""Benchmark: the full default capacity report, cold process each run; HTML size.

Targets (issue 5): `nodeledger report` on the default catalogue <= 1 s wall, cold; HTML < 2 MB.
Prints a table.  Run: python benchmarks/bench_report.py [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(args: list[str]) -> float:
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "nodeledger", *args], capture_output=True, text=True
    )
    dt = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"nodeledger {' '.join(args)} failed: {proc.stderr.strip()}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        html = Path(tmp) / "r.html"
        cases = [
            ("report (no args: probe, then reference)", ["report"]),
            (
                "report --machine k100-ai-8x64g --format json",
                ["report", "--machine", "k100-ai-8x64g", "--json"],
            ),
            (
                "report --machine dgx-h100 -o r.html",
                ["report", "--machine", "dgx-h100", "-o", str(html)],
            ),
            (
                "compare dgx-h100 8x-rtx4090 k100-ai-8x64g",
                ["compare", "dgx-h100", "8x-rtx4090", "k100-ai-8x64g"],
            ),
        ]
        for name, args in cases:
            times = [timed(args) for _ in range(a.runs)]
            rows.append((name, statistics.median(times), max(times)))
        size = html.stat().st_size
    print(f"| command (cold process, {a.runs} runs) | median s | max s | target |")
    print("|---|---|---|---|")
    for name, med, mx in rows:
        target = "<= 1 s" if name.startswith("report") else "-"
        print(f"| {name} | {med:.3f} | {mx:.3f} | {target} |")
    print(f"| HTML file size | {size:,} B | | < 2,000,000 B |")


if __name__ == "__main__":
    main()
