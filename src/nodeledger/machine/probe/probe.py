"""Assemble a live MachineProfile from every backend; none is required."""

from __future__ import annotations

import socket

from pydantic import ValidationError

from nodeledger.machine.probe import linux, nvidia, others
from nodeledger.machine.probe.runner import Runner
from nodeledger.machine.profile import Host, Interconnect, MachineProfile, Network, Storage

OTHER_VENDOR_TOOLS = ("rocm-smi", "hy-smi", "npu-smi")


def probe_machine(runner: Runner | None = None) -> MachineProfile:
    r = runner or Runner()
    notes: list[str] = []
    host = linux.host(r, notes)
    net = linux.network(r, notes)
    disks = linux.storage(r, notes)
    cards, inter = nvidia.probe(r, notes)
    for backend in (others.probe_amd, others.probe_ascend):
        if cards:
            break
        found = backend(r, notes)
        if found:
            cards, inter = found
    for tool in OTHER_VENDOR_TOOLS:
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
            bus = c.pci_bus_id.lower()
            bus = bus[-12:] if len(bus) > 12 else bus  # 00000000:18:00.0 -> 0000:18:00.0
            v = (r.read(f"/sys/bus/pci/devices/{bus}/numa_node") or "").strip()
            if v.isdigit():
                c.numa_node = int(v)
                c.sources["numa_node"] = f"/sys/bus/pci/devices/{bus}/numa_node"
    # NUMA ids the cards report must exist in the host map; else keep them unknown
    numa_ids = {n.id for n in host.numa_nodes}
    for c in cards:
        if numa_ids and c.numa_node is not None and c.numa_node not in numa_ids:
            notes.append(
                f"card {c.index}: NUMA node {c.numa_node} not in the host's map; set unknown"
            )
            c.numa_node = None
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
        return MachineProfile(**fields)
    except ValidationError as exc:
        # inconsistent tool outputs (e.g. links to cards no tool listed): keep what is coherent
        first = exc.errors()[0]["msg"]
        fields.update(interconnect=Interconnect(), notes=[*notes, f"links dropped: {first}"])
    try:
        return MachineProfile(**fields)
    except ValidationError as exc:
        first = exc.errors()[0]["msg"]
        fields.update(
            accelerators=[],
            notes=[*fields["notes"], f"cards dropped (inconsistent tool output): {first}"],
        )
    try:
        return MachineProfile(**fields)
    except ValidationError as exc:
        first = exc.errors()[0]["msg"]
        fields.update(host=Host(), network=Network(), storage=Storage(),
                      notes=[*fields["notes"], f"host inventory dropped (inconsistent): {first}"])  # fmt: skip
        return MachineProfile(**fields)
