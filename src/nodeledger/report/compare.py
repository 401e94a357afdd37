"""Several machines, one workload catalogue: which runs what, serving capacity, cost."""

from __future__ import annotations

from typing import Any

from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from nodeledger.document import Grid, Lines, Section
from nodeledger.errors import InputError
from nodeledger.machine.profile import MachineProfile
from nodeledger.model.spec import ModelSpec
from nodeledger.report.capacity import capacity_report
from nodeledger.report.usecase import ReportBodyJSON
from nodeledger.schemas import json_schema
from nodeledger.units import num
from nodeledger.verdict.catalogue import Workload


def parse_prices(items: list[str], names: list[str]) -> dict[str, float]:
    """``NAME=AMOUNT`` pairs; NAME must be one of the compared machines."""
    out: dict[str, float] = {}
    for it in items:
        name, sep, amount = it.partition("=")
        if not sep:
            raise InputError(f"--price {it!r}: write MACHINE=AMOUNT, e.g. dgx-h100=300000")
        if name not in names:
            raise InputError(
                f"--price {it!r}: {name!r} is not one of the compared machines {names}"
            )
        try:
            value = float(amount)
        except ValueError:
            raise InputError(f"--price {it!r}: {amount!r} is not a number") from None
        if not value > 0 or value == float("inf"):
            raise InputError(f"--price {it!r}: the amount must be a positive finite number")
        out[name] = value
    return out


AMORTIZE_YEARS = 3.0  # price per million tokens: the price spread over this many years at full load
SECONDS_PER_YEAR = 365.25 * 86400


def price_per_million_tokens(price: float | None, tokens_per_s: float | None,
                             years: float = AMORTIZE_YEARS) -> float | None:  # fmt: skip
    """price / (tokens/s x seconds in ``years`` / 1e6): the machine's price spread over the
    output tokens it serves at that rate, around the clock, for ``years`` (power and staff left
    out; an assumption the compare output names)."""
    if price is None or not tokens_per_s:
        return None
    return price / (tokens_per_s * years * SECONDS_PER_YEAR / 1e6)


# ``compare --format json``: the machine-readable contract (issue 31), its JSON Schema generated
# from these types and shipped as nodeledger/schemas/compare.schema.json
SCHEMA_VERSION = 1


class CompareCellJSON(TypedDict):
    tier: str
    binding: str | None
    reason: str


class CompareRowJSON(TypedDict):
    id: str
    title: str
    machines: dict[str, CompareCellJSON]  # machine -> its verdict on this workload


class CompareMachineJSON(TypedDict):
    """One machine's line: prices in the unit they were given (--price MACHINE=COST), rates per
    second; per serving workload in the dicts (None where it does not run or is unknown)."""

    machine: str
    name: str
    cards: int
    card_memory_bytes: int | None
    counts: dict[str, int]
    runnable: int
    price: float | None
    price_per_runnable_workload: float | None
    serving_sequences: dict[str, int | None]
    serving_notes: dict[str, str]
    price_per_sequence: dict[str, float | None]
    output_tokens_per_s: dict[str, float | None]
    requests_per_s_at_slo: dict[str, float | None]
    speed_binding: dict[str, str | None]
    output_tokens_per_s_per_price: dict[str, float | None]
    price_per_million_output_tokens: dict[str, float | None]
    bottleneck: str | None
    scale_out: str


class FasterJSON(TypedDict):
    fastest: str | None
    most_per_price: str | None
    ratio: float | None  # the fastest's output tokens/s over the slowest's


class CompareJSON(TypedDict):
    schema_version: int
    workloads_source: str
    workloads: list[CompareRowJSON]
    machines: list[CompareMachineJSON]
    reports: dict[str, ReportBodyJSON]  # machine -> its capacity report
    throughput_basis: str
    faster: dict[str, FasterJSON]


def compare_json_schema() -> dict[str, Any]:
    """The JSON Schema of ``compare --format json``, generated from :class:`CompareJSON`."""
    return json_schema(CompareJSON, "nodeledger compare --format json")


def compare(
    machines: list[tuple[str, MachineProfile]],
    workloads: list[Workload],
    specs: dict[str, ModelSpec],
    prices: dict[str, float] | None = None,
    lifeboat: int | None = None,
    years: float = AMORTIZE_YEARS,
) -> dict:
    """machines: (the name the user gave, profile) pairs."""
    prices = prices or {}
    reports = {ref: capacity_report(m, workloads, specs, lifeboat) for ref, m in machines}
    table = []
    for w in workloads:
        cells = {}
        for ref, _ in machines:
            r = next(x for x in reports[ref]["workloads"] if x["id"] == w.id)
            cells[ref] = {"tier": r["tier_name"], "binding": r["binding"], "reason": r["reason"]}
        table.append({"id": w.id, "title": w.title, "machines": cells})
    summary = []
    for ref, m in machines:
        rep = reports[ref]
        runnable = rep["counts"]["can"] + rep["counts"]["tight"]
        price = prices.get(ref)
        serving = {s["id"]: s["total_sequences"] for s in rep["serving"]["workloads"]}
        serving_notes = {s["id"]: s["note"] for s in rep["serving"]["workloads"] if s["note"]}
        tokens = {s["id"]: s["output_tokens_per_s"] for s in rep["serving"]["workloads"]}
        # requests/s within the workload's service levels (slo_ttft_p99_s / slo_tpot_p99_s)
        at_slo = {s["id"]: s.get("requests_per_s_at_slo") for s in rep["serving"]["workloads"]
                  if s.get("requests_per_s_at_slo") is not None}  # fmt: skip
        binds = {s["id"]: s["speed_binding"] for s in rep["serving"]["workloads"]}
        summary.append({
            "machine": ref,
            "name": m.name,
            "cards": len(m.accelerators),
            "card_memory_bytes": m.total_accelerator_memory_bytes(),
            "counts": rep["counts"],
            "runnable": runnable,
            "price": price,
            "price_per_runnable_workload": None if price is None or not runnable else price / runnable,
            "serving_sequences": serving,
            "serving_notes": serving_notes,
            "price_per_sequence": {
                k: (None if price is None or not v else price / v) for k, v in serving.items()
            },
            "output_tokens_per_s": tokens,
            "requests_per_s_at_slo": at_slo,
            "speed_binding": binds,
            "output_tokens_per_s_per_price": {
                k: (None if price is None or not v else v / price) for k, v in tokens.items()
            },
            "price_per_million_output_tokens": {
                k: price_per_million_tokens(price, v, years) for k, v in tokens.items()
            },
            "bottleneck": next(
                (b["resource"] for b in rep["bottlenecks"] if b["cannot"] or b["tight"]), None
            ),
            "scale_out": rep["scale_out"]["verdict"],
        })  # fmt: skip
    return {"schema_version": SCHEMA_VERSION, "workloads": table, "machines": summary,
            "reports": reports,
            "throughput_basis": (
                "output tokens/s of the serving workloads on the business cards (lifeboat "
                f"{_lifeboats(reports)}), concurrency at the most that fit, prompts/answers as each workload "
                "states (the engine simulated: speed/serving.py); price per million output tokens spreads the price over "
                f"{years:g} years of serving around the clock at that rate (power, staff left out)"
            ),
            "faster": _faster(summary)}  # fmt: skip


def _lifeboats(reports: dict) -> str:
    """The lifeboat each machine keeps: one figure when they agree (a one-card machine keeps
    none, verdict/lifeboat.py)."""
    kept = {ref: rep["serving"]["lifeboat"] for ref, rep in reports.items()}
    if len(set(kept.values())) <= 1:
        return str(next(iter(kept.values()), 0))
    return ", ".join(f"{v} on {k}" for k, v in kept.items())


def _faster(summary: list[dict]) -> dict:
    """Per serving workload: which machine serves more output tokens/s, and per price."""
    out = {}
    ids = list(summary[0]["output_tokens_per_s"]) if summary else []
    for wid in ids:
        rates = {m["machine"]: m["output_tokens_per_s"].get(wid) for m in summary}
        known = {k: v for k, v in rates.items() if v}
        per_price = {m["machine"]: m["output_tokens_per_s_per_price"].get(wid) for m in summary}
        kp = {k: v for k, v in per_price.items() if v}
        out[wid] = {
            "fastest": max(known, key=known.get) if known else None,
            "most_per_price": max(kp, key=kp.get) if len(kp) == len(summary) else None,
            "ratio": (max(known.values()) / min(known.values())) if len(known) == len(summary) and len(known) > 1 else None,
        }  # fmt: skip
    return out


def compare_machines(refs: list[str], workloads: str | None, price_texts: list[str],
                     lifeboat: int | None) -> tuple[dict, str]:  # fmt: skip
    """The ``compare`` use case: each machine (preset, profile or bundle) resolved, the prices
    (``MACHINE=COST``) read, the workload catalogue loaded; (the comparison, the catalogue's
    source)."""
    from nodeledger.machine import resolve_machine
    from nodeledger.report.usecase import catalogue

    profiles = [(m, resolve_machine(m)) for m in refs]
    prices = parse_prices(price_texts or [], refs)
    ws, specs, src = catalogue(workloads)
    return compare(profiles, ws, specs, prices, lifeboat), src


# -- the comparison as a document: tables of the shared section kinds (nodeledger.document) --


def _binding_note(cell: dict) -> str:
    """What binds a compare cell that is not "can", as " (resource)" after its tier."""
    return f" ({cell['binding']})" if cell["tier"] != "can" and cell["binding"] else ""


def _tput_cell(m: dict, wid: str) -> str:
    v = m["output_tokens_per_s"].get(wid)
    if not v:
        return "unknown" if m["serving_sequences"].get(wid) else "-"
    cell = f"{v:,.0f} tok/s"
    pm = m["price_per_million_output_tokens"].get(wid)
    if pm is not None:
        cell += f" ({pm:,.3f} per M tokens)"
    return cell


def _faster_cell(f: dict) -> str:
    if not f.get("fastest"):
        return ""
    cell = f"{f['fastest']}" + (f" x{f['ratio']:.2f}" if f.get("ratio") else "")
    if f.get("most_per_price"):
        cell += f"; per price: {f['most_per_price']}"
    return cell


def compare_sections(res: dict[str, Any], src: str) -> list[Section]:
    """The comparison's tables, in the order every format prints them."""
    from nodeledger.report.sections import TIER_STYLE

    names = [m["machine"] for m in res["machines"]]
    tiers = Grid(f"Workloads ({src})", ["workload", *names], [
        [row["id"], *[[(c["tier"], TIER_STYLE[c["tier"]]), (_binding_note(c), None)]
                      for c in (row["machines"][n] for n in names)]]
        for row in res["workloads"]
    ])  # fmt: skip
    per = Grid("Per machine", ["machine", "cards", "card memory", "can / tight / cannot / unknown",
                               "first bottleneck", "price", "price per runnable workload"], [
        [m["machine"], str(m["cards"]), num(m["card_memory_bytes"] and m["card_memory_bytes"] / 2**30, "GiB"),
         "{can} / {tight} / {cannot} / {unknown}".format(**m["counts"]), m["bottleneck"] or "none",
         num(m["price"]), num(m["price_per_runnable_workload"])]
        for m in res["machines"]
    ])  # fmt: skip
    ids = list(res["machines"][0]["serving_sequences"]) if res["machines"] else []
    seqs = Grid("Serving capacity on the business cards (sequences at the workload's context)",
                ["workload", *names], [
        [wid, *[num(m["serving_sequences"].get(wid))
                + (f" ({m['price_per_sequence'][wid]:,.0f}/seq)" if m["price_per_sequence"].get(wid) else "")
                + (" *" if (m.get("serving_notes") or {}).get(wid) else "") for m in res["machines"]]]
        for wid in ids
    ], [f"  * {m['machine']} {wid}: {note}" for m in res["machines"]
        for wid, note in (m.get("serving_notes") or {}).items()])  # fmt: skip
    tput = Grid("Serving throughput on the business cards (output tokens/s at the most that fit)",
                ["workload", *names, "faster"], [
        [wid, *[_tput_cell(m, wid) for m in res["machines"]], _faster_cell(res["faster"].get(wid, {}))]
        for wid in ids
    ])  # fmt: skip
    out: list[Section] = [tiers, per, seqs, tput]
    at_slo = [m.get("requests_per_s_at_slo") or {} for m in res["machines"]]
    slo_ids = [w for w in ids if any(w in s for s in at_slo)]
    if slo_ids:
        out.append(Grid("Capacity within each workload's service levels (requests/s on the "
                        "business cards, Poisson arrivals, the engine simulated)", ["workload", *names],
                        [[wid, *["-" if s.get(wid) is None else f"{s[wid]:,.2f} req/s" for s in at_slo]]
                         for wid in slo_ids]))  # fmt: skip
    out.append(Lines([f"  basis: {res['throughput_basis']}",
                      *(f"{m['machine']}: {m['scale_out']}" for m in res["machines"])]))  # fmt: skip
    return out


def compare_terminal(con, res: dict[str, Any], src: str) -> None:
    for section in compare_sections(res, src):
        section.terminal(con)


def compare_markdown(res: dict[str, Any], src: str) -> list[str]:
    out = [f"# Machine comparison ({src})"]
    for section in compare_sections(res, src):
        out += ["", *section.markdown()]
    return [*out, ""]
