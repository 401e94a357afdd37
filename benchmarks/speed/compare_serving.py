"""Predicted vs measured on published serving benchmark runs (``serving_runs.toml``: vLLM
``benchmark_serving`` / ``vllm bench serve`` and SGLang ``bench_serving`` outputs, each with its
pinned source and the verbatim output).  Each run is replayed as its client ran it — the same
request count, rate or concurrency cap, lengths or ShareGPT-like lengths — through nodeledger's
serving simulator (speed/simulate.py) with the engine release's scheduler (speed/engines.py)
and the operator-level step time on the card's kernel table (speed/operators.py); the KV pool is
the ledger's.  Nothing is fitted per run.

    python benchmarks/speed/compare_serving.py           # the table, then median / max |error|
    python benchmarks/speed/compare_serving.py --json

Targets (issue 28): median |error| <= 15 %, max <= 30 % per figure kind.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from compare import cells, error_summary, machine_of, shared  # noqa: E402

from nodeledger.ledger.jobs import Parallel, ServeJob  # noqa: E402
from nodeledger.model import load_model  # noqa: E402
from nodeledger.speed.serving import serving_benchmark  # noqa: E402
from nodeledger.verdict.fit import ledger_for  # noqa: E402

RUNS = HERE / "serving_runs.toml"
FIXTURES = {  # model_family -> a real config.json in ../shared/fixtures/models (else the catalogue)
    "llama-3.1-8b": "Llama-3.1-8B",
    "llama-3.1-70b": "Llama-3.1-70B",
    "llama-3.1-405b": "Llama-3.1-405B",
    "qwen3-32b": "Qwen3-32B",
    "deepseek-v3": "DeepSeek-V3",
    "gpt-oss-20b": "gpt-oss-20b",
    "gpt-oss-120b": "gpt-oss-120b",
}
# figure kinds compared: (metric key in the run, predicted key, scale to the printed unit)
KINDS = (
    ("output_throughput", "output_tokens_per_s", 1.0, "output tok/s"),
    ("median_ttft_ms", "ttft_median_s", 1e3, "TTFT median ms"),
    ("median_tpot_ms", "tpot_median_s", 1e3, "TPOT median ms"),
    ("median_itl_ms", "itl_median_s", 1e3, "ITL median ms"),
)


def _model(family: str):
    name = FIXTURES.get(family)
    if name:
        path = shared() / "fixtures" / "models" / name
        if path.is_dir():
            return load_model(str(path))[0]
    return load_model(family)[0]


def _dtype(run: dict) -> str | None:
    d = str(run.get("dtype") or "bf16").lower()
    if d.startswith("fp8"):
        return "fp8"
    if d in ("bf16", "fp16", "auto") or d.startswith("mxfp4"):
        return None  # as the checkpoint's config declares it (gpt-oss: mxfp4 experts)
    if d.startswith(("awq", "int4")):
        return "int4"  # 4-bit weight-only (AWQ / GPTQ): Marlin-style kernels read the packed bytes
    raise NotImplementedError(f"weights {d!r}: no kernel table for them yet")


def _old_range(run: dict) -> bool:
    """Whether the client drew random lengths uniform in [len x ratio, len] (SGLang's
    bench_serving; vLLM's benchmark_serving before 0.9), not [len (1 - r), len (1 + r)]."""
    client = str(run.get("client", ""))
    if "sglang" in client or "bench_serving.py" in client or run["engine"] == "sglang":
        return True
    v = str(run.get("engine_version") or "")
    return v.startswith(("0.4", "0.5", "0.6", "0.7", "0.8"))


def printed_means(run: dict) -> tuple[float, float] | None:
    """The run's mean input / output lengths from its printed token totals (answers that
    stopped early included), None without them: its requests, drawn as its client draws them
    (ShareGPT-like, or uniform in the random dataset's range), are rescaled to these means (the
    spread kept: a run of fixed lengths ends with all its requests together)."""
    m = run["metrics"]
    n = m.get("completed") or run.get("num_prompts")
    if m.get("total_input_tokens") and m.get("total_generated_tokens") and n:
        return m["total_input_tokens"] / n, m["total_generated_tokens"] / n
    return None


def lengths(run: dict) -> tuple[int | None, int | None, float]:
    """(input_len, output_len, symmetric range ratio) as the run's client drew them (the printed
    totals then rescale them: ``printed_means``).  ShareGPT runs: (None, None, 0): the
    simulator's ShareGPT-like distribution."""
    if run["dataset"] == "sharegpt":
        return None, None, 0.0
    inp, out = int(run["input_len"]), int(run["output_len"])
    if run["dataset"] != "random":  # sonnet: lines up to the length asked, answers up to theirs
        return inp, out, 0.0
    r = float(run.get("range_ratio") or 0.0)
    if _old_range(run):  # uniform in [len x r, len]: centre len (1 + r) / 2
        if r >= 1.0:
            return inp, out, 0.0
        half = (1 - r) / (1 + r)
        return round(inp * (1 + r) / 2), round(out * (1 + r) / 2), min(half, 0.999)
    return inp, out, min(r, 0.999)


def server_context(run: dict, spec) -> int | None:
    """The server's max_model_len: ``--max-model-len`` / ``--max_model_len`` / SGLang's
    ``--context-length`` where the launch line gives it, else the model's own
    (max_position_embeddings, what vLLM and SGLang default to)."""
    m = re.search(
        r"--(?:max[-_]model[-_]len|context-length)[ =](\d+)", str(run.get("server_args", ""))
    )
    if m:
        return int(m.group(1))
    return spec.max_position_embeddings


def engine_options(run: dict) -> dict:
    """The launch flags of the run's server that change how a step runs."""
    args = str(run.get("server_args", ""))
    opts: dict = {}
    if "--disable-cuda-graph" in args or "--enforce-eager" in args:
        opts["graphs"] = False
    if "--async-scheduling" in args:
        opts["async_scheduling"] = True
    m = re.search(r"--num-scheduler-steps[ =](\d+)", args)
    if m:
        opts["multi_step"] = int(m.group(1))
    return opts


def predict(run: dict) -> dict:
    spec = _model(run["model_family"])
    version = run.get("engine_version")
    if not version or version == "unknown":
        # the source does not print it; its notes say the release line where they can
        hint = re.search(r"between v(\d+\.\d+\.\d+)", run.get("notes", ""))
        version = hint.group(1) if hint else None
    version = None if not version else version.split("+")[0]
    tp, pp = int(run.get("tp", 1)), int(run.get("pp", 1) or 1)
    m = machine_of({"gpu": run["gpu"], "cards": tp * pp})
    inp, out, ratio = lengths(run)
    # the server's context decides vLLM V0's chunked prefill (on above 32,768 tokens)
    context = server_context(run, spec) or int((inp or 1024) + (out or 1024))
    dp_attention = "--enable-dp-attention" in str(run.get("server_args", ""))
    kv = "fp8" if str(run.get("kv_cache_dtype", "")).startswith("fp8") else "bf16"
    job = ServeJob(engine=run["engine"], engine_version=version, dtype=_dtype(run), kv_dtype=kv,
                   context=context, concurrency=1, dp_attention=dp_attention,
                   parallel=Parallel(tp=tp, pp=pp), input_len=None, output_len=None)  # fmt: skip
    lg = ledger_for(spec, job, m)
    rate = run.get("request_rate", "inf")
    rate = float("inf") if rate in ("inf", None) else float(rate)
    return serving_benchmark(
        spec, job, m,
        num_prompts=int(run.get("num_prompts") or 1000),
        request_rate=rate,
        max_concurrency=run.get("max_concurrency"),
        input_len=inp,
        output_len=out,
        dataset="sharegpt" if inp is None else "random",
        range_ratio=ratio,
        pool_tokens=lg.extras.get("kv_pool_tokens"),
        engine_options=engine_options(run),
        means=printed_means(run),
    )  # fmt: skip


def run_all(path: Path = RUNS) -> dict:
    runs = tomllib.loads(path.read_text(encoding="utf-8"))["runs"]
    rows = []
    for r in runs:
        t0 = time.perf_counter()
        try:
            pred, why = predict(r), None
        except Exception as exc:  # every miss is reported with its reason
            pred, why = None, f"{type(exc).__name__}: {exc}"
        secs = time.perf_counter() - t0
        for key, pkey, scale, label in KINDS:
            meas = r["metrics"].get(key)
            if meas is None:
                continue
            p = None if pred is None or pred.get(pkey) is None else pred[pkey] * scale
            err = None if p is None else (p - meas) / meas
            rows.append({"id": r["id"], "kind": label, "engine": f"{r['engine']} {r.get('engine_version')}",
                         "gpu": r["gpu"], "measured": meas, "predicted": p, "error": err,
                         "problem": why, "seconds": secs})  # fmt: skip
    summary = {}
    for _, _, _, label in KINDS:
        errs = [abs(x["error"]) for x in rows if x["kind"] == label and x["error"] is not None]
        n_all = len([x for x in rows if x["kind"] == label])
        if errs:
            summary[label] = {**error_summary(errs), "of": n_all}
    return {"rows": rows, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--runs", type=Path, default=RUNS)
    a = ap.parse_args(argv)
    res = run_all(a.runs)
    if a.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"{'run':62} {'figure':15} {'measured':>10} {'predicted':>10} {'error':>7}")
    for r in res["rows"]:
        p, e = cells(r)
        tail = f"  ({r['problem'][:90]})" if r["problem"] else ""
        print(f"{r['id'][:62]:62} {r['kind']:15} {r['measured']:>10,.1f} {p:>10} {e:>7}{tail}")
    print()
    print(
        f"{'figure':16} {'cases':>9} {'median |err|':>13} {'max |err|':>10}  target (median <= 15 %, max <= 30 %)"
    )
    for k, s in res["summary"].items():
        ok = "met" if s["meets_target"] else "NOT met"
        print(f"{k:16} {s['cases']:>4} of {s['of']:<3} {100 * s['median_abs_error']:>12.1f}% "
              f"{100 * s['max_abs_error']:>9.1f}%  {ok}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
