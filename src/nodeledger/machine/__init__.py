"""What the box is: the machine profile, bundled presets, probes per vendor behind one Runner, and one policy for which machine (``resolve``)."""

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
