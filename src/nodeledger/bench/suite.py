"""``nodeledger bench``: measure the disks (always) and the cards (with torch), judge every figure
against what the device class and this machine's topology say it should be.  The work is
here; ``cli/bench.py`` only renders."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from nodeledger import field_notes
from nodeledger.bench import cards as C
from nodeledger.bench import disk as D
from nodeledger.bench import judge as J
from nodeledger.errors import InputError
from nodeledger.machine.parsers.common import pci_address
from nodeledger.machine.probe.runner import Runner
from nodeledger.units import gib_num

PARTS = ("host_card", "peer", "collective", "memory")
PART_TITLES = {
    "disk": "Disk",
    "host_card": "Host <-> card copies",
    "peer": "Card <-> card copies",
    "collective": "Collectives (nccl-tests bus bandwidth)",
    "memory": "Allocatable card memory",
}


def _runner(runner: Runner | None) -> Runner:
    """``runner``, else a fresh live one (5 s per tool)."""
    return runner if runner is not None else Runner(timeout=5.0, live=True)


def _probe(runner: Runner | None = None):
    from nodeledger.machine.probe import probe_machine

    return probe_machine(_runner(runner))


def counts(figures: list[dict]) -> dict[str, int]:
    return {v: sum(1 for f in figures if f["verdict"] == v) for v in J.VERDICTS}


def run_bench(*, cards: list[int] | None = None, quick: bool = False, dataset: Path | None = None,
              cache: Path | None = None, compare_nccl: str | None = None, nccl_op: str | None = None,
              profile=None, backend_kind: str | None = None, disk_sizes: D.DiskSizes | None = None,
              card_sizes: C.CardSizes | None = None, skip_cards: bool = False,
              progress: Callable[[str], None] | None = None,
              runner: Runner | None = None, kernels: bool = False,
              kernel_sizes=None, date: str = "") -> dict:  # fmt: skip
    """Run every part; returns the report dict (see docs/reference.md "Bench and go-live").  ``profile``: the machine
    (default: probe this host); ``backend_kind="cpu"`` and the sizes are for tests.
    ``runner``: where /proc and /sys are read (and the probe runs); default: this host, live."""
    say = progress or (lambda _m: None)
    t0 = time.perf_counter()
    if dataset is not None and not dataset.exists():
        raise InputError(f"--dataset {str(dataset)!r} not found")
    if cache is not None and not cache.exists():
        raise InputError(f"--cache {str(cache)!r} not found")
    parsed = None
    if compare_nccl is not None:
        from nodeledger.bench.nccl import read_nccl_tests

        parsed = read_nccl_tests(compare_nccl, nccl_op)  # bad input fails before measuring
    if profile is None:
        say("probing the machine")
        profile = _probe(runner)
    dsz = disk_sizes or (D.QUICK if quick else D.FULL)
    csz = card_sizes or (C.QUICK if quick else C.FULL)
    rep: dict = {
        "machine": profile.name, "quick": quick,
        "sizes": {"disk": dsz.describe(), "cards": csz.describe()},
        "disk": [], "cards": None, "figures": [], "nccl_tests": None, "notes": [],
    }  # fmt: skip
    rep["disk"] = disk_part(dataset, cache, dsz, profile, say, runner)
    for sec in rep["disk"]:
        rep["figures"] += sec["figures"]
    rep["figures"].append(cache_beside_workdir(cache))
    if skip_cards:
        rep["cards"] = {
            "status": "unavailable",
            "reason": "not asked (--no-cards)",
            "backend": None,
        }
        rep["figures"] += [J.unavailable(p, "cards", PART_TITLES[p], "not asked") for p in PARTS]
    else:
        ksz = None
        if kernels:
            from nodeledger.bench import kernels as BK

            ksz = kernel_sizes or (BK.QUICK if quick else BK.FULL)
        rep["cards"] = card_part(profile, cards, csz, backend_kind, say, runner, ksz, date)
        rep["figures"] += rep["cards"].pop("figures")
    if parsed is not None:
        rep["nccl_tests"] = nccl_part(parsed, rep["cards"], profile)
        rep["figures"] += rep["nccl_tests"].pop("figures")
    rep["counts"] = counts(rep["figures"])
    rep["seconds"] = round(time.perf_counter() - t0, 2)
    return rep


# ---------------------------------------------------------------------------------------
# disks
# ---------------------------------------------------------------------------------------


def disk_part(dataset: Path | None, cache: Path | None, sizes: D.DiskSizes, profile,
              say: Callable[[str], None], runner: Runner | None = None) -> list[dict]:  # fmt: skip
    mounts_text = _runner(runner).read("/proc/mounts")
    mounts = profile.storage.mounts
    ds, ds_how = (
        (dataset, "--dataset")
        if dataset is not None
        else (Path.cwd(), "working directory (no --dataset)")
    )
    if cache is not None:
        mc, mc_how = cache, "--cache"
    else:
        mc, mc_how = D.model_cache_dir()
    out = []
    say(f"disk: reading {D.existing_dir(ds)}")
    first = D.bench_dir("dataset", ds, sizes, mounts, mounts_text, ds_how)
    out.append(first)
    if D.same_filesystem(ds, mc) and first["status"] == "measured":
        second = dict(first, label="model cache", path=str(mc), how=mc_how,
                      tested_in=str(D.existing_dir(mc)))  # fmt: skip
        subject = f"model cache {D.existing_dir(mc)} (same filesystem as the dataset)"
        second["figures"] = [
            dict(f, subject=subject, evidence="one measurement for both: " + f["evidence"])
            for f in first["figures"]
        ]
        second["shared_with"] = "dataset"
        out.append(second)
    else:
        say(f"disk: reading {D.existing_dir(mc)}")
        out.append(D.bench_dir("model cache", mc, sizes, mounts, mounts_text, mc_how))
    return out


def cache_beside_workdir(cache: Path | None) -> dict:
    """Field claim "cache_same_disk": the model cache on the working directory's disk."""
    mc = cache if cache is not None else D.model_cache_dir()[0]
    wd = Path.cwd()
    same = D.same_filesystem(mc, wd)
    subject = f"model cache {D.existing_dir(mc)} vs working directory {wd}"
    expected = "same filesystem"
    if same is None:
        v, ev = "unknown", "cannot stat one of them"
    elif same:
        v, ev = "ok", "same filesystem (st_dev)"
    else:
        v, ev = "low", "different filesystems: loading from the cache copies across disks"
    return {"part": "disk", "subject": subject, "metric": "model cache beside the working directory",
            "value": None, "unit": "", "verdict": v, "expected": expected,
            "source": field_notes.cited("cache_same_disk"),
            "evidence": ev}  # fmt: skip


# ---------------------------------------------------------------------------------------
# cards
# ---------------------------------------------------------------------------------------


def _unavailable_cards(reason: str, backend: str | None = None) -> dict:
    figs = [J.unavailable(p, "cards", PART_TITLES[p], f"unavailable: {reason}") for p in PARTS]
    return {"status": "unavailable", "reason": reason, "backend": backend, "figures": figs}


def _match(profile, idx: int, bus: str | None):
    """The profile accelerator of torch card ``idx``: by PCI bus id, else by index."""
    accs = profile.accelerators
    nb = pci_address(bus)
    if nb:
        for a in accs:
            if pci_address(a.pci_bus_id) == nb:
                return a, "PCI bus id"
    for a in accs:
        if a.index == idx:
            return a, "index (CUDA_DEVICE_ORDER=PCI_BUS_ID)"
    return None, "not in the machine profile"


def _sysfs_numa(bus: str | None, runner: Runner | None = None) -> int | None:
    b = pci_address(bus)
    if not b:
        return None
    text = _runner(runner).read(f"/sys/bus/pci/devices/{b}/numa_node")
    try:
        n = int((text or "").strip())
    except ValueError:
        return None
    return n if n >= 0 else None


def card_part(profile, want: list[int] | None, sizes: C.CardSizes, backend_kind: str | None,
              say: Callable[[str], None], runner: Runner | None = None, kernel_sizes=None,
              date: str = "") -> dict:  # fmt: skip
    be, why = C.load_backend(backend_kind)
    if be is None:
        return _unavailable_cards(why)
    n = be.count()
    if n == 0:
        return _unavailable_cards("no card visible to torch", be.label)
    sel = list(range(n)) if not want else list(dict.fromkeys(want))
    bad = [c for c in sel if c < 0 or c >= n]
    if bad:
        raise InputError(f"--cards {bad}: torch sees {n} card(s), indices 0-{n - 1}")
    figs: list[dict] = []
    info = {}
    for i in sel:
        pr = be.props(i)
        acc, how = _match(profile, i, pr["bus_id"])
        bus = pr["bus_id"] or (acc.pci_bus_id if acc else None)
        numa = acc.numa_node if acc and acc.numa_node is not None else _sysfs_numa(bus, runner)
        info[i] = {"card": i, "name": pr["name"], "bus_id": pci_address(bus), "numa_node": numa,
                   "profile_card": acc.index if acc else None, "matched_by": how,
                   "total_bytes": pr["total_bytes"] or (acc.memory_bytes if acc else None),
                   "busy": [f"pid {p.pid} ({p.name or '?'})" for p in acc.processes] if acc else [],
                   "pcie": C.pcie_link(bus, runner)}  # fmt: skip
    res = {"status": "measured", "reason": "", "backend": be.label, "cards": list(info.values()),
           "host_card": [], "peer": [], "collectives": [], "memory": []}  # fmt: skip

    say("cards: allocatable memory")
    for i in sel:
        figs.append(_memory(be, info[i], res))
    nodes = C.numa_cpus(profile, runner)
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    local_cpus: dict[int, set[int] | None] = {}
    for i in sel:
        say(f"cards: host <-> card {i}")
        figs += _host_card(be, info[i], sizes, nodes, allowed, res, local_cpus, runner)
    if kernel_sizes is not None:
        res["kernels"] = _kernels(be, info, sel, bool(want), kernel_sizes, date, say)
    if len(sel) >= 2:
        say(f"cards: peer copies ({len(sel) * (len(sel) - 1)} pairs)")
        figs += _peer(be, profile, info, sel, sizes, res)
        say(f"cards: collectives over {len(sel)} cards ({be.dist_backend})")
        figs += _collectives(be, profile, info, sel, sizes, res, local_cpus)
    else:
        for p in ("peer", "collective"):
            figs.append(J.unavailable(p, f"card {sel[0]}", PART_TITLES[p],
                                      "unavailable: needs at least 2 cards (--cards)"))  # fmt: skip
    res["figures"] = figs
    return res


def _memory(be: C.TorchCards, ci: dict, res: dict) -> dict:
    i = ci["card"]
    subj = f"card {i}"
    if ci["busy"]:
        return J.unavailable("memory", subj, "allocatable bytes",
                             f"skipped: card held by {', '.join(ci['busy'])} (filling it would starve them)")  # fmt: skip
    before = be.mem_get_info(i)
    got = C.allocatable(be, i) if be.kind != "cpu" else C.allocatable(be, i, cap=256 * C.MiB)
    total = (before[1] if before else None) or ci["total_bytes"]
    res["memory"].append({"card": i, "allocatable_bytes": got, "total_bytes": total,
                          "free_before_bytes": before[0] if before else None})  # fmt: skip
    if not total:
        return J.figure("memory", subj, "allocatable ÷ total", None, "", None,
                        evidence=f"{gib_num(got, 2)} GiB allocatable", expected_text="card total unknown")  # fmt: skip
    ev = f"{gib_num(got, 2)} GiB of {gib_num(total, 2)} GiB"
    if before:
        ev += f"; in use before the test: {gib_num((before[1] - before[0]), 2)} GiB (this process's context included)"
    return J.figure(
        "memory", subj, "allocatable ÷ total", got / total, "of total", J.MEMORY, evidence=ev
    )


def _kernels(be: C.TorchCards, info: dict, sel: list[int], named: bool, sizes, date: str,
             say: Callable[[str], None]) -> dict:  # fmt: skip
    """The kernel table of each card kind among ``sel``: measured on its first idle card (a card
    holding a job is skipped unless --cards named it)."""
    from nodeledger.bench import kernels as BK

    out: dict = {}
    for i in sel:
        name = info[i]["name"]
        if name in out:
            continue
        if info[i]["busy"] and not named:
            out.setdefault("_skipped", []).append(
                f"card {i} ({name}): holds {', '.join(info[i]['busy'])}; --cards {i} measures it"
            )
            continue
        say(f"cards: kernels on card {i} ({name})")
        t0 = time.perf_counter()
        rows, notes = BK.measure(be, i, name, sizes, date=date)
        out[name] = {"card": i, "rows": rows, "notes": notes,
                     "seconds": round(time.perf_counter() - t0, 2), **BK.plateaus(rows)}  # fmt: skip
    return out


def _host_card(be: C.TorchCards, ci: dict, sz: C.CardSizes, nodes, allowed, res: dict,
               local_cpus: dict, runner: Runner | None = None) -> list[dict]:  # fmt: skip
    i = ci["card"]
    subj = f"card {i}"
    local, remote, rnode, why = C.binding_sets(ci["numa_node"], nodes, allowed, runner)
    local_cpus[i] = local
    row: dict = {"card": i, "numa_node": ci["numa_node"], "remote_node": rnode, "binding_note": why}
    for bind, cpus in (("local", local), ("remote", remote)):
        if bind == "remote" and cpus is None:
            continue
        for pinned in (True, False):
            r = C.host_copy(be, i, sz.host_sweep, sz.host_reps, pinned, cpus)
            key = f"{'pinned' if pinned else 'pageable'}_{bind if local is not None else 'unbound'}"
            row[key] = r
    res["host_card"].append(row)
    # re-read: trained up now
    link = C.pcie_link(ci["bus_id"], runner) if ci["bus_id"] else ci["pcie"]
    ci["pcie_after"] = link
    label = J.pcie_label(link["max_gts"], link["max_width"])
    now = J.pcie_label(link["cur_gts"], link["cur_width"])
    link_ev = (
        f"PCIe link {label} (card and port), now {now}"
        if link["max_gts"]
        else "PCIe link unknown (no sysfs link files)"
    )
    if (
        link["max_gts"]
        and link["cur_gts"]
        and (link["cur_gts"], link["cur_width"]) < (link["max_gts"], link["max_width"])
    ):
        link_ev += " (below its maximum just after the copies: trained down?)"
    bind_word = "local" if local is not None else "unbound"
    bind_ev = f"CPUs of NUMA node {ci['numa_node']}" if local is not None else f"not bound: {why}"
    figs = []
    for pinned in (True, False):
        key = f"{'pinned' if pinned else 'pageable'}_{bind_word}"
        r = row[key]
        really = pinned and r.get("pinned_checked") is not False  # a buffer that did not pin
        exp = J.host_card_expect(link["max_gts"], link["max_width"], really)
        pin_ev = ("" if not pinned else "; the host buffer is not page-locked (is_pinned() "
                  "False): judged as pageable" if r.get("pinned_checked") is False else
                  "; host buffer checked pinned, copied non_blocking")  # fmt: skip
        for d, arrow in (("h2d_gbps", "host->card"), ("d2h_gbps", "card->host")):
            sweep = ", ".join(
                f"{x['bytes'] / C.MiB:,.0f} MiB {x[d]:,.1f}" for x in r.get("sweep", [])
            )
            figs.append(J.figure("host_card", subj, f"{arrow} {'pinned' if pinned else 'pageable'}",
                                 r[d], "GB/s", exp,
                                 evidence=f"{bind_ev}; {link_ev}; plateau of GB/s by size: {sweep}{pin_ev}",
                                 expected_text="link rate unknown: no sysfs PCIe link files for this card"))  # fmt: skip
    if remote is not None:
        loc, rem = row["pinned_local"]["h2d_gbps"], row["pinned_remote"]["h2d_gbps"]
        v, text = J.numa_verdict(loc, rem)
        cost = 100 * (1 - rem / loc) if loc else None
        pl, pr = row["pageable_local"]["h2d_gbps"], row["pageable_remote"]["h2d_gbps"]
        ev = (f"pinned host->card {rem:,.1f} GB/s with CPUs of node {rnode} vs {loc:,.1f} local "
              f"({cost:+.1f} % cost of a wrong binding); pageable {pr:,.1f} vs {pl:,.1f} "
              f"({100 * (1 - pr / pl):+.1f} %); {text}")  # fmt: skip
        figs.append(J.figure("host_card", subj, f"NUMA-remote binding cost (node {rnode})", cost, "%",
                             None, verdict=v, evidence=ev,
                             expected_text="local binding at least as fast as remote (within 5 %)"))  # fmt: skip
    else:
        figs.append(
            J.unavailable("host_card", subj, "NUMA-remote binding cost", f"unavailable: {why}")
        )
    return figs


def _achievable(ci: dict) -> float | None:
    link = ci.get("pcie_after") or ci["pcie"]
    if not link["max_gts"] or not link["max_width"]:
        return None
    return J.achievable(link["max_gts"]) * J.pcie_raw_gbps(link["max_gts"], link["max_width"])


def _pair_link(profile, info: dict, a: int, b: int) -> tuple[str, float | None, str]:
    pa, pb = info[a]["profile_card"], info[b]["profile_card"]
    if pa is None or pb is None:
        return "unknown", None, "card not in the machine profile"
    return profile_link(
        profile, pa, pb, info[a]["name"], _achievable(info[a]), _achievable(info[b])
    )


def profile_link(profile, pa: int, pb: int, product: str | None = None, ach_a: float | None = None,
                 ach_b: float | None = None) -> tuple[str, float | None, str]:  # fmt: skip
    """(kind, per-direction GB/s or None, why) of the path between profile cards pa and pb."""
    lk = profile.interconnect.link(pa, pb)
    kind = lk.kind.value if hasattr(lk.kind, "value") else str(lk.kind)
    if product is None:
        product = next((x.product for x in profile.accelerators if x.index == pa), None)
    gbps, why = J.link_gbps(
        kind, lk.lanes, lk.bandwidth_gbps, product, ach_a, ach_b, lk.label, lk.source
    )
    return kind, gbps, why


def _peer(
    be: C.TorchCards, profile, info: dict, sel: list[int], sz: C.CardSizes, res: dict
) -> list[dict]:
    figs = []
    for a in sel:
        for b in sel:
            if a == b:
                continue
            g = C.peer_copy(be, a, b, sz.copy_bytes, sz.copy_iters)
            kind, gbps, why = _pair_link(profile, info, a, b)
            p2p = be.can_peer(a, b)
            res["peer"].append({"src": a, "dst": b, "gbps": g, "link": kind, "link_gbps": gbps,
                                "peer_access": p2p})  # fmt: skip
            exp = J.peer_expect(kind, gbps, why)
            figs.append(J.figure("peer", f"card {a} -> {b}", "peer copy", g, "GB/s", exp,
                                 evidence=f"link {kind}; peer access {'yes' if p2p else 'no' if p2p is False else 'unknown'}",
                                 expected_text=why))  # fmt: skip
    return figs


def weakest_link(profile, info: dict, sel: list[int]) -> tuple[float | None, str]:
    return _weakest(sel, lambda a, b: _pair_link(profile, info, a, b))


def _weakest(sel: list[int], pair) -> tuple[float | None, str]:
    worst, text = None, ""
    for k, a in enumerate(sel):
        for b in sel[k + 1 :]:
            _kind, g, why = pair(a, b)
            if g is None:
                return None, f"cards {a}-{b}: {why}"
            if worst is None or g < worst:
                worst, text = g, f"cards {a}-{b}, {why}"
    return worst, text


def judge_nccl(parsed: dict, profile) -> dict:
    """The nccl-tests file's peak bus bandwidth judged against ``profile``'s weakest link among
    its first n cards (the same expectation as nodeledger's own collectives)."""
    subj = f"nccl-tests {Path(parsed['source']).name}"
    op = parsed["collective"] or "collective"
    metric = f"{op} peak busbw @ {parsed['peak']['size_bytes'] / 2**20:,.0f} MiB"
    value = parsed["peak"]["busbw_gbps"]
    avg = parsed["avg_busbw"]
    ev = (f"{parsed['n']} ranks on {len(parsed['hosts']) or 1} host(s); avg busbw "
          f"{'unknown' if avg is None else f'{avg} GB/s'} (nccl-tests' Avg bus bandwidth line)")  # fmt: skip
    if len(parsed["hosts"]) > 1:
        return J.figure("collective", subj, metric, value, "GB/s", None, evidence=ev,
                        expected_text=f"spans {len(parsed['hosts'])} hosts: bound by the network, not judged against one box's links")  # fmt: skip
    n = parsed["n"] or 0
    idx = sorted(a.index for a in profile.accelerators)[:n]
    if n < 2 or len(idx) < n:
        return J.figure("collective", subj, metric, value, "GB/s", None, evidence=ev,
                        expected_text=f"{profile.name} has {len(profile.accelerators)} card(s), the run {n} rank(s)")  # fmt: skip
    weakest, why = _weakest(idx, lambda a, b: profile_link(profile, a, b))
    exp = J.collective_expect(weakest, why)
    return J.figure("collective", subj, metric, value, "GB/s", exp, evidence=ev + f"; judged on {profile.name}",
                    expected_text=why)  # fmt: skip


def _collectives(be: C.TorchCards, profile, info: dict, sel: list[int], sz: C.CardSizes, res: dict,
                 local_cpus: dict) -> list[dict]:  # fmt: skip
    subj = f"cards {','.join(map(str, sel))}"
    results, err = C.run_collectives(be.kind, sel, sz, local_cpus)
    weakest, why = weakest_link(profile, info, sel)
    exp = J.collective_expect(weakest, why)
    if err:
        return [J.figure("collective", subj, "all-reduce / all-gather", None, "GB/s", exp,
                         verdict="bad", evidence=f"{be.dist_backend} failed: {err}")]  # fmt: skip
    res["collectives"] = results
    figs = []
    for r in results:
        name = {"all_reduce": "all-reduce", "all_gather": "all-gather"}.get(r["op"], r["op"])
        ev = (f"{r['n']} ranks ({r['backend']}), {r['size_bytes'] / C.MiB:,.0f} MiB, "
              f"{r['seconds'] * 1e6:,.1f} us per call, algbw {r['algbw_gbps']:,.1f} GB/s; "
              f"busbw = algbw x {J.bus_factor(r['op'], r['n']):.3f}")  # fmt: skip
        figs.append(J.figure("collective", subj, f"{name} busbw @ {r['size_bytes'] / C.MiB:,.0f} MiB",
                             r["busbw_gbps"], "GB/s", exp, evidence=ev, expected_text=why))  # fmt: skip
    return figs


# ---------------------------------------------------------------------------------------
# nccl-tests beside nodeledger
# ---------------------------------------------------------------------------------------


def nccl_part(parsed: dict, cards: dict | None, profile) -> dict:
    from nodeledger.bench.nccl import compare

    measured = (cards or {}).get("collectives") or []
    cmp = compare(parsed, measured) if measured else []
    out = {k: parsed[k] for k in ("source", "n", "hosts", "collective", "collective_from",
                                   "out_of_bounds", "peak")}  # fmt: skip
    out["avg_busbw_gbps"] = parsed["avg_busbw"]
    out["rows"] = len(parsed["rows"])
    out["comparison"] = cmp
    subj = f"nccl-tests {Path(parsed['source']).name}"
    figs = [judge_nccl(parsed, profile)]
    if not measured:
        reason = (cards or {}).get("reason") or "no collective measured"
        figs.append(J.unavailable("collective", subj, "nodeledger vs nccl-tests busbw",
                                  f"unavailable: nothing of nodeledger's to compare ({reason})"))  # fmt: skip
    elif not cmp:
        figs.append(J.unavailable("collective", subj, "nodeledger vs nccl-tests busbw",
                                  f"unavailable: the file is {parsed['collective'] or 'an unknown collective'}, "
                                  "nodeledger measured all_reduce and all_gather"))  # fmt: skip
    for c in cmp:
        v = J.ratio_verdict(c["ratio"]) if c["comparable"] else "unknown"
        figs.append(J.figure("collective", subj, f"{c['op']} busbw ÷ nccl-tests @ {c['size_bytes'] / 2**20:,.0f} MiB",
                             c["ratio"], "x nccl-tests", None, verdict=v,
                             expected_text="within 5 % of nccl-tests either way ok, within 20 % low, else bad (same bus-bandwidth definition)",
                             evidence=f"nodeledger {c['busbw_gbps']:,.1f} GB/s, nccl-tests {c['nccl_tests_busbw_gbps']} GB/s"
                             + (f"; {c['note']}" if c["note"] else "")))  # fmt: skip
    out["figures"] = figs
    return out
