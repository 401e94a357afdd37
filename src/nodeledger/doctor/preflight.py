"""Pre-flight of one job against the machine as it is now: go / wait / no-go, with reasons.

- no-go: the job cannot run on this machine at all — the ledger's card memory or host RAM is
  ``cannot`` (more than the card / the whole RAM), or it needs more cards than the machine has.
- wait: it would fit the machine, but not now — free RAM (MemAvailable) is below the job's
  host peak (other processes hold it), or too few cards are free, or starting it now would take
  the lifeboat card (field_notes.toml "lifeboat": always keep one card for triage).
- go: otherwise; warnings ride along (host RAM above half — no second such job beside it —,
  CPU offload on a small host, dataloader memory, swap in use, card memory above 90 %).

Free RAM: MemAvailable of the live machine (or the bundle).  A preset or profile file has no
live figure: the whole RAM (``ram_bytes``) counts as free, and the result says so.  Exit codes
(cli_doctor): 0 go, 1 wait, 3 no-go.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field

from nodeledger import field_notes
from nodeledger.doctor.checks import SWAP_WARN_BYTES, big_processes
from nodeledger.doctor.machine_state import MachineState
from nodeledger.ledger.build import check_parallel
from nodeledger.ledger.jobs import LoadJob, ServeJob, TrainJob
from nodeledger.machine.profile import Accelerator
from nodeledger.machine.vendors import spec as vendor_spec
from nodeledger.model.spec import ModelSpec
from nodeledger.units import GiB, gib_text
from nodeledger.verdict.lifeboat import one_card_note

VERDICT_EXIT = {"go": 0, "wait": 1, "no-go": 3}
LEVELS = ("ok", "info", "warning", "wait", "no-go")
SMALL_HOST = field_notes.value("offload_small_host", "small_host_bytes")  # tutorials' hosts
CARD_BUSY_FRACTION = 0.05  # a card with more memory used than this (and no listed process) is busy
DATALOADER_WARN = 0.25  # dataloader memory above this share of the free RAM


@dataclass
class Reason:
    level: str  # ok / info / warning / wait / no-go
    topic: str
    text: str


@dataclass
class Preflight:
    verdict: str  # go / wait / no-go
    reasons: list[Reason]
    cards: dict
    binding: list[str]
    host: dict
    fit: dict
    origin: str
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return VERDICT_EXIT[self.verdict]

    def to_json(self) -> dict:
        d = asdict(self)
        d["exit_code"] = self.exit_code
        d["units"] = "bytes"
        return d


_g = gib_text  # bytes as GiB, 1 decimal


def cards_needed(job) -> int:
    if isinstance(job, ServeJob):
        return job.parallel.tp * job.parallel.pp * job.replicas
    if isinstance(job, TrainJob):
        return job.parallel.cards
    return job.ranks  # LoadJob: each loading rank lands on its card


def _busy_reason(a: Accelerator, state: MachineState) -> str | None:
    """Why a card is not free now (None: free).  Without live state every card counts as free."""
    if not state.live:
        return None
    if a.processes:
        names = ", ".join(
            f"pid {p.pid}" + (f" {p.name}" if p.name else "") for p in a.processes[:3]
        )
        return f"held by {names}" + (" …" if len(a.processes) > 3 else "")
    used, total = a.memory_used_bytes, a.memory_bytes
    if used is not None and used > (CARD_BUSY_FRACTION * total if total else GiB):
        return f"{_g(used)} used with no process listed (another container?)"
    return None


def choose_cards(free: list[Accelerator], needed: int) -> list[Accelerator]:
    """``needed`` free cards, packed onto as few NUMA nodes as possible (nodes with the most free
    cards first; cards of unknown node last), lowest indices first within a node."""
    by_node: dict[int | None, list[Accelerator]] = {}
    for a in sorted(free, key=lambda a: a.index):
        by_node.setdefault(a.numa_node, []).append(a)
    # a node that alone holds the job: the smallest such, so bigger free groups stay whole
    fits = [n for n, cs in by_node.items() if n is not None and len(cs) >= needed]
    if fits:
        n = min(fits, key=lambda n: (len(by_node[n]), n))
        return by_node[n][:needed]
    order = sorted(by_node, key=lambda n: (n is None, -len(by_node[n]), n if n is not None else 0))
    out: list[Accelerator] = []
    for n in order:
        out.extend(by_node[n][: needed - len(out)])
        if len(out) == needed:
            break
    return out


def _binding_lines(chosen: list[Accelerator], state: MachineState) -> list[str]:
    if not chosen:
        return []
    var = vendor_spec(chosen[0].vendor).launch_visible
    ids = ",".join(str(a.index) for a in chosen)
    nodes = sorted({a.numa_node for a in chosen if a.numa_node is not None})
    if not nodes or any(a.numa_node is None for a in chosen):
        return [f"{var}={ids} <command>   # NUMA node of the cards unknown: no numactl binding"]
    if len(nodes) == 1:
        n = nodes[0]
        return [f"{var}={ids} numactl --cpunodebind={n} --membind={n} <command>"]
    lines = [f"{var}={ids} <launcher>   # the cards span NUMA nodes {','.join(map(str, nodes))}: "
             "bind each rank to its card's node"]  # fmt: skip
    for rank, a in enumerate(chosen):
        lines.append(f"  local rank {rank} -> card {a.index}: numactl --cpunodebind={a.numa_node} "
                     f"--membind={a.numa_node} <rank command>")  # fmt: skip
    return lines


def preflight(spec: ModelSpec, job, state: MachineState, lifeboat: int | None = None) -> Preflight:
    """``lifeboat`` None: one card kept free, none on a one-card machine (said in a note).
    Each part adds its reasons in order: card memory, host RAM, offload / dataloader / swap,
    then the cards."""
    from nodeledger.verdict.fit import fit

    prof = state.profile
    reasons: list[Reason] = []
    notes: list[str] = []
    if lifeboat is None:
        lifeboat = 0 if len(prof.accelerators) == 1 else 1
        if len(prof.accelerators) == 1:
            notes.append(one_card_note(1))
    add = lambda level, topic, text: reasons.append(Reason(level, topic, text))  # noqa: E731

    have = len(prof.accelerators)
    if not isinstance(job, LoadJob) and cards_needed(job) > have:
        # the docstring's no-go: more cards than the machine has (fit itself refuses the job);
        # the model's own limits (TP vs heads, PP vs layers) stay input errors
        check_parallel(spec, job.parallel.tp, job.parallel.pp, 0, prof)
        return _too_few_cards(job, state, lifeboat, have)
    result = fit(spec, job, prof)
    lg, v = result.ledger, result.verdict
    host_v = next(r for r in v.resources if r.resource == "host RAM")
    card_v = next(r for r in v.resources if r.resource == "card memory")
    fit_summary = {"tier": v.tier, "binding": v.binding, "reason": v.reason,
                   "suggestions": v.suggestions, "job_options": result.job_options}  # fmt: skip

    _card_memory(lg, card_v, add)
    host = _host_ram(state, lg, host_v, add, notes)
    _offload_dataloader_swap(job, state, lg, host_v, host["ram_bytes"], host["free_bytes"], add)
    card_info, binding = _cards(job, state, lifeboat, add, notes)

    levels = {r.level for r in reasons}
    verdict = "no-go" if "no-go" in levels else "wait" if "wait" in levels else "go"
    if verdict == "no-go" and v.suggestions:
        notes.append("would fit instead: " + "; ".join(f"{s['change']} ({s['reason']})"
                                                        for s in v.suggestions[:3]))  # fmt: skip
    if host_v.tier == "cannot" and isinstance(job, LoadJob):
        notes.extend(_load_instead(spec, job, prof))
    return Preflight(verdict, reasons, card_info, binding, host, fit_summary, state.origin, notes)


def _card_memory(lg, card_v, add) -> None:
    """The busiest card against its capacity (the ledger)."""
    card = max(lg.cards, key=lambda c: c.total_bytes)
    if card_v.tier == "cannot":
        add("no-go", "card memory", f"the busiest card needs {_g(card.total_bytes)} of "
            f"{_g(card.capacity_bytes)} ({100 * card.total_bytes / card.capacity_bytes:.0f} %)")  # fmt: skip
    elif card_v.tier == "tight":
        add("warning", "card memory", f"the busiest card needs {_g(card.total_bytes)} of "
            f"{_g(card.capacity_bytes)} (above 90 %: fragmentation and run-to-run variance "
            "eat the rest)")  # fmt: skip
    elif card_v.tier == "unknown":
        add("warning", "card memory", "card memory unknown: the ledger cannot judge the cards")
    else:
        add(
            "ok",
            "card memory",
            f"the busiest card needs {_g(card.total_bytes)} of {_g(card.capacity_bytes)}",
        )


def _host_ram(state: MachineState, lg, host_v, add, notes: list[str]) -> dict:
    """Host RAM: the whole machine (the ledger), then what is free now; the report's host dict."""
    prof, facts = state.profile, state.facts
    total, need, cache = prof.host.ram_bytes, lg.host.peak_bytes, lg.host.reclaimable_bytes
    if state.live and prof.host.available_bytes is not None:
        free, free_src = prof.host.available_bytes, "/proc/meminfo MemAvailable"
    else:
        free = total
        free_src = ("no live MemAvailable (a preset or profile file): the whole RAM (profile "
                    "ram_bytes) counts as free")  # fmt: skip
        notes.append(f"free host RAM: {free_src}")
    host = {"job_peak_bytes": need, "page_cache_bytes": cache, "ram_bytes": total,
            "free_bytes": free, "free_source": free_src, "swap_used_bytes": prof.host.swap_used_bytes,
            "big_processes": []}  # fmt: skip
    if total is None:
        add("warning", "host RAM", f"host RAM unknown: the job's {_g(need)} cannot be judged")
    elif host_v.tier == "cannot":
        add("no-go", "host RAM", f"the job's processes hold {_g(need)} at peak, more than the "
            f"host's {_g(total)} RAM (+ {_g(cache)} evictable page cache) — never run two ~60 GB "
            "loads at once")  # fmt: skip
    big = big_processes(facts)
    host["big_processes"] = [{"pid": p.pid, "name": p.name, "rss_bytes": p.rss_bytes,
                              "source": p.source} for p in big]  # fmt: skip
    big_txt = ", ".join(f"pid {p.pid} {p.name} {_g(p.rss_bytes)}" for p in big[:5])
    if total is not None and host_v.tier != "cannot" and free is not None:
        if need > free:
            add("wait", "host RAM", f"the job holds {_g(need)} at peak, {_g(free)} is free now "
                f"(MemAvailable of {_g(total)}); " + (
                    f"big loads running: {big_txt}: wait for them to finish, or stop them" if big
                    else "other processes hold the rest (ps -eo pid,rss,comm --sort=-rss | head): "
                    "wait, or free RAM"))  # fmt: skip
        else:
            text = f"the job holds {_g(need)} at peak; {_g(free)} free of {_g(total)}"
            level = "ok"
            if host_v.tier == "tight":
                level = "warning"
                text += (f" — above half the RAM ({100 * need / total:.0f} %): start no second job "
                         "of this size beside it")  # fmt: skip
            if cache and need + cache > free:
                text += (f"; its {_g(cache)} of page cache will evict other cached files "
                         "(slower, not fatal)")  # fmt: skip
            add(level, "host RAM", text)
            if big:
                add("info", "other loads", f"big processes running now: {big_txt}; the free RAM "
                    "above already excludes them")  # fmt: skip
    if facts is None:
        notes.append("other loads: no live process table (a preset or profile file)")

    return host


def _offload_dataloader_swap(job, state: MachineState, lg, host_v, total, free, add) -> None:
    """CPU offload on a small host, the dataloader's share of the free RAM, swap in use."""
    prof = state.profile
    if isinstance(job, TrainJob) and job.offload != "none":
        off = sum(i.bytes for i in lg.host.items if "offload" in i.name)
        text = f"--offload {job.offload} puts {_g(off)} in host RAM"
        if total is not None and total < SMALL_HOST:
            add("warning" if host_v.tier != "cannot" else "no-go", "CPU offload",
                text + f" on a {_g(total)} host (offload recipes assume 512 GB-1 TB): it trades "
                "a card OOM for a host OOM")  # fmt: skip
        else:
            add("info", "CPU offload", text)
    if isinstance(job, TrainJob) and job.host.workers:
        dl = sum(i.bytes for i in lg.host.items if i.name.startswith("dataloader"))
        if free and dl > DATALOADER_WARN * free:
            add("warning", "dataloader", f"{job.host.workers} workers x {job.parallel.cards} ranks "
                f"hold {_g(dl)} ({100 * dl / free:.0f} % of the free RAM): fewer --workers or a "
                "smaller --prefetch; start the dataloader after the weights are loaded")  # fmt: skip
        else:
            add(
                "ok",
                "dataloader",
                f"{job.host.workers} workers x {job.parallel.cards} ranks hold {_g(dl)}",
            )
    swap = prof.host.swap_used_bytes if state.live else None
    if swap is not None and swap >= SWAP_WARN_BYTES:
        add("warning", "swap", f"{_g(swap)} of swap in use: the host was short of RAM; paging "
            "during the job is catastrophic (cut dataloader workers rather than rely on swap)")  # fmt: skip


def _cards(job, state: MachineState, lifeboat: int, add, notes: list[str]):
    """Free cards, the lifeboat, which to use: (card info, the NUMA binding lines)."""
    cards = state.profile.accelerators
    needed = cards_needed(job)
    busy = {a.index: why for a in cards if (why := _busy_reason(a, state))}
    free_cards = [a for a in cards if a.index not in busy]
    chosen, boat = [], []
    if not state.live:
        notes.append(
            "cards: no live card state (a preset or profile file): every card counts as free"
        )
    if needed > len(cards):
        add("no-go", "cards", f"needs {needed} cards, the machine has {len(cards)}")
    elif needed > len(free_cards):
        add("wait", "cards", f"needs {needed} cards, {len(free_cards)} free now; busy: "
            + "; ".join(f"card {i} {w}" for i, w in sorted(busy.items())))  # fmt: skip
    else:
        chosen = choose_cards(free_cards, needed)
        rest = [a for a in free_cards if a not in chosen]
        boat = rest[:lifeboat]
        if len(rest) >= lifeboat:
            add("ok", "cards", f"needs {needed} of {len(free_cards)} free cards; "
                + (f"card {_ids(boat)} stays free as the lifeboat" if lifeboat == 1 else
                   f"cards {_ids(boat)} stay free as lifeboats" if lifeboat else
                   "no lifeboat card (a one-card machine)" if len(cards) == 1 else
                   "no lifeboat card kept (--lifeboat 0)"))  # fmt: skip
        elif len(cards) - needed < lifeboat:
            add("warning", "cards", f"needs {needed} of the machine's {len(cards)} cards: no "
                f"lifeboat card stays free while it runs (keep {lifeboat} for triage)")  # fmt: skip
        else:
            add("wait", "cards", f"needs {needed} cards, {len(free_cards)} free now: starting it "
                f"takes the lifeboat card (keep {lifeboat} free for triage); busy: "
                + "; ".join(f"card {i} {w}" for i, w in sorted(busy.items())))  # fmt: skip
    binding = _binding_lines(chosen, state)
    card_info = {"needed": needed, "total": len(cards), "free": [a.index for a in free_cards],
                 "busy": {str(k): w for k, w in sorted(busy.items())},
                 "chosen": [{"card": a.index, "numa_node": a.numa_node} for a in chosen],
                 "lifeboat": [a.index for a in boat], "lifeboat_wanted": lifeboat}  # fmt: skip

    return card_info, binding


def _too_few_cards(job, state: MachineState, lifeboat: int, have: int) -> Preflight:
    from nodeledger.verdict.fit import job_options

    needed = cards_needed(job)
    text = f"needs {needed} cards, the machine has {have}"
    fit_summary = {"tier": "cannot", "binding": "cards", "reason": text, "suggestions": [],
                   "job_options": job_options(job)}  # fmt: skip
    card_info = {"needed": needed, "total": have, "free": [], "busy": {}, "chosen": [],
                 "lifeboat": [], "lifeboat_wanted": lifeboat}  # fmt: skip
    notes = ["the memory ledger was not run: the job's layout does not fit this machine's cards"]
    return Preflight("no-go", [Reason("no-go", "cards", text)], card_info, [], {}, fit_summary,
                     state.origin, notes)  # fmt: skip


def _load_instead(spec: ModelSpec, job: LoadJob, prof) -> list[str]:
    """Loads whose host RAM the machine holds: fewer ranks at once, or one rank reading."""
    from nodeledger.verdict.fit import fit

    def host_ok(j) -> int | None:
        lg = fit(spec, j, prof, suggest=False).ledger
        cap = lg.host.capacity_bytes
        return lg.host.peak_bytes if cap is not None and lg.host.peak_bytes <= cap else None

    out = []
    for n in range(job.ranks - 1, 0, -1):
        peak = host_ok(dataclasses.replace(job, ranks=n))
        if peak is not None:
            out.append(f"stagger: at most {n} such load(s) at once ({_g(peak)} held at peak)")
            break
    if job.strategy == "every_rank":
        peak = host_ok(dataclasses.replace(job, strategy="rank0"))
        if peak is not None:
            out.append(
                f"or --load-strategy rank0 (one rank reads, then broadcasts: {_g(peak)} at peak)"
            )
    return out


def _ids(cards: list[Accelerator]) -> str:
    return ",".join(str(a.index) for a in cards)
