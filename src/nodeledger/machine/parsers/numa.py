"""Parse ``numactl -H`` (numactl --hardware) and ``lscpu`` text.

numactl: "available: N nodes (ids)", per node "cpus:" (space separated, possibly empty),
"size: X MB", "free: X MB" (0 MB = memoryless node), and the distance matrix.
lscpu: old and new util-linux layouts ("Key: value"), per-node "NUMA nodeN CPU(s):" lists that
may be ranges or interleaved ids, and empty lists for memory-only nodes (POWER9 GPU nodes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nodeledger.machine.parsers.common import (
    ParseError,
    clean,
    cpulist_ranges,
    format_ranges,
    shorten,
    to_int,
)


def compress_cpus(cpus: list[int]) -> str:
    """[0,1,2,5] -> "0-2,5" (kernel cpulist syntax)."""
    out: list[str] = []
    for c in sorted(set(cpus)):
        if out and "-" in out[-1] and int(out[-1].split("-")[1]) == c - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{c}"
        elif out and "-" not in out[-1] and int(out[-1]) == c - 1:
            out[-1] = f"{out[-1]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out)


@dataclass
class NumaNodeInfo:
    id: int
    cpus: str  # cpulist ("" when the node has no CPUs)
    cpu_count: int
    memory_bytes: int | None
    free_bytes: int | None = None


@dataclass
class NumaInfo:
    nodes: list[NumaNodeInfo]
    distances: dict[int, dict[int, int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def parse_numactl(text: str) -> NumaInfo:
    text = clean(text)
    m = re.search(r"available:\s*([0-9]{1,7})\s+nodes?\s*\(([^)\n]*)\)", text, flags=re.I)
    if not m:
        raise ParseError("not a numactl -H output: no 'available: N nodes' line")
    nodes: dict[int, dict] = {}
    notes: list[str] = []
    for nid, cpus in re.findall(r"^node\s+([0-9]{1,7})\s+cpus:[ \t]*(.*)$", text, flags=re.M):
        ranges = _numactl_cpus(cpus)
        if ranges is None:
            notes.append(f"numactl: node {nid} cpus {shorten(cpus)} not a CPU list; unknown")
        nodes.setdefault(int(nid), {})["cpus"] = ranges
    for key in ("size", "free"):
        for nid, val, unit in re.findall(
            rf"^node\s+([0-9]{{1,7}})\s+{key}:\s*([0-9]{{1,15}})\s*([A-Za-z]+)", text, flags=re.M
        ):
            b = _bytes(int(val), unit)
            nodes.setdefault(int(nid), {})[key] = b if b <= 2**60 else None
    if len(nodes) != int(m.group(1)):
        raise ParseError(f"numactl -H says {m.group(1)} nodes but lists {len(nodes)} (truncated?)")
    out = []
    for nid in sorted(nodes):
        d = nodes[nid]
        ranges = d.get("cpus", [])
        size = d.get("size")
        count = None if ranges is None else sum(hi - lo + 1 for lo, hi in ranges)
        out.append(NumaNodeInfo(nid, format_ranges(ranges or []), count or 0, size, d.get("free")))
        if size == 0:
            notes.append(f"node {nid} is memoryless (0 MB): its CPUs allocate from remote nodes")
        if ranges == []:
            notes.append(f"node {nid} has no CPUs (memory-only node)")
    distances: dict[int, dict[int, int]] = {}
    lines = text.split("\n")
    start = next((i for i, ln in enumerate(lines) if ln.strip().startswith("node distances")), None)
    if start is not None and start + 1 < len(lines):
        cols = [int(x) for x in lines[start + 1].split()[1:] if to_int(x) is not None]
        for row in lines[start + 2 :]:
            m2 = re.match(r"\s*([0-9]{1,7}):((?:\s+[0-9]{1,7})+)\s*$", row)
            if not m2:
                break
            distances[int(m2.group(1))] = dict(
                zip(cols, (int(x) for x in m2.group(2).split()), strict=False)
            )
    return NumaInfo(out, distances, notes)


def _numactl_cpus(cpus: str) -> list[tuple[int, int]] | None:
    """numactl's cpus: "0 1 2 3" (space separated), or ranges with a count under
    ``--cpu-compress`` ("0-15 (16)"); [] for none, None when not a CPU list."""
    toks = [t for t in cpus.split() if not re.fullmatch(r"\([0-9]{1,7}\)", t)]
    if not toks:
        return []
    return cpulist_ranges(",".join(toks))


def _bytes(value: int, unit: str) -> int:
    return value * {"kb": 2**10, "mb": 2**20, "gb": 2**30}.get(unit.lower(), 2**20)


@dataclass
class CpuInfo:
    architecture: str | None
    model_name: str | None
    cpus: int | None
    sockets: int | None
    cores_per_socket: int | None
    threads_per_core: int | None
    numa: NumaInfo
    notes: list[str] = field(default_factory=list)

    @property
    def cores(self) -> int | None:
        if self.sockets and self.cores_per_socket:
            return self.sockets * self.cores_per_socket
        return None


def parse_lscpu(text: str) -> CpuInfo:
    text = clean(text)
    kv: dict[str, str] = {}
    for line in text.split("\n"):
        if ":" not in line:
            continue
        k, v = line.split(":", 1)
        kv.setdefault(k.strip(), v.strip())
    if "Architecture" not in kv and "CPU(s)" not in kv:
        raise ParseError("not an lscpu output: no Architecture / CPU(s) fields")

    def num(key):
        return to_int(kv.get(key, ""), hi=2**24)

    nodes = []
    for line in text.split("\n"):
        m = re.match(r"\s*NUMA node([0-9]{1,7}) CPU\(s\):\s*(.*)$", line)
        if m:
            cpus = m.group(2).strip()
            ranges = cpulist_ranges(cpus) if cpus else []
            if ranges is None:
                raise ParseError(
                    f"lscpu NUMA node{m.group(1)} CPU list {shorten(cpus, 60)} is not a cpulist"
                )
            count = sum(hi - lo + 1 for lo, hi in ranges)
            nodes.append(NumaNodeInfo(int(m.group(1)), format_ranges(ranges), count, None))
    notes = []
    empty = [n.id for n in nodes if n.cpu_count == 0]
    if empty:
        notes.append(f"NUMA nodes {empty} list no CPUs (memory-only or accelerator nodes)")
    model = kv.get("Model name") or kv.get("BIOS Model name")
    if model in ("-", ""):
        model = kv.get("BIOS Model name") or None
    return CpuInfo(
        architecture=kv.get("Architecture"),
        model_name=model,
        cpus=num("CPU(s)"),
        sockets=num("Socket(s)"),
        cores_per_socket=num("Core(s) per socket") or num("Core(s) per cluster"),
        threads_per_core=num("Thread(s) per core"),
        numa=NumaInfo(nodes),
        notes=notes,
    )
