"""What the box is: the machine profile, bundled presets, and (later) probes per vendor."""

from nodeledger.machine.io import (
    DEFAULT_PRESET,
    dump_profile,
    list_presets,
    load_profile,
    parse_profile,
    resolve_machine,
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
    "save_profile",
]
