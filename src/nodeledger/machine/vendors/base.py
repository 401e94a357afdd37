"""The vendor contract: what the rest of nodeledger needs to know of a card vendor, in one place.

A vendor is one module in this package that builds a :class:`VendorSpec` and registers it
(``register``).  Consumers never branch on a vendor's name: they ask ``spec(vendor)`` for the
figure or text they need (the variable a launcher sets to pin a process to its cards, the
Kubernetes resource, the sharing advice, the exporter's metric names ...).  ``Vendor`` is the
name as a machine profile stores it: a ``str`` that must be a registered vendor's name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


class Vendor(str):
    """A registered vendor's name (``"nvidia"``, ``"amd"``, ...).  A ``str``: it compares, hashes
    and serialises as its text; ``Vendor.nvidia`` and ``.value`` are kept for readability and for
    the callers written when it was an Enum.  ``Vendor("x")`` raises ValueError unless a vendor
    module registered ``x``."""

    __slots__ = ()

    def __new__(cls, name: Any) -> Vendor:
        text = str.__str__(name) if isinstance(name, str) else name
        if not isinstance(text, str) or text not in _REGISTRY:
            raise ValueError(f"{name!r} is not a vendor nodeledger knows ({', '.join(_REGISTRY)})")
        return str.__new__(cls, text)

    @property
    def value(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"Vendor({str.__str__(self)!r})"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import PydanticCustomError, core_schema

        def check(value: Any) -> Vendor:
            if isinstance(value, str) and value in _REGISTRY:
                return cls(value)
            # the words and type pydantic gives an Enum field
            raise PydanticCustomError(
                "enum", "Input should be {expected}", {"expected": names_text()}
            )

        # any input type gets the Enum's words (a number or null as well as an unknown name)
        return core_schema.no_info_plain_validator_function(
            check, serialization=core_schema.to_string_ser_schema()
        )

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: Any) -> dict:
        return {"type": "string", "enum": list(_REGISTRY)}


@dataclass(frozen=True)
class ExporterNames:
    """The vendor's own Prometheus exporter's metric names, used instead of dcgm-exporter's on
    its cards (a dashboard made for that exporter works unchanged); None where it has none."""

    used: str | None
    total: str | None
    free: str | None
    util: str | None
    # (label, what fills it) in the exporter's order; what: index | uuid | pci_bus_id | device
    # (the device node's name) | name (the card model) | hostname | "" (nodeledger does not know)
    labels: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class HostPath:
    """A host path the exporter's Pod mounts (the device nodes or tools its sampler needs)."""

    name: str
    path: str
    read_only: bool | None = None  # None: the mount says nothing (read-write)


@dataclass(frozen=True)
class Sampler:
    """A watch backend that samples the vendor's cards (``watch --backend NAME``)."""

    name: str  # nvml, nvidia-smi, amdsmi, ...
    # "module:function" taking (name, runner, timeout) and returning the backend (watch/base.py's
    # Backend); a string, loaded when the backend opens (the watch layer sits above this one)
    factory: str
    auto_rank: int  # ``--backend auto`` tries the samplers of every vendor by this rank
    library: str | None = None  # the Python package it needs, named when it is not installed


@dataclass(frozen=True)
class VendorSpec:
    """One vendor's contract.  Every text is what the vendor's own documentation names."""

    name: str  # as a profile stores it: nvidia, amd, hygon, huawei, other
    label: str  # as a sentence names its cards: NVIDIA, AMD, Hygon, Ascend
    runtime: str  # the card runtime's name: CUDA, ROCm, DTK, CANN
    # the variable a launcher sets to pin a process to its cards (place, run, doctor --job)
    launch_visible: str
    device_file: str  # the card's /dev node (gres.conf File=): {i} card index, {r} render minor
    k8s_resource: str  # the device plugin's extended resource (a Pod's limits)
    # the variables that filter the cards a process sees, in the order the runtime applies them
    visible_filters: tuple[str, ...] = ()
    index_name: str | None = None  # what a process's card index is called ("CUDA index")
    # the variable that sets the runtime's card order (None: the runtime takes PCI order)
    device_order_env: str | None = None
    launch_env: tuple[tuple[str, str], ...] = ()  # more variables a launch line sets
    dra_class: str | None = None  # the DRA driver's DeviceClass / attribute domain
    share_note: str = "shares its card with another replica"
    # lines an sbatch script runs before srun to give the runtime its cards (Slurm sets
    # CUDA_VISIBLE_DEVICES and SLURM_JOB_GPUS only)
    sbatch_env_lines: tuple[str, ...] = ("export CUDA_DEVICE_ORDER=PCI_BUS_ID",)
    # the exporter's DaemonSet: host paths, privileged, extra env
    exporter_host_paths: tuple[HostPath, ...] = ()
    exporter_privileged: bool = False
    exporter_env: tuple[tuple[str, str], ...] = ()
    exporter_names: ExporterNames | None = None  # None: dcgm-exporter's names
    device_label_prefix: str = "card"  # the exporter's ``device`` label: prefix + index
    samplers: tuple[Sampler, ...] = ()  # the watch / exporter backends that read its cards
    # the vLLM runtime family (ROCm builds take their own attention and graph paths)
    rocm_runtime: bool = False
    # vLLM's ROCm figures (fp8 row padding, graph memory per layer) were measured on AMD cards;
    # a vendor without its own measurement keeps the CUDA ones
    vllm_rocm_figures: bool = False
    # a card whose product the data file does not know is taken as this class (speed floors)
    default_card_class: str = "unknown"
    # vLLM's CUDA build: GPTQ int4 goes through Marlin / Machete, which repack it
    vllm_marlin: bool = False
    # NVIDIA-only settings and tools doctor and golive check (persistence mode, MIG, MPS)
    nvidia_settings: bool = False
    # the live probe of its cards: "module:function" taking (runner, notes, ProbeContext) and
    # returning (cards, interconnect, topo NIC rows or None) or None when it found no card;
    # probes run in registration order until one finds cards.  A string, loaded when the probe
    # runs: the probe modules import the profile, which imports this package.
    card_probe: str | None = None
    # the vendor tools a probe looked for; one absent from PATH becomes a note
    probe_tools: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class ProbeContext:
    """What a card probe may use from the host probe that ran before it."""

    want_nics: bool = False  # the host has RDMA devices: read the NICs' distance to the cards
    numa_map: dict[int, str | None] = field(default_factory=dict)  # NUMA node -> cpulist


def load_probe(ref: str):
    """The probe function a ``card_probe`` string names."""
    import importlib

    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


_REGISTRY: dict[str, VendorSpec] = {}
# a machine with no card (a host-only profile) is costed with this vendor's runtime figures
DEFAULT_VENDOR = "nvidia"


def register(vs: VendorSpec) -> VendorSpec:
    """Add (or replace) a vendor; ``Vendor.<name>`` then names it.  A name must be a lower-case
    identifier that is not an attribute of ``str`` or ``Vendor`` (``value``, ``title`` ...)."""
    allowed = vs.name in _REGISTRY or not hasattr(Vendor, vs.name)
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,31}", vs.name) or not allowed:
        raise ValueError(f"vendor name {vs.name!r}: a lower-case identifier that is not an "
                         "attribute of str (e.g. 'value', 'title') is needed")  # fmt: skip
    _REGISTRY[vs.name] = vs
    setattr(Vendor, vs.name, str.__new__(Vendor, vs.name))
    return vs


def unregister(name: str) -> None:
    """Remove a vendor (tests that register a fake one)."""
    _REGISTRY.pop(name, None)
    if name in Vendor.__dict__:
        delattr(Vendor, name)


def spec(vendor: str | None) -> VendorSpec:
    """The registered vendor's spec; an unknown or missing vendor is ``other``."""
    return _REGISTRY.get(str.__str__(vendor) if isinstance(vendor, str) else "", _REGISTRY["other"])


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def names_text() -> str:
    """The registered names as pydantic words an Enum's error: 'a', 'b' or 'c'."""
    quoted = [f"'{n}'" for n in _REGISTRY]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + f" or {quoted[-1]}"


def all_specs() -> tuple[VendorSpec, ...]:
    return tuple(_REGISTRY.values())


def of_backend(backend: str | None) -> VendorSpec | None:
    """The vendor whose cards a watch backend samples; None for a fake or host-only one."""
    for vs in _REGISTRY.values():
        if any(s.name == backend for s in vs.samplers):
            return vs
    return None


def samplers() -> tuple[Sampler, ...]:
    """Every vendor's samplers, in the vendors' order (as ``--backend`` lists them)."""
    return tuple(s for vs in _REGISTRY.values() for s in vs.samplers)
