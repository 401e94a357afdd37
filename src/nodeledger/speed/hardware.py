"""Hardware figures as data (``speed/hardware.toml``): cards, links, NICs, disks and the achieved
fractions of their peaks, each with its source.  Read once per process, lazily.

The data is edited in ``hardware.toml``; ``hardware.json`` is the same data parsed once
(``python tests/regen_hardware_json.py`` writes it), read at run time because parsing the TOML
costs ~40 ms of every cold start.  ``tests/test_speed.py`` fails when the two differ.

``card(product)`` finds a card by the product name a vendor tool prints (first entry with a
matching substring, case-insensitive); ``efficiency(name)`` gives an achieved fraction with its
source; ``class_floor`` is the bound used when a card's own peak is unknown: the slowest card of
the same class and memory size in the data file.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
DATA = HERE / "hardware.toml"  # the source, edited by people
PARSED = HERE / "hardware.json"  # the same, parsed (tests/regen_hardware_json.py)
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Figure:
    """A number with its unit and where it came from; ``value`` None = unknown (``source`` then
    says why)."""

    value: float | None
    unit: str
    source: str

    @property
    def known(self) -> bool:
        return self.value is not None


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (int, float)):
        return float(x)
    return None  # "unknown"


def parse_source() -> dict:
    with DATA.open("rb") as fh:
        return tomllib.load(fh)


@lru_cache(maxsize=1)
def data() -> dict:
    return json.loads(PARSED.read_text(encoding="utf-8"))


def cards() -> list[dict]:
    return data().get("cards", [])


@lru_cache(maxsize=256)
def card(product: str | None) -> dict | None:
    """The data-file entry of a card, by a substring of its product name (remembered per name:
    every figure of every card of a report asks; callers only read the entry)."""
    if not product:
        return None
    p = product.lower()
    for c in cards():
        if any(m.lower() in p for m in c.get("match", [])):
            return c
    return None


def card_figure(product: str | None, key: str, unit: str) -> Figure:
    c = card(product)
    if c is None:
        return Figure(None, unit, f"{product!r} is not in nodeledger's hardware data")
    v = _num(c.get(key))
    note = c.get("note") or ""
    src = c.get("source", "")
    if v is None:
        return Figure(None, unit, f"{c['id']}: {key} unknown" + (f" ({note})" if note else ""))
    return Figure(v, unit, f"{c['id']} ({src})")


def _bound_cards() -> list[dict]:
    """Cards whose figures were read from the vendor's own document (``source_checked`` not
    false): a bound that decides a verdict rests on those only."""
    return [c for c in cards() if c.get("source_checked", True) is not False]


def class_floor(key: str, vendor_class: str, memory_gib: float | None) -> Figure:
    """The lowest ``key`` among data-file cards of ``vendor_class`` with at least
    ``memory_gib`` of memory: a lower bound for a card of that class whose figure is unknown."""
    best = None
    for c in _bound_cards():
        v = _num(c.get(key))
        mem = _num(c.get("memory_gib"))
        if v is None or c.get("class") != vendor_class:
            continue
        if memory_gib is not None and (mem is None or mem < memory_gib):
            continue
        if best is None or v < best[0]:
            best = (v, c["id"])
    if best is None:
        mem = "any memory" if memory_gib is None else f">= {memory_gib:g} GB"
        return Figure(None, "", f"no {vendor_class} card with {mem} in the data")
    n = sum(
        1
        for c in _bound_cards()
        if c.get("class") == vendor_class
        and _num(c.get(key)) is not None
        and (memory_gib is None or (_num(c.get("memory_gib")) or 0) >= memory_gib)
    )
    return Figure(
        best[0],
        "",
        f"lowest {key} of the {n} {vendor_class} cards "
        + ("" if memory_gib is None else f"with >= {memory_gib:g} GB (as vendors print it) ")
        + f"whose datasheet figures nodeledger's hardware data holds ({best[1]})",
    )


def link(link_id: str) -> dict | None:
    return next((x for x in data().get("links", []) if x.get("id") == link_id), None)


def efficiency(name: str, product: str | None = None) -> Figure:
    """An achieved fraction ([efficiency.<name>]) with its source; where the table has a
    ``by_card`` figure for the card ``product`` names, that one (with ``by_card_source``)."""
    e = data().get("efficiency", {}).get(name)
    if not e:
        return Figure(None, "fraction", f"efficiency {name!r} is not in the hardware data")
    c = card(product) if product else None
    own = _num((e.get("by_card") or {}).get(c["id"])) if c else None
    if own is not None:
        return Figure(own, "fraction", f"{c['id']}: {e.get('by_card_source', '')}")
    v = _num(e.get("value"))
    rng = ""
    if _num(e.get("low")) is not None and _num(e.get("high")) is not None:
        rng = f", range {e['low']:g}-{e['high']:g}"
    return Figure(v, "fraction", f"{e.get('source', '')}{rng}")


def disks() -> list[dict]:
    return data().get("disks", [])
