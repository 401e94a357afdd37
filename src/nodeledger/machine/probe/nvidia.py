"""NVIDIA backend: NVML (live probes, see nvml.py) or nvidia-smi (the text parsers here also
serve `nodeledger parse` and support bundles).

nvidia-smi path: ``--query-gpu`` with the card and health fields (QUERY; an older driver that
does not know a field fails the whole query, so the base fields (QUERY_BASE) are asked next),
else the default table, else the cards ``topo -m`` lists; ``--query-compute-apps`` for the
processes; ``topo -m`` for links, NUMA affinity and the NIC rows."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodeledger.errors import InputError
from nodeledger.lazy import LazyModule
from nodeledger.machine.parsers.common import pci_address
from nodeledger.machine.parsers.nvidia_query import APPS, HEALTH, QUERY, QUERY_BASE, parse_query_csv
from nodeledger.machine.probe.runner import Runner
from nodeledger.machine.profile import (
    Accelerator,
    CardProcess,
    Interconnect,
    Link,
    LinkKind,
    LinkPair,
)

if TYPE_CHECKING:
    from nodeledger.machine.parsers.nvidia_topo import TopoNic

# the NVIDIA tool parsers (XML among them) load only where an NVIDIA tool answered
nvidia_smi = LazyModule("nodeledger.machine.parsers.nvidia_smi")
nvidia_topo = LazyModule("nodeledger.machine.parsers.nvidia_topo")


def _processes_from_apps(r: Runner, cards: list[Accelerator], notes: list[str]) -> None:
    res = r.run(["nvidia-smi", f"--query-compute-apps={APPS}", "--format=csv,noheader,nounits"])
    if not res.ok:
        notes.append(f"NVIDIA processes unknown: nvidia-smi --query-compute-apps {res.problem}")
        return
    try:
        apps = nvidia_smi.parse_compute_apps(res.stdout)
    except InputError as exc:
        notes.append(f"NVIDIA processes unknown: --query-compute-apps not understood ({exc})")
        return
    by_bus = {pci_address(c.pci_bus_id): c for c in cards if c.pci_bus_id}
    unmatched = 0
    for a in apps:
        card = by_bus.get(pci_address(a["gpu_bus_id"]))
        if card is None:
            unmatched += 1
            continue
        card.processes.append(CardProcess(pid=a["pid"], name=a["process_name"],
                                          used_bytes=a["used_bytes"], kind="C"))  # fmt: skip
    for c in cards:
        if c.pci_bus_id:
            c.sources["processes"] = "nvidia-smi --query-compute-apps (compute processes)"
    if unmatched:
        notes.append(f"{unmatched} compute process(es) on a bus id no listed card has")


def _card_from_row(row: dict) -> Accelerator:
    mem = row["memory_mib"] * 2**20 if row["memory_mib"] else None
    sources = (
        {"memory_bytes": "nvidia-smi memory.total (MiB)", "product": "nvidia-smi name"}
        if mem
        else {}
    )
    fields: dict = {}
    for key, (field, smi) in HEALTH.items():
        if row.get(key) is not None:
            fields[field] = row[key]
            sources[field] = f"nvidia-smi --query-gpu {smi}"
    if row.get("retired_sbe") is not None and row.get("retired_dbe") is not None:
        fields["retired_pages"] = row["retired_sbe"] + row["retired_dbe"]
        sources["retired_pages"] = (
            "nvidia-smi --query-gpu retired_pages.single_bit_ecc.count + retired_pages.double_bit.count"
        )
    if row.get("memory_used_mib") is not None:
        fields["memory_used_bytes"] = row["memory_used_mib"] * 2**20
        sources["memory_used_bytes"] = "nvidia-smi --query-gpu memory.used (MiB, at probe time)"
    return Accelerator(
        index=row["index"], vendor="nvidia", product=row["name"] or "unknown NVIDIA GPU",
        memory_bytes=mem, pci_bus_id=row["pci_bus_id"] or None,
        partition=f"MIG {row['mig']}" if row["mig"] and row["mig"] != "[N/A]" else None,
        sources=sources, **fields,
    )  # fmt: skip


def _cards_from_table(table: nvidia_smi.SmiInfo) -> list[Accelerator]:
    """Cards from the default table: memory, persistence (On/Off), used memory, the ECC cell
    and the process table (WDDM/TCC in the persistence column say nothing about persistence)."""
    cards = []
    for c in table.cards:
        card = _card_from_row({
            "index": c.index, "name": c.name, "pci_bus_id": c.pci_bus_id, "mig": c.mig,
            "memory_mib": c.memory_total_bytes // 2**20 if c.memory_total_bytes else None,
        })  # fmt: skip
        src = "nvidia-smi table"
        pers = {"On": "enabled", "Off": "disabled"}.get(c.persistence or "")
        for field, value, where in (
            ("persistence_mode", pers, "Persistence-M"),
            ("memory_used_bytes", c.memory_used_bytes, "Memory-Usage (used, at probe time)"),
            (
                "ecc_mode",
                c.ecc_mode,
                "Volatile Uncorr. ECC (a count or On: enabled, Off: disabled)",
            ),
            ("ecc_errors_uncorrected", c.ecc_uncorrected_volatile, "Volatile Uncorr. ECC"),
        ):
            if value is not None:
                setattr(card, field, value)
                card.sources[field] = f"{src} {where}"
        card.processes = [
            CardProcess(
                pid=p.pid, name=p.name or None, used_bytes=p.used_bytes, kind=p.type or None
            )
            for p in table.processes
            if p.gpu == c.index
        ]
        card.sources["processes"] = f"{src} Processes"
        cards.append(card)
    return cards


def _numa_from_topo(cards: list[Accelerator], topo) -> None:
    """The NUMA Affinity column of ``topo -m`` for the cards whose NUMA node is still unknown
    (a VM's sysfs says -1, NVML may not support the query: the tool still knows it)."""
    by_index = {c.index: c for c in topo.cards}
    for card in cards:
        tc = by_index.get(card.index)
        if card.numa_node is None and tc is not None and tc.numa_node is not None:
            card.numa_node = tc.numa_node
            card.sources["numa_node"] = "nvidia-smi topo -m NUMA Affinity"


def _uuids_from_query(r: Runner, cards: list[Accelerator], notes: list[str]) -> None:
    """Each card's GPU UUID from ``--query-gpu=index,uuid`` (its own query, so a recording of
    the card query made before this field was asked for still replays)."""
    res = r.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader,nounits"])
    if not res.ok:
        notes.append(f"NVIDIA uuids unknown: nvidia-smi --query-gpu=index,uuid {res.problem}")
        return
    by_index = {c.index: c for c in cards}
    for line in res.stdout.splitlines()[: 4 * len(cards) + 4]:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 2 or not parts[0].isdecimal() or len(parts[0]) > 6:
            continue
        card = by_index.get(int(parts[0]))
        uuid = parts[1]
        if card is not None and uuid and not uuid.startswith("[") and len(uuid) <= 128:
            card.uuid = uuid
            card.sources["uuid"] = "nvidia-smi --query-gpu=uuid"


def probe(
    r: Runner, notes: list[str], want_nics: bool = False
) -> tuple[list[Accelerator], Interconnect | None, list[TopoNic]]:
    # long: one fallback chain (NVML, query-gpu, the smi table, topo -m only), then the topo links
    """Cards, links and the NIC rows of ``topo -m``.  ``want_nics``: the host has RDMA devices,
    so an NVML probe still runs ``topo -m`` for the NICs' distance to the cards."""
    if r.live:
        from nodeledger.machine.probe import nvml

        found = nvml.probe(notes, timeout=r.timeout, runner=r)
        if found is not None and found[0]:
            nics: list[TopoNic] = []
            no_numa = any(c.numa_node is None for c in found[0])
            if (want_nics or no_numa) and r.which("nvidia-smi") is not None:
                # topo -m: the NICs' distance to the cards, and the NUMA affinity NVML did not
                # give (nvmlDeviceGetNumaNodeId is unsupported on many drivers / VMs)
                t = r.run(["nvidia-smi", "topo", "-m"])
                topo = None
                try:
                    topo = nvidia_topo.parse(t.stdout) if t.ok else None
                except InputError as exc:
                    notes.append(f"NVIDIA topology not understood ({exc}); NIC distances unknown")
                if not t.ok:
                    notes.append(f"nvidia-smi topo -m {t.problem}; NIC distances unknown")
                if topo is not None:
                    nics = topo.nics if want_nics else []
                    _numa_from_topo(found[0], topo)
            return found[0], found[1], nics
    if r.which("nvidia-smi") is None:
        notes.append("NVIDIA backend: nvidia-smi absent (not on PATH)")
        return [], None, []
    rows = None
    cards: list[Accelerator] | None = None
    topo_res = None  # topo -m output, run once
    q = r.run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"])
    if not q.ok and not q.problem.startswith(("timed out", "permission", "absent")):
        # an older driver refuses a field it does not know (and the whole query with it)
        notes.append(
            f"NVIDIA backend: nvidia-smi --query-gpu with health fields {q.problem}; "
            "retrying with the base fields (health unknown)"
        )
        q = r.run(["nvidia-smi", f"--query-gpu={QUERY_BASE}", "--format=csv,noheader,nounits"])
    if q.ok:
        try:
            rows = parse_query_csv(q.stdout, notes) or None  # bad fields: notes
        except InputError as exc:
            notes.append(f"NVIDIA backend: nvidia-smi output not understood ({exc}); cards unknown")
            return [], None, []
        if rows is None:
            notes.append("NVIDIA backend: nvidia-smi --query-gpu listed no GPU")
            return [], None, []
        cards = [_card_from_row(row) for row in rows]
        _processes_from_apps(r, cards, notes)
        _uuids_from_query(r, cards, notes)
    else:
        notes.append(f"NVIDIA backend: nvidia-smi --query-gpu {q.problem}")
        if q.problem.startswith(("timed out", "permission")):
            return [], None, []
        t = r.run(["nvidia-smi"])  # older drivers / bundles: fall back to the default table
        if t.ok:
            try:
                cards = _cards_from_table(nvidia_smi.parse_table(t.stdout))
                notes.append("NVIDIA cards read from the nvidia-smi table")
            except InputError as exc:
                notes.append(f"NVIDIA backend: nvidia-smi table not understood ({exc})")
        if cards is None:
            # last resort (e.g. a bundle holding only topo -m): the cards topo lists, memory unknown
            topo_res = r.run(["nvidia-smi", "topo", "-m"])
            try:
                topo_only = nvidia_topo.parse(topo_res.stdout) if topo_res.ok else None
            except InputError:
                topo_only = None
            if topo_only is None:
                return [], None, []
            cards = [_card_from_row({"index": c.index, "name": None, "memory_mib": None,
                                     "pci_bus_id": None, "mig": None}) for c in topo_only.cards]  # fmt: skip
            notes.append(
                "NVIDIA cards known only from nvidia-smi topo -m: names and memory unknown"
            )
    t = topo_res or r.run(["nvidia-smi", "topo", "-m"])
    inter = None
    nics = []
    if not t.ok:
        notes.append(f"NVIDIA topology: nvidia-smi topo -m {t.problem}; links unknown")
    else:
        try:
            topo = nvidia_topo.parse(t.stdout)
        except InputError as exc:
            notes.append(f"NVIDIA topology not understood ({exc}); links unknown")
            topo = None
        if topo is not None:
            nics = topo.nics
            _numa_from_topo(cards, topo)
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
    return cards, inter, nics


def probe_cards(r: Runner, notes: list[str], ctx) -> tuple:
    """The vendor contract's card probe (machine/vendors/nvidia.py): NVML, else nvidia-smi;
    always a result (the NIC rows of ``topo -m`` may come without cards)."""
    return probe(r, notes, want_nics=ctx.want_nics)
