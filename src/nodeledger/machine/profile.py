"""The machine profile: a typed model of one server.

Units are in the field names (``_bytes``, ``_gbps`` = GB/s, ``_gbit`` = Gbit/s, ``_tflops``).
An unknown value is ``None`` in Python, ``null`` in JSON and the string ``"unknown"`` in TOML
(TOML has no null); it is rendered as "unknown" and never replaced by a guess.  Each object
carries ``sources``: field name -> where the figure came from (datasheet, vendor tool field,
measurement), so every printed number can say where it came from.

The types are stdlib dataclasses: a bundled preset is built without pydantic (``construct_trusted``,
the cold start of ``fit`` and ``report``), and untrusted data — a user's profile file, a vendor
tool's figures — is validated by pydantic, imported only then (``validate``, ``check``), which
also generates the profile's JSON Schema.  Building one in Python checks only the cross-field rules
(``__post_init__``: repeated indices, links to missing cards ...).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from functools import cache
from types import UnionType
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin, get_type_hints

from nodeledger.machine.vendors import Vendor  # re-exported: machine.Vendor

# errors, first_error, to_json: re-exported, the profile's validation API
from nodeledger.validation import Check, errors, first_error, to_json, validate  # noqa: F401

UNKNOWN = "unknown"


def _unknown_to_none(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() == UNKNOWN:
        return None
    if isinstance(value, bool):
        raise ValueError('true/false is not a value here; write a number, a text or "unknown"')
    if isinstance(value, float) and value != value:  # NaN never enters a profile
        raise ValueError('NaN is not a value; write "unknown"')
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        raise ValueError('infinity is not a value; write a finite number or "unknown"')
    return value


def _opt(tp: Any) -> Any:
    """An optional field that also accepts the literal string "unknown"."""
    return Annotated[tp | None, Check(before=_unknown_to_none)]


PositiveInt = Annotated[int, Check(gt=0)]
NonNegInt = Annotated[int, Check(ge=0, strict=True)]
PositiveFloat = Annotated[float, Check(gt=0)]
NonEmptyStr = Annotated[str, Check(min_length=1)]


_KernelValue = (
    Annotated[bool, Check(strict=True)]
    | Annotated[int, Check(strict=True)]
    | Annotated[float, Check(strict=True)]
    | Annotated[str, Check(strict=True)]
)


class _Strict:
    # read by pydantic when it validates one of these dataclasses: unknown keys are refused
    __pydantic_config__: ClassVar[dict[str, str]] = {"extra": "forbid"}


_model = dataclass(kw_only=True)


class LinkKind(str, Enum):
    """Normalised card-to-card path kind, best first (NVIDIA's topo legend for the PCIe levels)."""

    nvlink = "nvlink"  # NVIDIA NVLink, `lanes` = number of bonded links (NV18 -> 18)
    xgmi = "xgmi"  # AMD Infinity Fabric / Hygon xGMI-class in-box fabric
    hccs = "hccs"  # Huawei Cache Coherence System (Ascend)
    pix = "pix"  # at most one PCIe bridge
    pxb = "pxb"  # multiple PCIe bridges, no host bridge
    phb = "phb"  # through a PCIe host bridge (the CPU)
    node = "node"  # across host bridges within one NUMA node
    sys = "sys"  # across the SMP interconnect between NUMA nodes / sockets
    pcie = "pcie"  # PCIe path whose level the vendor tool does not say (rocm-smi "PCIE")
    unknown = "unknown"


@_model
class CardProcess(_Strict):
    """A process holding memory on a card at probe time (vendor tool / NVML)."""

    pid: NonNegInt
    name: _opt(str) = None
    used_bytes: _opt(NonNegInt) = None  # None where the driver does not say (e.g. WDDM)
    kind: _opt(str) = None  # "C" compute, "G" graphics, "C+G" as printed


@_model
class Accelerator(_Strict):
    index: NonNegInt
    vendor: Vendor
    product: NonEmptyStr
    memory_bytes: _opt(PositiveInt) = None
    # memory the driver keeps for itself (nvidia-smi -q "FB Memory Usage / Reserved"): the
    # runtime (cudaMemGetInfo) sees memory_bytes - this; 0 when memory_bytes is already that
    memory_reserved_bytes: _opt(NonNegInt) = None
    memory_bandwidth_gbps: _opt(PositiveFloat) = None
    bf16_dense_tflops: _opt(PositiveFloat) = None  # dense bf16/fp16 peak (no sparsity)
    fp8_dense_tflops: _opt(PositiveFloat) = None
    int8_dense_tops: _opt(PositiveFloat) = None
    numa_node: _opt(NonNegInt) = None
    pci_bus_id: _opt(str) = None
    uuid: _opt(str) = (
        None  # the vendor's unique id (NVIDIA GPU-..., AMD/Hygon/Ascend where printed)
    )
    partition: _opt(str) = None  # MIG / partition state: "disabled", "enabled: 3g.40gb x2", ...
    # health and state, live probes / bundles only (doctor reads them)
    persistence_mode: _opt(Literal["enabled", "disabled"]) = None
    ecc_mode: _opt(Literal["enabled", "disabled"]) = None
    ecc_errors_corrected: _opt(NonNegInt) = None  # volatile count since driver load
    ecc_errors_uncorrected: _opt(NonNegInt) = None  # volatile count since driver load
    retired_pages: _opt(NonNegInt) = None  # pages retired (single + double bit), pre-Ampere
    retired_pages_pending: _opt(Literal["yes", "no"]) = None  # a retirement waits for a reset
    remapped_rows_pending: _opt(Literal["yes", "no"]) = None  # Ampere+: row remap needs a reset
    remapped_rows_failed: _opt(Literal["yes", "no"]) = None  # Ampere+: a remap failed
    memory_used_bytes: _opt(NonNegInt) = None  # at probe time
    processes: list[CardProcess] = field(default_factory=list)  # at probe time
    # copy rates (GB/s, one direction), e.g. measured by ``bench --save-profile``
    host_to_card_gbps: _opt(PositiveFloat) = None  # pinned host buffer
    card_to_host_gbps: _opt(PositiveFloat) = None  # pinned host buffer
    host_to_card_pageable_gbps: _opt(PositiveFloat) = None
    sources: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:  # a vendor's name given as text (a probe's) is a Vendor
        if type(self.vendor) is not Vendor:
            self.vendor = Vendor(self.vendor)


@_model
class Link(_Strict):
    kind: LinkKind = LinkKind.unknown
    lanes: _opt(PositiveInt) = None  # NVLink count (NV18 -> 18); None where not applicable
    label: _opt(str) = None  # the vendor tool's own label: "NV18", "XGMI", "PIX", "HCCS"
    bandwidth_gbps: _opt(PositiveFloat) = None  # GB/s per direction
    source: _opt(str) = None

    def __post_init__(self) -> None:  # a kind given as text (a probe's) is a LinkKind
        if type(self.kind) is not LinkKind:
            self.kind = LinkKind(self.kind)


@_model
class LinkPair(Link):
    a: NonNegInt
    b: NonNegInt

    def __post_init__(self) -> None:  # pydantic calls it after validating, too
        super().__post_init__()
        if self.a == self.b:
            raise ValueError(f"a link joins two different cards, got a=b={self.a}")


CollectiveOp = Literal["all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall"]


@_model
class CollectiveFigure(_Strict):
    """One collective over a card set at one buffer size (nccl-tests' algbw / busbw, GB/s)."""

    op: CollectiveOp
    cards: Annotated[list[NonNegInt], Check(min_length=1)]  # the card indices measured
    size_bytes: PositiveInt
    algbw_gbps: _opt(PositiveFloat) = None
    busbw_gbps: _opt(PositiveFloat) = None
    source: _opt(str) = None


@_model
class Interconnect(_Strict):
    """Card-to-card link matrix: ``default`` applies to every pair not listed in ``pairs``;
    ``collectives``: measured collective bandwidths (``bench --save-profile``)."""

    default: Link = field(default_factory=Link)
    pairs: list[LinkPair] = field(default_factory=list)
    collectives: list[CollectiveFigure] = field(default_factory=list)

    def link(self, a: int, b: int) -> Link:
        for p in self.pairs:
            if {p.a, p.b} == {a, b}:
                return p
        return self.default


@_model
class NumaNode(_Strict):
    id: NonNegInt
    cpus: _opt(str) = None  # kernel cpulist syntax, e.g. "0-11,96-107"
    memory_bytes: _opt(PositiveInt) = None


@_model
class Host(_Strict):
    sockets: _opt(PositiveInt) = None
    cores: _opt(PositiveInt) = None  # physical cores, all sockets
    threads: _opt(PositiveInt) = None  # logical CPUs
    numa_nodes: list[NumaNode] = field(default_factory=list)
    ram_bytes: _opt(PositiveInt) = None
    swap_bytes: _opt(NonNegInt) = None
    swap_used_bytes: _opt(NonNegInt) = None  # live probes only
    available_bytes: _opt(NonNegInt) = None  # MemAvailable at probe time (live probes only)
    thp_enabled: _opt(Literal["always", "madvise", "never"]) = None
    thp_defrag: _opt(Literal["always", "defer", "defer+madvise", "madvise", "never"]) = None
    numa_balancing: _opt(NonNegInt) = None
    swappiness: _opt(Annotated[int, Check(ge=0, le=200, strict=True)]) = None
    sources: dict[str, str] = field(default_factory=dict)


@_model
class Nic(_Strict):
    name: str
    kind: Literal["ethernet", "infiniband", "roce", "rdma", "unknown"] = "unknown"
    # "rdma": an RDMA device (InfiniBand or RoCE) whose link layer the source does not say
    speed_gbit: _opt(PositiveFloat) = None  # Gbit/s per port
    numa_node: _opt(NonNegInt) = None
    pci_bus_id: _opt(str) = None
    near_cards: list[NonNegInt] = field(default_factory=list)  # cards at PIX/PXB from this NIC
    source: _opt(str) = None
    sources: dict[str, str] = field(default_factory=dict)  # field -> source, where not ``source``


@_model
class Network(_Strict):
    nics: list[Nic] = field(default_factory=list)


@_model
class Mount(_Strict):
    path: str
    kind: Literal["nvme", "ssd", "hdd", "network", "unknown"] = "unknown"
    filesystem: _opt(str) = None
    size_bytes: _opt(PositiveInt) = None
    source: _opt(str) = None
    sequential_read_gbps: _opt(PositiveFloat) = None  # one stream of large reads, cache bypassed
    random_read_latency_ms: _opt(PositiveFloat) = None  # one 4 KiB read in flight (QD1), mean
    sources: dict[str, str] = field(default_factory=dict)  # field -> source, where not ``source``


@_model
class Storage(_Strict):
    mounts: list[Mount] = field(default_factory=list)


@_model
class MachineProfile(_Strict):
    name: NonEmptyStr
    description: str = ""
    accelerators: list[Accelerator] = field(default_factory=list)
    interconnect: Interconnect = field(default_factory=Interconnect)
    host: Host = field(default_factory=Host)
    network: Network = field(default_factory=Network)
    storage: Storage = field(default_factory=Storage)
    # kernel tables measured on this box (``bench --kernels --save-profile``): per card product,
    # the rows of speed/kernels.py's JSON Lines format (a "meta" row first, with its source)
    kernels: dict[str, list[dict[str, _KernelValue]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # provenance, caveats, probe notes

    def __post_init__(self) -> None:  # pydantic calls it after validating, too
        indices = [a.index for a in self.accelerators]
        if len(set(indices)) != len(indices):
            raise ValueError(f"accelerator indices repeat: {indices}")
        seen_pairs: set[frozenset[int]] = set()
        for i, p in enumerate(self.interconnect.pairs):
            key = frozenset((p.a, p.b))
            if key in seen_pairs:
                raise ValueError(f"interconnect.pairs.{i}: cards {p.a}-{p.b} are listed twice")
            seen_pairs.add(key)
        numa = [n.id for n in self.host.numa_nodes]
        if len(set(numa)) != len(numa):
            raise ValueError(f"host.numa_nodes: ids repeat: {numa}")
        h = self.host
        if h.threads is not None and h.cores is not None and h.threads < h.cores:
            raise ValueError(f"host.threads: {h.threads} logical CPUs < {h.cores} cores")
        if h.cores is not None and h.sockets is not None and h.cores < h.sockets:
            raise ValueError(f"host.cores: {h.cores} cores < {h.sockets} sockets")
        known = set(indices)
        for i, p in enumerate(self.interconnect.pairs):
            for end in (p.a, p.b):
                if end not in known:
                    raise ValueError(
                        f"interconnect.pairs.{i}: card {end} is not among accelerators {sorted(known)}"
                    )
        for i, c in enumerate(self.interconnect.collectives):
            if len(set(c.cards)) != len(c.cards):
                raise ValueError(f"interconnect.collectives.{i}: cards repeat: {c.cards}")
            missing = sorted(set(c.cards) - known)
            if missing:
                raise ValueError(
                    f"interconnect.collectives.{i}: card(s) {missing} not among accelerators "
                    f"{sorted(known)}"
                )
        numa_ids = {n.id for n in self.host.numa_nodes}
        for a in self.accelerators:
            if numa_ids and a.numa_node is not None and a.numa_node not in numa_ids:
                raise ValueError(
                    f"accelerators.{a.index}.numa_node: {a.numa_node} is not a host NUMA node "
                    f"{sorted(numa_ids)}"
                )

    # -- derived figures (never stored, so a profile cannot contradict itself) --
    def total_accelerator_memory_bytes(self) -> int | None:
        """Sum of card memory; None (unknown) if any card's memory is unknown."""
        values = [a.memory_bytes for a in self.accelerators]
        if not values or any(v is None for v in values):
            return None
        return sum(values)  # type: ignore[arg-type]

    def link(self, a: int, b: int) -> Link:
        return self.interconnect.link(a, b)


# -- validation (pydantic, imported here only) and the bundled presets, built without it --------


def check(obj: Any) -> Any:
    """``obj`` (built from a probe's figures without checks) validated as ``validate`` would."""
    return validate(type(obj), dataclasses.asdict(obj))


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls, include_extras=True)


def construct_trusted(cls: type, data: dict[str, Any]) -> Any:
    """``cls`` from data that is known to validate — the bundled presets, which
    ``tests/test_machine_profile.py`` validates and compares with this, field by field — built
    with the same conversions the validator makes on such data: the string "unknown" -> None
    where the field is optional, enum values -> members, nested tables -> dataclasses, integers
    -> floats in float fields; missing fields take their defaults.  It checks only what the
    dataclass itself checks (``__post_init__``): user files and probes go through ``validate``."""
    hints = _hints(cls)
    return cls(**{name: _convert(hints[name], value) for name, value in data.items()})


def _convert(tp: Any, value: Any) -> Any:
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return _convert(args[0], value)
    if origin in (Union, UnionType):
        if value is None or (isinstance(value, str) and value.strip().lower() == UNKNOWN):
            return None
        return _convert(next(a for a in args if a is not type(None)), value)
    if origin is list:
        return [_convert(args[0], v) for v in value]
    if origin is dict:
        return dict(value)
    if dataclasses.is_dataclass(tp):
        return construct_trusted(tp, value)
    if isinstance(tp, type) and issubclass(tp, (Enum, Vendor)):
        return tp(value)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value
