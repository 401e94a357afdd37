"""Which machine: one policy for every command.

``resolve_machine(ref)``: a preset name, a profile file, a support bundle, or "probe" (this
machine, live); ``None`` gives the bundled default preset.

``resolve_or_reference(ref)``: ``--machine`` as given; none given: probe this host live, and when
the probe finds no accelerator, the bundled reference machine instead (``report``, ``place``,
``run``, ``watch`` and ``doctor --job`` all follow it; each words its own note from the result).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nodeledger.errors import ProfileError
from nodeledger.machine.io import DEFAULT_PRESET, list_presets, load_preset, load_profile
from nodeledger.machine.profile import MachineProfile


def resolve_machine(ref: str | None) -> MachineProfile:
    """A preset name, a profile file path, or "probe" (this machine, live); ``None`` gives the
    bundled default preset."""
    if ref is None:
        return load_preset(DEFAULT_PRESET)
    if ref == "probe":
        from nodeledger.machine.probe import Runner, probe_machine

        return probe_machine(Runner(live=True))
    if ref in list_presets():
        return load_preset(ref)
    p = Path(ref)
    if p.is_file() and p.name.endswith((".tar.gz", ".tgz")):
        from nodeledger.machine.probe import probe_machine
        from nodeledger.machine.probe.bundle import load_bundle

        return probe_machine(load_bundle(p))
    if p.is_file():
        return load_profile(p)
    raise ProfileError(
        f"machine {ref!r} is neither a bundled preset ({', '.join(list_presets())}) nor a file"
    )


@dataclass(frozen=True)
class Resolved:
    profile: MachineProfile
    live: bool  # the profile is this host, probed now
    reference: bool  # no --machine and no accelerator here: the bundled reference machine


def resolve_or_reference(ref: str | None, probe=None) -> Resolved:
    """``ref`` as given (``live`` when it is "probe"); ``None``: ``probe()`` (default: a live
    probe of this host), or the reference preset when that finds no accelerator."""
    if ref is not None:
        return Resolved(resolve_machine(ref), live=ref == "probe", reference=False)
    if probe is None:
        from nodeledger.machine.probe import probe_machine

        def probe() -> MachineProfile | None:
            return probe_machine(need_cards=True)

    probed = probe()
    if probed is not None and probed.accelerators:
        return Resolved(probed, live=True, reference=False)
    return Resolved(load_preset(DEFAULT_PRESET), live=False, reference=True)


def machine_with_intro(ref: str | None) -> tuple[MachineProfile, list[str]]:
    """``resolve_or_reference(ref)`` with the intro line a report-like command prints first:
    the machine as given, the live probe, or why the reference machine stands in."""
    from nodeledger import field_notes

    r = resolve_or_reference(ref)
    if ref is not None:
        return r.profile, [f"machine: {ref}"]
    if not r.reference:
        return r.profile, [
            f"machine: live probe of this host ({len(r.profile.accelerators)} cards)"
        ]
    return r.profile, [
        f"No accelerator found on this host (live probe): reporting on the bundled reference "
        f"machine {DEFAULT_PRESET} ({field_notes.origin()}). Use --machine PRESET|FILE|BUNDLE for "
        "another."
    ]
