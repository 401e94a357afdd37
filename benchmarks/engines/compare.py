"""Reported vs predicted: what vLLM printed at start-up (benchmarks/engines/logs, parsed by
`nodeledger parse vllm-log`) against nodeledger's vLLM ledger for the same launch.

    python benchmarks/engines/compare.py [--json]

A case is predicted when its model is one nodeledger can load (`model_local`) and the card total
is known: the total vLLM printed (``total_gpu_memory``, as torch.cuda.mem_get_info reports it)
when it did, else a bundled preset's card memory for that card.  The launch arguments are the
case's own (tensor parallel size, max_model_len, gpu_memory_utilization, max_num_seqs,
max_num_batched_tokens, quantization, KV dtype); engine defaults where the case does not say.
Figures compared, per card: weights (GiB), the KV-cache pool (GiB), the pool in tokens, and
the maximum concurrency vLLM prints (pool tokens / max_model_len).  Nothing is fitted per case.
Targets (issue 16): weights median <= 1 %, max <= 5 %; KV pool median <= 3 %, max <= 15 %.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from nodeledger.ledger.build import serve_ledger
from nodeledger.ledger.jobs import Parallel, ServeJob
from nodeledger.machine import resolve_machine
from nodeledger.machine.parsers import parse_kind
from nodeledger.machine.profile import Accelerator, MachineProfile
from nodeledger.model import load_model
from nodeledger.units import GiB

HERE = Path(__file__).resolve().parent
CARD_PRESETS = {"h100": "dgx-h100", "h200": "hgx-h200", "a100": "dgx-a100-80g", "a40": "8x-a40-48g-pcie",
                "4090": "8x-rtx4090"}  # fmt: skip
QUANT = {"fp8": "fp8", "mxfp4": "mxfp4", "awq": "int4", "gptq": "int4", "w8a8": "int8"}


def shared() -> Path:
    env = os.environ.get("NODELEDGER_SHARED")
    return Path(env) if env else HERE.parents[2] / "shared"


def model_of(name: str):
    if name.startswith("fixture:"):
        return load_model(str(shared() / "fixtures" / "models" / name.split(":", 1)[1]))[0]
    return load_model(name)[0]


def card_total_bytes(case: dict, reported: dict) -> tuple[int | None, str]:
    total = reported.get("total_gpu_memory_gib") or case.get("total_gpu_memory_gib")
    if total:
        return int(total * GiB), "printed by vLLM"
    g = (case.get("gpu") or "").lower()
    for key, preset in CARD_PRESETS.items():
        if key in g:
            return resolve_machine(preset).accelerators[0].memory_bytes, f"preset {preset}"
    return None, "card total unknown"


def predict(case: dict, reported: dict) -> dict:
    spec = model_of(case["model_local"])
    tp = int(case.get("tp") or 1)
    total, where = card_total_bytes(case, reported)
    if total is None:
        raise LookupError(where)
    q = (case.get("quantization") or "").lower()
    dtype = next((v for k, v in QUANT.items() if k in q), None)
    kv = "fp8" if "fp8" in (case.get("kv_cache_dtype") or "") else "bf16"
    ctx = int(case.get("max_model_len") or reported.get("config", {}).get("max_model_len") or 4096)
    job = ServeJob(engine="vllm", dtype=dtype, kv_dtype=kv, context=ctx, concurrency=1,
                   parallel=Parallel(tp=tp), gpu_memory_utilization=float(case.get("gpu_memory_utilization") or 0.9),
                   max_num_seqs=int(case.get("max_num_seqs") or 256),
                   max_num_batched_tokens=int(case.get("max_num_batched_tokens") or 8192))  # fmt: skip
    m = MachineProfile(name="case", accelerators=[
        Accelerator(index=i, vendor="nvidia", product=case.get("gpu") or "card", memory_bytes=total)
        for i in range(tp)])  # fmt: skip
    lg = serve_ledger(spec, job, m)
    card = lg.cards[0]
    weights = next(i.bytes for i in card.items if i.name == "weights")
    ex = lg.extras
    tokens = ex.get("kv_pool_tokens")
    return {
        "weights_gib": weights / GiB,
        "kv_cache_gib": None
        if ex.get("kv_pool_unclamped_bytes") is None
        else ex["kv_pool_unclamped_bytes"] / GiB,
        "kv_tokens": tokens,
        "max_concurrency": None
        if tokens is None
        else tokens / (reported.get("max_concurrency_tokens_per_request") or ctx),
        "card_total": where,
    }


FIGURES = ("weights_gib", "kv_cache_gib", "kv_tokens", "max_concurrency")


def run() -> dict:
    cases = tomllib.loads((HERE / "cases.toml").read_text(encoding="utf-8"))["cases"]
    rows = []
    for c in cases:
        if c["engine"] != "vllm":
            continue
        text = (HERE / "logs" / f"{c['id']}.txt").read_text(encoding="utf-8")
        try:
            rep = parse_kind("vllm-log", text)
        except Exception as exc:
            rows.append({"id": c["id"], "problem": f"log: {exc}"})
            continue
        if rep.get("weights_gib") is None and rep.get("profile_weights_gib") is not None:
            rep["weights_gib"] = rep["profile_weights_gib"]
        row = {"id": c["id"], "version": rep.get("version") or c.get("version"), "reported": rep}
        if not c.get("model_local"):
            row["problem"] = "model not loadable by nodeledger"
        else:
            try:
                row["predicted"] = predict(c, rep)
            except (LookupError, ValueError, OSError) as exc:
                row["problem"] = str(exc)[:120]
        if "predicted" in row:
            row["error"] = {
                k: (row["predicted"][k] - rep[k]) / rep[k]
                for k in FIGURES
                if rep.get(k) not in (None, 0) and row["predicted"].get(k) is not None
            }
        rows.append(row)
    summary = {}
    for k in FIGURES:
        errs = [abs(r["error"][k]) for r in rows if "error" in r and k in r["error"]]
        if errs:
            summary[k] = {"cases": len(errs), "median_abs_error": statistics.median(errs),
                          "max_abs_error": max(errs)}  # fmt: skip
    return {"rows": rows, "summary": summary}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    res = run()
    if a.json:
        print(json.dumps(res, indent=2, default=str))
        return 0
    print(f"{'case':52} {'version':12} " + " ".join(f"{k:>22}" for k in FIGURES))
    for r in res["rows"]:
        if "predicted" not in r:
            print(f"{r['id'][:52]:52} {'':12} ({r.get('problem')})")
            continue
        cells = []
        for k in FIGURES:
            rv, pv = r["reported"].get(k), r["predicted"].get(k)
            if rv is None or pv is None:
                cells.append(f"{'-':>22}")
            else:
                e = r["error"].get(k)
                fmt = (lambda x: f"{x:,.0f}") if k == "kv_tokens" else (lambda x: f"{x:,.2f}")
                err = "" if e is None else f"{100 * e:+.0f}%"
                cells.append(f"{fmt(rv)}/{fmt(pv)} {err}".rjust(22))
        print(f"{r['id'][:52]:52} {str(r['version'])[:12]:12} " + " ".join(cells))
    print()
    print(f"{'figure':18} {'cases':>5} {'median |err|':>13} {'max |err|':>10}")
    for k, s in res["summary"].items():
        print(
            f"{k:18} {s['cases']:>5} {100 * s['median_abs_error']:>12.1f}% {100 * s['max_abs_error']:>9.1f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
