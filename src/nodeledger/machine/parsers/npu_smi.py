"""Parse Huawei ``npu-smi info`` (Atlas A2 one chip per NPU, A3 two chips per NPU with a Phy-ID
column, and the older narrow 910 layout).  Each chip is a two-row block: row 1 "NPU Name |
Health | Power Temp Hugepages", row 2 "Chip [Phy-ID] | Bus-Id | AICore Memory-Usage HBM-Usage"
(used / total MB).  The process table follows ("NPU Chip | Process id | Process name |
Process memory(MB)")."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nodeledger.machine.parsers.common import ParseError, clean


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


_ROW1 = re.compile(r"^\|\s*(\d+)\s+(\S+)\s*\|\s*(\S+)\s*\|")
_ROW2 = re.compile(
    r"^\|\s*(\d+)\s*(\d+)?\s*\|\s*([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*\|(.*)\|"
)
_PAIR = re.compile(r"(\d+)\s*/\s*(\d+)")
_PROC = re.compile(r"^\|\s*(\d+)\s+(\d+)\s*\|\s*(\d+)\s*\|\s*(.*?)\s*\|\s*(\d+)\s*\|")


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
