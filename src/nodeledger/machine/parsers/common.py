"""Helpers shared by the vendor-tool parsers (pure functions of text)."""

from __future__ import annotations

import re

from nodeledger.errors import InputError

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class ParseError(InputError):
    """A recorded tool output that does not have the expected shape (truncated, garbage)."""


def clean(text: str) -> str:
    """Strip ANSI escapes and carriage returns."""
    return ANSI.sub("", text).replace("\r", "")


def cpulist_ids(cpus: str | None) -> set[int] | None:
    """CPU ids of a kernel cpulist ("0-23,96-119" -> {0..23, 96..119}); None if not a cpulist."""
    if not cpus or not cpus.strip():
        return None
    out: set[int] = set()
    for part in cpus.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            return None
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            return None
        out.update(range(lo, hi + 1))
    return out or None


def cpulist_count(cpus: str | None) -> int | None:
    """Number of CPUs in a kernel cpulist ("0-31,64-95" -> 64); None if not a cpulist."""
    ids = cpulist_ids(cpus)
    return None if ids is None else len(ids)


def size_to_bytes(value: float, unit: str) -> int:
    unit = unit.strip().lower().rstrip("b") or "b"
    mult = {"": 1, "b": 1, "k": 2**10, "ki": 2**10, "m": 2**20, "mi": 2**20, "g": 2**30, "gi": 2**30,
            "t": 2**40, "ti": 2**40}.get(unit)  # fmt: skip
    if mult is None:
        raise ParseError(f"unknown size unit {unit!r}")
    return round(value * mult)


def parse_link_speed(text: str | None) -> float | None:
    """sysfs ``max_link_speed`` / ``current_link_speed``: "16.0 GT/s PCIe", "8 GT/s", "Unknown"."""
    if not text:
        return None
    head = text.strip().split()
    try:
        return float(head[0])
    except (ValueError, IndexError):
        return None


_PCI = re.compile(r"(?:([0-9a-f]{1,8}):)?([0-9a-f]{2}):([0-9a-f]{2})(?:\.([0-7]))?")


def pci_address(bus: str | None) -> str | None:
    """A PCI bus id in the one spelling every match uses, ``dddd:bb:dd.f`` in lower case:
    nvidia-smi's "00000000:18:00.0", sysfs' "0000:18:00.0", lspci's short "18:00.0" and a
    device address without its function, "0000:18:00" (function 0), all become "0000:18:00.0".
    None for no text or text that is not a bus id."""
    if not bus:
        return None
    m = _PCI.fullmatch(bus.strip().lower())
    if not m:
        return None
    domain, bus_no, device, function = m.groups()
    return f"{int(domain or '0', 16):04x}:{bus_no}:{device}.{function or '0'}"
