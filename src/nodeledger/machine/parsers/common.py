"""Helpers shared by the vendor-tool parsers (pure functions of text)."""

from __future__ import annotations

import math
import re

from nodeledger.errors import InputError

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class ParseError(InputError):
    """A recorded tool output that does not have the expected shape (truncated, garbage)."""


def clean(text: str) -> str:
    """Strip ANSI escapes and carriage returns."""
    return ANSI.sub("", text).replace("\r", "")


# a cpulist is refused (not a CPU list) before any expansion when it names more CPUs than this
# or an id above MAX_CPU_ID: no machine has them, and expanding one would exhaust memory
MAX_CPUS = 65_536
MAX_CPU_ID = 2**20
_RANGE = re.compile(r"([0-9]{1,8})(?:-([0-9]{1,8}))?")


def cpulist_ranges(cpus: str | None) -> list[tuple[int, int]] | None:
    """A kernel cpulist ("0-23,96-119") as sorted, merged inclusive ranges [(0, 23), (96, 119)],
    without expanding it; None if not a cpulist (empty, garbage, a range backwards, an id above
    MAX_CPU_ID or more than MAX_CPUS CPUs)."""
    if not cpus or not cpus.strip() or len(cpus) > 200_000:
        return None
    spans: list[tuple[int, int]] = []
    for part in cpus.split(","):
        part = part.strip()
        if not part:
            continue
        m = _RANGE.fullmatch(part)
        if not m:
            return None
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo or hi > MAX_CPU_ID:
            return None
        spans.append((lo, hi))
    if not spans:
        return None
    spans.sort()
    merged = [spans[0]]
    for lo, hi in spans[1:]:
        plo, phi = merged[-1]
        if lo <= phi + 1:
            merged[-1] = (plo, max(phi, hi))
        else:
            merged.append((lo, hi))
    if sum(hi - lo + 1 for lo, hi in merged) > MAX_CPUS:
        return None
    return merged


def format_ranges(ranges: list[tuple[int, int]]) -> str:
    """[(0, 2), (5, 5)] -> "0-2,5" (kernel cpulist syntax)."""
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges)


def cpulist_ids(cpus: str | None) -> set[int] | None:
    """CPU ids of a kernel cpulist ("0-23,96-119" -> {0..23, 96..119}); None if not a cpulist
    (see :func:`cpulist_ranges`: never more than MAX_CPUS ids)."""
    ranges = cpulist_ranges(cpus)
    if ranges is None:
        return None
    out: set[int] = set()
    for lo, hi in ranges:
        out.update(range(lo, hi + 1))
    return out


def cpulist_count(cpus: str | None) -> int | None:
    """Number of CPUs in a kernel cpulist ("0-31,64-95" -> 64), counted from its ranges; None if
    not a cpulist."""
    ranges = cpulist_ranges(cpus)
    return None if ranges is None else sum(hi - lo + 1 for lo, hi in ranges)


def shorten(text: object, limit: int = 40) -> str:
    """A bad value for a note: repr'd and cut to ``limit`` characters."""
    r = repr(text)
    return r if len(r) <= limit else r[: limit - 3] + "..."


def ascii_uint(text: object) -> bool:
    """A non-negative integer in ASCII digits ("12"; not "²", "١٢", "-1", "0x10")."""
    return isinstance(text, str) and 0 < len(text) <= 30 and text.isascii() and text.isdecimal()


# the largest memory a card can report: anything above (1 PB) is garbage, not a card
MAX_CARD_BYTES = 2**50


def finite(value: float | None, lo: float = 0.0, hi: float = 1e15) -> float | None:
    """``value`` if it is a finite number within [lo, hi], else None."""
    if value is None or isinstance(value, bool):
        return None
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return v if math.isfinite(v) and lo <= v <= hi else None


_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def to_float(text: str | None, lo: float = 0.0, hi: float = 1e15) -> float | None:
    """A finite number within [lo, hi] from text ("12.5"), else None ("N/A", "0x10", "1e400",
    "NaN", "-1", "...")."""
    if text is None or not isinstance(text, str) or len(text) > 64:
        return None
    t = text.strip()
    if not t.isascii() or not _FLOAT.fullmatch(t):
        return None
    return finite(float(t), lo, hi)


def to_int(text: str | None, hi: int = 2**62) -> int | None:
    """A non-negative integer in ASCII digits up to ``hi``, else None."""
    if not isinstance(text, str):
        return None
    t = text.strip()
    if not ascii_uint(t):
        return None
    v = int(t)
    return v if v <= hi else None


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


# what job launchers put before every line of a tool's output: `srun -l` ("0: "), Cray / ALPS
# and pdsh style ("nid005113 out: ", "node12: ")
_LAUNCHER = (
    re.compile(r" {0,5}\d{1,6}: "),  # srun -l right-aligns the task number past 9 tasks
    re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62} (?:out|err): "),
    re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}: "),
)


def strip_launcher_prefix(text: str) -> tuple[str, str | None]:
    """(text, note): when every non-empty line starts with the same job-launcher prefix — srun
    -l's task number "0: ", "nid005113 out: ", pdsh's "node12: " — the text without it and a note
    that names it; otherwise the text unchanged and None.  Only one prefix shared by all lines
    counts: a tool's own "GPU 0: ..." lines differ from line to line and are left alone."""
    lines = text.splitlines()
    body = [line for line in lines if line.strip()]
    if len(body) < 2:
        return text, None
    for pattern in _LAUNCHER:
        m = pattern.match(body[0])
        if m is None:
            continue
        prefix = m.group(0)
        bare = prefix.rstrip()  # an empty line of the tool: "0:" once an editor trims it

        def carries(line: str, prefix=prefix, bare=bare) -> bool:
            return line.startswith(prefix) or line.rstrip() == bare

        if all(carries(line) for line in body):
            kept = [line[len(prefix) :] if line.startswith(prefix) else ("" if line.rstrip() == bare else line)
                    for line in lines]  # fmt: skip
            return "\n".join(kept) + ("\n" if text.endswith("\n") else ""), (
                f"every line carried the launcher prefix {prefix!r} (srun -l, pdsh, ...): read "
                "without it"
            )
    return text, None


def card_indices(text: str | None, flag: str = "--cards") -> list[int] | None:
    """``--cards 0-3`` / ``0,2,4,6`` / ``0-1,4`` in the order given (None when absent): each part
    a kernel-cpulist range (parsers.common: ASCII digits, bounded), no card twice."""
    if text is None:
        return None
    out: list[int] = []
    for part in text.split(","):
        ranges = cpulist_ranges(part.strip())
        if ranges is None:
            raise InputError(
                f"{flag} {text!r}: {part.strip()!r} is not a card index or a range like 0-3"
            )
        out += [i for lo, hi in ranges for i in range(lo, hi + 1)]
    dupes = sorted({c for c in out if out.count(c) > 1})
    if dupes:
        raise InputError(f"{flag} {text!r}: card(s) {dupes} named twice")
    return out
