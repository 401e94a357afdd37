"""Parse ``numactl -H`` (numactl --hardware) and ``lscpu`` text.

numactl: "available: N nodes (ids)", per node "cpus:" (space separated, possibly empty),
"size: X MB", "free: X MB" (0 MB = memoryless node), and the distance matrix.
lscpu: old and new util-linux layouts ("Key: value"), per-node "NUMA nodeN CPU(s):" lists that
may be ranges or interleaved ids, and empty lists for memory-only nodes (POWER9 GPU nodes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nodeledger.machine.parsers.common import ParseError, clean, cpulist_count, cpulist_ids


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
    m = re.search(r"available:\s*(\d+)\s+nodes?\s*\(([^)]*)\)", text, flags=re.I)
    if not m:
        raise ParseError("not a numactl -H output: no 'available: N nodes' line")
    nodes: dict[int, dict] = {}
    for nid, cpus in re.findall(r"^node\s+(\d+)\s+cpus:[ \t]*(.*)$", text, flags=re.M):
        ids = [int(x) for x in cpus.split()]
        nodes.setdefault(int(nid), {})["cpus"] = ids
    for nid, val, unit in re.findall(r"^node\s+(\d+)\s+size:\s*(\d+)\s*(\w+)", text, flags=re.M):
        nodes.setdefault(int(nid), {})["size"] = _bytes(int(val), unit)
    for nid, val, unit in re.findall(r"^node\s+(\d+)\s+free:\s*(\d+)\s*(\w+)", text, flags=re.M):
        nodes.setdefault(int(nid), {})["free"] = _bytes(int(val), unit)
    if len(nodes) != int(m.group(1)):
        raise ParseError(f"numactl -H says {m.group(1)} nodes but lists {len(nodes)} (truncated?)")
    out = []
    notes = []
    for nid in sorted(nodes):
        d = nodes[nid]
        cpus = d.get("cpus", [])
        size = d.get("size")
        out.append(NumaNodeInfo(nid, compress_cpus(cpus), len(cpus), size, d.get("free")))
        if size == 0:
            notes.append(f"node {nid} is memoryless (0 MB): its CPUs allocate from remote nodes")
        if not cpus:
            notes.append(f"node {nid} has no CPUs (memory-only node)")
    distances: dict[int, dict[int, int]] = {}
    lines = text.split("\n")
    start = next((i for i, ln in enumerate(lines) if ln.strip().startswith("node distances")), None)
    if start is not None and start + 1 < len(lines):
        cols = [int(x) for x in lines[start + 1].split()[1:] if x.isdigit()]
        for row in lines[start + 2 :]:
            m2 = re.match(r"\s*(\d+):((?:\s+\d+)+)\s*$", row)
            if not m2:
                break
            distances[int(m2.group(1))] = dict(
                zip(cols, (int(x) for x in m2.group(2).split()), strict=False)
            )
    return NumaInfo(out, distances, notes)


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
        v = kv.get(key, "")
        return int(v) if v.isdigit() else None

    nodes = []
    for line in text.split("\n"):
        m = re.match(r"\s*NUMA node(\d+) CPU\(s\):\s*(.*)$", line)
        if m:
            cpus = m.group(2).strip()
            count = cpulist_count(cpus) if cpus else 0
            if cpus and count is None:
                raise ParseError(f"lscpu NUMA node{m.group(1)} CPU list {cpus!r} is not a cpulist")
            ids = _expand(cpus)
            nodes.append(NumaNodeInfo(int(m.group(1)), compress_cpus(ids), count or 0, None))
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


def _expand(cpus: str) -> list[int]:
    return sorted(cpulist_ids(cpus) or [])
