"""The ledger beside what the serving engine printed at start-up, term by term.

Input: a vLLM job's ledger (ledger/serve_vllm.py ``_vllm_card``: weights, activation peak, sampler,
non-torch = CUDA context + graph pool + NCCL, the KV pool filling the rest of
``gpu_memory_utilization`` x card memory) and the engine's own figures
(machine/parsers/engine_log.py).  Output: one row per term with both figures in GiB and their
difference, the launch arguments that differ between the log and the job (the most common
cause of a surprise), and the term whose difference is largest — where to look first.

vLLM's figures are per card (per TP rank); its "GiB" is bytes / 2^30, as are the ledger's.
"""

from __future__ import annotations

from nodeledger.units import GiB


def ledger_terms(ledger, job, tokens_per_request: int | None = None) -> dict:
    """The engine ledger's per-card terms in GiB, as the release in the job accounts them
    (ledger/serve_vllm.py ``_vllm_card`` / ``_sglang_card`` put them in ``extras["engine"]``);
    None where the ledger does not know them."""
    e = ledger.extras.get("engine") or {}
    ex = ledger.extras
    g = lambda k: None if e.get(k) is None else e[k] / GiB  # noqa: E731
    per_request = tokens_per_request or job.context
    conc = ex.get("max_concurrency_printed")
    if (
        tokens_per_request
        and tokens_per_request != job.context
        and ex.get("kv_pool_tokens") is not None
    ):
        conc = ex["kv_pool_tokens"] / per_request
    if e.get("name") == "sglang":
        return {
            "total_gpu_memory_gib": g("card_total_bytes"),
            "avail_before_weights_gb": g("free_before_weights_bytes"),
            "weights_gib": g("weights_bytes"),
            "kv_cache_gib": g("kv_available_bytes"),
            "kv_tokens": ex.get("kv_pool_tokens"),
        }
    return {
        "total_gpu_memory_gib": g("card_total_bytes"),
        "budget_gib": g("budget_bytes"),
        "weights_gib": g("weights_bytes"),
        "activation_peak_gib": g("profile_peak_bytes"),
        "non_torch_gib": g("non_torch_charged_bytes"),
        "cuda_graph_gib": g("cuda_graph_bytes"),
        "kv_cache_gib": g("kv_available_bytes"),
        "kv_tokens": ex.get("kv_pool_tokens"),
        "max_concurrency": conc,
    }


TERMS = (
    ("total_gpu_memory_gib", "card total", "GiB"),
    ("budget_gib", "budget (total x gpu_memory_utilization)", "GiB"),
    ("weights_gib", "weights", "GiB"),
    ("activation_peak_gib", "activation peak of the profile run", "GiB"),
    ("non_torch_gib", "non-torch memory charged to the budget", "GiB"),
    ("cuda_graph_gib", "CUDA graphs", "GiB"),
    ("avail_before_weights_gb", "free memory before the weights (SGLang)", "GiB"),
    ("kv_cache_gib", "KV-cache pool", "GiB"),
    ("kv_tokens", "KV-cache pool", "tokens"),
    ("max_concurrency", "maximum concurrency at the context", "x"),
)
# the terms the pool is made of: the largest difference among them is where to look
PARTS = (
    "budget_gib",
    "weights_gib",
    "activation_peak_gib",
    "non_torch_gib",
    "avail_before_weights_gb",
)


def _launch_differences(reported: dict, job) -> list[str]:
    cfg = reported.get("config") or {}
    out = []
    checks = (
        ("tensor_parallel_size", job.parallel.tp, "--tp"),
        ("pipeline_parallel_size", job.parallel.pp, "--pp"),
        ("max_model_len", job.context, "--context"),
        ("max_num_seqs", job.max_num_seqs, "--max-num-seqs"),
        ("max_num_batched_tokens", job.max_num_batched_tokens, "--max-num-batched-tokens"),
    )
    for key, ours, flag in checks:
        if key in cfg and cfg[key] != ours:
            out.append(f"the engine ran {key}={cfg[key]}, the job says {flag} {ours}")
    util = reported.get("gpu_memory_utilization")
    if util is None:
        util = cfg.get("gpu_memory_utilization")
    if (
        util is not None
        and job.gpu_memory_utilization is not None
        and abs(util - job.gpu_memory_utilization) > 1e-6
    ):
        out.append(f"the engine ran gpu_memory_utilization={util:g}, the job says "
                   f"--gpu-memory-utilization {job.gpu_memory_utilization:g}")  # fmt: skip
    if cfg.get("enforce_eager") is True and job.cuda_graphs:
        out.append(
            "the engine ran enforce_eager (no CUDA graphs); the job captures graphs: add --enforce-eager"
        )
    mfs = reported.get("mem_fraction_static")
    if (
        mfs is not None
        and job.mem_fraction_static is not None
        and abs(mfs - job.mem_fraction_static) > 1e-6
    ):
        out.append(
            f"the engine ran mem_fraction_static={mfs:g}, the job says --mem-fraction-static {job.mem_fraction_static:g}"
        )
    v = reported.get("version")
    if v and job.engine_version and v.split("+")[0] != job.engine_version.split("+")[0]:
        out.append(
            f"the log is from release {v}, the job follows {job.engine_version}'s accounting: add --engine-version {v.split('+')[0]}"
        )
    at_least = cfg.get("tensor_parallel_size_at_least")
    if at_least and job.parallel.tp < at_least:
        out.append(f"the log shows ranks up to TP{at_least - 1}: at least --tp {at_least}")
    return out


def engine_check(ledger, job, reported: dict, spec=None) -> dict:
    """Rows (term, engine, ledger, difference), launch differences, the term to look at first.
    ``spec``: the model, to say when vLLM's concurrency counts sliding-window layers apart."""
    per_request = reported.get("max_concurrency_tokens_per_request")
    ours = ledger_terms(ledger, job, per_request)
    rows = []
    for key, what, unit in TERMS:
        e, n = reported.get(key), ours.get(key)
        note = None
        if key == "weights_gib" and e is None:
            e = reported.get("profile_weights_gib")
        if key == "cuda_graph_gib" and e is None:
            e = reported.get("cudagraph_budget_gib")
        if reported.get("engine") == "sglang" and key == "weights_gib" and e is None:
            e = reported.get("weights_gb")
        if reported.get("engine") == "sglang" and key == "kv_cache_gib":
            e = reported.get("kv_cache_gb")
        if key == "kv_tokens" and e is None and reported.get("gpu_blocks") is not None:
            e = reported["gpu_blocks"] * job.block_size
            note = f"the engine printed {reported['gpu_blocks']:,} blocks; x {job.block_size} tokens per block"
        if key == "max_concurrency" and per_request:
            what = f"maximum concurrency at {per_request:,} tokens per request (as the engine printed it)"
        diff = None if e is None or n is None else n - e
        rows.append({"term": key, "what": what, "unit": unit, "engine": e, "ledger": n,
                     "difference": diff, "note": note,
                     "relative": None if diff is None or not e else diff / abs(e)})  # fmt: skip
    parts = [r for r in rows if r["term"] in PARTS and r["difference"] is not None]
    first = max(parts, key=lambda r: abs(r["difference"]), default=None)
    pool = next(r for r in rows if r["term"] == "kv_cache_gib")
    out = {
        "engine": reported.get("engine"),
        "version": reported.get("version"),
        "rows": rows,
        "launch_differences": _launch_differences(reported, job),
        "look_first": None,
    }
    if first is not None and abs(first["difference"]) >= 0.01:
        sign = "more" if first["difference"] > 0 else "less"
        out["look_first"] = (
            f"{first['what']}: the ledger counts {abs(first['difference']):.2f} GiB {sign} than "
            f"the engine ({first['ledger']:.2f} vs {first['engine']:.2f} GiB per card)"
        )
    explained = sum(abs(r["difference"]) for r in parts)
    if (
        pool["difference"] is not None
        and abs(pool["difference"]) >= 0.05
        and abs(pool["relative"] or 0) >= 0.02  # within 2 %: agreement, nothing to look for
        and (explained < 0.5 * abs(pool["difference"]))
    ):
        knob = (
            "--mem-fraction-static"
            if reported.get("engine") == "sglang"
            else "--gpu-memory-utilization"
        )
        cause = (
            f"the launch differs: {out['launch_differences'][0]}"
            if out["launch_differences"]
            else f"the card total or the budget (not printed here) differs — check --machine (the card) and {knob}"
        )
        out["look_first"] = (
            f"KV-cache pool: {pool['ledger']:.2f} vs {pool['engine']:.2f} GiB per card, and the "
            f"terms the log prints do not explain it: {cause}"
        )
    return out
