"""Probes: fill a MachineProfile from the box itself.  Collecting (subprocesses, file reads)
and parsing (pure functions in machine/parsers) are separate; every subprocess runs without a
shell and with a timeout; a missing tool, a permission error, a hang or garbage output leaves
that part unknown with the reason in the profile's notes.

``Runner`` and ``probe_machine`` are loaded on first use (PEP 562): importing the Runner alone
does not import the probes and the profile models."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodeledger.lazy import attr_loader

_WHERE = {"Runner": "runner", "probe_machine": "probe"}
__all__ = ["Runner", "probe_machine"]


__getattr__ = attr_loader(__name__, _WHERE)

if TYPE_CHECKING:  # pragma: no cover
    from nodeledger.machine.probe.probe import probe_machine
    from nodeledger.machine.probe.runner import Runner
