"""Predicted vs measured time of one fused-MoE layer (moe_kernels.toml: public
``benchmark_moe.py`` tables, each with its source) against the operator model's routed-expert
term (speed/operators.py OpPlan.matmuls: the touched experts' grouped GEMMs on the card's kernel
table, the engine release's fused-MoE streaming share) plus the four small kernels a fused_moe
call runs beside them (top-k, block alignment, activation, top-k sum) at the in-graph floor.
Nothing is fitted per table; the DeepSeek-V3 tables' 128-token points are the source of the
release's block-fp8 streaming share (moe_kernels.toml says so), the other points are not.

    python benchmarks/speed/compare_moe_kernels.py          # per table and M, then a summary
    python benchmarks/speed/compare_moe_kernels.py --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from compare import machine_of, shared  # noqa: E402

from nodeledger.ledger.jobs import Parallel, ServeJob  # noqa: E402
from nodeledger.model import load_model  # noqa: E402
from nodeledger.speed.kernels import KERNEL_FLOOR_S  # noqa: E402
from nodeledger.speed.serving import step_model_for  # noqa: E402

TABLES = HERE / "moe_kernels.toml"
SMALL_KERNELS = 4  # top-k, moe_align_block_size, silu_and_mul, moe_sum


def predict_table(t: dict) -> list[dict]:
    path = shared() / "fixtures" / "models" / t["model"]
    if not path.is_dir():
        return []
    spec = load_model(str(path))[0]
    m = machine_of({"gpu": t["gpu"], "cards": t["tp"]})
    dtype = "fp8" if t["dtype"] == "fp8" else None  # block fp8 / bf16: the checkpoint's own
    job = ServeJob(engine=t["engine"], engine_version=t["engine_version"], dtype=dtype,
                   context=8192, concurrency=1, parallel=Parallel(tp=t["tp"]))  # fmt: skip
    model, unknown = step_model_for(spec, job, m, 1000.0)
    if model is None:
        raise SystemExit(f"{t['id']}: {unknown}")
    plan, layers = model.plan, spec.moe.moe_layers
    rows = []
    for tokens, measured_us in t["points"]:
        experts = plan.matmuls(float(tokens))[2] / layers
        pred = (experts + SMALL_KERNELS * KERNEL_FLOOR_S) * 1e6
        rows.append({"tokens": tokens, "measured_us": measured_us, "predicted_us": pred,
                     "error": pred / measured_us - 1.0})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    tables = tomllib.loads(TABLES.read_text(encoding="utf-8"))["tables"]
    out = {}
    for t in tables:
        out[t["id"]] = {"kernel": t["kernel"], "source": t["source"], "rows": predict_table(t)}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{'table':52} {'tokens':>7} {'measured us':>12} {'predicted us':>13} {'error':>7}")
    small, large = [], []
    for tid, d in out.items():
        if not d["rows"]:
            print(f"{tid:52} skipped (../shared fixtures absent)")
        for r in d["rows"]:
            print(f"{tid[:52]:52} {r['tokens']:7d} {r['measured_us']:12,.1f} "
                  f"{r['predicted_us']:13,.1f} {r['error']:+7.0%}")  # fmt: skip
            (small if r["tokens"] <= 256 else large).append(abs(r["error"]))
    print()
    for name, errs in (("tokens <= 256", small), ("tokens > 256", large)):
        if errs:
            print(f"{name:14} {len(errs):3d} points  median |error| {statistics.median(errs):6.1%}  "
                  f"max {max(errs):6.1%}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
