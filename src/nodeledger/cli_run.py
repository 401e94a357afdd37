"""CLI layer of `nodeledger run` (rendering only; the work is in the library)."""

from __future__ import annotations


def register(app) -> None:
    """Add the command(s) to the typer app (called by cli.py)."""
