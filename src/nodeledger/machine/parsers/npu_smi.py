"""Parse Huawei ``npu-smi info`` (Atlas A2 one chip per NPU, A3 two chips per NPU with a Phy-ID
column, and the older narrow 910 layout).  Each chip is a two-row block: row 1 "NPU Name |
Health | Power Temp Hugepages", row 2 "Chip [Phy-ID] | Bus-Id | AICore Memory-Usage HBM-Usage"
(used / total MB).  The process table follows ("NPU Chip | Process id | Process name |
Process memory(MB)").  ``parse_npu`` is the watch's per-sample view of the same output
(HBM used / total, AICore %, processes by card).

``parse_topo`` reads ``npu-smi info -t topo`` (the HCCS / PCIe matrix and CPU affinity)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nodeledger.machine.parsers.common import ParseError, clean, cpulist_ids, to_float


@dataclass
class NpuChip:
    npu: int
    chip: int
    phy_id: int | None
    name: str
    health: str
    bus_id: str | None
    hbm_used_bytes: int | None
    hbm_total_bytes: int | None
    ddr_total_bytes: int | None  # "Memory-Usage" (DDR on 910A-class parts; 0 on 910B)


@dataclass
class NpuInfo:
    version: str | None
    chips: list[NpuChip]
    processes: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


_ROW1 = re.compile(r"^\|\s*([0-9]{1,12})\s+(\S+)\s*\|\s*(\S+)\s*\|")
_ROW2 = re.compile(
    r"^\|\s*([0-9]{1,12})\s*([0-9]{1,12})?\s*\|\s*([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*\|(.*)\|"
)
_PAIR = re.compile(r"([0-9]{1,12})\s*/\s*([0-9]{1,12})")
_PROC = re.compile(
    r"^\|\s*([0-9]{1,12})\s+([0-9]{1,12})\s*\|\s*([0-9]{1,12})\s*\|\s*(.*?)\s*\|\s*([0-9]{1,12})\s*\|"
)


def parse(text: str) -> NpuInfo:
    text = clean(text)
    ver = re.search(r"npu-smi\s+(\S+)", text)
    if not ver:
        raise ParseError("not an npu-smi info output: no 'npu-smi <version>' banner")
    lines = text.split("\n")
    chips: list[NpuChip] = []
    procs: list[dict] = []
    in_procs = False
    for i, ln in enumerate(lines):
        if "Process id" in ln:
            in_procs = True
            continue
        if in_procs:
            m = _PROC.match(ln)
            if m:
                procs.append({"npu": int(m.group(1)), "chip": int(m.group(2)), "pid": int(m.group(3)),
                              "name": m.group(4), "memory_bytes": int(m.group(5)) * 2**20})  # fmt: skip
            continue
        m1 = _ROW1.match(ln)
        if not m1 or i + 1 >= len(lines) or m1.group(2) in ("Name",):
            continue
        m2 = _ROW2.match(lines[i + 1])
        if not m2:
            continue
        pairs = _PAIR.findall(m2.group(4))
        hbm = pairs[-1] if pairs else None
        ddr = pairs[0] if len(pairs) >= 2 else None
        chips.append(NpuChip(
            npu=int(m1.group(1)), chip=int(m2.group(1)),
            phy_id=int(m2.group(2)) if m2.group(2) else None,
            name=m1.group(2), health=m1.group(3), bus_id=m2.group(3),
            hbm_used_bytes=int(hbm[0]) * 2**20 if hbm else None,
            hbm_total_bytes=int(hbm[1]) * 2**20 if hbm else None,
            ddr_total_bytes=int(ddr[1]) * 2**20 if ddr and int(ddr[1]) else None,
        ))  # fmt: skip
    if not chips:
        raise ParseError("npu-smi info lists no NPU chips (truncated?)")
    notes = []
    per_npu = {}
    for c in chips:
        per_npu[c.npu] = per_npu.get(c.npu, 0) + 1
    if max(per_npu.values()) > 1:
        notes.append(
            f"{max(per_npu.values())} chips per NPU (Atlas A3 layout): each chip is a device with its own HBM"
        )
    return NpuInfo(ver.group(1), chips, procs, notes)


# AICore % of each chip: the number after the Bus-Id cell of a chip's second row
_AICORE = re.compile(
    r"^\|\s*\d+\s*\d*\s*\|\s*[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\s*\|\s*(\d+|-)\s",
    re.M,
)


def _float(v: str) -> float | None:
    return to_float(v, hi=100.0)  # "-" -> None


def parse_npu(text: str) -> tuple[list[dict], list[dict]]:
    """``npu-smi info`` -> (cards: [{index, name, pci_bus_id, used_bytes, total_bytes, util_pct
    (AICore %)}], processes: [{card, pid, name, used_bytes}]); chips are numbered in order.  The
    AICore column is used only when every chip row has one."""
    info = parse(text)
    utils = [_float(u) for u in _AICORE.findall(text)]
    order = {(c.npu, c.chip): i for i, c in enumerate(info.chips)}
    cards = [{"index": i, "name": c.name, "pci_bus_id": c.bus_id, "used_bytes": c.hbm_used_bytes,
              "total_bytes": c.hbm_total_bytes,
              "util_pct": utils[i] if i < len(utils) and len(utils) == len(info.chips) else None}
             for i, c in enumerate(info.chips)]  # fmt: skip
    procs = [{"card": order.get((p["npu"], p["chip"])), "pid": p["pid"], "name": p["name"],
              "used_bytes": p["memory_bytes"]} for p in info.processes]  # fmt: skip
    return cards, procs


# -- npu-smi info -t topo ---------------------------------------------------------------------

TOPO_LABEL_KIND = {"HCCS": "hccs", "HCCS_SW": "hccs", "SIO": "hccs", "PIX": "pix", "PXB": "pxb",
                   "PHB": "phb", "NODE": "node", "SYS": "sys", "NA": "unknown"}  # fmt: skip
_DEV = re.compile(r"(NPU|Phy-ID)([0-9]{1,12})$")
_NIC = re.compile(r"NIC\d+$")


@dataclass
class NpuTopoCard:
    index: int  # the number in the device name (logical NPU id, or physical chip id for Phy-ID)
    name: str  # as printed: NPU0, Phy-ID12
    cpu_affinity: str | None  # cpulist as printed, None when the column is absent or empty
    numa_node: int | None = None  # npu-smi does not print it; a probe maps the affinity


@dataclass
class NpuTopoLink:
    a: int
    b: int
    label: str  # as printed: HCCS, HCCS_SW, SIO, SYS, UB, NA
    kind: str  # normalised (hccs, pix, pxb, phb, node, sys, unknown)
    lanes: int | None = None  # npu-smi never prints a link count


@dataclass
class NpuTopology:
    id_kind: str  # "npu" (NPU<n>: logical NPU id) or "phy_id" (Phy-ID<n>: physical chip id)
    cards: list[NpuTopoCard]
    links: list[NpuTopoLink]
    nics: list[dict] = field(default_factory=list)  # {name, device, links: {npu: label}} (A5)
    notes: list[str] = field(default_factory=list)


def parse_topo(text: str) -> NpuTopology:
    # long: one parse of the matrix, each step reading the last: header, rows, cards, links, NICs
    """``npu-smi info -t topo`` prints a matrix like ``nvidia-smi topo -m``: a header row of device
    names (``NPU<n>`` = logical NPU id on Atlas A2 / 300I boxes, ``Phy-ID<n>`` = physical chip id on
    Atlas A3), one row per device with one label per column, an optional ``CPU Affinity`` column
    (absent on A3 containers and on A5), then a Legend.  Labels (Huawei's legend): X self; HCCS
    (Huawei Cache Coherence System, the in-box NPU fabric); HCCS_SW (HCCS through a switch chip, A3
    supernodes); SIO (the die-to-die bus between the two chips of one A3 / 910C module); PIX / PXB /
    PHB / SYS (PCIe levels, as NVIDIA's legend); UB (Unified Bus, Ascend 950-class); NA unknown."""
    text = clean(text)
    lines = text.split("\n")
    header_i = None
    for i, ln in enumerate(lines):
        toks = ln.split()
        if toks and _DEV.match(toks[0]) and "X" not in toks:  # a data row has X on its diagonal
            header_i = i
            break
    if header_i is None:
        raise ParseError("not an npu-smi info -t topo output: no header row naming NPU0 / Phy-ID0")
    header = lines[header_i].split()
    devices = [t for t in header if _DEV.match(t)]
    if header[: len(devices)] != devices:
        raise ParseError("npu-smi topo header mixes device names and other columns")
    nic_cols = [t for t in header[len(devices) :] if _NIC.match(t)]
    extra = " ".join(header[len(devices) + len(nic_cols) :])
    has_affinity = "CPU Affinity" in extra
    kinds = {_DEV.match(d).group(1) for d in devices}
    if len(kinds) != 1:
        raise ParseError(f"npu-smi topo header mixes NPU and Phy-ID names: {' '.join(devices)}")
    id_kind = "npu" if kinds == {"NPU"} else "phy_id"
    if len(set(devices)) != len(devices):
        raise ParseError(f"npu-smi topo header repeats a device: {' '.join(devices)}")
    rows: dict[str, list[str]] = {}
    nic_rows: dict[str, list[str]] = {}
    for ln in lines[header_i + 1 :]:
        toks = ln.split()
        if not toks:
            if rows:
                break
            continue
        if toks[0].startswith("Legend"):
            break
        if _NIC.match(toks[0]) and rows:
            nic_rows[toks[0]] = toks[1:]
            continue
        if not _DEV.match(toks[0]):
            if rows:
                break  # trailing text
            continue
        if toks[0] in rows:
            raise ParseError(f"npu-smi topo row {toks[0]} appears twice")
        rows[toks[0]] = toks[1:]
    n = len(devices)
    notes: list[str] = []
    cards: list[NpuTopoCard] = []
    labels: dict[tuple[str, str], str] = {}
    for d in devices:
        cells = rows.get(d)
        if cells is None or len(cells) < n:
            got = 0 if cells is None else len(cells)
            raise ParseError(f"npu-smi topo row {d} is missing or truncated ({got} of {n} cells)")
        if cells[devices.index(d)].upper() != "X":
            raise ParseError(
                f"npu-smi topo row {d}: diagonal cell is {cells[devices.index(d)]!r}, not X"
            )
        rest = cells[n + len(nic_cols) :]
        cpu = rest[0] if has_affinity and rest else None
        if cpu is not None and cpulist_ids(cpu) is None:
            notes.append(f"{d}: CPU Affinity {cpu!r} is not a cpulist; kept unknown")
            cpu = None
        cards.append(NpuTopoCard(int(_DEV.match(d).group(2)), d, cpu))
        for other, cell in zip(devices, cells[:n], strict=True):
            labels[(d, other)] = cell.upper()
    links: list[NpuTopoLink] = []
    unknown_labels: set[str] = set()
    asym = []
    for i, a in enumerate(devices):
        for b in devices[i + 1 :]:
            lab = labels[(a, b)]
            if labels[(b, a)] != lab:
                asym.append(f"{a}-{b} ({lab} / {labels[(b, a)]})")
            kind = TOPO_LABEL_KIND.get(lab)
            if kind is None:
                unknown_labels.add(lab)
                kind = "unknown"
            links.append(
                NpuTopoLink(int(_DEV.match(a).group(2)), int(_DEV.match(b).group(2)), lab, kind)
            )
    if asym:
        notes.append(f"matrix not symmetric for {', '.join(asym)}; the row of the lower id is kept")
    present = {lk.label for lk in links}
    if "HCCS_SW" in present:
        notes.append("HCCS_SW: HCCS through a switch chip (Atlas A3 supernode); normalised to hccs")
    if "SIO" in present:
        notes.append(
            "SIO: the die-to-die bus between the two chips of one Ascend 910C module (faster than "
            "the HCCS between modules); normalised to hccs, label SIO kept"
        )
    if unknown_labels:
        notes.append(
            f"labels {sorted(unknown_labels)} have no normalised kind (UB: Ascend Unified Bus); "
            "kept as printed with kind unknown"
        )
    if not has_affinity:
        notes.append(
            "no CPU Affinity column (Atlas A3 / A5 print none): NPU NUMA placement unknown"
        )
    nic_names = dict(re.findall(r"^\s*(NIC\d+):\s*(\S+)\s*$", text, flags=re.M))
    nics = []
    for name in nic_cols:
        cells = nic_rows.get(name, [])
        nics.append({"name": name, "device": nic_names.get(name),
                     "links": {int(_DEV.match(d).group(2)): c.upper()
                               for d, c in zip(devices, cells[:n], strict=False)}})  # fmt: skip
    return NpuTopology(id_kind, cards, links, nics, notes)


def numa_node_of_cpus(cpus: str | None, nodes: dict[int, str | None]) -> int | None:
    """The one NUMA node holding every CPU of ``cpus`` (node id -> its cpulist), else None
    (affinity unknown or spanning nodes, or a map that does not cover it)."""
    want = cpulist_ids(cpus)
    if not want:
        return None
    holders = [nid for nid, lst in nodes.items() if want <= (cpulist_ids(lst) or set())]
    return holders[0] if len(holders) == 1 else None
