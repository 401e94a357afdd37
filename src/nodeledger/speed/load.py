"""How long a checkpoint takes to arrive: read from each kind of mount, copied host -> card, or
sent over the NIC to a second machine (speed/terms.py (8); one copy is one stream through one
port: the fastest port's line rate, an upper bound).

Reading a safetensors checkpoint streams file -> page cache -> (pinned staging) -> card; the
chain runs at its slowest stage.  Each loading rank (the load job's ``--ranks``, strategy
every_rank) puts the whole checkpoint on its own card over its own PCIe link, in parallel with
the others, and the disk is read once (the other ranks hit the page cache): the time is that of
one rank.  A transfer to a second box crosses the NIC once at its line rate (a file
copy, not a collective: no socket-transport penalty assumed beyond TCP's, which the figure's
source states).
"""

from __future__ import annotations

from nodeledger.machine.profile import MachineProfile
from nodeledger.speed import figures as F
from nodeledger.speed import terms as T

MOUNT_KINDS = ("nvme", "ssd", "hdd", "network")


def _fastest_port(machine: MachineProfile):
    """One file copy is one stream through one interface: the fastest port's line rate."""
    ports = [n for n in machine.network.nics if n.speed_gbit is not None]
    if not ports:
        f, _ = F.nic(machine)
        return f
    n = max(ports, key=lambda x: x.speed_gbit)
    return F.Figure(n.speed_gbit / 8, "GB/s", f"{n.name} ({n.kind}) {n.speed_gbit:g} Gbit/s line "
                    f"rate, one stream through one port ({n.source or 'machine profile'})")  # fmt: skip


def load_speed(checkpoint_bytes: int, machine: MachineProfile, ranks: int = 1) -> dict:
    h2c = F.host_to_card(machine)
    rows = []
    for kind in MOUNT_KINDS:
        disk = F.mount_read(machine, kind)
        read_s = None if disk.value is None else T.transfer_seconds(checkpoint_bytes, disk.value)
        stages = [x for x in (disk.value, h2c.value) if x]
        total = None if disk.value is None else T.streamed_seconds(checkpoint_bytes, stages)
        rows.append({
            "mount": kind,
            "read_gbps": disk.value,
            "read_source": disk.source,
            "read_s": read_s,
            "to_cards_s": total,
            "binding": None if total is None else ("disk" if disk.value == min(stages) else "host -> card"),
        })  # fmt: skip
    nic = _fastest_port(machine)
    return {
        "checkpoint_bytes": checkpoint_bytes,
        "ranks": ranks,
        "host_to_card_gbps": h2c.value,
        "host_to_card_source": h2c.source,
        "host_to_card_s": None
        if h2c.value is None
        else T.transfer_seconds(checkpoint_bytes, h2c.value * ranks),
        "mounts": rows,
        "to_second_machine": {
            "nic_gbps": nic.value,
            "source": nic.source,
            "seconds": None
            if nic.value is None
            else T.transfer_seconds(checkpoint_bytes, nic.value),
            "at_common_ethernet_s": {
                f"{g} GbE": T.transfer_seconds(checkpoint_bytes, g / 8) for g in (1, 10, 25, 100)
            },
        },
    }
