"""A running server's own start-up figures against the plan: the KV-cache pool vLLM or SGLang
sized when it started (its log) beside the pool the ledger plans for the same job.

The engine sizes its pool once, at start-up, from what it measured then; a pool smaller than
planned means fewer sequences than the plan promised (another process held memory at start-up,
a different release or launch argument), a larger one means the card holds more than planned.
Input: the engine_check of verdict/engine_check.py (term rows, launch differences, where to look
first).  Output: a summary for the watch report and, when the pool differs by more than the
watch's ``--tolerance``, a verification finding.
"""

from __future__ import annotations


def _row(check: dict, term: str) -> dict | None:
    return next((r for r in check.get("rows", []) if r["term"] == term), None)


def kv_pool_summary(check: dict, path: str, cut: bool) -> dict:
    """The engine's and the ledger's KV pool (GiB and tokens per card) and what differs."""
    gib, tokens = _row(check, "kv_cache_gib"), _row(check, "kv_tokens")
    notes = []
    if cut:
        notes.append("the log is large: only its first and last 8 MiB were read")
    if (gib is None or gib["engine"] is None) and (tokens is None or tokens["engine"] is None):
        notes.append(
            "the log has no KV-cache line yet (the engine may still be starting): nothing to check"
        )
    return {
        "file": path,
        "engine": check.get("engine"),
        "version": check.get("version"),
        "pool_gib": {"engine": gib and gib["engine"], "plan": gib and gib["ledger"]},
        "pool_tokens": {"engine": tokens and tokens["engine"], "plan": tokens and tokens["ledger"]},
        "launch_differences": check.get("launch_differences", []),
        "look_first": check.get("look_first"),
        "notes": notes,
    }


def kv_pool_finding(check: dict, cards: list[int], tolerance: float) -> dict | None:
    """A verification finding when the engine's pool (tokens when printed, else GiB) differs
    from the plan's by more than ``tolerance`` (a fraction of the plan), else None."""
    for term, unit in (("kv_tokens", "tokens"), ("kv_cache_gib", "GiB")):
        r = _row(check, term)
        if r is None or r["engine"] is None or r["ledger"] is None or not r["ledger"]:
            continue
        rel = (r["engine"] - r["ledger"]) / abs(r["ledger"])
        if abs(rel) <= tolerance:
            return None
        fmt = (lambda v: f"{v:,.0f}") if unit == "tokens" else (lambda v: f"{v:,.2f}")
        side = "smaller" if rel < 0 else "larger"
        why = check.get("look_first") or "the log names no cause"
        return {
            "rule": "engine pool vs plan",
            "cards": cards,
            "message": (
                f"the engine's KV-cache pool is {fmt(r['engine'])} {unit} per card, {abs(rel):.0%} "
                f"{side} than the plan's {fmt(r['ledger'])} {unit} (tolerance {tolerance:.0%}); "
                f"look first at: {why}"
            ),
        }
    return None
