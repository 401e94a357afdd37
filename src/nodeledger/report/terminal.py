"""The capacity report on a terminal (rich): the headline, the workloads (one line each, the
caveats once; ``details``: every reason whole), the bottleneck ranking, serving capacity, big
loads at once, links and network, the scale-out verdict.  The same figures as ``render``'s
Markdown and HTML; it prints to the console it is given (the CLI's, or a file's)."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from nodeledger.report import render

TIER_STYLE = {"can": "green", "tight": "dark_orange", "cannot": "red", "unknown": "grey50"}


def compact_workloads(con, rep: dict) -> None:
    """One line per workload (tier, what binds, its figure, the field notes' expectation), then
    each caveat once with the rows it applies to; `--details` prints every reason whole."""
    t = Table(title="Workloads (`--details`: every reason; `nodeledger fit`: every item)")
    for col in ("workload", "tier", "binds", "figure", "field notes"):
        t.add_column(col, no_wrap=col in ("workload", "tier"))
    for r in rep["workloads"]:
        tier = r["tier_name"]
        exp = r.get("expect")
        notes = "" if not exp else (f"{exp} (agrees)" if r.get("agrees") else f"{exp} (differs)")
        t.add_row(escape(r["id"]), f"[{TIER_STYLE[tier]}]{tier}[/]", r["binding"] or "",
                  escape(render.binding_figure(r)), notes)  # fmt: skip
    con.print(t)
    for text, ids in render.caveats(rep):
        rows = ", ".join(ids) if len(ids) <= 4 else f"{len(ids)} workloads: {', '.join(ids)}"
        con.print(f"  {text} — {rows}", markup=False, highlight=False)


def terminal(con, rep: dict, intro: list[str], details: bool = False) -> None:
    """The whole report, on ``con``."""
    for line in intro:
        con.print(line, markup=False, highlight=False)
    con.print(render.headline(rep), markup=False)
    if details:
        t = Table(title="Workloads", show_lines=False)
        for col in (
            "workload",
            "tier",
            "binds",
            "reason (numbers; `nodeledger fit` shows every item)",
            "field notes",
        ):
            t.add_column(col)
        for r in rep["workloads"]:
            tier = r["tier_name"]
            t.add_row(
                escape(r["id"]),
                f"[{TIER_STYLE[tier]}]{tier}[/]",
                r["binding"] or "",
                r["reason"] + (f"\n{r['lifeboat']}" if r.get("lifeboat") else ""),
                render.expect_note(r),
            )
        con.print(t)
    else:
        compact_workloads(con, rep)
    for r in rep["workloads"]:
        if r.get("claim") and r.get("model_state"):
            con.print(
                f"{r['id']}: claim: {r['claim']}.\n  ledger: {render.state_line(r['model_state'], r.get('framework'), r.get('claim_check'))}",
                markup=False,
            )
    b = Table(title="Bottleneck ranking (workloads each resource binds)")
    for col in ("resource", "cannot", "tight",
                "worst demand / capacity (memory: used / size; links, network: traffic / compute time)",
                "unknown"):  # fmt: skip
        b.add_column(col)
    for x in rep["bottlenecks"]:
        ratio = "" if x["worst_ratio"] is None else f"{x['worst_ratio']:.0%}"
        b.add_row(x["resource"], str(x["cannot"]), str(x["tight"]), ratio, str(x["unknown"]))
    con.print(b)
    s = rep["serving"]
    con.print(f"Serving capacity (lifeboat: {s['lifeboat']} of {s['cards']} cards kept free):")
    for line in render.serving_lines(rep):
        con.print(f"  {line}", markup=False)
    con.print("Host RAM, big loads at once:")
    for h in rep["host_loads"]:
        con.print(f"  {h['model']}: {h['max_concurrent']} at once (hard limit), "
                  f"{h['max_without_tight']} without entering tight; {h['reason']}", markup=False)  # fmt: skip
        if h.get("load_times"):
            con.print(f"    {render.load_line(h['load_times'])}", markup=False)
    con.print("Links and network:")
    for lk in rep["links"]:
        con.print(f"  {lk['id']} ({lk['basis']}): {lk['reason']}", markup=False)
    so = rep["scale_out"]
    con.print(f"Scale-out verdict: {so['verdict']}", markup=False)
    for i, c in enumerate(so["criteria"], 1):
        con.print(
            f"  {i}. {c['criterion']}: {'holds' if c['holds'] else 'does not hold'}",
            markup=False,
        )
        for e in c["evidence"]:
            con.print(f"     - {e}", markup=False)
