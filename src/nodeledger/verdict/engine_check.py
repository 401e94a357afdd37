"""The ledger beside what the serving engine printed at start-up, term by term.

Input: a vLLM job's ledger (ledger/build.py ``_vllm_card``: weights, activation peak, sampler,
non-torch = CUDA context + graph pool + NCCL, the KV pool filling the rest of
``gpu_memory_utilization`` x card memory) and the engine's own figures
(machine/parsers/engine_log.py).  Output: one row per term with both figures in GiB and their
difference, the launch arguments that differ between the log and the job (the most common
cause of a surprise), and the term whose difference is largest — where to look first.

vLLM's figures are per card (per TP rank); its "GiB" is bytes / 2^30, as are the ledger's.
"""

from __future__ import annotations

from nodeledger.units import GiB

ACTIVATION_ITEMS = ("activation peak", "sampler logits")


def _item(card, prefix: str) -> int:
    return sum(i.bytes for i in card.items if i.name.startswith(prefix))


def ledger_terms(ledger, job) -> dict:
    """The vLLM ledger's per-card terms in GiB (None where the ledger does not know them)."""
    card = ledger.cards[0]
    ex = ledger.extras
    non_torch = sum(i.bytes for i in card.items if not i.torch)
    cap = card.capacity_bytes
    return {
        "total_gpu_memory_gib": None if cap is None else cap / GiB,
        "budget_gib": None if cap is None else cap * job.gpu_memory_utilization / GiB,
        "weights_gib": _item(card, "weights") / GiB,
        "activation_peak_gib": sum(_item(card, p) for p in ACTIVATION_ITEMS) / GiB,
        "non_torch_gib": non_torch / GiB,
        "kv_cache_gib": None if ex.get("kv_pool_bytes") is None else ex["kv_pool_bytes"] / GiB,
        "kv_tokens": ex.get("kv_pool_tokens"),
        "max_concurrency": None if ex.get("kv_pool_tokens") is None else ex["kv_pool_tokens"] / job.context,
    }  # fmt: skip


TERMS = (
    ("total_gpu_memory_gib", "card total", "GiB"),
    ("budget_gib", "budget (total x gpu_memory_utilization)", "GiB"),
    ("weights_gib", "weights", "GiB"),
    ("activation_peak_gib", "activation peak of the profile run", "GiB"),
    ("non_torch_gib", "non-torch memory charged to the budget", "GiB"),
    ("kv_cache_gib", "KV-cache pool", "GiB"),
    ("kv_tokens", "KV-cache pool", "tokens"),
    ("max_concurrency", "maximum concurrency at the context", "x"),
)
# the terms the pool is made of: the largest difference among them is where to look
PARTS = ("budget_gib", "weights_gib", "activation_peak_gib", "non_torch_gib")


def _launch_differences(reported: dict, job) -> list[str]:
    cfg = reported.get("config") or {}
    out = []
    checks = (
        ("tensor_parallel_size", job.parallel.tp, "--tp"),
        ("pipeline_parallel_size", job.parallel.pp, "--pp"),
        ("max_model_len", job.context, "--context"),
        ("max_num_seqs", job.max_num_seqs, "max_num_seqs"),
        ("max_num_batched_tokens", job.max_num_batched_tokens, "--max-num-batched-tokens"),
    )
    for key, ours, flag in checks:
        if key in cfg and cfg[key] != ours:
            out.append(f"the engine ran {key}={cfg[key]}, the job says {flag} {ours}")
    util = reported.get("gpu_memory_utilization")
    if util is not None and abs(util - job.gpu_memory_utilization) > 1e-6:
        out.append(f"the engine ran gpu_memory_utilization={util:g}, the job says "
                   f"--gpu-memory-utilization {job.gpu_memory_utilization:g}")  # fmt: skip
    return out


def engine_check(ledger, job, reported: dict) -> dict:
    """Rows (term, engine, ledger, difference), launch differences, the term to look at first."""
    ours = ledger_terms(ledger, job)
    rows = []
    for key, what, unit in TERMS:
        e, n = reported.get(key), ours.get(key)
        if key == "weights_gib" and e is None:
            e = reported.get("profile_weights_gib")
        if key == "kv_tokens" and e is None and reported.get("gpu_blocks") is not None:
            e = reported["gpu_blocks"] * job.block_size  # the blocks times the job's block size
        diff = None if e is None or n is None else n - e
        rows.append({"term": key, "what": what, "unit": unit, "engine": e, "ledger": n,
                     "difference": diff,
                     "relative": None if diff is None or not e else diff / abs(e)})  # fmt: skip
    parts = [r for r in rows if r["term"] in PARTS and r["difference"] is not None]
    # budget: more budget = more pool; the others: more memory = less pool
    first = max(parts, key=lambda r: abs(r["difference"]), default=None)
    out = {
        "engine": reported.get("engine"),
        "version": reported.get("version"),
        "rows": rows,
        "launch_differences": _launch_differences(reported, job),
        "look_first": None,
    }
    if first is not None:
        sign = "more" if first["difference"] > 0 else "less"
        out["look_first"] = (
            f"{first['what']}: the ledger counts {abs(first['difference']):.2f} GiB {sign} than "
            f"the engine ({first['ledger']:.2f} vs {first['engine']:.2f} GiB per card)"
        )
    return out
