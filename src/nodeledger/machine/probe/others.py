"""AMD ROCm, Hygon DCU and Huawei Ascend backends through their smi tools (text parsers in
machine/parsers, shared with `nodeledger parse` and `nodeledger watch`: the card memory here comes
from the same rocm-smi / hy-smi --json parser the watch samples with).  Each is optional:
absent, failing or garbled tools become notes.

AMD: hy-smi (Hygon DTK), then amd-smi (ROCm >= 6, rocm-smi's successor: `static --json`, else
`static` text; `topology`), then rocm-smi.  A failing amd-smi falls back to rocm-smi.
Ascend: `npu-smi info` (cards, HBM), then `npu-smi info -t topo` (HCCS / PCIe matrix, CPU
affinity, mapped to a host NUMA node when it lies within exactly one)."""

from __future__ import annotations

from nodeledger.errors import InputError
from nodeledger.lazy import LazyModule
from nodeledger.machine.parsers.common import pci_address
from nodeledger.machine.probe.runner import Runner
from nodeledger.machine.profile import (
    Accelerator,
    Interconnect,
    Link,
    LinkKind,
    LinkPair,
    check,
    first_error,
)

# the AMD / Hygon and Ascend tool parsers load only where such a tool answered
amd_smi = LazyModule("nodeledger.machine.parsers.amd_smi")
npu_smi = LazyModule("nodeledger.machine.parsers.npu_smi")


def _amd_like(r: Runner, tool: str, vendor: str, notes: list[str]):
    res = r.run([tool])
    if not res.ok:
        if not res.problem.startswith("absent"):
            notes.append(f"{tool}: {res.problem}")
        return None
    try:
        concise = amd_smi.parse_concise(res.stdout)
    except InputError as exc:
        notes.append(f"{tool} output not understood ({exc}); its cards are unknown")
        return None
    # cells the parser could not read (unknown now) and rows it skipped, named by field
    notes.extend(f"{tool}: {n.split(': ', 1)[1]}" for n in concise.notes
                 if n.startswith(("hy-smi: ", "rocm-smi: ")))  # fmt: skip
    if concise.device_label in ("HCU", "DCU"):
        vendor = "hygon"  # DTK's rocm-smi and hy-smi label Hygon DCUs HCU / DCU
    mem: dict[int, int] = {}
    j = r.run([tool, "--showmeminfo", "vram", "--json"])
    if j.ok:
        try:
            for c in amd_smi.parse_json(j.stdout):
                if c["vram_total_bytes"]:
                    mem[c["index"]] = c["vram_total_bytes"]
        except InputError as exc:
            notes.append(
                f"{tool} --showmeminfo vram --json not understood ({exc}); card memory unknown"
            )
    else:
        notes.append(f"{tool} --showmeminfo vram --json: {j.problem}; card memory unknown")
    cards = []
    for c in concise.cards:
        try:
            cards.append(check(Accelerator(
                index=c.index, vendor=vendor, product=c.name or ("Hygon DCU" if vendor == "hygon" else "AMD GPU"),
                memory_bytes=mem.get(c.index) or None, partition=c.partitions,
                sources={"memory_bytes": f"{tool} --showmeminfo vram --json"} if mem.get(c.index) else {},
            )))  # fmt: skip
        except ValueError as exc:
            notes.append(f"{tool}: card {c.index} skipped ({first_error(exc)})")
    t = r.run([tool, "--showtopo"])
    inter = None
    if t.ok:
        try:
            topo = amd_smi.parse_showtopo(t.stdout)
            for card in cards:
                if card.index in topo.numa:
                    card.numa_node = topo.numa[card.index]
            inter = check(Interconnect(default=Link(), pairs=[
                LinkPair(a=lk["a"], b=lk["b"], kind=LinkKind(lk["kind"]), label=lk["label"],
                         source=f"{tool} --showtopo (weight {lk['weight']}, hops {lk['hops']})")
                for lk in topo.links
            ]))  # fmt: skip
        except ValueError as exc:
            notes.append(f"{tool} --showtopo: links dropped ({first_error(exc)})")
        except InputError as exc:
            notes.append(f"{tool} --showtopo not understood ({exc}); links unknown")
    else:
        notes.append(f"{tool} --showtopo: {t.problem}; links unknown")
    return cards, inter


def _amd_smi(r: Runner, notes: list[str]):
    """amd-smi: cards from `static --json` (else the `static` text), links from `topology`."""
    rows = None
    res = r.run(["amd-smi", "static", "--json"])
    if res.ok:
        try:
            rows = amd_smi.parse_amd_smi_static_json(res.stdout)
        except InputError as exc:
            notes.append(f"amd-smi static --json not understood ({exc})")
    else:
        notes.append(f"amd-smi static --json: {res.problem}")
        if res.problem.startswith(("timed out", "permission")):
            return None
    src = "amd-smi static --json"
    if rows is None:
        src = "amd-smi static"
        t = r.run(["amd-smi", "static"])
        if not t.ok:
            notes.append(f"amd-smi static: {t.problem}; amd-smi cards unknown")
            return None
        try:
            rows = amd_smi.parse_amd_smi_static(t.stdout)
        except InputError as exc:
            notes.append(f"amd-smi static not understood ({exc}); amd-smi cards unknown")
            return None
    cards = []
    for row in rows:
        sources = {"product": f"{src} asic.market_name"} if row["name"] else {}
        if row["vram_total_bytes"]:
            sources["memory_bytes"] = f"{src} vram.size (MB = MiB)"
        if row["numa_node"] is not None:
            sources["numa_node"] = f"{src} numa.node"
        try:
            cards.append(check(Accelerator(
                index=row["index"], vendor="amd", product=row["name"] or "AMD GPU",
                memory_bytes=row["vram_total_bytes"], pci_bus_id=row["pci_bus"],
                numa_node=row["numa_node"], partition=row["partition"], sources=sources,
            )))  # fmt: skip
        except ValueError as exc:
            notes.append(f"amd-smi: card {row['index']} skipped ({first_error(exc)})")
    if not cards:
        notes.append("amd-smi lists no usable GPU")
        return None
    return cards, _amd_smi_links(r, cards, notes)


def _amd_smi_links(r: Runner, cards: list[Accelerator], notes: list[str]) -> Interconnect | None:
    t = r.run(["amd-smi", "topology"])
    if not t.ok:
        notes.append(f"amd-smi topology: {t.problem}; links unknown")
        return None
    try:
        topo = amd_smi.parse_amd_smi_topology(t.stdout)
    except InputError as exc:
        notes.append(f"amd-smi topology not understood ({exc}); links unknown")
        return None
    notes.extend(f"amd-smi topology: {n}" for n in topo.notes)
    by_bus = {pci_address(c.pci_bus_id): c.index for c in cards if c.pci_bus_id}
    if by_bus:
        index = {pos: by_bus.get(pci_address(bdf)) for pos, bdf in enumerate(topo.devices)}
    elif len(topo.devices) == len(cards):
        index = dict(enumerate(sorted(c.index for c in cards)))
        notes.append(
            "amd-smi static gave no bus ids: topology matched to cards by position "
            "(amd-smi prints GPUs in ID order)"
        )
    else:
        notes.append(
            f"amd-smi topology lists {len(topo.devices)} GPUs, static {len(cards)} without bus ids; links unknown"
        )
        return None
    unmatched = [topo.devices[p] for p, i in index.items() if i is None]
    if unmatched:
        notes.append(
            f"amd-smi topology GPUs {unmatched} are not among the cards; their links dropped"
        )
    pairs = []
    for lk in topo.links:
        a, b = index.get(lk["a"]), index.get(lk["b"])
        if a is None or b is None or a == b:
            continue
        detail = f"weight {lk['weight']}, hops {lk['hops']}"
        if lk["access"] == "DISABLED":
            detail += ", peer access DISABLED"
        try:
            pairs.append(check(LinkPair(a=a, b=b, kind=LinkKind(lk["kind"]), label=lk["label"],
                                        source=f"amd-smi topology ({detail})")))  # fmt: skip
        except ValueError as exc:
            notes.append(f"amd-smi topology: link {a}-{b} dropped ({first_error(exc)})")
    return Interconnect(default=Link(), pairs=pairs)


def probe_amd(r: Runner, notes: list[str]):
    """hy-smi first (Hygon DTK), then amd-smi (ROCm >= 6), then rocm-smi (AMD ROCm; DTK's
    rocm-smi prints HCU labels).  The first tool that yields cards wins."""
    for tool in ("hy-smi", "amd-smi", "rocm-smi"):
        if r.which(tool) is None:
            continue
        if tool == "amd-smi":
            out = _amd_smi(r, notes)
            if out is None and r.which("rocm-smi") is not None:
                notes.append("amd-smi gave no cards: falling back to rocm-smi")
        else:
            out = _amd_like(r, tool, "hygon" if tool == "hy-smi" else "amd", notes)
        if out is not None:
            return out
    return None


def apply_npu_topology(cards: list[Accelerator], chips: list[npu_smi.NpuChip],
                       topo: npu_smi.NpuTopology, numa_map: dict[int, str | None],
                       notes: list[str]) -> Interconnect:  # fmt: skip
    """Pure: map the topo matrix's devices onto ``cards`` (card i = npu-smi info chip i), set each
    card's NUMA node from its CPU affinity when that lies within exactly one host NUMA node, and
    return the link matrix.  ``NPU<n>`` is matched to the NPU id of a one-chip NPU, ``Phy-ID<n>``
    to a chip's Phy-ID."""
    per_npu: dict[int, list[int]] = {}
    for i, c in enumerate(chips):
        per_npu.setdefault(c.npu, []).append(i)
    index: dict[int, int] = {}
    for tc in topo.cards:
        if topo.id_kind == "npu":
            found = per_npu.get(tc.index, [])
            i = found[0] if len(found) == 1 else None
        else:
            found = [i for i, c in enumerate(chips) if c.phy_id == tc.index]
            i = found[0] if len(found) == 1 else None
        if i is not None and i < len(cards):
            index[tc.index] = cards[i].index
    unmatched = [tc.name for tc in topo.cards if tc.index not in index]
    if unmatched:
        notes.append(
            f"npu-smi topo devices {unmatched} not matched to npu-smi info chips; their links dropped"
        )
    by_index = {c.index: c for c in cards}
    unplaced = []
    for tc in topo.cards:
        card = by_index.get(index.get(tc.index, -1))
        if card is None or not tc.cpu_affinity:
            continue
        node = npu_smi.numa_node_of_cpus(tc.cpu_affinity, numa_map)
        if node is None:
            unplaced.append(f"{tc.name} ({tc.cpu_affinity})")
            continue
        card.numa_node = node
        card.sources["numa_node"] = (
            f"npu-smi info -t topo CPU Affinity {tc.cpu_affinity} = host NUMA node {node} CPUs"
        )
    if unplaced:
        why = "no host NUMA map" if not numa_map else "not within one host NUMA node"
        notes.append(f"NPU CPU affinity {', '.join(unplaced)}: {why}; NUMA node left to sysfs")
    pairs = []
    for lk in topo.links:
        a, b = index.get(lk.a), index.get(lk.b)
        if a is None or b is None or a == b:
            continue
        pairs.append(LinkPair(a=a, b=b, kind=LinkKind(lk.kind), label=lk.label,
                              source="npu-smi info -t topo"))  # fmt: skip
    notes.extend(f"npu-smi topo: {n}" for n in topo.notes)
    return Interconnect(default=Link(), pairs=pairs)


def probe_ascend(r: Runner, notes: list[str], numa_map: dict[int, str | None]):
    """``numa_map``: host NUMA node id -> cpulist (the host backend's), for the NPUs' CPU
    affinity."""
    if r.which("npu-smi") is None:
        return None
    res = r.run(["npu-smi", "info"])
    if not res.ok:
        notes.append(f"npu-smi info: {res.problem}")
        return None
    try:
        info = npu_smi.parse(res.stdout)
    except InputError as exc:
        notes.append(f"npu-smi info not understood ({exc}); NPUs unknown")
        return None
    cards = [
        Accelerator(
            index=i, vendor="huawei", product=f"Ascend {c.name}", memory_bytes=c.hbm_total_bytes or None,
            pci_bus_id=c.bus_id,
            sources={"memory_bytes": "npu-smi info HBM-Usage total (MB)", "product": "npu-smi info Name"}
            if c.hbm_total_bytes else {"product": "npu-smi info Name"},
        )
        for i, c in enumerate(info.chips)
    ]  # fmt: skip
    if any(c.hbm_total_bytes == 0 for c in info.chips):
        notes.append("npu-smi reports HBM total 0 for some chips: their memory is unknown")
    notes.extend(info.notes)
    t = r.run(["npu-smi", "info", "-t", "topo"])
    if not t.ok:
        notes.append(f"npu-smi info -t topo: {t.problem}; HCCS links unknown")
        return cards, None
    try:
        topo = npu_smi.parse_topo(t.stdout)
    except InputError as exc:
        notes.append(f"npu-smi info -t topo not understood ({exc}); HCCS links unknown")
        return cards, None
    try:
        inter = check(apply_npu_topology(cards, info.chips, topo, numa_map, notes))
    except ValueError as exc:
        notes.append(f"npu-smi info -t topo: links dropped ({first_error(exc)})")
        inter = None
    return cards, inter


def probe_amd_cards(r: Runner, notes: list[str], ctx) -> tuple | None:
    """The vendor contract's card probe for AMD and Hygon (machine/vendors/amd.py): hy-smi,
    amd-smi, rocm-smi (``probe_amd``)."""
    found = probe_amd(r, notes)
    return (*found, None) if found else None


def probe_ascend_cards(r: Runner, notes: list[str], ctx) -> tuple | None:
    """The vendor contract's card probe for Ascend (machine/vendors/ascend.py): npu-smi, with the
    host's NUMA map for the NPUs' CPU affinity."""
    found = probe_ascend(r, notes, numa_map=ctx.numa_map)
    return (*found, None) if found else None
