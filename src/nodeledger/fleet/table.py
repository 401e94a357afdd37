"""`nodeledger fleet`: one row per box — free cards, the lifeboat, host-RAM headroom, findings —
from several support bundles, or read-only from a Prometheus server that scrapes the boxes'
exporters.  No agent, no database: the bundles and Prometheus are the state.

Per bundle (``probe --from`` and ``doctor --from`` replays, as those commands do):

1. free cards: cards whose memory in use at bundle time is under FREE_BYTES (1 GiB: a context
   and a driver reservation, nothing loaded) and that list no process; unknown when the card
   tool gave no memory figure;
2. lifeboat: with ``--plan`` the card the planner keeps free on that box (and whether it is
   free now), else "ok" when at least one card is free, "none free" when none is;
3. host-RAM headroom: MemAvailable at bundle time (/proc/meminfo), and the share of MemTotal;
4. findings: doctor's checks on the bundle that end warning or error, by id.

From Prometheus (``--prometheus URL``): the same columns from the exporter's series through the
HTTP API (``/api/v1/query``, GET only, a bounded answer, a deadline per query).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field

from typing_extensions import TypedDict

from nodeledger.document import Grid
from nodeledger.errors import InputError
from nodeledger.files import loads_json
from nodeledger.units import gib_num

FREE_BYTES = 2**30
MAX_ANSWER = 16 * 2**20  # bytes of one Prometheus answer read
QUERY_TIMEOUT = 10.0


@dataclass
class Box:
    name: str
    source: str
    cards: int | None = None
    free_cards: list[int] | None = None
    lifeboat: str = "unknown"
    mem_available_bytes: int | None = None
    mem_total_bytes: int | None = None
    findings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> BoxJSON:
        return asdict(self)  # type: ignore[return-value]


FLEET_SCHEMA_VERSION = 1


class BoxJSON(TypedDict):
    name: str
    source: str  # the support bundle, or the Prometheus server
    cards: int | None
    free_cards: list[int] | None  # under FREE_BYTES in use and no process
    lifeboat: str
    mem_available_bytes: int | None
    mem_total_bytes: int | None
    findings: list[str]
    notes: list[str]


class FleetJSON(TypedDict):
    """``nodeledger fleet --json``."""

    schema_version: int
    boxes: list[BoxJSON]
    free_below_bytes: int


def fleet_json(boxes: list[Box]) -> FleetJSON:
    return {"schema_version": FLEET_SCHEMA_VERSION, "boxes": [b.to_json() for b in boxes],
            "free_below_bytes": FREE_BYTES}  # fmt: skip


def fleet_json_schema() -> dict:
    from nodeledger.schemas import json_schema

    return json_schema(FleetJSON, "nodeledger fleet --json")


def _free(profile) -> list[int] | None:
    out = []
    for a in profile.accelerators:
        if a.memory_used_bytes is None:
            return None
        if a.memory_used_bytes < FREE_BYTES and not a.processes:
            out.append(a.index)
    return out


def from_bundle(path: str, plan_file: str | None = None, lifeboat: int = 1) -> Box:
    from pathlib import Path

    from nodeledger.doctor.checks import run_checks
    from nodeledger.doctor.machine_state import MachineState
    from nodeledger.machine.probe.bundle import load_bundle
    from nodeledger.machine.probe.probe import probe_with_facts

    rr = load_bundle(path)  # read once: doctor's state and the recorded hostname
    host = rr.manifest.get("hostname")  # the box's own name, where recorded
    prof, facts = probe_with_facts(rr)
    state = MachineState(prof, facts, f"support bundle {path} ({prof.name})")
    free = _free(prof)
    name = host if isinstance(host, str) and host else Path(path).name
    box = Box(name=name[:80], source=path, cards=len(prof.accelerators), free_cards=free,
              mem_available_bytes=prof.host.available_bytes, mem_total_bytes=prof.host.ram_bytes)  # fmt: skip
    if plan_file:
        from nodeledger.placement import reserve as rs

        workloads, specs = rs.load_plan_inputs(plan_file)
        boats = rs.make_plan(prof, workloads, specs, lifeboat, set()).get("lifeboat") or []
        if boats:
            busy = [c for c in boats if free is not None and c not in free]
            box.lifeboat = ",".join(map(str, boats)) + (
                " (taken)" if busy else " (free)" if free is not None else " (use unknown)"
            )
        else:
            box.lifeboat = "none (the plan keeps none free here)"
    elif not prof.accelerators:
        box.lifeboat = "no cards"
    elif free is not None:
        box.lifeboat = "ok: a card is free" if free else "none free"
    box.findings = [f.id for f in run_checks(state) if f.severity in ("warning", "error")]
    if free is None and prof.accelerators:
        box.notes.append("card memory in use not in the bundle: free cards unknown")
    return box


# -- Prometheus -------------------------------------------------------------------------------


def _query(base: str, expr: str, timeout: float = QUERY_TIMEOUT) -> list[dict]:
    url = base.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        deadline = time.monotonic() + timeout  # the whole answer, not each read, is bounded
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            chunks, size = [], 0
            while size <= MAX_ANSWER:
                if time.monotonic() > deadline:
                    raise InputError(f"--prometheus {base}: no full answer within {timeout:g} s")
                chunk = resp.read(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            body = b"".join(chunks)
    except urllib.error.HTTPError as exc:
        raise InputError(f"--prometheus {base}: HTTP {exc.code} for query {expr!r}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        why = getattr(exc, "reason", exc)
        raise InputError(f"--prometheus {base}: cannot query ({str(why)[:120]})") from None
    if len(body) > MAX_ANSWER:
        raise InputError(f"--prometheus {base}: answer over {MAX_ANSWER // 2**20} MiB; refusing it")
    try:
        data = loads_json(body, f"--prometheus {base}: the answer")
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise InputError(f"--prometheus {base}: the answer is not JSON") from None
    if not isinstance(data, dict) or data.get("status") != "success":
        raise InputError(f"--prometheus {base}: query {expr!r} failed ({str(data)[:120]})")
    res = (data.get("data") or {}).get("result")
    if not isinstance(res, list):
        raise InputError(f"--prometheus {base}: no result list for {expr!r}")
    return [r for r in res if isinstance(r, dict) and isinstance(r.get("metric"), dict)]


def _value(r: dict) -> float | None:
    v = r.get("value")
    try:
        return float(v[1])
    except (TypeError, ValueError, IndexError):
        return None


def from_prometheus(base: str) -> list[Box]:
    if not base.startswith(("http://", "https://")):
        raise InputError(f"--prometheus {base!r}: give an http:// or https:// URL")
    boxes: dict[str, Box] = {}

    def box(r: dict) -> Box:
        inst = str(r["metric"].get("instance", "?"))[:200]
        return boxes.setdefault(inst, Box(name=inst, source=base, free_cards=[]))

    for r in _query(base, "nodeledger_card_memory_total_bytes"):
        b = box(r)
        b.cards = (b.cards or 0) + 1
    used = {}
    for r in _query(base, "nodeledger_card_memory_used_bytes"):
        used[(r["metric"].get("instance"), r["metric"].get("card"))] = _value(r)
    procs = {}
    for r in _query(base, "nodeledger_card_processes"):
        procs[(r["metric"].get("instance"), r["metric"].get("card"))] = _value(r)
    for (inst, card), u in sorted(used.items(), key=lambda kv: str(kv[0])):
        b = box({"metric": {"instance": inst}})
        if u is not None and u < FREE_BYTES and not procs.get((inst, card)):
            b.free_cards.append(int(card) if str(card).isdigit() else card)
    boats: dict[str, list[str]] = {}
    for r in _query(base, "nodeledger_lifeboat_card == 1"):
        boats.setdefault(str(r["metric"].get("instance")), []).append(str(r["metric"].get("card")))
    for name, key in (("mem_available_bytes", "nodeledger_host_memory_available_bytes"),
                      ("mem_total_bytes", "nodeledger_host_memory_total_bytes")):  # fmt: skip
        for r in _query(base, key):
            v = _value(r)
            setattr(box(r), name, int(v) if v is not None else None)
    for r in _query(base, "nodeledger_finding == 1"):
        m = r["metric"]
        box(r).findings.append(f"{m.get('rule')} (card {m.get('card')})")
    for inst, b in boxes.items():
        mine = boats.get(inst)
        if mine:
            taken = [c for c in mine if not c.isdigit() or int(c) not in b.free_cards]
            b.lifeboat = ",".join(mine) + (" (taken)" if taken else " (free)")
        else:
            b.lifeboat = "ok: a card is free" if b.free_cards else "none free"
    return [boxes[k] for k in sorted(boxes)]


def grid(boxes: list[Box]) -> Grid:
    """The fleet as one table (a shared section kind: terminal, Markdown, HTML), a row per box,
    each box's notes under it."""
    rows = []
    for b in boxes:
        free = "unknown" if b.free_cards is None else (",".join(map(str, b.free_cards)) or "none")
        ram = "unknown" if b.mem_available_bytes is None else (
            f"{gib_num(b.mem_available_bytes)}"
            + (f" of {gib_num(b.mem_total_bytes)}" if b.mem_total_bytes else ""))  # fmt: skip
        rows.append([b.name, b.source, "unknown" if b.cards is None else str(b.cards), free,
                     b.lifeboat, ram, ", ".join(b.findings) or "none"])  # fmt: skip
    return Grid("nodeledger fleet: one row per box (free: under 1 GiB in use, no process)",
                ["box", "source", "cards", "free cards", "lifeboat", "host RAM available GiB",
                 "findings"], rows,
                [f"note: {b.name}: {n}" for b in boxes for n in b.notes])  # fmt: skip
