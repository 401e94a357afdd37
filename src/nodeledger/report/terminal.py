"""The capacity report on a terminal (rich): the intro and the headline, then each section
(report/sections.py: the workloads, one line each with the caveats once, or with ``details``
every reason whole; the bottleneck ranking, serving capacity, big loads at once, links and
network, the scale-out verdict).  It prints to the console it is given (the CLI's, or a
file's)."""

from __future__ import annotations

from nodeledger.report import render
from nodeledger.report.sections import TIER_STYLE, sections

__all__ = ["TIER_STYLE", "terminal"]


def terminal(con, rep: dict, intro: list[str], details: bool = False) -> None:
    """The whole report, on ``con``."""
    for line in intro:
        con.print(line, markup=False, highlight=False)
    con.print(render.headline(rep), markup=False)
    for sec in sections(rep):
        sec.terminal(con, details)
