"""The capacity report: a workload catalogue judged on one machine.

For each workload: the ledger (verdict/fit.py) for card memory and host RAM, the traffic check
(verdict/links.py) for card links and network, and the card count; the tier is the worst of them
("can" / "tight" / "cannot", or "unknown" when the card memory is unknown).  Then, per machine:
the bottleneck ranking, the serving capacity with the lifeboat rule, how many big loads host RAM
takes at once, and the scale-out verdict (the three criteria of field claim "scale_out", each with
its evidence).

The result is plain data (dicts and lists) so that JSON, Markdown, HTML and the terminal render
the same figures.
"""

from __future__ import annotations

import dataclasses
import re

from nodeledger.errors import InputError
from nodeledger.ledger.build import load_ledger, train_ledger
from nodeledger.ledger.jobs import LoadJob, ServeJob, TrainJob
from nodeledger.ledger.runtime import provenance
from nodeledger.ledger.weights import config_scheme, scheme_for, weight_bytes
from nodeledger.machine.profile import MachineProfile
from nodeledger.model.spec import ModelSpec
from nodeledger.speed import figures as F
from nodeledger.speed.job import job_speed
from nodeledger.speed.load import load_speed
from nodeledger.speed.work import decode_weight_bytes
from nodeledger.units import count, gib_num
from nodeledger.verdict.catalogue import Workload
from nodeledger.verdict.fit import TIGHT, _judge, fit, verdict_of
from nodeledger.verdict.lifeboat import resolve_lifeboat
from nodeledger.verdict.links import RATIO_TIERS, link_check

TIER_NAME = {"fits": "can", "tight": "tight", "cannot": "cannot", "unknown": "unknown"}
ORDER = {"fits": 0, "unknown": 1, "tight": 2, "cannot": 3}
RESOURCES = ("card memory", "host RAM", "card links", "network", "disk", "cards")
CANNOT_ABOVE = {"card links": RATIO_TIERS[-1][0], "network": RATIO_TIERS[-1][0]}  # memory: 1
UNDECIDED = {  # what would decide a resource left unknown
    "card links": "link bandwidth unknown: `nodeledger bench --save-profile FILE` measures it",
    "network": "NIC speed unknown: `nodeledger machine probe` reads it",
    "card memory": "card memory unknown: `nodeledger machine probe` reads it",
    "disk": "the cache disk's read rate unknown: `nodeledger bench --save-profile FILE` measures it",
    "host RAM": "host RAM unknown: `nodeledger machine probe` reads it",
}


def span(machine: MachineProfile, machines: int) -> MachineProfile:
    """``machines`` identical copies seen as one pool of cards (for the per-card ledger; host
    RAM grows with the copies since every machine holds its own ranks)."""
    if machines == 1:
        return machine
    n = len(machine.accelerators)
    cards = [
        dataclasses.replace(a, index=k * n + a.index, numa_node=None)
        for k in range(machines)
        for a in machine.accelerators
    ]
    ram = machine.host.ram_bytes
    host = dataclasses.replace(
        machine.host, ram_bytes=None if ram is None else ram * machines, numa_nodes=[]
    )
    return dataclasses.replace(
        machine,
        name=f"{machines} x {machine.name}",
        accelerators=cards,
        interconnect=dataclasses.replace(machine.interconnect, pairs=[]),
        host=host,
    )


def cards_needed(job) -> int:
    if isinstance(job, LoadJob):
        return job.ranks  # each loading rank puts the weights on its own card
    p = job.parallel
    return p.tp * p.pp * (p.dp if isinstance(job, TrainJob) else job.replicas)


# the unit of a resource's used / capacity figures, in their key names; card links and the
# network carry only their ratio (traffic time / compute time, dimensionless), a disk its reason
UNIT_OF = {"card memory": "bytes", "host RAM": "bytes", "cards": "cards"}


def _resource(name: str, tier: str, used: float | None, cap: float | None, reason: str) -> dict:
    unit = UNIT_OF.get(name)
    out = {"resource": name, "tier": tier}
    if unit is not None:
        out |= {f"used_{unit}": used, f"capacity_{unit}": cap}
    return out | {"ratio": None if not cap or used is None else round(used / cap, 4),
                  "reason": reason}  # fmt: skip


def _card_stack(ledger) -> dict:
    card = max(ledger.cards, key=lambda c: c.total_bytes)
    return {
        "cards": card.cards,
        "capacity_bytes": card.capacity_bytes,
        "total_bytes": card.total_bytes,
        "items": [{"name": i.name, "bytes": i.bytes} for i in card.items if i.bytes > 0],
    }


def evaluate(w: Workload, spec: ModelSpec, machine: MachineProfile) -> dict:
    # long: one workload on one machine: cards, fit, each resource's reason, links, then the row
    """One workload on one machine: resources, tier, binding, reason (with numbers)."""
    job = w.job()
    row: dict = {
        "id": w.id,
        "title": w.title,
        "model": w.model,
        "job": w.kind,
        "options": dict(w.options),
        "machines": w.machines,
        "expect": w.expect,
        "beside": list(w.beside),
    }
    have = len(machine.accelerators) * w.machines
    need = cards_needed(job)
    row["cards_needed"] = need
    fewer = None  # serving replicas asked beyond the box: the replicas that fit are judged
    if need > have:
        per = need // job.replicas if isinstance(job, ServeJob) else need
        if not (isinstance(job, ServeJob) and w.machines == 1 and per <= have):
            res = _resource(
                "cards",
                "cannot",
                need,
                have,
                f"needs {count(need, 'card')}, {machine.name} has {have}",
            )
            row.update(tier="cannot", binding="cards", reason=res["reason"], resources=[res])
            row.update(ledger=None, stack=None, links=None, largest=None)
            return row
        # a serving workload of more replicas than the box holds still serves with fewer: the
        # same replicas the serving capacity counts are judged, and the shortfall of cards is
        # "tight" (it runs, not at the asked scale), never a "cannot" beside a served capacity
        fewer = _resource(
            "cards", "tight", need, have,
            f"{job.replicas} replicas x {per} card(s) = {need} cards asked, {machine.name} has "
            f"{have}: {have // per} replica(s) fit (serving capacity: what the business cards hold)",
        )  # fmt: skip
        job = dataclasses.replace(job, replicas=have // per)
    pool = span(machine, w.machines)
    result = fit(spec, job, pool, suggest=True)
    lg, v = result.ledger, result.verdict
    resources = []
    for r in v.resources:
        used, cap = r.used_bytes, r.capacity_bytes
        pct = "" if not cap else f" ({100 * used / cap:.0f} %)"
        reason = (
            f"{gib_num(used)} GiB of {'unknown' if cap is None else f'{gib_num(cap)} GiB'}{pct}"
        )
        if r.resource == "card memory":
            reason = f"busiest card {reason}"
        if r.resource == "host RAM" and lg.host.reclaimable_bytes:
            reason += f" + {gib_num(lg.host.reclaimable_bytes)} GiB evictable page cache"
        resources.append(_resource(r.resource, r.tier, used, cap, reason))
    if v.resources[0].tier == "cannot" and lg.extras.get("kv_shortfall"):
        resources[0]["reason"] += f"; {lg.extras['kv_shortfall']}"
    big = lg.extras.get("largest") or {}
    if big.get("max_concurrency_at_context") is not None:
        resources[0]["reason"] += (
            f"; at most {count(big['max_concurrency_at_context'], 'sequence')} of "
            f"{big['context']:,} tokens fit per replica"
        )
    links = link_check(spec, job, machine, w.machines)
    if links is not None:
        ratio = links.get("ratio")
        resources.append(
            _resource(
                links["resource"], links["tier"], ratio, 1.0 if ratio else None, links["reason"]
            )
        )
    if isinstance(job, LoadJob):
        resources.append(disk_resource(spec, job, machine))
    if fewer is not None:
        resources.append(fewer)
    if isinstance(job, TrainJob):
        row["model_state"] = model_state(lg)
        row["framework"] = lg.extras.get("framework")
        if w.claim and not job.is_lora:
            row["claim_check"] = claim_check(spec, job, machine, w.claim)
    if need and need > len(machine.accelerators) - 1 and w.machines == 1:
        row["lifeboat"] = (
            f"uses all {len(machine.accelerators)} cards: no lifeboat card while it runs "
            "(run it off-hours, or move triage elsewhere)"
        )
    row.update(
        resources=resources,
        ledger={
            "host_peak_bytes": lg.host.peak_bytes,
            "host_reclaimable_bytes": lg.host.reclaimable_bytes,
            "host_items": [
                {"name": i.name, "bytes": i.bytes, "reclaimable": i.reclaimable}
                for i in lg.host.items
            ],
        },
        stack=_card_stack(lg),
        links=links,
        largest=lg.extras.get("largest"),
        speed=_speed(spec, job, machine, lg.extras, w.machines, w),
        suggestions=[s.get("options") or s for s in v.suggestions][:3],
        notes=lg.notes,
    )
    _decide(row, machine)
    return row


def _speed(
    spec: ModelSpec, job, machine: MachineProfile, extras: dict, machines: int, w=None
) -> dict | None:
    """The speed estimate of a workload (serving and training; loads are in host_loads); a
    serving workload with service levels also gets the request rate one replica sustains
    within them (speed.capacity_at_slo)."""
    if isinstance(job, LoadJob):
        return None
    bench = None
    if w is not None and (w.slo_ttft_p99_s or w.slo_tpot_p99_s):
        from nodeledger.speed.serving import BenchOptions

        bench = BenchOptions(slo_ttft_p99_s=w.slo_ttft_p99_s, slo_tpot_p99_s=w.slo_tpot_p99_s)
    return job_speed(spec, job, machine, extras, machines, bench=bench)


def _cache_mount(machine: MachineProfile):
    """The mount holding the default Hugging Face cache (~/.cache/huggingface), else the root
    mount: where a load reads its checkpoint from; None when the profile lists no mount."""
    import os

    mounts = machine.storage.mounts
    if not mounts:
        return None
    cache = os.path.expanduser("~/.cache/huggingface")
    inside = [m for m in mounts if cache == m.path or cache.startswith(m.path.rstrip("/") + "/")]
    if inside:
        return max(inside, key=lambda m: len(m.path))
    return next((m for m in mounts if m.path == "/"), None)


def disk_resource(spec: ModelSpec, job, machine: MachineProfile) -> dict:
    """The time a load spends reading its checkpoint from the cache's disk (informational: the
    field notes give no threshold for it, so the tier is "fits" once the time is known)."""
    size = decode_weight_bytes(spec, getattr(job, "dtype", None), 1)["checkpoint_bytes"]
    m = _cache_mount(machine)
    if m is None:
        return _resource("disk", "unknown", None, None, "no mount in the profile: the "
                         "checkpoint's read time is unknown")  # fmt: skip
    f = F.read_rate(m)
    rate, src = f.value, f.source
    if rate is None:
        return _resource("disk", "unknown", None, None, f"{m.path} ({m.kind}): read rate "
                         "unknown")  # fmt: skip
    secs = size / (rate * 1e9)
    return _resource("disk", "fits", None, None,
                     f"{size / 1e9:,.1f} GB from {m.path} ({m.kind}) in {secs:,.0f} s at "
                     f"{rate:,.2f} GB/s ({src.split(' (')[0]})")  # fmt: skip


STATE_ITEMS = ("parameters", "gradients", "optimizer states", "fp32 master weights",
               "fp32 gradient partition", "DDP gradient buckets")  # fmt: skip
# the framework layouts a full fine-tune's claim is checked under: (framework, --shard it takes
# for a sharded job, --precision; None = the framework's default)
CLAIM_LAYOUTS = (("deepspeed", "zero3", None), ("fsdp2", "fsdp", None), ("fsdp2", "fsdp", "bf16"),
                 ("fsdp1", "fsdp", None), ("megatron", "zero1", None), ("hf-trainer", "fsdp", None))  # fmt: skip
_CLAIM_RANGE = re.compile(r"(\d+(?:\.\d+)?)\s*[-–]\s*(\d+(?:\.\d+)?)\s*GB per card")


def claim_check(spec: ModelSpec, job: TrainJob, machine: MachineProfile, claim: str) -> dict:
    """A field claim about a sharded full fine-tune ("16-30 GB per card sharded over 8") held
    against the model state per card under each framework's default layout (CLAIM_LAYOUTS,
    ledger/frameworks.toml), each re-computed by the ledger; which layouts, if any, fall in the
    claimed range (GB = 10^9 B, as the claim writes it)."""
    m = _CLAIM_RANGE.search(claim)
    lo, hi = (float(m.group(1)), float(m.group(2))) if m else (None, None)
    rows = []
    for fw, shard, prec in CLAIM_LAYOUTS:
        changes = {"framework": fw, "shard": shard if job.shard != "none" else "none"}
        if prec:
            changes["precision"] = prec
        try:
            cand = job.rechoose(**changes)
            lg = train_ledger(spec, cand, machine)
        except InputError:
            continue
        ms = model_state(lg)
        v = verdict_of(lg)
        gb = ms["per_card_bytes"] / 1e9
        rows.append({
            "framework": fw if fw == lg.extras["framework"]["layout_of"] else f"{fw} ({lg.extras['framework']['layout_of']})",
            "shard": cand.shard, "precision": lg.extras["framework"]["layout_precision"],
            "layout": lg.extras["framework"]["layout"],
            "state_per_card_bytes": ms["per_card_bytes"],
            "busiest_card_total_bytes": ms["busiest_card_total_bytes"], "tier": v.tier,
            "in_claimed_range": None if lo is None else lo <= gb <= hi,
        })  # fmt: skip
    hits = [r for r in rows if r["in_claimed_range"]]
    return {"range_gb": None if lo is None else [lo, hi], "layouts": rows,
            "reaching": [f"{r['framework']} --shard {r['shard']} --precision {r['precision']}" for r in hits]}  # fmt: skip


def model_state(lg) -> dict:
    """Parameters + gradients + optimizer states: per card, and over all cards of the job."""
    per_card = {}
    total = 0
    for c in lg.cards:
        here = sum(i.bytes for i in c.items if i.name.startswith(STATE_ITEMS))
        per_card[str(c.cards[0])] = here
        total += here * len(c.cards)
    busiest = max(lg.cards, key=lambda c: c.total_bytes)
    return {
        "total_bytes": total,
        "per_card_bytes": max(per_card.values()) if per_card else 0,
        "busiest_card_total_bytes": busiest.total_bytes,
        "cards": sum(len(c.cards) for c in lg.cards),
        "items": {
            name: sum(
                i.bytes * len(c.cards) for c in lg.cards for i in c.items if i.name.startswith(name)
            )
            for name in STATE_ITEMS
        },
    }


def _decide(row: dict, machine: MachineProfile) -> None:
    res = row["resources"]
    card = next(r for r in res if r["resource"] == "card memory")
    known = [r for r in res if r["tier"] != "unknown"]
    if not known:
        row.update(tier="unknown", binding=None, reason="capacities unknown")
        return
    worst = max(known, key=lambda r: (ORDER[r["tier"]], r["ratio"] or 0))
    tier = worst["tier"]
    if card["tier"] == "unknown" and tier != "cannot":
        worst, tier = card, "unknown"
    # the resource a workload exists to test: unknown there means no verdict
    net = next((r for r in res if r["resource"] == "network"), None)
    host = next((r for r in res if r["resource"] == "host RAM"), None)
    if row["machines"] > 1 and net is not None and net["tier"] == "unknown" and tier != "cannot":
        worst, tier = net, "unknown"  # a job across machines lives or dies by its network
    loads = row["job"] == "load" or row["beside"]
    if loads and host and host["tier"] == "unknown" and tier != "cannot":
        worst, tier = host, "unknown"  # a load is a host-RAM question
    unknown = [r for r in res if r["tier"] == "unknown" and r is not worst]
    reason = f"{worst['resource']}: {worst['reason']}" if not worst["reason"].startswith(worst["resource"]) else worst["reason"]  # fmt: skip
    if unknown:
        reason += "; not judged: " + "; ".join(
            f"{r['resource']} ({UNDECIDED.get(r['resource'], 'unknown')})" for r in unknown
        )
    row.update(tier=tier, binding=worst["resource"], reason=reason)


def _add_beside(rows: dict[str, dict], machine: MachineProfile) -> None:
    """Workloads that share the host with others: host RAM is judged on the sum."""
    for row in rows.values():
        if not row["beside"] or row.get("ledger") is None:
            continue
        others = [rows[b] for b in row["beside"] if rows[b].get("ledger")]
        hard = row["ledger"]["host_peak_bytes"] + sum(
            o["ledger"]["host_peak_bytes"] for o in others
        )
        soft = row["ledger"]["host_reclaimable_bytes"] + sum(
            o["ledger"]["host_reclaimable_bytes"] for o in others
        )
        cap = machine.host.ram_bytes
        j = _judge("host RAM", hard, cap)
        pct = "" if not cap else f" ({100 * hard / cap:.0f} %)"
        reason = (
            f"{gib_num(hard)} GiB with {', '.join(row['beside'])} running beside it, of "
            f"{'unknown' if cap is None else f'{gib_num(cap)} GiB'}{pct}"
            + (f" + {gib_num(soft)} GiB evictable page cache" if soft else "")
        )
        host = next(r for r in row["resources"] if r["resource"] == "host RAM")
        host.update(tier=j.tier, used_bytes=hard, capacity_bytes=cap,
                    ratio=None if not cap else round(hard / cap, 4), reason=reason)  # fmt: skip
        _decide(row, machine)


def _weights_bytes(spec: ModelSpec, job) -> int:
    dtype = getattr(job, "dtype", None)
    scheme = scheme_for(dtype, spec) if dtype else config_scheme(spec)
    return weight_bytes(spec, scheme).total_bytes


def bottlenecks(rows: list[dict]) -> list[dict]:
    """Which resource binds how many workloads, and by how much (worst used / capacity)."""
    out = []
    for name in RESOURCES:
        bound = [r for r in rows if r.get("binding") == name and r["tier"] in ("tight", "cannot")]
        hit = [res for r in rows for res in r.get("resources", []) if res["resource"] == name]
        unknown = sum(1 for res in hit if res["tier"] == "unknown")
        ratios = [res["ratio"] for res in hit if res["ratio"] is not None]
        out.append({
            "resource": name,
            "cannot": sum(1 for r in bound if r["tier"] == "cannot"),
            "tight": sum(1 for r in bound if r["tier"] == "tight"),
            "workloads": [r["id"] for r in bound],
            "worst_ratio": max(ratios) if ratios else None,
            "unknown": unknown,
        })  # fmt: skip
    for b in out:
        bound = [res["ratio"] for r in rows if r.get("binding") == b["resource"]
                 and r["tier"] in ("tight", "cannot")
                 for res in r.get("resources", []) if res["resource"] == b["resource"]
                 and res["ratio"] is not None]  # fmt: skip
        limit = CANNOT_ABOVE.get(b["resource"], 1.0)
        b["severity"] = round(max(bound) / limit, 4) if bound else 0.0
    # the resource that most exceeds what it gives ranks first, in multiples of its own cannot
    # threshold (used / capacity > 1 for memory; traffic / compute time > 2 for links and the
    # network), then by how many workloads it binds
    out.sort(key=lambda b: (b["severity"], b["cannot"], b["tight"], b["worst_ratio"] or 0),
             reverse=True)  # fmt: skip
    return out


def _capacity_note(replicas: int, card_tier: str, fits_one: bool, conc, per: int,
                   business: int, context) -> str | None:  # fmt: skip
    """Why a workload's serving capacity is what it is, where that needs saying."""
    if replicas:
        if card_tier in ("fits", "tight"):
            return None
        return (
            f"the workload's own concurrency is {card_tier}; the capacity is at the most that fit"
        )
    if fits_one:
        return f"one replica needs {count(per, 'card')}, more than the {count(business, 'business card')}"
    if conc == 0:
        return (f"not one sequence of {context:,} tokens fits beside the weights (card memory): "
                "no replica")  # fmt: skip
    return f"does not fit ({card_tier}): no replica"


def _slo_levels(slo: dict) -> str:
    """The service levels a capacity was found within, as the report words them."""
    return " and ".join(x for x in (
        f"TTFT p99 <= {slo['ttft_p99_s']:g} s" if slo.get("ttft_p99_s") else "",
        f"TPOT p99 <= {slo['tpot_p99_s']:g} s" if slo.get("tpot_p99_s") else "") if x)  # fmt: skip


def serving_capacity(rows: list[dict], machine: MachineProfile, lifeboat: int) -> dict:
    n = len(machine.accelerators)
    business = max(0, n - lifeboat)
    out = []
    for r in rows:
        if r["job"] != "serve" or r["machines"] != 1 or not r.get("stack"):
            continue
        o = r["options"]
        per = o.get("tp", 1) * o.get("pp", 1)
        largest = r.get("largest") or {}
        conc = largest.get("max_concurrency_at_context")
        card_tier = next(
            (x["tier"] for x in r["resources"] if x["resource"] == "card memory"),
            r["resources"][0].get("per_replica_card_tier", "unknown"),
        )
        # capacity is the most that fit, whatever the workload's own concurrency: a replica
        # counts when at least one sequence of its context fits on its cards
        fits_one = bool(conc) if conc is not None else card_tier in ("fits", "tight")
        replicas = business // per if fits_one else 0
        sp = r.get("speed") or {}
        top = sp.get("at_most_that_fit") or {}
        tps = top.get("output_tokens_per_s") if replicas else None
        rps = top.get("requests_per_s") if replicas else None
        slo = sp.get("capacity_at_slo") if replicas else None
        slo_rps = None if not slo else slo["requests_per_s"] * replicas
        out.append({
            "requests_per_s_at_slo": slo_rps,
            "slo": None if not slo else {"ttft_p99_s": slo.get("ttft_p99_s"),
                                         "tpot_p99_s": slo.get("tpot_p99_s"),
                                         "levels": _slo_levels(slo),
                                         "per_replica": slo["requests_per_s"],
                                         "bound": slo["bound"]},
            "output_tokens_per_s_per_replica": tps,
            "requests_per_s_per_replica": rps,
            "output_tokens_per_s": None if tps is None else tps * replicas,
            "requests_per_s": None if rps is None else rps * replicas,
            "input_len": sp.get("input_len"),
            "output_len": sp.get("output_len"),
            "speed_binding": top.get("binding"),
            "speed_unknown": (sp.get("unknown") or []) if replicas else [
                "no replica on the business cards (lifeboat rule)"],
            "id": r["id"],
            "cards_per_replica": per,
            "replicas_on_business_cards": replicas,
            "max_sequences_per_replica": conc,
            "context": largest.get("context"),
            "total_sequences": None if conc is None else replicas * conc,
            "note": _capacity_note(replicas, card_tier, fits_one, conc, per, business,
                                   largest.get("context")),
        })  # fmt: skip
    return {"cards": n, "lifeboat": lifeboat, "business_cards": business, "workloads": out}


def host_load_concurrency(rows, specs, machine: MachineProfile) -> list[dict]:
    """How many loads of each loaded checkpoint host RAM takes at once (load ledger, ranks k)."""
    out = []
    seen = set()
    n = max(1, len(machine.accelerators))
    for r in rows:
        if r["job"] != "load" or r["model"] in seen:
            continue
        seen.add(r["model"])
        spec = specs[r["model"]]
        base = LoadJob()
        hard_max = fits_max = 0
        cap = machine.host.ram_bytes
        if cap is None:
            out.append({"model": r["model"], "max_concurrent": None, "max_without_tight": None,
                        "reason": "host RAM unknown"})  # fmt: skip
            continue
        per_load = None
        for k in range(1, n + 1):
            lg = load_ledger(spec, dataclasses.replace(base, ranks=k), machine)
            j = _judge("host RAM", lg.host.peak_bytes, cap)
            if k == 1:
                per_load = lg.host.peak_bytes
            if j.tier != "cannot":
                hard_max = k
            if j.tier == "fits":
                fits_max = k
        times = load_speed(decode_weight_bytes(spec, None, 1)["checkpoint_bytes"], machine)
        out.append({
            "model": r["model"],
            "load_times": times,
            "one_load_host_bytes": per_load,
            "max_concurrent": hard_max,
            "max_without_tight": fits_max,
            "reason": f"one load holds {gib_num(per_load)} GiB (+ page cache); host RAM "
            f"{gib_num(cap)} GiB, tight above {TIGHT['host RAM']:.0%}",
        })  # fmt: skip
    return out


def throughput_criterion(rows: list[dict], serving: dict) -> dict:
    """Criterion 2: a serving workload's declared peak (peak_requests_per_s at its input/output
    lengths, peak_output_tokens_per_s, or peak_sequences at once) against what the machine's
    business cards serve (lifeboat rule) with concurrency tuned to the most that fit."""
    cap_by_id = {s["id"]: s for s in serving["workloads"]}
    short, ok, open_ = [], [], []
    declared = [r for r in rows if r.get("peak_sequences") or r.get("peak_requests_per_s")
                or r.get("peak_output_tokens_per_s")]  # fmt: skip
    for r in declared:
        if r["tier"] == "cannot" and r["binding"] in ("card memory", "cards"):
            ok.append(
                f"{r['id']}: does not fit one machine at all (criterion 1), not a throughput limit"
            )
            continue
        s = cap_by_id.get(r["id"]) or {}
        reps = s.get("replicas_on_business_cards")
        at_slo = s.get("requests_per_s_at_slo") is not None
        for key, have_key, unit in (
            (
                "peak_requests_per_s",
                "requests_per_s_at_slo" if at_slo else "requests_per_s",
                "requests/s",
            ),
            ("peak_output_tokens_per_s", "output_tokens_per_s", "output tokens/s"),
            ("peak_sequences", "total_sequences", "sequences at once"),
        ):
            need = r.get(key)
            if not need:
                continue
            have = s.get(have_key)
            lengths = (f" (prompts {s['input_len']:,}, answers {s['output_len']:,} tokens)"
                       if unit != "sequences at once" and s.get("input_len") else "")  # fmt: skip
            if have is None:
                why = "; ".join(s.get("speed_unknown") or []) or "no replica fits"
                open_.append(
                    f"{r['id']}: peak {need:,.4g} {unit}{lengths}; one machine: unknown ({why})"
                )
                continue
            within = ""
            if unit == "requests/s" and at_slo:
                within = f" within {s['slo']['levels']} (Poisson arrivals, the engine simulated)"
            line = (f"{r['id']}: peak {need:,.4g} {unit}{lengths}; one machine serves {have:,.4g}"
                    f"{within} on {reps} replica(s) of the business cards"
                    + (f", bound by {s['speed_binding']}" if s.get("speed_binding") and unit != "sequences at once" else ""))  # fmt: skip
            (short if have < need else ok).append(line)
    if not declared:
        evidence = ["no serving workload declares a peak (peak_requests_per_s, "
                    "peak_output_tokens_per_s or peak_sequences): not established"]  # fmt: skip
    else:
        evidence = short + open_ + ok
    return {
        "criterion": "one machine's throughput cannot carry the peak",
        "holds": bool(short),
        "unknown": bool(open_) and not short,
        "evidence": evidence,
    }


def scale_out(rows: list[dict], specs, machine: MachineProfile, serving: dict) -> dict:
    # long: the three scale-out criteria in order, each gathered into a dict of holds + evidence
    """Field claim "scale_out": buy a second machine only when all three hold at once."""
    total = machine.total_accelerator_memory_bytes()
    # 1. a model that does not fit the total card memory of one machine (really, not a bad split)
    too_big, bad_split = [], []
    for r in rows:
        if r["machines"] != 1 or r["job"] == "load" or r["tier"] != "cannot":
            continue
        if r["binding"] not in ("card memory", "cards"):
            continue
        job = Workload(r["id"], r["title"], r["model"], r["job"], r["options"]).job()
        w = _weights_bytes(specs[r["model"]], job) if isinstance(job, ServeJob) else None
        if isinstance(job, ServeJob) and total is not None and w > total:
            too_big.append(
                f"{r['id']}: weights {gib_num(w, 0)} GiB > all cards {gib_num(total, 0)} GiB"
            )
        elif (
            isinstance(job, ServeJob)
            and r["binding"] == "card memory"
            and r["cards_needed"] >= len(machine.accelerators)
        ):
            too_big.append(
                f"{r['id']}: spread over all {len(machine.accelerators)} cards it still does not "
                f"fit (weights {gib_num(w, 0)} GiB of "
                f"{'unknown' if total is None else f'{gib_num(total, 0)} GiB'} of cards; no room "
                "left for the runtime and the KV cache)"
            )
        else:
            bad_split.append(r["id"])
    c1 = {
        "criterion": "the model does not fit the total card memory of one machine",
        "holds": bool(too_big),
        "evidence": too_big
        or (
            ["every catalogue model's weights fit the machine's cards"]
            if machine.accelerators
            else ["the machine has no accelerator: nothing to split, nothing fits"]
        ),
    }
    if bad_split and machine.accelerators:
        c1["evidence"].append(
            "cannot as split, but the weights fit in all cards (re-split first): "
            + ", ".join(bad_split)
        )
    # 2. one machine's throughput cannot carry the peak
    c2 = throughput_criterion(rows, serving)
    # 3. training needs pipeline parallel across machines
    from nodeledger.verdict.search import search_train

    need_pp, fits_in_box = [], []
    searched: dict[tuple, tuple] = {}  # (model, job) -> (found, tried): one search per layout
    for r in rows:
        if r["job"] not in ("train", "lora", "qlora") or r["machines"] != 1:
            continue
        if r["tier"] != "cannot":
            fits_in_box.append(f"{r['id']}: {TIER_NAME[r['tier']]} in one machine as written")
            continue
        job = Workload(r["id"], r["title"], r["model"], r["job"], r["options"]).job()
        key = (r["model"], job)
        if key not in searched:
            searched[key] = search_train(specs[r["model"]], job, machine, top=1, lifeboat=0)
        found, tried = searched[key]
        if found:
            fits_in_box.append(f"{r['id']}: fits in one machine as {found[0].options} "
                               f"(searched {tried} layouts)")  # fmt: skip
        else:
            need_pp.append(f"{r['id']}: none of {tried} in-box layouts fits")
    c3 = {
        "criterion": "training needs pipeline parallel across machines",
        "holds": bool(need_pp),
        "evidence": need_pp + fits_in_box or ["no training workload in the catalogue"],
    }
    crit = [c1, c2, c3]
    buy = all(c["holds"] for c in crit)
    failing = [str(i + 1) for i, c in enumerate(crit) if not c["holds"]]
    verdict = (
        "buy a second machine: all three criteria hold"
        if buy
        else f"stay on one machine: criterion {failing[0]} does not hold"
        if len(failing) == 1
        else f"stay on one machine: criteria {' and '.join(failing)} do not hold"
    )
    return {"buy_second_machine": buy, "verdict": verdict, "criteria": crit}


def capacity_report(
    machine: MachineProfile,
    workloads: list[Workload],
    specs: dict[str, ModelSpec],
    lifeboat: int | None = None,
) -> dict:
    """The report of ``workloads`` on ``machine``; ``lifeboat`` None: one card kept free, none
    on a one-card machine (verdict/lifeboat.py, said in ``serving.lifeboat_note``)."""
    lifeboat, lifeboat_note = resolve_lifeboat(len(machine.accelerators), lifeboat)
    rows = {}
    for w in workloads:
        try:
            rows[w.id] = evaluate(w, specs[w.model], machine)
        except InputError as exc:
            msg = str(exc)
            raise InputError(
                msg if msg.startswith("workload ") else f"workload {w.id!r}: {msg}"
            ) from None
    for w in workloads:
        rows[w.id]["peak_sequences"] = w.peak_sequences
        rows[w.id]["peak_requests_per_s"] = w.peak_requests_per_s
        rows[w.id]["peak_output_tokens_per_s"] = w.peak_output_tokens_per_s
        rows[w.id]["claim"] = w.claim
    _add_beside(rows, machine)
    ordered = [rows[w.id] for w in workloads]
    for r in ordered:
        r["tier_name"] = TIER_NAME[r["tier"]]
        r["agrees"] = None if not r["expect"] else r["expect"] == r["tier_name"]
    serving = serving_capacity(ordered, machine, lifeboat)
    serving["lifeboat_note"] = lifeboat_note
    runtime = provenance(machine.accelerators[0].vendor if machine.accelerators else "")
    return {
        "runtime": runtime,
        "machine": {
            "name": machine.name,
            "description": machine.description,
            "cards": len(machine.accelerators),
            "card_memory_bytes": machine.total_accelerator_memory_bytes(),
            "host_ram_bytes": machine.host.ram_bytes,
        },
        "workloads": ordered,
        "counts": {
            t: sum(1 for r in ordered if r["tier_name"] == t)
            for t in ("can", "tight", "cannot", "unknown")
        },
        "bottlenecks": bottlenecks(ordered),
        "serving": serving,
        "host_loads": host_load_concurrency(ordered, specs, machine),
        "links": [{"id": r["id"], **r["links"]} for r in ordered if r.get("links")],
        "scale_out": scale_out(ordered, specs, machine, serving),
    }
