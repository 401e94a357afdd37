"""The field claims nodeledger rests a threshold or a note on, loaded from ``field_notes.toml``
(package data) with their origin, so that every printed claim says where it comes from."""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_FILE = Path(__file__).resolve().parent / "field_notes.toml"


@cache
def _data() -> dict[str, Any]:
    return tomllib.loads(_FILE.read_text(encoding="utf-8"))


def origin(short: bool = True) -> str:
    """Where the claims come from, in a few words (``short``) or whole."""
    return _data()["short" if short else "origin"]


def claim(key: str) -> str:
    """One claim's text."""
    return _data()["claims"][key]["text"]


def cited(key: str) -> str:
    """One claim as printed: its text and its origin."""
    return f"{claim(key)} ({origin()})"


def value(key: str, field: str) -> Any:
    """A figure a claim gives (e.g. offload_small_host.small_host_bytes)."""
    return _data()["claims"][key][field]
