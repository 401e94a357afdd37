"""NVIDIA backend through nvidia-smi (NVML through nvidia-ml-py is the next step; the text
parsers here also serve `nodeledger parse` and support bundles)."""

from __future__ import annotations

import csv
import io
import re

from nodeledger.errors import InputError
from nodeledger.machine.parsers import nvidia_smi, nvidia_topo
from nodeledger.machine.probe.runner import Runner
from nodeledger.machine.profile import Accelerator, Interconnect, Link, LinkKind, LinkPair

QUERY = "index,name,memory.total,pci.bus_id,mig.mode.current"


def parse_query_csv(text: str) -> list[dict]:
    """``nvidia-smi --query-gpu=index,name,memory.total,pci.bus_id,mig.mode.current
    --format=csv,noheader,nounits`` -> rows (memory in MiB)."""
    rows = []
    reader = list(csv.reader(io.StringIO(text.strip())))
    cols = None
    if reader and reader[0] and not reader[0][0].strip().isdigit():
        cols = [
            c.strip().split(" [")[0] for c in reader[0]
        ]  # a header row (format=csv with header)
        reader = reader[1:]
    for n, rec in enumerate(reader, 1):
        if not rec:
            continue
        if cols:
            d = dict(zip(cols, (x.strip() for x in rec), strict=False))
            idx, name, mem, bus, mig = (
                d.get(k, "")
                for k in ("index", "name", "memory.total", "pci.bus_id", "mig.mode.current")
            )
        else:
            if len(rec) < 4:
                raise InputError(f"nvidia-smi query row {n} has {len(rec)} fields, expected 5")
            idx, name, mem, bus = (x.strip() for x in rec[:4])
            mig = rec[4].strip() if len(rec) > 4 else ""
        if not idx.isdigit():
            raise InputError(
                f"nvidia-smi query row {n} has no numeric index (first field {idx[:20]!r})"
            )
        m = re.match(r"(\d+)\s*(MiB)?$", mem)
        rows.append({"index": int(idx), "name": name or None, "memory_mib": int(m.group(1)) if m else None,
                     "pci_bus_id": bus or None, "mig": mig or None})  # fmt: skip
    return rows


def probe(r: Runner, notes: list[str]) -> tuple[list[Accelerator], Interconnect | None]:
    if r.live:
        from nodeledger.machine.probe import nvml

        found = nvml.probe(notes, timeout=r.timeout)
        if found is not None and found[0]:
            return found
    if r.which("nvidia-smi") is None:
        notes.append("NVIDIA backend: nvidia-smi absent (not on PATH)")
        return [], None
    rows = None
    topo_res = None  # topo -m output, run once
    q = r.run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"])
    if q.ok:
        try:
            rows = parse_query_csv(q.stdout) or None
        except InputError as exc:
            notes.append(f"NVIDIA backend: nvidia-smi output not understood ({exc}); cards unknown")
            return [], None
        if rows is None:
            notes.append("NVIDIA backend: nvidia-smi --query-gpu listed no GPU")
            return [], None
    else:
        notes.append(f"NVIDIA backend: nvidia-smi --query-gpu {q.problem}")
        if q.problem.startswith(("timed out", "permission")):
            return [], None
        t = r.run(["nvidia-smi"])  # older drivers / bundles: fall back to the default table
        if t.ok:
            try:
                table = nvidia_smi.parse_table(t.stdout)
                rows = [{"index": c.index, "name": c.name,
                         "memory_mib": c.memory_total_bytes // 2**20 if c.memory_total_bytes else None,
                         "pci_bus_id": c.pci_bus_id, "mig": c.mig} for c in table.cards]  # fmt: skip
                notes.append("NVIDIA cards read from the nvidia-smi table")
            except InputError as exc:
                notes.append(f"NVIDIA backend: nvidia-smi table not understood ({exc})")
        if rows is None:
            # last resort (e.g. a bundle holding only topo -m): the cards topo lists, memory unknown
            topo_res = r.run(["nvidia-smi", "topo", "-m"])
            try:
                topo_only = nvidia_topo.parse(topo_res.stdout) if topo_res.ok else None
            except InputError:
                topo_only = None
            if topo_only is None:
                return [], None
            rows = [{"index": c.index, "name": None, "memory_mib": None, "pci_bus_id": None, "mig": None}
                    for c in topo_only.cards]  # fmt: skip
            notes.append(
                "NVIDIA cards known only from nvidia-smi topo -m: names and memory unknown"
            )
    cards = []
    for row in rows:
        mem = row["memory_mib"] * 2**20 if row["memory_mib"] else None
        cards.append(Accelerator(
            index=row["index"], vendor="nvidia", product=row["name"] or "unknown NVIDIA GPU",
            memory_bytes=mem, pci_bus_id=row["pci_bus_id"] or None,
            partition=f"MIG {row['mig']}" if row["mig"] and row["mig"] != "[N/A]" else None,
            sources={"memory_bytes": "nvidia-smi memory.total (MiB)", "product": "nvidia-smi name"}
            if mem
            else {},
        ))  # fmt: skip
    t = topo_res or r.run(["nvidia-smi", "topo", "-m"])
    inter = None
    if not t.ok:
        notes.append(f"NVIDIA topology: nvidia-smi topo -m {t.problem}; links unknown")
    else:
        try:
            topo = nvidia_topo.parse(t.stdout)
        except InputError as exc:
            notes.append(f"NVIDIA topology not understood ({exc}); links unknown")
            topo = None
        if topo is not None:
            by_index = {c.index: c for c in topo.cards}
            for card in cards:
                tc = by_index.get(card.index)
                if tc is not None and tc.numa_node is not None:
                    card.numa_node = tc.numa_node
                    card.sources["numa_node"] = "nvidia-smi topo -m NUMA Affinity"
            known = {c.index for c in cards}
            dropped = [lk for lk in topo.links if lk.a not in known or lk.b not in known]
            if dropped:
                notes.append(
                    f"topo -m lists GPUs the card query does not ({len(dropped)} links dropped)"
                )
            pairs = [
                LinkPair(
                    a=lk.a,
                    b=lk.b,
                    kind=LinkKind(lk.kind)
                    if lk.kind in LinkKind._value2member_map_
                    else LinkKind.unknown,
                    lanes=lk.lanes,
                    label=lk.label,
                    source="nvidia-smi topo -m",
                )
                for lk in topo.links
                if lk.a in known and lk.b in known
            ]
            inter = Interconnect(default=Link(), pairs=pairs)
    return cards, inter
