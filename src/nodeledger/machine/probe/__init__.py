"""Probes: fill a MachineProfile from the box itself.  Collecting (subprocesses, file reads)
and parsing (pure functions in machine/parsers) are separate; every subprocess runs without a
shell and with a timeout; a missing tool, a permission error, a hang or garbage output leaves
that part unknown with the reason in the profile's notes."""

from nodeledger.machine.probe.probe import probe_machine
from nodeledger.machine.probe.runner import Runner

__all__ = ["Runner", "probe_machine"]
