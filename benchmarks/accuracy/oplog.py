"""Log every op that changed the tracked memory total for one case (debugging the formulas).

    python benchmarks/accuracy/oplog.py CASE_ID [--device fake|cuda|cpu] [--override KEY=VALUE ...]
        [--out FILE.tsv] [--cases cases.json] [--fixtures DIR]

Writes a TSV: op, delta_bytes, total_bytes, in_backward, outputs (shape/dtype/device).  Use
``--override num_hidden_layers=1`` to keep it short.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import harness  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("case_id")
    ap.add_argument("--device", default="fake", choices=["fake", "cuda", "cpu"])
    ap.add_argument("--override", nargs="*", default=[])
    ap.add_argument("--out", default=None)
    ap.add_argument("--cases", default=str(HERE / "cases.json"))
    ap.add_argument("--fixtures", default=None)
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    case = {c["id"]: c for c in json.loads(Path(args.cases).read_text())}[args.case_id]
    case = dict(case, config_overrides=dict(case.get("config_overrides") or {}))
    for kv in args.override:
        k, v = kv.split("=", 1)
        case["config_overrides"][k] = json.loads(v)
    harness.OP_LOG = []
    res = harness.measure_case(case, device=args.device, fixtures=args.fixtures)
    lines = ["op\tdelta\ttotal\tbackward\toutputs"]
    for op, delta, total, outs, bw in harness.OP_LOG:
        lines.append(f"{op}\t{delta}\t{total}\t{int(bw)}\t{outs}")
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    print(f"# peak {res['torch_peak_bytes']} sdpa {res.get('sdpa_backend')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
