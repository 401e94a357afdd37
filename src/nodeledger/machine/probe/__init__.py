"""Probes: fill a MachineProfile from the box itself.  Collecting (subprocesses, file reads)
and parsing (pure functions in machine/parsers) are separate; every subprocess runs without a
shell and with a timeout; a missing tool, a permission error, a hang or garbage output leaves
that part unknown with the reason in the profile's notes.

``Runner`` and ``probe_machine`` are loaded on first use (PEP 562): importing the Runner alone
does not import the probes and the profile models."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_WHERE = {"Runner": "runner", "probe_machine": "probe"}
__all__ = ["Runner", "probe_machine"]


def __getattr__(name: str):
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:  # pragma: no cover
    from nodeledger.machine.probe.probe import probe_machine
    from nodeledger.machine.probe.runner import Runner
