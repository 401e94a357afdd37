"""Placement: which replica goes on which cards, bound to which CPUs, with a lifeboat card.

1. Units.  Each workload of the plan becomes replicas of ``tp x pp`` cards (serve: ``replicas``
   of them; train: one replica of ``tp x pp x dp`` cards; load: ``ranks`` cards).  Each replica's
   busiest card and host peak come from the ledger (verdict/fit.py) for ONE replica.
2. Free cards.  Cards holding processes at probe time are taken (``running`` in the result).
3. Lifeboat.  Every free card is tried as the lifeboat; the plan without it is scored and the
   best kept; ties go to the card whose loss breaks no well-linked group (its best link is the
   weakest), then to the NUMA node with the most free cards, then to the highest index.
4. Groups.  Replicas are placed by priority (high first), then size (big first).  For each, every
   set of k free cards is scored by its links: the weakest pair first (NVLink / xGMI / HCCS >
   PIX > PXB > PHB > NODE > SYS; NVLink lane count breaks ties), then the sum over pairs, then
   one NUMA node over several.  A depth-first search over the whole plan keeps the assignment
   with the most replicas placed (weighted by priority), then the best links, then the least
   fragmentation (the free cards left form the fewest islands of well-linked cards) — not the
   first group a greedy pass would take.
5. Sharing (``share=True``): a TP1 replica that found no free card may join a card whose placed
   replicas plus it stay within the card-memory margin (90 %); MPS / MIG is noted.
6. Host RAM: the replicas' host peaks add up; a replica that would push the sum past RAM is not
   placed (binding: host RAM).
7. CPU binding: a replica's NUMA node is its cards' node when they agree; that node's CPUs are
   split evenly between the replicas bound to it; workers = CPUs of the slice - 1 (the main
   process), capped by what host RAM leaves at 300 MiB per worker (fit's documented default).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import shlex
from dataclasses import dataclass, field

from nodeledger import field_notes
from nodeledger.errors import InputError
from nodeledger.ledger.jobs import LoadJob, ServeJob, TrainJob
from nodeledger.machine.parsers.common import cpulist_ids
from nodeledger.machine.parsers.numa import compress_cpus
from nodeledger.machine.profile import LinkKind, MachineProfile
from nodeledger.machine.vendors import spec as vendor_spec
from nodeledger.model.spec import ModelSpec
from nodeledger.units import gib_num
from nodeledger.verdict.catalogue import Workload
from nodeledger.verdict.fit import TIGHT, fit
from nodeledger.verdict.lifeboat import resolve_lifeboat

WORKER_BYTES = 300 * 2**20  # fit's HostSide.worker_rss_bytes default
KIND_SCORE = {
    LinkKind.nvlink: 100, LinkKind.xgmi: 100, LinkKind.hccs: 100, LinkKind.pix: 50,
    LinkKind.pxb: 40, LinkKind.pcie: 35, LinkKind.phb: 30, LinkKind.node: 20, LinkKind.sys: 10,
    LinkKind.unknown: 0,
}  # fmt: skip
MAX_NODES = 50_000  # search budget (nodes of the depth-first search), for one lifeboat choice
TOTAL_NODES = 60_000  # and for all lifeboat choices together (each gets at least MIN_NODES)
MIN_NODES = 2_000
EXACT_GROUPS = 5_000  # every k-card group is compared while there are at most this many
SYMMETRY_FROM = 8  # above this many free cards, lifeboat cards alike are tried once


@dataclass
class Unit:
    name: str  # "<workload id>#<n>"
    workload: str
    priority: int
    cards: int
    card_bytes: int | None  # busiest card of one replica
    host_bytes: int  # host peak of one replica (held, not page cache)
    workers: int  # dataloader workers the job asked for (train), else 0
    shareable: bool


@dataclass
class Placed:
    unit: Unit
    cards: list[int]
    shared: bool = False


@dataclass
class State:
    placed: list[Placed] = field(default_factory=list)
    unplaced: list[tuple[Unit, str, str]] = field(default_factory=list)  # unit, binding, reason


def _link_score(lk) -> int:
    s = KIND_SCORE[lk.kind] * 100
    if lk.kind == LinkKind.nvlink and lk.lanes:
        s += lk.lanes
    return s


class LinkScores:
    """Every card pair's link score, computed once per plan: the profile's pair list is read
    once into a table, not scanned again for each of the millions of lookups a search makes.
    Score = 100 x the link class (NVLink / xGMI / HCCS > PIX > PXB > PCIE > PHB > NODE > SYS)
    + the NVLink lane count."""

    def __init__(self, machine: MachineProfile):
        ic = machine.interconnect
        listed = {frozenset((p.a, p.b)): p for p in ic.pairs}
        cards = [a.index for a in machine.accelerators]
        self._score: dict[tuple[int, int], int] = {}
        self.groups: dict[tuple[int, ...], tuple] = {}  # group_score's memory (one NUMA map)
        for a, b in itertools.combinations(cards, 2):
            s = _link_score(listed.get(frozenset((a, b)), ic.default))
            self._score[(a, b)] = self._score[(b, a)] = s

    def __call__(self, a: int, b: int) -> int:
        return self._score[(a, b)]


def group_score(score: LinkScores, cards: tuple[int, ...], numa: dict[int, int | None]):
    """(weakest pair, mean pair, one NUMA node): the key groups are ranked by.  Remembered per
    group for the plan: the search meets the same groups under many sets of free cards."""
    known = score.groups.get(cards)
    if known is not None:
        return known
    if len(cards) == 1:
        result = (10**6, 0, 1)
    else:
        pairs = [score(a, b) for a, b in itertools.combinations(cards, 2)]
        nodes = {numa.get(c) for c in cards}
        one_node = 1 if len(nodes) == 1 and None not in nodes else 0
        result = (min(pairs), sum(pairs) / len(pairs), one_node)
    score.groups[cards] = result
    return result


def islands(score: LinkScores, free: list[int]) -> int:
    """Number of groups of free cards joined by their best link class (fragmentation)."""
    if not free:
        return 0
    best = max((score(a, b) for a, b in itertools.combinations(free, 2)), default=0)
    parent = {c: c for c in free}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in itertools.combinations(free, 2):
        if score(a, b) // 100 == best // 100:
            parent[find(a)] = find(b)
    return len({find(c) for c in free})


def candidate_groups(score: LinkScores, left: list[int], k: int, numa) -> tuple[list, bool]:
    """(groups of k cards to try, exact).  Every k-subset while there are at most EXACT_GROUPS
    of them (every 8-card box: C(8, 4) = 70); beyond that, the group grown from each card by
    adding, one at a time, the card whose weakest link to the group is best (then the sum of
    its links, then the same NUMA node, then the lowest index), a card of a group already
    grown not seeding another — at most N groups instead of C(N, k),
    and ``exact`` False so the plan can say the search was bounded."""
    left = sorted(left)
    if math.comb(len(left), k) <= EXACT_GROUPS:
        return list(itertools.combinations(left, k)), True
    seen, out, covered = set(), [], set()
    for seed in left:
        if seed in covered:  # grown from a card of a group found already: that group again
            continue
        group = [seed]
        # each outside card's weakest and summed link to the group, updated as the group grows
        weakest = {c: score(c, seed) for c in left if c != seed}
        total = dict(weakest)
        while len(group) < k:
            nxt = max(weakest, key=lambda c: (weakest[c], total[c],
                                              numa.get(c) == numa.get(seed), -c))  # fmt: skip
            group.append(nxt)
            del weakest[nxt], total[nxt]
            for c in weakest:
                s = score(c, nxt)
                weakest[c] = min(weakest[c], s)
                total[c] += s
        g = tuple(sorted(group))
        covered.update(g)
        if g not in seen:
            seen.add(g)
            out.append(g)
    return out, False


def units_of(workloads: list[Workload], specs: dict[str, ModelSpec], machine: MachineProfile):
    units: list[Unit] = []
    refused: list[tuple[Unit, str, str]] = []
    for w in workloads:
        job = w.job()
        prio = w.priority
        if isinstance(job, ServeJob):
            per, count = job.parallel.tp * job.parallel.pp, job.replicas
            one = dataclasses.replace(job, replicas=1)
        elif isinstance(job, TrainJob):
            per, count, one = job.parallel.tp * job.parallel.pp * job.parallel.dp, 1, job
        elif isinstance(job, LoadJob):
            per, count, one = job.ranks, 1, job
        else:  # pragma: no cover
            raise InputError(f"workload {w.id!r}: unknown job kind")
        try:
            res = fit(specs[w.model], one, machine, suggest=False)
        except InputError as exc:
            raise InputError(f"workload {w.id!r}: {exc}") from None
        card = next(r for r in res.verdict.resources if r.resource == "card memory")
        busiest = max(res.ledger.cards, key=lambda c: c.total_bytes).total_bytes
        workers = job.host.workers if isinstance(job, TrainJob) else 0
        for n in range(count):
            u = Unit(f"{w.id}#{n}", w.id, prio, per, busiest, res.ledger.host.peak_bytes,
                     workers, per == 1)  # fmt: skip
            if card.tier == "cannot":
                refused.append((u, "card memory", f"one replica needs {gib_num(busiest)} GiB "
                                f"on its busiest card, the card has {gib_num(card.capacity_bytes)} GiB"))  # fmt: skip
            elif card.tier == "unknown":
                refused.append(
                    (u, "card memory", "card memory unknown: cannot place by the ledger")
                )
            else:
                units.append(u)
    return units, refused


def _groups_to_try(score: LinkScores, left: list[int], k: int, numa) -> tuple[list, bool, bool]:
    """(the groups one search node tries, whether any group exists, exact): the candidates
    best first by group_score; of groups that score alike, two are enough to compare
    fragmentation; at most six in all."""
    candidates, exact = candidate_groups(score, left, k, numa)
    ranked = sorted(((group_score(score, g, numa), g) for g in candidates),
                    key=lambda scored: scored[0], reverse=True)  # fmt: skip
    chosen: list[tuple[int, ...]] = []
    seen_scores: set = set()
    for sc, g in ranked:
        if sc in seen_scores and len(chosen) >= 2:
            continue  # equivalent groups: a few are enough to compare fragmentation
        seen_scores.add(sc)
        if len(chosen) == 6:
            break
        chosen.append(g)
    return chosen, bool(ranked), exact


def _search(score, units, free, numa, share, cap_card, ram, nodes=MAX_NODES, bounds=None):
    """Depth-first search over the whole plan; returns (its key, the best State).  The key is
    (placed replicas weighted by priority, link score, -islands of the cards left, -shared)."""
    best = {"key": None, "state": None}
    budget = [nodes]
    tries: dict[tuple, tuple[list, bool, bool]] = {}  # (free cards, k) -> _groups_to_try
    fragments: dict[tuple, int] = {}  # free cards left -> islands
    load: dict[int, int] = {}  # card -> bytes of the replicas sharing it beyond its first
    order = sorted(units, key=lambda u: (-u.priority, -u.cards))

    def key_of(state: State, left: list[int]):
        placed_w = sum(1 + p.unit.priority for p in state.placed)
        links = sum(group_score(score, tuple(p.cards), numa)[0] for p in state.placed)
        key = tuple(sorted(left))
        if key not in fragments:
            fragments[key] = islands(score, left)
        frag = -fragments[key]
        return (placed_w, links, frag, -sum(p.shared for p in state.placed))

    def rec(i: int, left: list[int], state: State, host: int):
        budget[0] -= 1
        if budget[0] <= 0 and i < len(order) and bounds is not None:
            bounds["budget"] = True
        if i == len(order) or budget[0] <= 0:
            k = key_of(state, left)
            if best["key"] is None or k > best["key"]:
                best["key"] = k
                best["state"] = State(list(state.placed), list(state.unplaced))
            return
        u = order[i]
        if ram is not None and host + u.host_bytes > ram:
            state.unplaced.append((u, "host RAM", f"host RAM: {gib_num(host + u.host_bytes)} GiB "
                                   f"with it, of {gib_num(ram)} GiB"))  # fmt: skip
            rec(i + 1, left, state, host)
            state.unplaced.pop()
            return
        memo = (tuple(sorted(left)), u.cards)
        if memo not in tries:  # the same free cards recur down many branches of the search
            tries[memo] = _groups_to_try(score, left, u.cards, numa)
        chosen, groups, exact = tries[memo]
        if not exact and bounds is not None:
            bounds["groups"].add(u.cards)
        for g in chosen:
            rest = [c for c in left if c not in g]
            state.placed.append(Placed(u, list(g)))
            rec(i + 1, rest, state, host + u.host_bytes)
            state.placed.pop()
        if not groups and share and u.shareable and cap_card is not None:
            for p in list(state.placed):
                if len(p.cards) != 1 or not p.unit.shareable:
                    continue
                c = p.cards[0]
                if load.get(c, 0) + (p.unit.card_bytes or 0) + (u.card_bytes or 0) <= cap_card:
                    load[c] = load.get(c, 0) + (u.card_bytes or 0)
                    state.placed.append(Placed(u, [c], shared=True))
                    rec(i + 1, left, state, host + u.host_bytes)
                    state.placed.pop()
                    load[c] -= u.card_bytes or 0
                    break
        if not groups:
            free_n = len(left)
            state.unplaced.append((u, "cards", f"needs {u.cards} free card(s), {free_n} left"))
            rec(i + 1, left, state, host)
            state.unplaced.pop()

    rec(0, list(free), State(), 0)
    return best["key"], best["state"]


def _one_per_kind(free: list[int], cards: list[int], numa, score: LinkScores) -> list[tuple]:
    """One lifeboat choice per kind of card: cards on the same NUMA node whose link scores to
    all other cards are the same multiset are taken as interchangeable — exact for identical
    cards in a symmetric fabric (NVLink islands, all-pairs links), an approximation otherwise,
    which the plan's note names — so only the highest index of each kind is searched (the one
    ties would choose).  Used above SYMMETRY_FROM free cards only."""
    kinds: dict[tuple, int] = {}
    for c in free:
        sig = (numa.get(c), tuple(sorted(score(c, o) for o in cards if o != c)))
        kinds[sig] = max(kinds.get(sig, c), c)
    return sorted((c,) for c in kinds.values())


def plan(
    machine: MachineProfile,
    workloads: list[Workload],
    specs: dict[str, ModelSpec],
    lifeboat: int | None = None,
    share: bool = False,
) -> dict:
    # long: the planner in order: cards, the lifeboat choices searched, the best kept, then the result dict
    cards = [a.index for a in machine.accelerators]
    if not cards:
        raise InputError(f"machine {machine.name} has no accelerator: nothing to place")
    lifeboat, lifeboat_note = resolve_lifeboat(len(cards), lifeboat)
    numa = {a.index: a.numa_node for a in machine.accelerators}
    running = {a.index: [p.pid for p in a.processes] for a in machine.accelerators if a.processes}
    free = [c for c in cards if c not in running]
    units, refused = units_of(workloads, specs, machine)
    caps = [a.memory_bytes for a in machine.accelerators]
    cap_card = None if any(c is None for c in caps) else int(min(caps) * TIGHT["card memory"])
    ram = machine.host.ram_bytes
    notes: list[str] = []
    if lifeboat_note:
        notes.append(lifeboat_note)
    elif lifeboat == 0:
        notes.append(f"--lifeboat 0: no card kept free ({field_notes.cited('lifeboat')})")
    best = None
    score = LinkScores(machine)
    n_alt = math.comb(len(free), min(lifeboat, len(free)))
    choices = list(itertools.combinations(free, min(lifeboat, len(free))))
    if lifeboat == 1 and len(free) > SYMMETRY_FROM:
        choices = _one_per_kind(free, cards, numa, score)
        if len(choices) < n_alt:
            notes.append(
                f"lifeboat: cards with the same NUMA node and the same links to every other card "
                f"were tried once each ({len(choices)} kinds among {n_alt} free cards; the "
                "highest index of a kind stands for it, as ties go to the highest index)"
            )
    nodes = (  # every 8-card box keeps the whole budget per lifeboat choice, as before
        MAX_NODES
        if len(free) <= SYMMETRY_FROM
        else min(MAX_NODES, max(MIN_NODES, TOTAL_NODES // max(1, len(choices))))
    )
    bounds: dict = {"groups": set(), "budget": False}
    for boats in choices:
        usable = [c for c in free if c not in boats]
        (placed_w, links, frag, _), st = _search(score, units, usable, numa, share, cap_card,
                                                 ram, nodes, bounds)  # fmt: skip
        weakest = -sum(max((score(b, o) for o in cards if o != b), default=0)
                       for b in boats)  # fmt: skip
        numa_free = sum(sum(1 for c in free if numa.get(c) == numa.get(b)) for b in boats)
        key = (placed_w, links, frag, weakest, numa_free, sum(boats))
        if best is None or key > best[0]:
            best = (key, boats, st)
    _, boats, st = best
    if bounds["budget"]:
        notes.append(
            f"search bounded: {nodes:,} search steps per lifeboat choice were spent before every "
            "assignment was compared; the plan is the best found within them"
        )
    if bounds["groups"]:
        notes.append(
            "search bounded: for groups of "
            + ", ".join(str(k) for k in sorted(bounds["groups"]))
            + f" cards there are more than {EXACT_GROUPS:,} ways to pick them, so the groups "
            "compared were the best-linked ones grown from each card, not every group"
        )
    boat_reason = _lifeboat_reason(machine, score, boats, free, numa, st, n_alt) if boats else None
    cmds = {w.id: " ".join(shlex.quote(c) for c in w.command) for w in workloads if w.command}
    replicas = _bindings(machine, st.placed, numa, ram, cmds)
    not_placed = [
        {"replica": u.name, "workload": u.workload, "cards": u.cards, "binding": b, "reason": r}
        for u, b, r in refused + st.unplaced
    ]
    return {
        "machine": machine.name,
        "cards": cards,
        "running": {str(k): v for k, v in running.items()},
        "lifeboat": list(boats),
        "lifeboat_reason": boat_reason,
        "replicas": replicas,
        "not_placed": not_placed,
        "free_after": [
            c for c in free if c not in boats and all(c not in r["cards"] for r in replicas)
        ],
        "notes": notes,
    }


def _lifeboat_reason(machine, score: LinkScores, boats, free, numa, st, alternatives) -> str:
    """Why this card: what the plan keeps without it, and which links its absence costs."""
    parts = []
    groups = {c: p for p in st.placed for c in p.cards}
    for b in boats:
        others = [o for o in free if o != b]
        best = max((score(b, o) for o in others), default=0)
        partners = [o for o in others if score(b, o) == best]
        kind = (
            machine.link(b, partners[0]).label or machine.link(b, partners[0]).kind.value
            if partners
            else "none"
        )
        in_tp = sorted(
            {groups[o].unit.name for o in partners if o in groups and len(groups[o].cards) > 1}
        )
        breaks = (
            f"its {kind} partners ({', '.join(map(str, partners))}) run no multi-card replica that "
            "would need it, so keeping it out breaks no TP group"
            if not in_tp
            else f"its {kind} partners serve {', '.join(in_tp)}, which did not need it"
        )
        parts.append(
            f"card {b}: with it kept free the plan still places {len(st.placed)} replica(s), as "
            f"many as the best of the {alternatives} choices; {breaks}; ties go to the weakest-"
            "linked card, then the NUMA node with the most free cards, then the highest index "
            f"(NUMA node {numa.get(b) if numa.get(b) is not None else 'unknown'})"
        )
    return "; ".join(parts)


def _bindings(
    machine: MachineProfile, placed: list[Placed], numa, ram, commands: dict[str, str] | None = None
) -> list[dict]:
    commands = commands or {}
    nodes = {n.id: n for n in machine.host.numa_nodes}
    by_node: dict[int | None, list[Placed]] = {}
    for p in placed:
        ns = {numa.get(c) for c in p.cards}
        key = ns.pop() if len(ns) == 1 else None
        by_node.setdefault(key, []).append(p)
    vs = vendor_spec(machine.accelerators[0].vendor)
    var = vs.launch_visible
    host_used = sum(p.unit.host_bytes for p in placed if not p.shared)
    spare = None if ram is None else max(0, int(ram * TIGHT["host RAM"]) - host_used)
    out = []
    for node, group in by_node.items():
        cpus = None
        if node is not None and node in nodes and nodes[node].cpus:
            cpus = sorted(cpulist_ids(nodes[node].cpus) or [])
        slice_n = len(group)
        for k, p in enumerate(sorted(group, key=lambda x: x.cards)):
            mine = None
            if cpus:
                size = len(cpus) // slice_n
                mine = cpus[k * size : (k + 1) * size] if size else cpus
            workers = None
            if mine:
                workers = max(0, len(mine) - 1)
                if spare is not None and placed:
                    workers = min(workers, spare // len(placed) // WORKER_BYTES)
            env = {var: ",".join(str(c) for c in p.cards), **dict(vs.launch_env)}
            bind = (
                f"numactl --physcpubind={compress_cpus(mine)} --membind={node}"
                if mine
                else (f"numactl --cpunodebind={node} --membind={node}" if node is not None else "")
            )
            prefix = " ".join(f"{k}={v}" for k, v in env.items())
            out.append({
                "replica": p.unit.name,
                "workload": p.unit.workload,
                "cards": p.cards,
                "shared": p.shared,
                "links": _links_text(machine, p.cards),
                "numa_node": node,
                "cpus": compress_cpus(mine) if mine else None,
                "workers": workers,
                "card_bytes": p.unit.card_bytes,
                "host_bytes": p.unit.host_bytes,
                "env": env,
                "launch": f"{prefix} {bind + ' -- ' if bind else ''}{commands.get(p.unit.workload) or 'CMD'}".strip(),
                "note": vs.share_note if p.shared else None,
            })  # fmt: skip
    out.sort(key=lambda r: r["replica"])
    return out


def _links_text(machine: MachineProfile, cards: list[int]) -> str:
    if len(cards) < 2:
        return "single card"
    kinds = {}
    for a, b in itertools.combinations(cards, 2):
        lk = machine.link(a, b)
        label = lk.label or lk.kind.value
        kinds[label] = kinds.get(label, 0) + 1
    return ", ".join(f"{n} pair(s) {k}" for k, n in sorted(kinds.items()))
