"""Several machines, one workload catalogue: which runs what, serving capacity, cost."""

from __future__ import annotations

from nodeledger.errors import InputError
from nodeledger.machine.profile import MachineProfile
from nodeledger.model.spec import ModelSpec
from nodeledger.report.capacity import capacity_report
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


def compare(
    machines: list[tuple[str, MachineProfile]],
    workloads: list[Workload],
    specs: dict[str, ModelSpec],
    prices: dict[str, float] | None = None,
    lifeboat: int = 1,
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
            "price_per_sequence": {
                k: (None if price is None or not v else price / v) for k, v in serving.items()
            },
            "bottleneck": next(
                (b["resource"] for b in rep["bottlenecks"] if b["cannot"] or b["tight"]), None
            ),
            "scale_out": rep["scale_out"]["verdict"],
        })  # fmt: skip
    return {"workloads": table, "machines": summary, "reports": reports}
