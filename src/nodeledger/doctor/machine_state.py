"""What doctor looks at: a machine profile, and the live facts when there is a live machine (this
box, or the box a support bundle recorded).  A preset or a profile file has no live state."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nodeledger.errors import NodeledgerError
from nodeledger.machine.probe.facts import Facts
from nodeledger.machine.profile import MachineProfile


@dataclass
class MachineState:
    profile: MachineProfile
    facts: Facts | None  # None: no live state (a preset or a profile file)
    origin: str  # one line: where the profile and facts came from
    notes: list[str] = field(default_factory=list)

    @property
    def live(self) -> bool:
        return self.facts is not None


def _is_bundle(ref: str) -> bool:
    return ref.endswith((".tar.gz", ".tgz")) and Path(ref).is_file()


def load_state(from_bundle: str | None = None, machine: str | None = None, timeout: float = 5.0,
               fallback_preset: bool = False) -> MachineState:  # fmt: skip
    """``from_bundle``: replay a bundle; ``machine``: a preset / profile file (no live state) or
    a bundle; neither: probe this box live.  ``fallback_preset``: when the live box has no
    accelerator, judge the bundled reference machine instead (as `report` does)."""
    from nodeledger.machine.probe import Runner
    from nodeledger.machine.probe.bundle import load_bundle
    from nodeledger.machine.probe.probe import probe_with_facts

    if from_bundle and machine:
        raise NodeledgerError("--from and --machine name two machines; give one")
    if machine and _is_bundle(machine):
        from_bundle, machine = machine, None
    if from_bundle:
        profile, facts = probe_with_facts(load_bundle(from_bundle))
        return MachineState(profile, facts, f"support bundle {from_bundle} ({profile.name})")
    if machine == "probe":
        return load_state(timeout=timeout)
    if machine:
        from nodeledger.machine import resolve_machine

        profile = resolve_machine(machine)
        return MachineState(profile, None, f"machine {machine} (a profile: no live state)")
    if not timeout > 0:
        raise NodeledgerError(f"--timeout must be > 0, got {timeout}")
    live: dict = {}

    def probe() -> MachineProfile:  # the live probe, keeping its facts for doctor
        live["profile"], live["facts"] = probe_with_facts(Runner(timeout=timeout, live=True))
        return live["profile"]

    if fallback_preset:
        from nodeledger.machine.io import DEFAULT_PRESET
        from nodeledger.machine.resolve import resolve_or_reference

        r = resolve_or_reference(None, probe=probe)
        if r.reference:
            return MachineState(
                r.profile, None,
                f"no accelerator found on this host (live probe): the bundled reference machine "
                f"{DEFAULT_PRESET} (a preset: no live state). Use --machine PRESET|FILE|BUNDLE for another.",
            )  # fmt: skip
    else:
        probe()
    profile, facts = live["profile"], live["facts"]
    return MachineState(profile, facts, f"live probe of this host ({profile.name})")
