"""What the box is: the machine profile, bundled presets, probes per vendor behind one Runner, and one policy for which machine (``resolve``).

The names below are loaded on first use (PEP 562): a command that needs only the Runner (oom
reading the kernel log) does not pay for the profile's pydantic models."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodeledger.lazy import attr_loader

_WHERE = {
    "DEFAULT_PRESET": "io",
    "dump_profile": "io",
    "list_presets": "io",
    "load_profile": "io",
    "parse_profile": "io",
    "save_profile": "io",
    "Accelerator": "profile",
    "Host": "profile",
    "Interconnect": "profile",
    "Link": "profile",
    "LinkKind": "profile",
    "LinkPair": "profile",
    "MachineProfile": "profile",
    "Vendor": "profile",
    "resolve_machine": "resolve",
    "resolve_or_reference": "resolve",
}
__all__ = [
    "DEFAULT_PRESET",
    "Accelerator",
    "Host",
    "Interconnect",
    "Link",
    "LinkKind",
    "LinkPair",
    "MachineProfile",
    "Vendor",
    "dump_profile",
    "list_presets",
    "load_profile",
    "parse_profile",
    "resolve_machine",
    "resolve_or_reference",
    "save_profile",
]


__getattr__ = attr_loader(__name__, _WHERE)

if TYPE_CHECKING:  # pragma: no cover
    from nodeledger.machine.io import (
        DEFAULT_PRESET,
        dump_profile,
        list_presets,
        load_profile,
        parse_profile,
        save_profile,
    )
    from nodeledger.machine.profile import (
        Accelerator,
        Host,
        Interconnect,
        Link,
        LinkKind,
        LinkPair,
        MachineProfile,
        Vendor,
    )
    from nodeledger.machine.resolve import resolve_machine, resolve_or_reference
