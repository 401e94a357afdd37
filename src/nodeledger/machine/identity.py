"""One device identity per card: the index the vendor tool prints (smi index), the index a
process sees under the current environment, the PCI bus id, the /dev node and its minor, and
the NUMA node — the numbers that differ and, mixed, book or blame the wrong card.

The runtime index follows the vendor runtime's rules:
  NVIDIA  CUDA enumerates in CUDA_DEVICE_ORDER: PCI_BUS_ID = ascending PCI bus id; unset or
          FASTEST_FIRST = "fastest to slowest using a simple heuristic" (CUDA C Programming
          Guide, CUDA Environment Variables) -- for identical cards the order is taken as PCI
          order and said to be assumed; for mixed models it is unknown.  CUDA_VISIBLE_DEVICES
          then keeps the listed devices (indices into that order, or GPU-<uuid> prefixes) in
          the listed order, and stops at the first entry it cannot match.
  AMD     ROCR_VISIBLE_DEVICES filters first, then HIP_VISIBLE_DEVICES (ROCm docs, "GPU
  Hygon   isolation"); enumeration in PCI order (assumed: KFD topology order, which follows
          the PCI bus for one model of card).
  Ascend  ASCEND_RT_VISIBLE_DEVICES lists the logical devices a process sees (CANN docs).

The /dev node is read from sysfs / procfs for a live host (``dev_nodes``), unknown otherwise.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from nodeledger.machine.parsers.common import pci_address
from nodeledger.machine.profile import MachineProfile
from nodeledger.machine.vendors import spec as vendor_spec


def _bus_key(bus: str | None) -> tuple:
    """A PCI bus id as a sortable key (domain, bus, device, function); unknown ids last."""
    m = re.match(r"(?:([0-9a-fA-F]+):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])", bus or "")
    if not m:
        return (1, bus or "")
    dom, b, d, f = m.groups()
    return (0, int(dom or "0", 16), int(b, 16), int(d, 16), int(f))


def _filter(order: list[int], value: str | None, uuids: dict[int, str]) -> tuple[list[int], str]:
    """``order`` (smi indices in runtime order) kept by a *_VISIBLE_DEVICES value: indices into
    ``order`` or uuid prefixes, in the listed order, up to the first entry that matches none."""
    if value is None:
        return order, ""
    kept: list[int] = []
    for raw in [x.strip() for x in value.split(",")]:
        if raw.isdigit() and int(raw) < len(order):
            kept.append(order[int(raw)])
            continue
        hit = [i for i in order if uuids.get(i) and uuids[i].lower().startswith(raw.lower())]
        if raw and len(hit) == 1:
            kept.append(hit[0])
            continue
        return kept, f"stops at {raw!r} (matches no card)"
    return kept, ""


def device_identity(profile: MachineProfile, env: dict | None = None,
                    dev_nodes: dict[str, tuple[str, int]] | None = None) -> dict:  # fmt: skip
    """{"rows": [...], "notes": [...]}: per card its smi index, runtime index under ``env``
    (None: not visible to a process here), PCI bus id, /dev node and minor, NUMA node."""
    env = dict(os.environ if env is None else env)
    cards = profile.accelerators
    notes: list[str] = []
    if not cards:
        return {"rows": [], "notes": ["no accelerator"], "index_name": None}
    vendor = cards[0].vendor
    vs = vendor_spec(vendor)
    by_pci = [a.index for a in sorted(cards, key=lambda a: _bus_key(a.pci_bus_id))]
    if vs.device_order_env:  # CUDA: FASTEST_FIRST unless CUDA_DEVICE_ORDER=PCI_BUS_ID
        var = vs.device_order_env
        mode = env.get(var) or "FASTEST_FIRST"
        if mode == "PCI_BUS_ID":
            order, known = by_pci, True
        elif len({a.product for a in cards}) == 1:
            order, known = by_pci, True
            notes.append(f"{var}={mode}: identical cards taken in PCI order (the "
                         f"heuristic's order is not guaranteed); set {var}=PCI_BUS_ID, "
                         "as `place` and `run` do")  # fmt: skip
        else:
            order, known = by_pci, False
            notes.append(f"{var}={mode} with mixed card models: {vs.runtime}'s order is unknown; "
                         f"set {var}=PCI_BUS_ID")  # fmt: skip
    else:
        order, known = by_pci, True
        notes.append(f"{vendor.value}: runtime order taken as PCI order (assumed)")
    if any(a.pci_bus_id is None for a in cards):
        notes.append("PCI bus ids unknown (a preset): PCI order taken as the smi index order")
    uuids = {a.index: a.uuid for a in cards if a.uuid}
    for var in vs.visible_filters:
        if var in env:
            order, why = _filter(order, env[var], uuids)
            notes.append(f"{var}={env[var]!r}" + (f": {why}" if why else ""))
    runtime = {smi: k for k, smi in enumerate(order)}
    nodes = dev_nodes or {}
    rows = []
    for a in sorted(cards, key=lambda x: x.index):
        node = nodes.get(pci_address(a.pci_bus_id) or "")
        rows.append({
            "smi_index": a.index,
            "runtime_index": runtime.get(a.index) if known else None,
            "visible": a.index in runtime,
            "pci_bus_id": a.pci_bus_id,
            "uuid": a.uuid,
            "dev_node": node[0] if node else None,
            "dev_minor": node[1] if node else None,
            "numa_node": a.numa_node,
        })  # fmt: skip
    return {"rows": rows, "notes": notes, "index_name": vs.index_name or "runtime index"}


def read_dev_nodes(root: str = "/") -> dict[str, tuple[str, int]]:
    """PCI bus id -> (/dev node, minor) on a live host, from small procfs / sysfs files (each
    read bounded): NVIDIA /proc/driver/nvidia/gpus/<bus>/information "Device Minor"; AMD and
    Hygon /sys/bus/pci/devices/<bus>/drm/renderD<n> (the render node; its minor is n).
    Missing files are skipped: the node stays unknown."""
    out: dict[str, tuple[str, int]] = {}
    base = Path(root)
    for d in _entries(base / "proc/driver/nvidia/gpus")[:64]:
        try:
            with open(d / "information", errors="replace") as fh:
                text = fh.read(8192)
        except OSError:
            continue
        m = re.search(r"Device Minor:\s*(\d+)", text)
        if m:
            out[pci_address(d.name) or d.name.lower()] = (
                f"/dev/nvidia{m.group(1)}",
                int(m.group(1)),
            )
    for d in _entries(base / "sys/bus/pci/devices")[:512]:
        for n in (p.name for p in _entries(d / "drm")):
            m = re.fullmatch(r"renderD(\d+)", n)
            if m:
                out.setdefault(
                    pci_address(d.name) or d.name.lower(), (f"/dev/dri/{n}", int(m.group(1)))
                )
    return out


def _entries(folder: Path) -> list[Path]:
    """``folder``'s entries, sorted; none when it is missing or unreadable."""
    try:
        return sorted(folder.iterdir()) if folder.is_dir() else []
    except OSError:
        return []
