"""The ``report`` use case: a workload catalogue judged on one machine, from the options a user
gives to what ``nodeledger report`` renders (terminal, Markdown, HTML or JSON).  The CLI parses,
calls :func:`assess_capacity` once, renders ``CapacityAnswer.report`` and exits with
``CapacityAnswer.tier``.  Never prints, never exits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CapacityRequest:
    machine: str | None = None  # preset, profile file or bundle; None: probe, else the reference
    workloads: str | None = None  # catalogue file; "+FILE" adds it to the bundled default
    lifeboat: int | None = None  # cards kept free; None: one (none on a one-card machine)


@dataclass
class CapacityAnswer:
    intro: list[str]  # which machine and catalogue, and why (the report's first lines)
    report: dict[str, Any]  # report.capacity.capacity_report's sections
    profile: Any  # the MachineProfile judged (the HTML charts draw its cards)
    tier: str  # the worst tier among workloads not as their catalogue entry expects
    why: str  # that tier's workloads, "" when every one can

    def to_json(self) -> dict[str, Any]:
        """``nodeledger report --format json``."""
        return {"intro": self.intro, **self.report}


def catalogue(workloads: str | None):
    """(workloads, specs, source) of a workload catalogue: the bundled default, a FILE, or
    '+FILE' added to the default."""
    from nodeledger.verdict.catalogue import load_catalogue, load_specs

    ws, src = load_catalogue(workloads)
    return ws, load_specs(ws), src


def gate(rep: dict) -> tuple[str, str]:
    """(worst tier, why) over the workloads whose outcome is not the one their catalogue entry
    expects (``agrees`` True: e.g. a 671B model the notes say cannot run on one box)."""
    order = {"can": 0, "unknown": 1, "tight": 2, "cannot": 3}
    rows = [r for r in rep["workloads"] if r.get("agrees") is not True]
    worst = max(rows, key=lambda r: order.get(r["tier_name"], 1), default=None)
    if worst is None or worst["tier_name"] == "can":
        return "can", ""
    tier = worst["tier_name"]
    same = [r["id"] for r in rows if r["tier_name"] == tier]
    return tier, f"{len(same)} workload(s) {tier}: {', '.join(same)}"


def assess_capacity(req: CapacityRequest) -> CapacityAnswer:
    from nodeledger.machine.resolve import machine_with_intro
    from nodeledger.report.capacity import capacity_report

    profile, intro = machine_with_intro(req.machine)
    ws, specs, src = catalogue(req.workloads)
    intro.append(f"workloads: {src} ({len(ws)})")
    rep = capacity_report(profile, ws, specs, req.lifeboat)
    tier, why = gate(rep)
    return CapacityAnswer(intro=intro, report=rep, profile=profile, tier=tier, why=why)
