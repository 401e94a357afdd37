"""Diagnosis of a sample stream: verification against the ledger, and idle cards with their
likely cause.  The same code judges a live watch, a replay and the exporter.

Verify (needs expectations: ``--plan`` / ``--job`` / a recording's header, except rule 2).
Each card's figure is its *sustained peak*: the highest used memory held for CONFIRM (3)
consecutive samples (one odd reading does not fail a job; the caching allocator keeps what it
reserved, so a real peak stays).

1. sharding not happening (a group whose job shards: FSDP / ZeRO):
   (a) one card >= SHARD_FULL (80 %) of the unsharded figure (the same job with shard=none; capped
       at the card's memory, where such a job runs out) and at least its sharded prediction,
       while every other card of the group stays <= SHARD_OTHERS (50 %) of its sharded
       prediction — one card holds everything, the rest are near empty; or
   (b) every card >= 80 % of the unsharded figure when that figure is >= SHARD_DDP_RATIO (1.5) x
       the sharded one — each rank holds a full copy (plain data parallel).
2. extra contexts on card N: card N holds processes that also own another card (other ranks),
   each with a context-sized amount (CONTEXT_MIN..CONTEXT_MAX, 0.3-1.5 GiB), in CONFIRM
   consecutive samples — ranks that touched the device before set_device().  Needs no plan.
3. above plan: a card's sustained peak > prediction x (1 + TOLERANCE) + TOLERANCE_BYTES
   (10 % + 1 GiB by default: the ledger's measured error on H200 is within a few percent;
   the byte term covers driver and library variation on small jobs).  Cards shared by several
   replicas are judged on the sum of their predictions.
Status: ``failed`` (any finding), ``pending`` (no planned card has reached PENDING (10 %) of its
prediction yet: the job has not allocated), ``passed``, or ``not asked`` (no expectations).

Idle cards (over a window of IDLE_WINDOW_S = 60 s; kinds in order of precedence):
- ``owner dead``: the card lists a pid that no longer exists (or is a zombie) for CONFIRM
  samples.  When no listed pid on any card exists, the pids are taken as invisible (the watch runs
  in another PID namespace) and the kind is ``owner not visible``.
- ``no owner``: >= HELD_BYTES (1 GiB) used and no process listed, for CONFIRM samples.
- ``held, low activity``: >= 1 GiB used in every sample of the window and mean utilisation
  < IDLE_UTIL_PCT (10 %).
- ``lagging``: mean utilisation < LAG_FRACTION (50 %) of the median of the busy cards (mean
  >= LAG_BUSY_PCT, 40 %; at least two of them) — fed, but starved ("30 % while others at 90 %").
- ``planned, unused``: a planned card below 1 GiB with no process for the whole window while
  another card of its group holds memory.
Likely cause, from evidence in the window (first that holds; all are listed):
  its job fails verification (the card waits for a card that cannot keep up);
  remote NUMA: the owner (or its children, e.g. DataLoader workers) may run only on CPUs of
  other NUMA nodes than the card's, or its memory is bound away from the card's node;
  CPU starvation: the owner and its children use >= CPU_SATURATED (90 %) of the CPUs they may
  run on, or the host's CPUs are >= HOST_CPU_BUSY (95 %) busy;
  host swapping: >= SWAP_PAGES_S (256) pages/s swapped in + out (1 MiB/s at 4 KiB pages);
  IO wait: >= IOWAIT_SHARE (10 %) of CPU time;
  the card's NUMA node has < NODE_FREE (5 %) of its memory free;
  host RAM nearly exhausted: MemAvailable < HOST_RAM_LOW (5 %) of RAM in the window (the
  kernel OOM killer; check dmesg) — the usual way an owner dies.
An unbound owner on a multi-node host gets a hint (bind it to the card's node), not a cause.
"""

from __future__ import annotations

import statistics
from collections import deque

from nodeledger import field_notes
from nodeledger.machine.parsers.common import cpulist_ids
from nodeledger.units import GiB, gib_num

CONFIRM = 3
TOLERANCE = 0.10
TOLERANCE_BYTES = 1 * GiB
SHARD_FULL = 0.80
SHARD_OTHERS = 0.50
SHARD_DDP_RATIO = 1.5
CONTEXT_MIN = int(0.3 * GiB)
CONTEXT_MAX = int(1.5 * GiB)
PENDING = 0.10
IDLE_WINDOW_S = 60.0
IDLE_UTIL_PCT = 10.0
HELD_BYTES = 1 * GiB
LAG_FRACTION = 0.50
LAG_BUSY_PCT = 40.0
CPU_SATURATED = 0.90
HOST_CPU_BUSY = 0.95
SWAP_PAGES_S = 256.0
IOWAIT_SHARE = 0.10
NODE_FREE = 0.05
HOST_RAM_LOW = 0.05
MAX_OWNERS = 32  # owners remembered per card (summary), oldest dropped
HIST_MAX = 2048  # samples kept for the idle window (time-trimmed too): a stream of samples at
# one timestamp, or sampled faster than IDLE_WINDOW_S / HIST_MAX, keeps its last HIST_MAX

VERIFY_RULES = ("sharding not happening", "extra contexts", "above plan", "engine pool vs plan")


def g(n: float | int | None) -> str:
    return "unknown" if n is None else f"{gib_num(n)} GiB"


def _cpus_text(cpus: set[int]) -> str:
    from nodeledger.machine.parsers.numa import compress_cpus

    return compress_cpus(sorted(cpus))


class Analyzer:
    """Feed samples in time order; ``verify()`` / ``idle()`` / ``summary()`` at any point."""

    def __init__(self, header: dict, expect: dict | None = None, *, tolerance: float = TOLERANCE,
                 tolerance_bytes: int = TOLERANCE_BYTES, idle_window: float = IDLE_WINDOW_S,
                 confirm: int = CONFIRM):  # fmt: skip
        self.header = header
        self.expect = expect
        self.tolerance, self.tolerance_bytes = tolerance, tolerance_bytes
        self.window, self.confirm = idle_window, max(1, confirm)
        mach = header.get("machine") or {}
        self.info = {c["index"]: c for c in mach.get("cards", [])}
        self.node_cpus = {
            int(k): cpulist_ids(v) or set() for k, v in (mach.get("numa_nodes") or {}).items()
        }
        self.predicted: dict[int, int] = {}
        for grp in (expect or {}).get("groups", []):
            for c, b in grp.get("predicted", {}).items():
                if isinstance(b, int):
                    self.predicted[int(c)] = self.predicted.get(int(c), 0) + b
        self.recent: dict[int, deque] = {}
        self.peak: dict[int, int] = {}
        self.peak_t: dict[int, float] = {}
        self.max_used: dict[int, int] = {}  # highest single sample
        self.last_used: dict[int, int] = {}  # the latest sample
        self.ctx_run: dict[int, int] = {}
        self.contexts: dict[int, dict] = {}  # card -> worst extra-contexts observation
        self.hist: deque = deque(maxlen=HIST_MAX)  # bounded by count as well as by time
        # beside each sample of hist, its cards by index: a card's series is one lookup per
        # sample instead of a scan of every card (analysis stays linear in the cards)
        self._cards_by_index: deque = deque(maxlen=HIST_MAX)
        self._hist_full = False  # the last feed dropped a sample by count (not by time)
        self.n = 0
        self.t_first = self.t_last = None
        self.util_sum: dict[int, float] = {}
        self.util_n: dict[int, int] = {}
        self.owners: dict[int, dict[int, str | None]] = {}
        # card -> pid -> [last, max] bytes the card tool gave for that process (None: unknown)
        self.owner_bytes: dict[int, dict[int, list]] = {}
        self.proc_sum: dict[int, int | None] = {}  # card -> its processes' bytes, last sample
        self.last_pct: dict[int, float] = {}  # card -> VRAM % where the tool gives no bytes
        self.last_host: dict | None = None
        self.dead_run: dict[int, int] = {}
        self.noowner_run: dict[int, int] = {}
        self.idle_seen: dict[tuple[str, int], dict] = {}
        self.ever_failed = False
        self.cards_seen = False
        self._idle_now: list[dict] = []

    # -- feeding ------------------------------------------------------------------------------

    def feed(self, s: dict) -> None:
        self.n += 1
        t = s["t"]
        self.t_first = t if self.t_first is None else self.t_first
        self.t_last = t
        cards = {c["index"]: c for c in s.get("cards", [])}
        self.cards_seen = self.cards_seen or bool(cards)
        if s.get("host"):
            self.last_host = s["host"]
        pids = s.get("pids") or {}
        home: dict[int, tuple[int, int]] = {}  # pid -> (card, used) of its largest share
        for i, c in cards.items():
            used = c.get("used_bytes")
            if used is not None:
                self.last_used[i] = used
                self.max_used[i] = max(used, self.max_used.get(i, 0))
                q = self.recent.setdefault(i, deque(maxlen=self.confirm))
                q.append(used)
                if len(q) == self.confirm:
                    held = min(q)
                    if held > self.peak.get(i, -1):
                        self.peak[i], self.peak_t[i] = held, t
            if c.get("used_pct") is not None:
                self.last_pct[i] = c["used_pct"]
            procs = c.get("processes")
            byts = [p.get("used_bytes") for p in procs or []]
            self.proc_sum[i] = (  # a floor under the card's use where the tool gives none
                sum(byts) if procs and all(b is not None for b in byts) else None
            )
            u = c.get("util_pct")
            if u is not None:
                self.util_sum[i] = self.util_sum.get(i, 0.0) + u
                self.util_n[i] = self.util_n.get(i, 0) + 1
            for p in c.get("processes") or []:
                name = p.get("name") or (pids.get(str(p["pid"])) or {}).get("name")
                known = self.owners.setdefault(i, {})
                if name or p["pid"] not in known:  # a dead pid keeps the name it had
                    known[p["pid"]] = name
                    if len(known) > MAX_OWNERS:  # a long watch with pid churn stays bounded
                        del known[next(iter(known))]
                seen = self.owner_bytes.setdefault(i, {})
                if p["pid"] in seen or len(seen) < MAX_OWNERS:
                    ub = p.get("used_bytes")
                    last_max = seen.setdefault(p["pid"], [None, None])
                    last_max[0] = ub
                    if ub is not None:
                        last_max[1] = max(ub, last_max[1] or 0)
                b = p.get("used_bytes") or 0
                if p["pid"] not in home or b > home[p["pid"]][1]:
                    home[p["pid"]] = (i, b)
        self._contexts(t, cards, home)
        self._hist_full = len(self.hist) == self.hist.maxlen
        self.hist.append(s)  # at HIST_MAX the oldest sample falls off
        first: dict = {}
        for c in s.get("cards", []):
            first.setdefault(c["index"], c)  # a repeated index: the first, as a scan finds it
        self._cards_by_index.append(first)
        while len(self.hist) > 2 and t - self.hist[1]["t"] >= self.window:
            self.hist.popleft()
            self._cards_by_index.popleft()
        findings = self.verify()["findings"]  # once a sample: nothing _idle changes alters it
        self._idle_now = self._idle(s, findings)
        for f in self._idle_now:
            key = (f["kind"], f["card"])
            seen = self.idle_seen.get(key)
            if seen is None:
                self.idle_seen[key] = dict(f, first_unix_s=t, last_unix_s=t)
            else:  # the evidence of the moment it was first seen stays (a death's cause is then)
                keep = {k: seen[k] for k in ("evidence", "likely_cause") if seen["evidence"]}
                seen.update(f, first_unix_s=seen["first_unix_s"], last_unix_s=t, **keep)
        if any(f["rule"] in VERIFY_RULES for f in findings):
            self.ever_failed = True

    def _contexts(self, t: float, cards: dict, home: dict) -> None:
        for i, c in cards.items():
            extra = [
                p for p in c.get("processes") or []
                if p.get("used_bytes") is not None and CONTEXT_MIN <= p["used_bytes"] <= CONTEXT_MAX
                and home.get(p["pid"], (i, 0))[0] != i and home[p["pid"]][1] > CONTEXT_MAX
            ]  # fmt: skip
            self.ctx_run[i] = self.ctx_run.get(i, 0) + 1 if extra else 0
            if extra and self.ctx_run[i] >= self.confirm:
                worst = self.contexts.get(i)
                if worst is None or len(extra) >= len(worst["pids"]):
                    self.contexts[i] = {
                        "t": t,
                        "pids": [p["pid"] for p in extra],
                        "homes": sorted({home[p["pid"]][0] for p in extra}),
                        "bytes": [p["used_bytes"] for p in extra],
                    }

    # -- verify -------------------------------------------------------------------------------

    def _cap(self, i: int) -> int | None:
        return (self.info.get(i) or {}).get("total_bytes")

    def verify(self) -> dict:
        findings = []
        for i, x in sorted(self.contexts.items()):
            total = sum(x["bytes"])
            each = ", ".join(g(b) for b in sorted(set(x["bytes"])))
            findings.append({
                "rule": "extra contexts", "cards": [i],
                "message": f"extra contexts on card {i}: {len(x['pids'])} process(es) of other "
                f"ranks (pids {', '.join(map(str, x['pids']))}, whose memory is on card(s) "
                f"{', '.join(map(str, x['homes']))}) hold {each} each, {g(total)} in all: they "
                "touched the device before set_device() (call torch.cuda.set_device(local_rank) "
                "first, or set CUDA_VISIBLE_DEVICES per rank)",
                "numbers": {"card": i, "pids": x["pids"], "bytes": x["bytes"], "total_bytes": total},
            })  # fmt: skip
        if not self.expect:
            status = "failed" if findings else "not asked"
            return {"status": status, "findings": findings}
        for grp in self.expect.get("groups", []):
            findings.extend(self._sharding(grp))
        for i, pred in sorted(self.predicted.items()):
            peak = self.peak.get(i)
            limit = pred * (1 + self.tolerance) + self.tolerance_bytes
            if peak is not None and peak > limit:
                findings.append({
                    "rule": "above plan", "cards": [i],
                    "message": f"above plan on card {i}: {g(peak)} held (sustained peak) vs "
                    f"{g(pred)} predicted; the limit is {g(pred)} x {1 + self.tolerance:.2f} + "
                    f"{g(self.tolerance_bytes)} = {g(limit)} ({100 * (peak / pred - 1):+.0f} %)",
                    "numbers": {"card": i, "peak_bytes": peak, "predicted_bytes": pred,
                                "limit_bytes": int(limit)},
                })  # fmt: skip
        order = {r: k for k, r in enumerate(VERIFY_RULES)}
        findings.sort(key=lambda f: (order[f["rule"]], f["cards"]))
        started = any(self.peak.get(i, 0) >= PENDING * p for i, p in self.predicted.items() if p)
        status = "failed" if findings else ("passed" if started else "pending")
        return {"status": status, "findings": findings}

    def _sharding(self, grp: dict) -> list[dict]:
        cards = grp.get("cards") or []
        un = grp.get("unsharded_bytes")
        pred = {int(c): b for c, b in (grp.get("predicted") or {}).items()}
        if (
            not grp.get("shard")
            or not un
            or len(cards) < 2
            or any(c not in self.peak for c in cards)
        ):
            return []
        out = []
        for c in cards:
            cap = self._cap(c)
            full = SHARD_FULL * (min(un, cap) if cap else un)
            others = [o for o in cards if o != c]
            if self.peak[c] >= max(full, pred.get(c, 0)) and all(
                self.peak[o] <= SHARD_OTHERS * pred.get(o, 0) for o in others
            ):
                hi = max(self.peak[o] for o in others)
                ref = min(un, cap) if cap else un
                what = (f"the card's {g(cap)} (the unsharded figure, {g(un)}, does not fit)"
                        if cap and un > cap else f"the unsharded figure {g(un)}")  # fmt: skip
                out.append({
                    "rule": "sharding not happening", "cards": [c],
                    "message": f"sharding not happening ({grp['shard']}, {grp['name']}): card {c} "
                    f"holds {g(self.peak[c])} = {100 * self.peak[c] / ref:.0f} % of {what} "
                    f"(the rule: >= {SHARD_FULL:.0%}), while cards "
                    f"{', '.join(map(str, others))} hold at most {g(hi)} — under "
                    f"{SHARD_OTHERS:.0%} of their sharded {g(min(pred.get(o, 0) for o in others))}."
                    " One card holds everything: check the FSDP wrap policy / ZeRO stage really "
                    "applies (verify by memory, not by log lines)",
                    "numbers": {"card": c, "peak_bytes": self.peak[c], "unsharded_bytes": un,
                                "card_bytes": cap,
                                "others_max_bytes": hi, "sharded_bytes": pred.get(c)},
                })  # fmt: skip
                return out
        sharded = max(pred.values(), default=0)
        if (
            sharded
            and un >= SHARD_DDP_RATIO * sharded
            and all(self.peak[c] >= SHARD_FULL * un for c in cards)
        ):
            lo = min(self.peak[c] for c in cards)
            out.append({
                "rule": "sharding not happening", "cards": list(cards),
                "message": f"sharding not happening ({grp['shard']}, {grp['name']}): every card "
                f"holds at least {g(lo)}, >= {SHARD_FULL:.0%} of the unsharded {g(un)} (sharded: "
                f"{g(sharded)}): each rank keeps a full copy, i.e. plain data parallel",
                "numbers": {"cards": list(cards), "min_bytes": lo, "unsharded_bytes": un,
                            "sharded_bytes": sharded},
            })  # fmt: skip
        return out

    # -- idle ---------------------------------------------------------------------------------

    def _covered(self) -> bool:
        if len(self.hist) < 2:
            return False
        if self._hist_full:  # sampled faster than the window holds: judged on the last HIST_MAX
            return (self.t_last or 0) - (self.t_first or 0) >= self.window - 1e-6
        return self.hist[-1]["t"] - self.hist[0]["t"] >= self.window - 1e-6

    def _series(self, i: int, key: str) -> list:
        """Card ``i``'s ``key`` in every sample of the window (None where it was not sampled)."""
        out = []
        for cards in self._cards_by_index:
            c = cards.get(i)
            out.append(None if c is None else c.get(key))
        return out

    def _idle(self, s: dict, findings: list[dict]) -> list[dict]:
        pids = s.get("pids") or {}
        cards = {c["index"]: c for c in s.get("cards", [])}
        listed = {p["pid"] for c in cards.values() for p in c.get("processes") or []}
        visible = any((pids.get(str(p)) or {}).get("alive") for p in listed)
        out: list[dict] = []
        covered = self._covered()
        means = {}
        if covered:
            for i in cards:
                us = [u for u in self._series(i, "util_pct") if u is not None]
                if len(us) * 2 >= len(self.hist):
                    means[i] = sum(us) / len(us)
        busy = [m for m in means.values() if m >= LAG_BUSY_PCT]
        median_busy = statistics.median(busy) if len(busy) >= 2 else None
        for i, c in sorted(cards.items()):
            used = c.get("used_bytes") or 0
            procs = c.get("processes")
            dead = [p for p in procs or []  # liveness None (a bundle without /proc): unknown
                    if (pids.get(str(p["pid"])) or {"alive": False}).get("alive") is False]  # fmt: skip
            self.dead_run[i] = self.dead_run.get(i, 0) + 1 if dead else 0
            none = procs is not None and not procs and used >= HELD_BYTES
            self.noowner_run[i] = self.noowner_run.get(i, 0) + 1 if none else 0
            f = None
            if dead and self.dead_run[i] >= self.confirm:
                held = sum(p.get("used_bytes") or 0 for p in dead)
                who = ", ".join(f"{p['pid']}" + (f" ({self.owners.get(i, {}).get(p['pid'])})"
                                if self.owners.get(i, {}).get(p["pid"]) else "") for p in dead)  # fmt: skip
                if visible:
                    f = {"kind": "owner dead",
                         "message": f"card {i}: {g(used)} held, owner pid {who} no longer exists"
                         f" ({g(held)} listed for it); the memory stays until every handle closes "
                         "(a zombie not reaped, a child still holding the device) or the card is reset"}  # fmt: skip
                else:
                    f = {"kind": "owner not visible",
                         "message": f"card {i}: {g(used)} held by pid {who}, which is not in this "
                         "host's /proc: it exited, or the watch runs in another PID namespace "
                         "(container; run with --pid=host)"}  # fmt: skip
            elif self.noowner_run[i] >= self.confirm:
                f = {"kind": "no owner", "message": f"card {i}: {g(used)} held and no process "
                     "listed (a context the driver did not release, MIG/MPS clients, or another "
                     "container's process the driver does not show)"}  # fmt: skip
            elif covered and i in means:
                held_all = all((u or 0) >= HELD_BYTES for u in self._series(i, "used_bytes"))
                m = means[i]
                if held_all and m < IDLE_UTIL_PCT:
                    f = {"kind": "held, low activity",
                         "message": f"card {i}: {g(used)} held, utilisation {m:.0f} % on average "
                         f"over {self.window:.0f} s (idle below {IDLE_UTIL_PCT:.0f} %)"}  # fmt: skip
                elif held_all and median_busy is not None and m < LAG_FRACTION * median_busy:
                    f = {"kind": "lagging",
                         "message": f"card {i}: utilisation {m:.0f} % on average over "
                         f"{self.window:.0f} s while the busy cards' median is {median_busy:.0f} %"}  # fmt: skip
            if f is None and covered and self.expect:
                f = self._unused(i, cards)
            if f is None:
                continue
            f.update(card=i, used_bytes=used, util_mean_pct=means.get(i))
            causes, hints = self._causes(i, c, pids, f["kind"], findings)
            f["evidence"] = causes
            f["hints"] = hints
            f["likely_cause"] = causes[0] if causes else (
                "no host-side cause in the evidence (waiting on a collective, a stalled rank, "
                "input from the network?)" if f["kind"] in ("held, low activity", "lagging") else None
            )  # fmt: skip
            out.append(f)
        return out

    def _unused(self, i: int, cards: dict) -> dict | None:
        for grp in self.expect.get("groups", []):
            if i not in grp.get("cards", []):
                continue
            mine = self._series(i, "used_bytes")
            procs = self._series(i, "processes")
            if any((u or 0) >= HELD_BYTES for u in mine) or any(p for p in procs):
                return None
            if any(
                (cards.get(o) or {}).get("used_bytes", 0) >= HELD_BYTES
                for o in grp["cards"]
                if o != i
            ):
                return {"kind": "planned, unused", "message": f"card {i}: planned for "
                        f"{grp['name']} but nothing runs on it for {self.window:.0f} s while the "
                        "rest of its group holds memory (a rank that never started, or the wrong "
                        "CUDA_VISIBLE_DEVICES)"}  # fmt: skip
        return None

    def _causes(
        self, i: int, c: dict, pids: dict, kind: str, findings: list[dict]
    ) -> tuple[list[str], list[str]]:
        # long: one check per idle cause (verify, NUMA, CPU, swap, IO wait, RAM) over one window
        causes: list[str] = []
        hints: list[str] = []
        grp = next((gr for gr in (self.expect or {}).get("groups", []) if i in gr["cards"]), None)
        for fd in findings:
            if fd["rule"] == "extra contexts":
                continue
            if grp and set(fd["cards"]) & set(grp["cards"]) and i not in fd["cards"]:
                causes.append(f"its job fails verification ({fd['rule']} on card(s) "
                              f"{', '.join(map(str, fd['cards']))}): this card waits for it")  # fmt: skip
                break
        node = (self.info.get(i) or {}).get("numa_node")
        first, last = self.hist[0], self.hist[-1]
        dt = max(last["t"] - first["t"], 1e-9)
        for p in c.get("processes") or []:
            if (
                (p.get("used_bytes") or 0)
                and (p.get("used_bytes") or 0) <= CONTEXT_MAX
                and len(c.get("processes") or []) > 1
            ):
                continue  # another rank's context here: not this card's owner
            facts = pids.get(str(p["pid"])) or {}
            if not facts.get("alive"):
                continue
            name = facts.get("name") or "?"
            mine = cpulist_ids(facts.get("cpus")) or set()
            kids = facts.get("children") or []
            if node is not None and node in self.node_cpus and len(self.node_cpus) > 1 and mine:
                local = self.node_cpus[node]
                mems = cpulist_ids(facts.get("mems"))
                kid_remote = [
                    k for k in kids if (ids := cpulist_ids(k.get("cpus"))) and not ids & local
                ]
                if (
                    not mine & local
                    or (mems is not None and node not in mems)
                    or (kids and len(kid_remote) * 2 > len(kids))
                ):
                    where = sorted(n for n, cs in self.node_cpus.items() if cs & mine)
                    txt = (f"remote NUMA: pid {p['pid']} ({name}) may run on CPUs {_cpus_text(mine)} "
                           f"(NUMA node {', '.join(map(str, where))}), memory on node(s) "
                           f"{facts.get('mems') or 'unknown'}; card {i} sits on node {node} (CPUs "
                           f"{_cpus_text(local)})")  # fmt: skip
                    if kid_remote:
                        txt += f"; {len(kid_remote)} of its {len(kids)} children (DataLoader workers) run remote too"
                    causes.append(
                        txt + f" — bind it: numactl --cpunodebind={node} --membind={node}"
                    )
                elif mine >= set().union(*self.node_cpus.values()):
                    hints.append(f"pid {p['pid']} ({name}) is not bound to a NUMA node: bind it to "
                                 f"the card's node {node} (numactl --cpunodebind={node} --membind={node})")  # fmt: skip
            # CPU use of the owner and its children over the window
            f0 = (first.get("pids") or {}).get(str(p["pid"])) or {}
            if "cpu_s" in facts and "cpu_s" in f0:
                used = facts["cpu_s"] - f0["cpu_s"]
                k0 = {k.get("pid"): k.get("cpu_s", 0) for k in f0.get("children") or []}
                used += sum(
                    k.get("cpu_s", 0) - k0.get(k.get("pid"), k.get("cpu_s", 0)) for k in kids
                )
                allowed = set(mine)
                for k in kids:
                    allowed |= cpulist_ids(k.get("cpus")) or set()
                if allowed and used / dt >= CPU_SATURATED * len(allowed):
                    causes.append(f"CPU starvation: pid {p['pid']} and its {len(kids)} children used "
                                  f"{used / dt:.1f} of the {len(allowed)} CPUs they may run on")  # fmt: skip
        h0, h1 = first.get("host") or {}, last.get("host") or {}
        c0, c1 = h0.get("cpu"), h1.get("cpu")
        if c0 and c1 and c1["total"] > c0["total"]:
            tot = c1["total"] - c0["total"]
            iow = (c1["iowait"] - c0["iowait"]) / tot
            busy = 1 - (c1["idle"] - c0["idle"]) / tot - iow
            if busy >= HOST_CPU_BUSY:
                causes.append(
                    f"CPU starvation: the host's CPUs were {busy:.0%} busy over {dt:.0f} s"
                )
        if all(isinstance(h.get(k), int) for h in (h0, h1) for k in ("pswpin", "pswpout")):
            rate = (h1["pswpin"] + h1["pswpout"] - h0["pswpin"] - h0["pswpout"]) / dt
            if rate >= SWAP_PAGES_S:
                used = (h1.get("swap_total") or 0) - (h1.get("swap_free") or 0)
                causes.append(f"host swapping: {rate:,.0f} pages/s in + out over {dt:.0f} s, "
                              f"{g(used)} of swap in use ({field_notes.cited('swap_paging')})")  # fmt: skip
        if c0 and c1 and c1["total"] > c0["total"]:
            iow = (c1["iowait"] - c0["iowait"]) / (c1["total"] - c0["total"])
            if iow >= IOWAIT_SHARE:
                causes.append(f"IO wait: {iow:.0%} of CPU time over {dt:.0f} s (slow or contended "
                              "storage: cache the dataset on local NVMe, prefetch asynchronously)")  # fmt: skip
        numa = (h1.get("numa") or {}).get(str(node)) if node is not None else None
        if numa and numa[0] and numa[1] is not None and numa[1] < NODE_FREE * numa[0]:
            causes.append(f"NUMA node {node} (the card's) has {g(numa[1])} of {g(numa[0])} free: "
                          "the owner's memory comes from remote nodes")  # fmt: skip
        lows = [(s["host"].get("mem_available"), s["t"]) for s in self.hist
                if (s.get("host") or {}).get("mem_available") is not None]  # fmt: skip
        total = h1.get("mem_total")
        if lows and total:
            low, at = min(lows)
            if low < HOST_RAM_LOW * total:
                txt = (
                    f"host RAM nearly exhausted: {g(low)} available of {g(total)} at "
                    f"t={at - (self.t_first or at):.0f} s"
                )
                if kind in ("owner dead", "owner not visible"):
                    txt += " — the kernel OOM killer likely took the owner (check dmesg)"
                causes.append(txt)
        return causes, hints

    def idle(self, active_only: bool = False) -> list[dict]:
        if active_only:
            return list(self._idle_now)
        now = {(f["kind"], f["card"]) for f in self._idle_now}
        return [
            dict(f, active=k in now)
            for k, f in sorted(self.idle_seen.items(), key=lambda x: (x[0][1], x[0][0]))
        ]

    # -- summary ------------------------------------------------------------------------------

    def summary(self) -> dict:
        cards = []
        grp_of = {}
        for grp in (self.expect or {}).get("groups", []):
            for c in grp.get("cards", []):
                grp_of[c] = grp
        for i in sorted(set(self.info) | set(self.peak)):
            grp = grp_of.get(i)
            held = self.owner_bytes.get(i, {})  # pid -> [last, max] bytes
            owners = []
            for p, n in sorted((self.owners.get(i) or {}).items())[:8]:
                last, most = held.get(p) or (None, None)
                owners.append({"pid": p, "name": n, "last_bytes": last, "max_bytes": most})
            cards.append({
                "index": i,
                "total_bytes": self._cap(i),
                "peak_bytes": self.peak.get(i),
                "max_bytes": self.max_used.get(i),
                "last_bytes": self.last_used.get(i),
                "predicted_bytes": self.predicted.get(i),
                "unsharded_bytes": (grp or {}).get("unsharded_bytes"),
                "group": (grp or {}).get("name"),
                "util_mean_pct": round(self.util_sum[i] / self.util_n[i], 1) if self.util_n.get(i) else None,
                "processes_bytes": self.proc_sum.get(i),
                "last_pct": self.last_pct.get(i),
                "owners": owners,
            })  # fmt: skip
        return {
            "samples": self.n,
            # seconds between the first and the last sample on the samples' own clock (a fake
            # scenario's steps, a recording's timestamps, this host's time for a live watch)
            "duration_s": round((self.t_last or 0) - (self.t_first or 0), 3),
            "peak_rule": f"sustained peak: the highest memory a card held for {self.confirm} samples in a row",
            "cards": cards,
            "host": host_summary(self.last_host),
            "verify": self.verify(),
            "idle": self.idle(),
        }


def host_summary(h: dict | None) -> dict | None:
    """The last sample's host figures with their units in the key names, as ``watch --json``
    prints them (a recorded sample keeps /proc's names, which a replay reads): bytes from
    /proc/meminfo, pages swapped in / out since boot (/proc/vmstat pswpin / pswpout), CPU
    time in clock ticks since boot (/proc/stat), each NUMA node's total and free bytes."""
    if not h:
        return None
    cpu = h.get("cpu") or None
    numa = {n: {"total_bytes": v[0], "free_bytes": v[1]} for n, v in (h.get("numa") or {}).items()}
    return {"mem_total_bytes": h.get("mem_total"), "mem_available_bytes": h.get("mem_available"),
            "page_cache_bytes": h.get("page_cache"), "swap_total_bytes": h.get("swap_total"),
            "swap_free_bytes": h.get("swap_free"), "swap_in_pages": h.get("pswpin"),
            "swap_out_pages": h.get("pswpout"),
            "cpu_ticks": None if cpu is None else {k: cpu.get(k) for k in ("total", "idle", "iowait")},
            "numa": numa}  # fmt: skip
