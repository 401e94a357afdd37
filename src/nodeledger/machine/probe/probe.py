"""Assemble a live MachineProfile from every backend; none is required."""

from __future__ import annotations

import dataclasses
import socket

from nodeledger.machine.parsers.common import pci_address
from nodeledger.machine.parsers.nvidia_topo import TopoNic
from nodeledger.machine.probe import facts, linux
from nodeledger.machine.probe.runner import Runner
from nodeledger.machine.profile import (
    Accelerator,
    Host,
    Interconnect,
    MachineProfile,
    Network,
    Nic,
    Storage,
    check,
    first_error,
)
from nodeledger.machine.vendors import ProbeContext, load_probe
from nodeledger.machine.vendors import all_specs as all_vendor_specs

NEAR = ("PIX", "PXB")  # a NIC this close to a card serves it (GPUDirect RDMA)
SAME_NUMA = ("PIX", "PXB", "PHB", "NODE")  # topo labels that stay within one NUMA node


def merge_topo_nics(net: Network, topo_nics: list[TopoNic], cards: list[Accelerator],
                    rdma: dict[str, dict], notes: list[str]) -> Network:  # fmt: skip
    """Add the NIC rows of ``nvidia-smi topo -m`` to the NICs found in sysfs, by device name:
    an InfiniBand NIC is listed by its RDMA device (mlx5_0), a RoCE one by its netdev (matched
    through /sys/class/infiniband/<dev>/device/net).  sysfs facts win (kind, speed, NUMA node,
    bus id); topo adds the cards at PIX/PXB (``near_cards``) and, where sysfs does not say, the
    NUMA node of the cards on the NIC's side of the host (PIX/PXB/PHB/NODE)."""
    if not topo_nics:
        return net
    numa_of = {c.index: c.numa_node for c in cards}
    nics = list(net.nics)
    by_name = {n.name: i for i, n in enumerate(nics)}
    unnamed = []
    for t in topo_nics:
        if t.device is None:
            unnamed.append(t.name)
            continue
        near = sorted(g for g, label in t.links.items() if label.upper() in NEAR and g in numa_of)
        sides = {
            numa_of[g]
            for g, label in t.links.items()
            if label.upper() in SAME_NUMA and g in numa_of
        }
        numa = sides.pop() if len(sides) == 1 and None not in sides else None
        dev = rdma.get(t.device, {})
        targets = [by_name[t.device]] if t.device in by_name else [
            by_name[n] for n in dev.get("netdevs", []) if n in by_name
        ]  # fmt: skip
        if targets:
            for i in targets:
                old = nics[i]
                src = old.source or ""
                if "nvidia-smi topo -m" not in src:
                    src += "; near_cards from nvidia-smi topo -m"
                update: dict = {
                    "near_cards": sorted(set(old.near_cards) | set(near)),
                    "source": src,
                }
                if old.numa_node is None and numa is not None:
                    update["numa_node"] = numa
                    update["source"] += " (NUMA node: that of its cards)"
                nics[i] = dataclasses.replace(old, **update)
            continue
        layer = dev.get("layer")
        kind = {"infiniband": "infiniband", "ethernet": "roce"}.get(layer or "", t.kind)
        src = "nvidia-smi topo -m"
        if dev.get("numa_node") is not None:
            numa = dev["numa_node"]
            src += f"; NUMA node from {dev['dir']}/device/numa_node"
        elif numa is not None:
            src += " (NUMA node: that of its cards)"
        if layer:
            src += f"; kind from {dev['dir']}/ports/1/link_layer"
        nics.append(Nic(name=t.device, kind=kind if kind in ("infiniband", "roce", "rdma") else "unknown",
                        speed_gbit=dev.get("rate_gbit"), numa_node=numa, pci_bus_id=dev.get("pci_bus_id"),
                        near_cards=near, source=src))  # fmt: skip
        by_name[t.device] = len(nics) - 1
    if unnamed:
        notes.append(
            f"topo -m NIC rows without a NIC Legend ({', '.join(unnamed)}): device names unknown, "
            "not added to the network"
        )
    return Network(nics=nics)


def probe_machine(runner: Runner | None = None, need_cards: bool = False) -> MachineProfile | None:
    """The machine profile of this box (or of the box a replaying runner recorded).
    ``need_cards``: None when no vendor tool finds a card, before the network and storage are
    probed and before the profile is validated (a caller that stands in the reference machine for
    a box without cards needs nothing more)."""
    return _profile(runner or Runner(), need_cards)


def probe_with_facts(runner: Runner | None = None) -> tuple[MachineProfile, facts.Facts]:
    """The profile and the live facts doctor reads (machine/probe/facts.py: process table, kernel
    command line, IOMMU groups, ``lspci -vvv``, mounts, ...), both through one runner, so that a
    support bundle made from this runner holds them."""
    r = runner or Runner()
    profile = _profile(r)
    return profile, facts.collect(r, profile)


def _profile(r: Runner, need_cards: bool = False) -> MachineProfile | None:
    # long: the probe in order: host, cards, network and storage, checks on the tools' figures,
    # then the profile, dropping links, cards or host inventory until it validates
    notes: list[str] = []
    host = linux.host(r, notes)
    rdma = linux.rdma_devices(r)
    # each vendor's card probe (machine/vendors), in registration order, until one finds cards;
    # its notes follow the network's and storage's, probed after it
    card_notes: list[str] = []
    ctx = ProbeContext(want_nics=bool(rdma), numa_map={n.id: n.cpus for n in host.numa_nodes})
    cards, inter, topo_nics = [], None, []
    for vs in all_vendor_specs():
        if cards:
            break
        if vs.card_probe is None:
            continue
        found = load_probe(vs.card_probe)(r, card_notes, ctx)
        if found is not None:
            cards, inter = found[0], found[1]
            topo_nics = found[2] if found[2] is not None else topo_nics
    if need_cards and not cards:
        return None
    net = linux.network(r, notes, rdma)
    disks = linux.storage(r, notes)
    notes.extend(card_notes)
    for tool in (t for vs in all_vendor_specs() for t in vs.probe_tools):
        if r.which(tool) is None:
            notes.append(f"{tool}: absent (not on PATH)")
    unique: dict[int, object] = {}
    for c in cards:
        if c.index in unique:
            notes.append(
                f"card index {c.index} listed twice by the vendor tool; the second entry is ignored"
            )
            continue
        unique[c.index] = c
    cards = list(unique.values())
    if not cards:
        notes.append("no accelerator found: host-only profile")
    # a card whose tool did not say its NUMA node: the kernel knows it from the PCI device
    for c in cards:
        if c.numa_node is None and c.pci_bus_id:
            bus = pci_address(c.pci_bus_id)  # 00000000:18:00.0 -> 0000:18:00.0
            v = (r.read(f"/sys/bus/pci/devices/{bus}/numa_node") or "").strip()
            if v.isascii() and v.isdecimal() and len(v) < 8:
                c.numa_node = int(v)
                c.sources["numa_node"] = f"/sys/bus/pci/devices/{bus}/numa_node"
    # a card cannot hold more than it has: a used figure above the card's memory is a tool
    # fault (seen: 104 TB used on an 80 GiB card) and becomes unknown, with a note
    for c in cards:
        total = c.memory_bytes
        if total and c.memory_used_bytes is not None and c.memory_used_bytes > total:
            notes.append(
                f"card {c.index}: {c.memory_used_bytes:,} B used reported of {total:,} B on the "
                f"card ({c.sources.get('memory_used_bytes', 'vendor tool')}); used set unknown"
            )
            c.memory_used_bytes = None
        for proc in c.processes if total else ():
            if proc.used_bytes is not None and proc.used_bytes > total:
                notes.append(
                    f"card {c.index}: process {proc.pid} reported holding {proc.used_bytes:,} B "
                    f"of {total:,} B; its used bytes set unknown"
                )
                proc.used_bytes = None
    # NUMA ids the cards report must exist in the host map; else keep them unknown
    numa_ids = {n.id for n in host.numa_nodes}
    for c in cards:
        if numa_ids and c.numa_node is not None and c.numa_node not in numa_ids:
            notes.append(
                f"card {c.index}: NUMA node {c.numa_node} not in the host's map; set unknown"
            )
            c.numa_node = None
    net = merge_topo_nics(net, topo_nics if cards else [], cards, rdma, notes)
    for nic in net.nics:
        if numa_ids and nic.numa_node is not None and nic.numa_node not in numa_ids:
            notes.append(
                f"NIC {nic.name}: NUMA node {nic.numa_node} not in the host's map; set unknown"
            )
            nic.numa_node = None
    try:
        name = socket.gethostname() or "this-host"
    except OSError:
        name = "this-host"
    fields = dict(
        name=f"probed-{name}",
        description=f"live probe of {name}",
        accelerators=cards,
        interconnect=inter or Interconnect(),
        host=host,
        network=net,
        storage=disks,
        notes=notes,
    )
    try:
        return check(MachineProfile(**fields))
    except ValueError as exc:
        # inconsistent tool outputs (e.g. links to cards no tool listed): keep what is coherent
        first = first_error(exc)
        fields.update(interconnect=Interconnect(), notes=[*notes, f"links dropped: {first}"])
    try:
        return check(MachineProfile(**fields))
    except ValueError as exc:
        first = first_error(exc)
        fields.update(
            accelerators=[],
            notes=[*fields["notes"], f"cards dropped (inconsistent tool output): {first}"],
        )
    try:
        return check(MachineProfile(**fields))
    except ValueError as exc:
        first = first_error(exc)
        fields.update(host=Host(), network=Network(), storage=Storage(),
                      notes=[*fields["notes"], f"host inventory dropped (inconsistent): {first}"])  # fmt: skip
        return check(MachineProfile(**fields))
