"""Sizes as printed in logs -> bytes, exactly as the printer meant them.

- ``KiB/MiB/GiB/TiB`` are powers of 1024 (PyTorch's ``format_size``, vLLM's ``GiB_bytes``).
- ``KB/MB/GB/TB`` are powers of 1000, as printed — except in the kernel log, whose ``kB`` /
  ``KB`` is 1024 bytes by the kernel's own definition (``K(x) = x << (PAGE_SHIFT - 10)``);
  kernel parsers call :func:`kernel_kb`.
- ``bytes`` / ``B`` are bytes.

PyTorch prints two decimals, so a printed "8.13 GiB" is 8.13 × 2**30 rounded to a byte: the
figure is as exact as the log, never more. Decimal arithmetic keeps "0.10 GiB" from becoming
0.1000000000000000055 GiB.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

_UNITS = {
    "b": 1,
    "byte": 1,
    "bytes": 1,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}

# one size as printed: "8.13 GiB", "0 bytes", "1006.00 MiB", "6291456 bytes", "12.0 GiB"
SIZE = r"\d+(?:\.\d+)?\s*(?:bytes|byte|[KMGT]i?B|B)"
_SIZE_RE = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>bytes|byte|[KMGT]i?B|B)\s*$", re.I)

# the largest limit a memory cgroup prints when it has none (PAGE_COUNTER_MAX pages, in kB)
UNLIMITED_KB = 2**52
# sanity bounds (the report turns a figure beyond them into unknown, with a note): nothing in a
# 64-bit address space reaches 2**64 bytes; resident memory cannot pass the largest virtual
# address space of x86-64 / arm64 (57-bit, 128 PiB)
MAX_BYTES = 2**64
MAX_RSS_BYTES = 2**57
_MAX_DIGITS = 40  # a printed number longer than this is not a size (and int() of it is slow)


_LONG_RUN = re.compile(r"\d{41,}")


def clip_digits(line: str) -> str:
    """A long line with its runs of more than 40 digits cut to 40 (no figure a log prints is
    longer; ``int()`` refuses more than 4300 digits): numbers stay absurd, parsing stays safe."""
    if len(line) <= 4000:
        return line
    return _LONG_RUN.sub(lambda m: m[0][:_MAX_DIGITS], line)


def to_bytes(number: str, unit: str) -> int:
    """``("8.13", "GiB")`` -> 8729520046; raises ValueError on an unknown unit."""
    mult = _UNITS.get(unit.strip().lower())
    if mult is None:
        raise ValueError(f"unknown size unit {unit!r}")
    try:
        value = Decimal(number) * mult
    except InvalidOperation as exc:
        raise ValueError(f"not a number: {number!r}") from exc
    if not value.is_finite():
        raise ValueError(f"not a finite size: {number!r}")
    return int(value.to_integral_value(rounding=ROUND_HALF_EVEN))


def parse_size(text: str | None) -> int | None:
    """One printed size -> bytes; None for None or text that is not a size."""
    if text is None:
        return None
    m = _SIZE_RE.match(text)
    if not m:
        return None
    try:
        return to_bytes(m["num"], m["unit"])
    except ValueError:
        return None


def kernel_kb(number: str | int | None) -> int | None:
    """The kernel's kB (1024 bytes) -> bytes."""
    if number is None:
        return None
    if isinstance(number, str) and len(number.lstrip("-")) > _MAX_DIGITS:
        # no size the kernel prints is this long (and int() refuses > 4300 digits): keep the
        # magnitude, so the report can say it is impossible
        digits = number.lstrip("-")
        value = int(digits[:_MAX_DIGITS]) * 10 ** (len(digits) - _MAX_DIGITS)
        return (-value if number.startswith("-") else value) * 1024
    return int(number) * 1024


def human(n: int | None) -> str:
    """Bytes for people: GiB / MiB / KiB with two decimals (like PyTorch), else bytes."""
    if n is None:
        return "unknown"
    sign = "-" if n < 0 else ""
    a = abs(n)
    if a >= 2**80:  # beyond any memory (and beyond a float for the largest): no digits
        return f"{sign}about 2**{a.bit_length() - 1} B"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if a >= size:
            return f"{sign}{a / size:,.2f} {unit}"
    return f"{sign}{a} B"
