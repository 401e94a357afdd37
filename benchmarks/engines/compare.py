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
import re
import statistics
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from nodeledger.errors import NodeledgerError
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


def card_total_bytes(case: dict, reported: dict) -> tuple[int | None, int | None, str]:
    """(card memory, driver-reserved, where): the total vLLM printed (already what
    torch.cuda.mem_get_info reports: reserved 0), else a bundled preset's card memory (the
    reserved figure then comes from engines.toml by card model)."""
    total = reported.get("total_gpu_memory_gib") or case.get("total_gpu_memory_gib")
    if total:
        return int(total * GiB), 0, "printed by vLLM"
    g = (case.get("gpu") or "").lower()
    if g.startswith("unknown"):
        return None, None, "card total unknown (the card is not identified)"
    for key, preset in CARD_PRESETS.items():
        if key in g:
            return resolve_machine(preset).accelerators[0].memory_bytes, None, f"preset {preset}"
    return None, None, "card total unknown"


_NUM = re.compile(r"(\d+\.\d+(?:\.\d+)?)")


def version_of(case: dict, reported: dict) -> tuple[str | None, bool]:
    """(release, assumed): the version the log printed or the case states; for a case whose
    version is unknown, the estimate its notes give ("~0.10.1", "log format of 0.6.4.x")."""
    v = reported.get("version") or case.get("version") or ""
    if case.get("version_assumed"):
        return case["version_assumed"], True
    if v[:1].isdigit():
        return v, False
    m = re.search(r"~\s*" + _NUM.pattern, v) or _NUM.search(v)
    return (m.group(1), True) if m else (None, True)


def predict(case: dict, reported: dict) -> dict:
    spec = model_of(case["model_local"])
    tp = int(case.get("tp") or 1)
    total, reserved, where = card_total_bytes(case, reported)
    weights_only = total is None
    if weights_only:  # the weights as loaded do not depend on the card total: compare them alone
        total, reserved, where = 1024 * GiB, 0, f"weights only: {where}"
    q = (case.get("quantization") or "").lower()
    dtype = next((v for k, v in QUANT.items() if k in q), None)
    kv = "fp8" if "fp8" in (case.get("kv_cache_dtype") or "") else "bf16"
    cfg = reported.get("config", {})
    ctx = int(
        case.get("max_model_len")
        or cfg.get("max_model_len")
        or spec.max_position_embeddings
        or 4096
    )
    version, assumed = version_of(case, reported)
    opt = lambda k, cast: None if case.get(k) in (None, "") else cast(case[k])  # noqa: E731
    job = ServeJob(engine="vllm", dtype=dtype, kv_dtype=kv, context=ctx, concurrency=1,
                   parallel=Parallel(tp=tp, pp=int(case.get("pp") or 1)), engine_version=version,
                   gpu_memory_utilization=opt("gpu_memory_utilization", float),
                   max_num_seqs=opt("max_num_seqs", int),
                   max_num_batched_tokens=opt("max_num_batched_tokens", int),
                   cuda_graphs=not case.get("enforce_eager", False))  # fmt: skip
    m = MachineProfile(name="case", accelerators=[
        Accelerator(index=i, vendor="amd" if "amd" in (case.get("gpu") or "").lower() else "nvidia",
                    product=case.get("gpu") or "card", memory_bytes=total, memory_reserved_bytes=reserved)
        for i in range(tp * int(case.get("pp") or 1))])  # fmt: skip
    lg = serve_ledger(spec, job, m)
    card = lg.cards[0]
    weights = next(i.bytes for i in card.items if i.name == "weights")
    ex = lg.extras
    e = ex["engine"]
    if weights_only:
        return {"weights_gib": weights / GiB, "card_total": where, "family": e["family"],
                "version": f"{e['version']}{'?' if assumed else ''}"}  # fmt: skip
    return {
        "weights_gib": weights / GiB,
        "kv_cache_gib": None if e["kv_available_bytes"] is None else e["kv_available_bytes"] / GiB,
        "kv_tokens": ex.get("kv_pool_tokens"),
        "max_concurrency": ex.get("max_concurrency_printed"),
        "activation_peak_gib": e["profile_peak_bytes"] / GiB,
        "card_total": where,
        "version": f"{e['version']}{'?' if assumed else ''}",
        "family": e["family"],
    }


def predict_sglang(case: dict, reported: dict) -> dict:
    """SGLang: the card total from the free memory it printed before the weights ("Load weight
    begin ... avail mem"), plus the context engines.toml assumes, when printed; else a preset.
    mem_fraction_static and chunked_prefill_size as the case ran them (stored in
    gpu_memory_utilization / max_num_batched_tokens)."""
    spec = model_of(case["model_local"])
    tp = int(case.get("tp") or 1)
    before = reported.get("avail_before_weights_gb")
    if before:
        from nodeledger.ledger.engines import data

        total, reserved, where = (
            int((before + data()["sglang"]["context_gib"]) * GiB),
            0,
            "free memory printed by SGLang",
        )
    else:
        total, reserved, where = card_total_bytes(case, reported)
    if total is None:
        raise LookupError(where)
    q = (case.get("quantization") or "").lower()
    dtype = next((v for k, v in QUANT.items() if k in q), None)
    ctx = int(
        case.get("max_model_len")
        or reported.get("context_len")
        or spec.max_position_embeddings
        or 4096
    )
    job = ServeJob(engine="sglang", dtype=dtype, context=ctx, concurrency=1, parallel=Parallel(tp=tp),
                   mem_fraction_static=reported.get("mem_fraction_static") or case.get("gpu_memory_utilization"),
                   max_num_batched_tokens=case.get("max_num_batched_tokens") or None,
                   cuda_graphs=not case.get("enforce_eager", False))  # fmt: skip
    m = MachineProfile(name="case", accelerators=[
        Accelerator(index=i, vendor="nvidia", product=case.get("gpu") or "card", memory_bytes=total,
                    memory_reserved_bytes=reserved) for i in range(tp)])  # fmt: skip
    lg = serve_ledger(spec, job, m)
    e = lg.extras["engine"]
    return {"weights_gib": e["weights_bytes"] / GiB, "kv_cache_gib": e["kv_available_bytes"] / GiB,
            "kv_tokens": lg.extras.get("kv_pool_tokens"), "max_concurrency": None, "activation_peak_gib": None,
            "card_total": where, "version": "sglang", "family": "sglang"}  # fmt: skip


FIGURES = ("weights_gib", "activation_peak_gib", "kv_cache_gib", "kv_tokens", "max_concurrency")


def run() -> dict:
    cases = tomllib.loads((HERE / "cases.toml").read_text(encoding="utf-8"))["cases"]
    rows = []
    for c in cases:
        text = (HERE / "logs" / f"{c['id']}.txt").read_text(encoding="utf-8")
        try:
            rep = parse_kind(f"{c['engine']}-log", text)
        except Exception as exc:
            rows.append({"id": c["id"], "problem": f"log: {exc}"})
            continue
        if rep.get("weights_gib") is None and rep.get("profile_weights_gib") is not None:
            rep["weights_gib"] = rep["profile_weights_gib"]
        if c["engine"] == "sglang":
            if rep.get("weights_gb") is not None:
                rep["weights_gib"] = rep["weights_gb"]
            elif rep.get("avail_before_weights_gb") and rep.get("avail_after_weights_gb"):
                rep["weights_gib"] = rep["avail_before_weights_gb"] - rep["avail_after_weights_gb"]
            rep["kv_cache_gib"] = rep.get("kv_cache_gb")
        row = {"id": c["id"], "version": version_of(c, rep)[0], "reported": rep}
        if not c.get("model_local"):
            row["problem"] = "model not loadable by nodeledger"
        else:
            try:
                row["predicted"] = (predict_sglang if c["engine"] == "sglang" else predict)(c, rep)
            except (LookupError, ValueError, OSError, NodeledgerError) as exc:
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
    print(f"{'case':46} {'version':9} {'family':16} " + " ".join(f"{k:>22}" for k in FIGURES))
    for r in res["rows"]:
        if "predicted" not in r:
            print(f"{r['id'][:46]:46} {'':9} {'':16} ({r.get('problem')})")
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
        p = r["predicted"]
        print(f"{r['id'][:46]:46} {p['version'][:9]:9} {p['family'][:16]:16} " + " ".join(cells))
    print()
    print(f"{'figure':18} {'cases':>5} {'median |err|':>13} {'max |err|':>10}")
    for k, s in res["summary"].items():
        print(
            f"{k:18} {s['cases']:>5} {100 * s['median_abs_error']:>12.1f}% {100 * s['max_abs_error']:>9.1f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
