"""``nodeledger bench --save-profile FILE``: measured beats assumed.

``measured_profile(profile, report, date)`` puts what bench measured (``run_bench``'s report
dict, or a saved ``bench --json``) into the machine profile bench ran against, as ordinary
profile fields, each with the source text ``"measured by bench, YYYY-MM-DD: <detail>"``:

| report                                             | profile field                                  |
|----------------------------------------------------|------------------------------------------------|
| ``cards.host_card`` pinned h2d (best NUMA side)    | ``accelerators[i].host_to_card_gbps``          |
| ``cards.host_card`` pinned d2h (best NUMA side)    | ``accelerators[i].card_to_host_gbps``          |
| ``cards.host_card`` pageable h2d (best NUMA side)  | ``accelerators[i].host_to_card_pageable_gbps`` |
| ``cards.peer`` a->b and b->a (the lower kept)      | ``interconnect.pairs[a,b].bandwidth_gbps``     |
| ``cards.collectives`` (largest size per op, set)   | ``interconnect.collectives``                   |
| disk "sequential read" (MB/s -> GB/s)              | ``storage.mounts[m].sequential_read_gbps``     |
| disk "random 4 KiB read latency (QD1, mean)"       | ``storage.mounts[m].random_read_latency_ms``   |
| ``nic_speeds`` (``read_nic_speeds``: sysfs speed)  | ``network.nics[n].speed_gbit``                 |

Cards are the profile's (torch's index mapped through ``cards.cards[].profile_card``; a card
whose bus id disagrees with the profile's is left out).  A peer pair keeps the kind, lanes and
label the profile gives it (``interconnect.link(a, b)``).  A figure that is unavailable, not a
positive finite number, judged ``unknown`` because it is not the device's (a disk read from
the page cache or from memory), or measured on the CPU stand-in backend (tests) never becomes
a number.  Allocatable memory and nccl-tests' own figures are not saved (no profile field; not
bench's measurement); memory bandwidth is not measured.
"""

from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path

from nodeledger import atomic
from nodeledger.errors import InputError, ProfileError
from nodeledger.machine.io import save_profile
from nodeledger.machine.parsers.common import pci_address
from nodeledger.machine.profile import MachineProfile, errors, to_json, validate

MEASURED = "measured by bench"
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall")
NIC_LIMIT = 64  # NICs whose sysfs speed is read, at most
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_IFNAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,15}$")  # IFNAMSIZ 16, no "/"
MiB = 2**20


def source_text(date: str, detail: str = "") -> str:
    """``"measured by bench, DATE"``, the detail after a colon."""
    return f"{MEASURED}, {date}" + (f": {detail}" if detail else "")


def _num(x) -> float | None:
    """A positive finite number, else None (unknown stays unknown)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) and x > 0 else None


def _round(x: float) -> float | None:
    r = round(x, 4)
    return r if r > 0 else None


def _g(x: float) -> str:
    return f"{x:,.1f}" if x >= 10 else f"{x:,.3g}"


# ---------------------------------------------------------------------------------------
# the profile from the report
# ---------------------------------------------------------------------------------------


def measured_profile(profile: MachineProfile, report: dict, date: str) -> MachineProfile:
    """A new, validated profile: ``profile`` with ``report``'s measured figures put in (see the
    module docstring); ``date`` = the run's UTC date, YYYY-MM-DD."""
    if not _DATE.match(date or ""):
        raise ValueError(f"date must be YYYY-MM-DD, got {date!r}")
    data = to_json(profile)
    notes: list[str] = []
    cards = report.get("cards") or {}
    copies = str((report.get("sizes") or {}).get("cards") or "").split(";")[0].strip()
    if cards.get("status") == "measured":
        if str(cards.get("backend") or "").endswith(", cpu"):
            notes.append("card figures not saved: measured on CPU tensors (test backend)")
        else:
            where = _card_map(profile, cards, notes)
            _host_card(data, cards, where, copies, date)
            _peer(data, profile, cards, where, copies, date)
            _collectives(data, cards, where, date, notes)
            _kernel_tables(data, cards, date)
    _disks(data, report.get("disk") or [], date)
    _nics(data, report.get("nic_speeds") or [], date)
    try:
        out = validate(MachineProfile, data)
    except ValueError as exc:  # a report that does not fit the profile: one line
        first = errors(exc)[0]
        loc = ".".join(str(x) for x in first["loc"]) or "(top level)"
        raise ProfileError(f"measured profile: field {loc}: {first['msg']}") from None
    n = count_measured(out, date)
    run = "quick" if report.get("quick") else "full"
    out.notes = [*out.notes, f"{n} figure(s) {source_text(date)} ({run} run on "
                 f"{report.get('machine') or profile.name}; source texts say which)", *notes]  # fmt: skip
    return out


def _kernel_tables(data: dict, cards: dict, date: str) -> None:
    """Each card kind's measured kernel table into ``kernels[product]``; where the card's
    datasheet figures are unknown, its bf16 peak and memory bandwidth become the measured
    plateaus (the best GEMM rate, the best device copy's read + write rate), said so."""
    for product, k in (cards.get("kernels") or {}).items():
        if product.startswith("_") or not isinstance(k, dict) or not k.get("rows"):
            continue
        data.setdefault("kernels", {})[product] = k["rows"]
        for a in data.get("accelerators", []):
            if a.get("product") != product:
                continue
            for field, key, what in (
                ("bf16_dense_tflops", "bf16_tflops", "the best bf16 GEMM of its kernel sweep"),
                ("memory_bandwidth_gbps", "memory_gbps", "the best device copy, read + write"),
            ):
                v = _num(k.get(key))
                if a.get(field) is None and v is not None:
                    a[field] = v
                    a.setdefault("sources", {})[field] = source_text(
                        date, f"{what} (no datasheet figure for this card: the measured plateau)"
                    )


def count_measured(profile: MachineProfile, date: str) -> int:
    """How many fields of ``profile`` say ``measured by bench, DATE``."""
    tag = source_text(date)
    texts: list[str | None] = []
    for a in profile.accelerators:
        texts += list(a.sources.values())
    texts += [p.source for p in profile.interconnect.pairs]
    texts += [c.source for c in profile.interconnect.collectives]
    for m in profile.storage.mounts:
        texts += list(m.sources.values())
    for nic in profile.network.nics:
        texts += list(nic.sources.values())
    return sum(1 for t in texts if t and (t == tag or t.startswith(tag + ":")))


def _card_map(profile: MachineProfile, cards: dict, notes: list[str]) -> dict[int, int]:
    """torch card index -> profile card index, for the cards bench could attribute."""
    accs = {a.index: a for a in profile.accelerators}
    out: dict[int, int] = {}
    for c in cards.get("cards") or []:
        i, pc = c.get("card"), c.get("profile_card")
        if not isinstance(i, int) or not isinstance(pc, int) or pc not in accs:
            notes.append(f"bench card {i}: not in the machine profile, its figures not saved")
            continue
        mine, theirs = pci_address(c.get("bus_id")), pci_address(accs[pc].pci_bus_id)
        if mine and theirs and mine != theirs:
            notes.append(f"bench card {i} (bus {mine}) is not profile card {pc} (bus {theirs}): "
                         "its figures not saved")  # fmt: skip
            continue
        out[i] = pc
    return out


def _side(row: dict, key: str, d: str) -> list[tuple[str, float]]:
    """(side, GB/s) of one copy kind (``pinned`` / ``pageable``) and direction, measured ones."""
    got = []
    for side in ("local", "remote", "unbound"):
        v = _num((row.get(f"{key}_{side}") or {}).get(d))
        if v is not None:
            got.append((side, v))
    return got


def _host_card(data: dict, cards: dict, where: dict[int, int], copies: str, date: str) -> None:
    accs = {a["index"]: a for a in data["accelerators"]}
    what = {"host_to_card_gbps": ("pinned", "h2d_gbps", "pinned host->card copy"),
            "card_to_host_gbps": ("pinned", "d2h_gbps", "pinned card->host copy"),
            "host_to_card_pageable_gbps": ("pageable", "h2d_gbps", "pageable host->card copy")}  # fmt: skip
    for row in cards.get("host_card") or []:
        pc = where.get(row.get("card"))
        if pc is None:
            continue
        acc = accs[pc]
        node, rnode = row.get("numa_node"), row.get("remote_node")
        names = {"local": f"NUMA-local (CPUs of node {node})",
                 "remote": f"NUMA-remote (CPUs of node {rnode})",
                 "unbound": "CPUs not bound" + (f" ({row['binding_note']})" if row.get("binding_note") else "")}  # fmt: skip
        short = {"local": f"NUMA-local (node {node})", "remote": f"NUMA-remote (node {rnode})",
                 "unbound": "unbound"}  # fmt: skip
        for field, (key, d, label) in what.items():
            got = _side(row, key, d)
            if not got:
                continue
            best, value = max(got, key=lambda sv: (sv[1], sv[0] == "local"))
            r = _round(value)
            if r is None:
                continue
            detail = f"{label}, {copies or 'bench copy sizes'}, {names[best]}"
            others = [f"{short[s]}: {_g(v)} GB/s" for s, v in got if s != best]
            if others:
                detail += "; " + ", ".join(others)
            if best == "remote":
                detail += " (remote faster than local: is the card's NUMA node right?)"
            acc[field] = r
            acc["sources"][field] = source_text(date, detail)


def _peer(data: dict, profile: MachineProfile, cards: dict, where: dict[int, int], copies: str,
          date: str) -> None:  # fmt: skip
    both: dict[tuple[int, int], dict[tuple[int, int], tuple[float, object]]] = {}
    for row in cards.get("peer") or []:
        a, b, g = where.get(row.get("src")), where.get(row.get("dst")), _num(row.get("gbps"))
        if a is None or b is None or a == b or g is None:
            continue
        both.setdefault((min(a, b), max(a, b)), {})[(a, b)] = (g, row.get("peer_access"))
    pairs = data["interconnect"]["pairs"]
    for (a, b), dirs in sorted(both.items()):
        low = min(g for g, _ in dirs.values())
        r = _round(low)
        if r is None:
            continue
        lk = profile.interconnect.link(a, b)
        kind = lk.kind.value if hasattr(lk.kind, "value") else str(lk.kind)
        each = ", ".join(f"{s}->{t} {_g(g)} GB/s" for (s, t), (g, _) in sorted(dirs.items()))
        access = {v for _, v in dirs.values()}
        acc = "yes" if access == {True} else "no" if access == {False} else "unknown"
        detail = (f"peer copy {each}" + (" (the lower kept)" if len(dirs) > 1 else "")
                  + f", {copies or 'bench copy sizes'}; peer access {acc}; link {lk.label or kind}"
                  + (f" ({lk.source})" if lk.source else ""))  # fmt: skip
        new = {"a": a, "b": b, "kind": kind, "lanes": lk.lanes, "label": lk.label,
               "bandwidth_gbps": r, "source": source_text(date, detail)}  # fmt: skip
        for k, p in enumerate(pairs):
            if {p["a"], p["b"]} == {a, b}:
                pairs[k] = dict(new, a=p["a"], b=p["b"])
                break
        else:
            pairs.append(new)


def _collectives(data: dict, cards: dict, where: dict[int, int], date: str,
                 notes: list[str]) -> None:  # fmt: skip
    sel = [c.get("card") for c in cards.get("cards") or []]
    mapped = [where.get(c) for c in sel]
    rows = cards.get("collectives") or []
    if not rows:
        return
    if not sel or any(m is None for m in mapped) or len(set(mapped)) != len(mapped):
        notes.append("collectives not saved: not every card of the set is in the machine profile")
        return
    cset = sorted(mapped)  # type: ignore[type-var]
    best: dict[str, dict] = {}
    for r in rows:
        op, size = r.get("op"), r.get("size_bytes")
        alg, bus = _num(r.get("algbw_gbps")), _num(r.get("busbw_gbps"))
        if op not in OPS or isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            continue
        if alg is None and bus is None:
            continue
        if r.get("n") not in (None, len(cset)):
            continue  # not over this card set
        if op not in best or size > best[op]["size_bytes"]:
            best[op] = dict(r, algbw_gbps=alg, busbw_gbps=bus)
    coll = data["interconnect"]["collectives"]
    for op, r in best.items():
        sec = _num(r.get("seconds"))
        detail = (f"{op} over cards {','.join(map(str, cset))} ({r.get('backend') or 'torch.distributed'}, "
                  f"{len(cset)} ranks), {r['size_bytes'] / MiB:,.0f} MiB x {r.get('iters') or '?'}"
                  + (f", {sec * 1e6:,.1f} us per call" if sec else "")
                  + "; busbw as nccl-tests (doc/PERFORMANCE.md)")  # fmt: skip
        new = {"op": op, "cards": cset, "size_bytes": r["size_bytes"],
               "algbw_gbps": _round(r["algbw_gbps"]) if r["algbw_gbps"] else None,
               "busbw_gbps": _round(r["busbw_gbps"]) if r["busbw_gbps"] else None,
               "source": source_text(date, detail)}  # fmt: skip
        coll[:] = [c for c in coll if not (c["op"] == op and sorted(c["cards"]) == cset)]
        coll.append(new)


_CACHE = {"bypassed": "page cache bypassed (O_DIRECT)",
          "dropped": "page cache dropped (POSIX_FADV_DONTNEED, checked with mincore)",
          "dropped-unverified": "page cache dropped (POSIX_FADV_DONTNEED, not verified)"}  # fmt: skip


def _disks(data: dict, sections: list[dict], date: str) -> None:
    mounts = {(m["path"].rstrip("/") or "/"): m for m in data["storage"]["mounts"]}
    done: set[str] = set()
    for sec in sections:
        if sec.get("status") != "measured" or not sec.get("mount"):
            continue
        key = str(sec["mount"]).rstrip("/") or "/"
        m = mounts.get(key)
        if m is None or key in done:
            continue
        raw = sec.get("raw") or {}
        mode = (raw.get("page_cache") or {}).get("mode")
        if mode not in _CACHE:
            continue  # read from memory: not the disk's figure
        figs = {f.get("metric"): f for f in sec.get("figures") or []}
        where = f"{sec.get('label', 'folder')} {sec.get('tested_in') or sec.get('path')}"
        size = sec.get("file_bytes")
        size_text = f"{size / MiB:,.0f} MiB test file" if isinstance(size, int) else "test file"
        put = False
        seq = figs.get("sequential read") or {}
        v = _num(seq.get("value"))
        if (
            v is not None
            and seq.get("unit") == "MB/s"
            and seq.get("verdict") in ("ok", "low", "bad")
        ):
            r = _round(v / 1000)
            if r is not None:
                m["sequential_read_gbps"] = r
                m["sources"]["sequential_read_gbps"] = source_text(
                    date, f"{where}: one stream of 4 MiB reads over a {size_text}, {_CACHE[mode]}"
                )
                put = True
        lat = figs.get("random 4 KiB read latency (QD1, mean)") or {}
        v = _num(lat.get("value"))
        if v is not None and lat.get("unit") == "ms" and lat.get("verdict") in ("ok", "low", "bad"):
            r = _round(v)
            if r is not None:
                n = raw.get("qd1_reads")
                extra = [f"{n:,} reads" if isinstance(n, int) else None,
                         f"p50 {raw['qd1_p50_ms']:.3g} ms" if _num(raw.get("qd1_p50_ms")) else None,
                         f"p99 {raw['qd1_p99_ms']:.3g} ms" if _num(raw.get("qd1_p99_ms")) else None]  # fmt: skip
                m["random_read_latency_ms"] = r
                m["sources"]["random_read_latency_ms"] = source_text(
                    date, f"{where}: random 4 KiB reads, one in flight (QD1), mean"
                    + "".join(f", {e}" for e in extra if e) + f"; {size_text}, {_CACHE[mode]}",
                )  # fmt: skip
                put = True
        if put:
            done.add(key)


def _nics(data: dict, rows: list[dict], date: str) -> None:
    nics = {n["name"]: n for n in data["network"]["nics"]}
    for row in rows:
        nic = nics.get(row.get("nic"))
        v = _num(row.get("speed_gbit"))
        if nic is None or v is None:
            continue
        nic["speed_gbit"] = v
        nic["sources"]["speed_gbit"] = source_text(
            date, f"{row.get('path')} = {row.get('raw')} Mb/s (the negotiated link rate)"
        )


# ---------------------------------------------------------------------------------------
# reading NIC speeds (bounded, through the Runner)
# ---------------------------------------------------------------------------------------


def read_nic_speeds(profile: MachineProfile, runner=None) -> list[dict]:
    """``/sys/class/net/<nic>/speed`` (Mb/s) of the profile's NICs, at most ``NIC_LIMIT``,
    through ``runner`` (default: this host, live): {nic, path, raw, speed_gbit (None: unknown,
    e.g. link down), reason}.  RDMA device names (no netdev of that name) come back unknown."""
    if runner is None:
        from nodeledger.machine.probe.runner import Runner

        runner = Runner(timeout=5.0, live=True)
    out = []
    for nic in profile.network.nics[:NIC_LIMIT]:
        row = {"nic": nic.name, "path": None, "raw": None, "speed_gbit": None, "reason": ""}
        if not _IFNAME.match(nic.name) or nic.name in (".", ".."):
            row["reason"] = "not a network interface name"
            out.append(row)
            continue
        path = f"/sys/class/net/{nic.name}/speed"
        text = (runner.read(path) or "").strip()
        row.update(path=path, raw=text[:32] or None)
        mbit = int(text) if text.isdigit() and len(text) <= 9 else None
        if mbit:
            row["speed_gbit"] = mbit / 1000
        else:
            row["reason"] = (
                runner.problems.get(path) or f"speed {text[:32]!r} is no link rate (link down?)"
            )
        out.append(row)
    return out


# ---------------------------------------------------------------------------------------
# the file
# ---------------------------------------------------------------------------------------


def check_target(path: str | os.PathLike, option: str = "--save-profile") -> Path:
    """The profile file to write, checked before anything is measured: a name, not a folder or
    a special file, in an existing folder this process can write (a temporary file is made and
    removed there, as the atomic write will).  InputError (one line, exit 2) otherwise."""
    if not str(path).strip():
        raise InputError(f"{option} needs a file name")
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{option} {str(p)!r} is a folder, not a file name")
    if p.exists() and not stat.S_ISREG(p.stat().st_mode):
        raise InputError(f"{option} {str(p)!r} is not a regular file")
    folder = p.parent
    if not folder.exists():
        raise InputError(f"{option} {str(p)!r}: folder {str(folder)!r} does not exist")
    if not folder.is_dir():
        raise InputError(f"{option} {str(p)!r}: {str(folder)!r} is not a folder")
    try:
        atomic.AtomicText(p).discard()
    except OSError as exc:
        raise InputError(
            f"{option} {str(p)!r}: cannot write in {str(folder)!r}: {exc.strerror or exc}"
        ) from None
    return p


def write_profile(profile: MachineProfile, path: str | os.PathLike) -> None:
    """Write atomically (``machine.io.save_profile``: TOML, or JSON for a .json name); an
    interrupted or failed write leaves the old file (or none), never half of one."""
    save_profile(profile, path)


def probe_this_machine(timeout: float = 5.0) -> MachineProfile:
    """The live probe of this machine: the profile the measured figures are written into."""
    from nodeledger.machine.probe import Runner, probe_machine

    return probe_machine(Runner(timeout=timeout, live=True))
