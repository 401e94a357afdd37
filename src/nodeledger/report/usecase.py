"""The ``report`` use case: a workload catalogue judged on one machine, from the options a user
gives to what ``nodeledger report`` renders (terminal, Markdown, HTML or JSON).  The CLI parses,
calls :func:`assess_capacity` once, renders ``CapacityAnswer.report`` and exits with
``CapacityAnswer.tier``.  Never prints, never exits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from typing_extensions import NotRequired, TypedDict  # pydantic needs these on Python < 3.12

from nodeledger.schemas import json_schema


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
        """``nodeledger report --format json`` (its shape: :class:`CapacityJSON`, shipped as a
        JSON Schema)."""
        return {"schema_version": SCHEMA_VERSION, "intro": self.intro, **self.report}


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


# -- the shape of report --format json (report.schema.json is generated from it) -------------

# raised when a key of report --format json changes meaning or goes away
SCHEMA_VERSION = 1
Tier = Literal["can", "tight", "cannot", "unknown"]


class ResourceJSON(TypedDict):
    """One resource's judgement of a workload, the unit in each key: card memory and host RAM
    carry ``used_bytes`` / ``capacity_bytes``, the card count ``used_cards`` / ``capacity_cards``;
    card links and the network only ``ratio`` (traffic time / compute time, dimensionless), a
    disk only its reason.  None where unknown."""

    resource: str
    tier: str  # fits / tight / cannot / unknown (the ledger's words)
    used_bytes: NotRequired[int | None]
    capacity_bytes: NotRequired[int | None]
    used_cards: NotRequired[int]
    capacity_cards: NotRequired[int]
    ratio: float | None  # used / capacity, or traffic time / compute time
    reason: str


class WorkloadJSON(TypedDict):
    id: str
    title: str
    model: str
    job: Literal["serve", "train", "lora", "qlora", "load"]
    options: dict[str, Any]  # fit's options in snake_case, as the catalogue gives them
    machines: int
    expect: str | None  # the tier the field notes give
    beside: list[str]  # ids running at the same time (host RAM judged on the sum)
    cards_needed: int
    lifeboat: NotRequired[str]  # said when it uses every card
    resources: list[ResourceJSON]
    ledger: dict[str, Any] | None  # host_peak_bytes, host_reclaimable_bytes, host_items
    stack: dict[str, Any] | None  # the busiest card's items (bytes) against its capacity
    links: dict[str, Any] | None
    largest: dict[str, Any] | None
    # the next three are absent where the workload was not judged (too few cards)
    speed: NotRequired[dict[str, Any] | None]  # seconds in *_s keys, rates per second
    suggestions: NotRequired[list[Any]]
    notes: NotRequired[list[str]]
    tier: str
    binding: str
    reason: str
    peak_sequences: int | None
    peak_requests_per_s: float | None
    peak_output_tokens_per_s: float | None
    claim: str | None
    tier_name: Tier
    agrees: bool | None
    model_state: NotRequired[dict[str, Any]]
    framework: NotRequired[dict[str, Any]]
    claim_check: NotRequired[dict[str, Any]]


class BottleneckJSON(TypedDict):
    resource: str
    cannot: int
    tight: int
    workloads: list[str]
    worst_ratio: float | None  # used / size for memory, traffic / compute time for links
    unknown: int
    severity: float


class ReportBodyJSON(TypedDict):
    """The capacity report of a workload catalogue on one machine, as ``report`` and
    ``compare`` (once per machine) print it.  Bytes in ``*_bytes`` keys (and a memory
    resource's used / capacity)."""

    runtime: dict[str, Any]  # vendor, runtime, measured, caveat
    machine: dict[str, Any]  # name, description, cards, card_memory_bytes, host_ram_bytes
    workloads: list[WorkloadJSON]
    counts: dict[Tier, int]
    bottlenecks: list[BottleneckJSON]
    serving: dict[str, Any]  # cards, lifeboat, business_cards, workloads, lifeboat_note
    host_loads: list[dict[str, Any]]
    links: list[dict[str, Any]]
    scale_out: dict[str, Any]  # buy_second_machine, verdict, criteria


class CapacityJSON(ReportBodyJSON):
    """``nodeledger report --format json``: the capacity report with its schema version and the
    lines that say where the machine and the workloads came from."""

    schema_version: int
    intro: list[str]


def capacity_json_schema() -> dict[str, Any]:
    """The JSON Schema of ``report --format json``, generated from :class:`CapacityJSON`."""
    return json_schema(CapacityJSON, "nodeledger report --format json")
