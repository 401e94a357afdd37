"""Parse time of every recorded vendor-tool output in ../shared/fixtures/real (issue 4 target:
< 20 ms per fixture).  Prints a table; exits 1 when a fixture that has a parser misses it.

    python benchmarks/bench_parse.py [--fixtures ../shared/fixtures/real]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

from nodeledger.machine.parsers import parse_kind

HERE = Path(__file__).resolve().parent
DEFAULT = HERE.parent.parent / "shared" / "fixtures" / "real"
TARGET_MS = 20.0

# folder/prefix -> parser kind
KINDS = [
    ("nvidia-topo/", "nvidia-smi-topo"),
    ("nvidia-smi-table/", "nvidia-smi"),
    ("nvidia-query/", "nvidia-smi-q-xml"),  # only the *.xml.txt files
    ("numa/", None),  # numactl or lscpu by content
    ("rocm/", None),
    ("dcu/", None),
    ("ascend/", "npu-smi"),
]


def kind_for(rel: str, text: str) -> str | None:
    if rel.startswith("nvidia-query/"):
        if rel.endswith(".xml.txt"):
            return "nvidia-smi-q-xml"
        if rel.endswith(".csv.txt"):
            return "nvidia-smi-csv"
        return "nvidia-smi-q" if rel.endswith("-q.txt") else None
    if rel.startswith("numa/"):
        return "lscpu" if "Architecture" in text else "numactl"
    if rel.startswith(("rocm/", "dcu/")):
        if "between" in text or "Numa Node" in text:
            return "rocm-smi-showtopo"
        if rel.endswith("json.txt"):
            return "rocm-smi-json"
        if rel.endswith("csv.txt"):
            return "rocm-smi-csv"
        if re.search(r"^(Device|GPU|HCU|DCU)\s+.*Temp", text, flags=re.M):
            return "rocm-smi"
        if "amd-smi-static" in rel:
            return "amd-smi-static"
        if rel.endswith("rocm-smi-a.txt"):
            return "rocm-smi-all"
        return None
    for prefix, kind in KINDS:
        if rel.startswith(prefix):
            return kind
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", type=Path, default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args(argv)
    if not args.fixtures.is_dir():
        print(f"fixtures folder not found: {args.fixtures}", file=sys.stderr)
        return 2
    rows = []
    for f in sorted(args.fixtures.rglob("*.txt")):
        rel = str(f.relative_to(args.fixtures))
        text = f.read_text(errors="replace")
        kind = kind_for(rel, text)
        if kind is None:
            rows.append((rel, "-", None))
            continue
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            parse_kind(kind, text)
            times.append((time.perf_counter() - t0) * 1e3)
        rows.append((rel, kind, statistics.median(times)))
    print(f"{'fixture':62s} {'parser':20s} {'median ms':>9s}")
    for rel, kind, ms in rows:
        print(f"{rel:62s} {kind:20s} {'no parser yet' if ms is None else f'{ms:9.3f}'}")
    timed = [ms for _, _, ms in rows if ms is not None]
    worst = max(timed)
    print()
    print("| metric | value |")
    print("|---|---|")
    print(f"| fixtures parsed | {len(timed)} of {len(rows)} |")
    print(f"| median parse time | {statistics.median(timed):.3f} ms |")
    print(f"| slowest | {worst:.3f} ms |")
    print(f"| target | < {TARGET_MS:g} ms each |")
    print(f"| result | {'PASS' if worst < TARGET_MS else 'FAIL'} |")
    return 0 if worst < TARGET_MS else 1


if __name__ == "__main__":
    raise SystemExit(main())
