"""The go-live checklist as a document: its steps as a ``Checklist`` section (the kind doctor's
checks use), in the terminal and in Markdown (``golive --format md``), with the bench figures it
judged.  Never prints on its own: the terminal form prints on the console it is given."""

from __future__ import annotations

from typing import Any

from nodeledger.bench.judge import figure_text
from nodeledger.document import Check, Checklist, md_cell

STATUS_STYLE = {"pass": "green", "fail": "red", "unavailable": "grey50"}


def steps(rep: dict[str, Any]) -> Checklist:
    checks = [
        Check(s["title"], s["status"], s["summary"], list(s["evidence"])) for s in rep["steps"]
    ]
    return Checklist("Steps", ("step", "status", "summary"), checks, STATUS_STYLE)


def terminal(rep: dict[str, Any], con) -> None:
    con.print(
        f"go-live checklist: {rep['machine']} — {rep['origin']}", markup=False, highlight=False
    )
    steps(rep).terminal(con)
    style = "green" if rep["exit_code"] == 0 else "red"
    con.print(f"[{style}]{rep['verdict']}[/] (exit {rep['exit_code']})")


def markdown(rep: dict[str, Any]) -> list[str]:
    out = [f"# Go-live checklist: {rep['machine']}", "", f"Machine: {rep['origin']}.",
           f"Plan: {rep['plan'] or 'none given'}.", "",
           f"**Verdict: {rep['verdict']}** (exit {rep['exit_code']}; unavailable steps do not fail it)", ""]  # fmt: skip
    out += steps(rep).markdown()
    b = rep.get("bench")
    if b and b.get("figures"):
        out += ["", "## Bench figures", "", "| subject | metric | value | verdict | expected | source |",
                "|---|---|---|---|---|---|"]  # fmt: skip
        for f in b["figures"]:
            out.append(f"| {md_cell(f['subject'])} | {md_cell(f['metric'])} | {figure_text(f)} | "
                       f"{f['verdict']} | {md_cell(f['expected'])} | {md_cell(f['source'] or f['evidence'])} |")  # fmt: skip
    return out
