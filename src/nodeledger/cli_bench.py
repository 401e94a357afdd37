"""CLI layer of `nodeledger bench` / `nodeledger golive` (rendering only)."""

from __future__ import annotations


def register(app) -> None:
    """Add the command(s) to the typer app (called by cli.py)."""
