"""``lspci -D -vvv`` (pure): the PCI bridges with the bus range below each and its ACS control
bits, which doctor's ``pcie-acs`` check reads (ACS redirect on a bridge between two cards sends
their peer-to-peer traffic up to the root complex)."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass
class PciBridge:
    """A PCI bridge from ``lspci -D -vvv``: bus range below it and its ACS control bits."""

    bdf: str  # 0000:3a:00.0
    domain: int
    secondary: int
    subordinate: int
    acs_ctl: dict[str, bool] | None  # ACSCtl flags (SrcValid, ReqRedir, CmpltRedir, ...)


def parse_lspci(text: str) -> tuple[list[PciBridge], bool]:
    """``lspci -D -vvv`` -> PCI bridges (bus range, ACSCtl flags) and whether lspci said
    "<access denied>" (extended capabilities need root)."""
    bridges = []
    denied = "<access denied>" in text
    for block in re.split(r"\n(?=\S)", text):
        head = re.match(
            r"([0-9a-fA-F]{4,}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7]) ([^:]+):", block
        )
        if not head or "bridge" not in head.group(5).lower():
            continue
        bus = re.search(
            r"Bus: primary=([0-9a-f]+), secondary=([0-9a-f]+), subordinate=([0-9a-f]+)", block
        )
        if not bus:
            continue
        acs = re.search(r"ACSCtl:\s*(.*)", block)
        flags = None
        if acs:
            flags = {
                m.group(1): m.group(2) == "+" for m in re.finditer(r"(\w+)([+-])", acs.group(1))
            }
        bdf = f"{int(head.group(1), 16):04x}:{head.group(2).lower()}:{head.group(3).lower()}.{head.group(4)}"
        bridges.append(PciBridge(bdf, int(head.group(1), 16), int(bus.group(2), 16),
                                 int(bus.group(3), 16), flags))  # fmt: skip
    return bridges, denied
