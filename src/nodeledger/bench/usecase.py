"""The bench use case (``nodeledger bench``): measure, then save the measured profile, and the
typed contract of ``bench --json`` (``BenchJSON``, its JSON Schema shipped as
``schemas/bench.schema.json``).  Units are in the key names (``_gbps`` = GB/s, ``_mbps`` = MB/s,
``_bytes``, ``_ms``, ``_gts`` = PCIe GT/s); a figure's ``unit`` says its own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from typing_extensions import NotRequired, TypedDict

from nodeledger.errors import NodeledgerError

SCHEMA_VERSION = 1
Verdict = Literal["ok", "low", "bad", "unknown", "unavailable"]


class FigureJSON(TypedDict):
    """One judged figure: the measured value in ``unit`` against its class (``expected``, with
    the ``source`` of that class) and how it was measured (``evidence``)."""

    part: str  # disk, host_card, peer, collective, memory, kernels
    subject: str
    metric: str
    value: float | None
    unit: str
    verdict: Verdict
    expected: str
    source: str
    evidence: str


class PageCacheJSON(TypedDict):
    mode: Literal["bypassed", "dropped", "dropped-unverified", "cached"]
    text: str


class DiskRawJSON(TypedDict):
    sequential_mbps: float | None
    qd1_reads: int
    qd1_mean_ms: float | None
    qd1_p50_ms: float | None
    qd1_p99_ms: float | None
    qd1_mbps: float | None
    qd_threads: int
    qdn_reads: int
    qdn_mbps: float | None
    page_cache: PageCacheJSON


class DiskSectionJSON(TypedDict):
    """One folder read (the dataset's, the model cache's) on its mount."""

    label: str
    path: str
    how: str
    tested_in: str
    mount: str | None
    filesystem: str | None
    kind: str
    kind_source: str
    file_bytes: int
    sizes: str
    status: Literal["measured", "unavailable"]
    reason: str
    page_cache: str | None
    write_mbps: float | None
    raw: DiskRawJSON | None
    figures: list[FigureJSON]
    shared_with: NotRequired[str]  # the section measured once for both (one filesystem)


class PcieJSON(TypedDict):
    max_gts: float | None
    max_width: int | None
    cur_gts: float | None
    cur_width: int | None
    source: str | None


class CardJSON(TypedDict):
    card: int  # torch's index
    name: str
    bus_id: str | None
    numa_node: int | None
    profile_card: int | None
    matched_by: str
    total_bytes: int | None
    busy: list[str]
    pcie: PcieJSON
    pcie_after: NotRequired[PcieJSON]  # read again after the copies (a link that trained down)


class SweepJSON(TypedDict):
    bytes: int
    h2d_gbps: float
    d2h_gbps: float


class CopyJSON(TypedDict):
    h2d_gbps: float
    d2h_gbps: float
    sweep: list[SweepJSON]
    pinned_checked: bool | None


class HostCardJSON(TypedDict):
    card: int
    numa_node: int | None
    remote_node: int | None
    binding_note: str
    pinned_local: NotRequired[CopyJSON]
    pageable_local: NotRequired[CopyJSON]
    pinned_remote: NotRequired[CopyJSON]
    pageable_remote: NotRequired[CopyJSON]
    pinned_unbound: NotRequired[CopyJSON]
    pageable_unbound: NotRequired[CopyJSON]


class PeerJSON(TypedDict):
    src: int
    dst: int
    gbps: float | None
    link: str
    link_gbps: float | None
    peer_access: bool | None


class CollectiveJSON(TypedDict):
    op: str
    n: int
    size_bytes: int
    seconds: float
    algbw_gbps: float
    busbw_gbps: float
    iters: int
    in_place: bool
    backend: str


class MemoryJSON(TypedDict):
    card: int
    allocatable_bytes: int | None
    total_bytes: int | None
    free_before_bytes: int | None


class KernelTableJSON(TypedDict):
    """One card kind's kernel table: ``rows`` in speed/kernels.py's JSON Lines format (a "meta"
    row first, with its source), and the plateaus it gives."""

    card: int
    rows: list[dict[str, bool | int | float | str | None]]
    notes: list[str]
    seconds: float
    bf16_tflops: float | None
    memory_gbps: float | None


class CardsPartJSON(TypedDict):
    status: Literal["measured", "unavailable"]
    reason: str
    backend: str | None
    cards: NotRequired[list[CardJSON]]
    host_card: NotRequired[list[HostCardJSON]]
    peer: NotRequired[list[PeerJSON]]
    collectives: NotRequired[list[CollectiveJSON]]
    memory: NotRequired[list[MemoryJSON]]
    # --kernels: per card kind, its table; "_skipped": why a card kind was not measured
    kernels: NotRequired[dict[str, KernelTableJSON | list[str]]]


class NcclPeakJSON(TypedDict):
    size_bytes: int
    busbw_gbps: float | None
    in_place_busbw_gbps: float | None


class NcclComparisonJSON(TypedDict):
    op: str
    n: int
    size_bytes: int
    busbw_gbps: float
    nccl_tests_size_bytes: int
    nccl_tests_busbw_gbps: float | None
    ratio: float | None
    within_5pct: bool | None
    comparable: bool
    note: str


class NcclOutOfBoundsJSON(TypedDict):
    count: int  # nccl-tests' "Out of bounds values" line
    status: str | None


class NcclTestsJSON(TypedDict):
    source: str
    n: int | None
    hosts: list[str]
    collective: str | None
    collective_from: str
    out_of_bounds: NcclOutOfBoundsJSON | None
    peak: NcclPeakJSON
    avg_busbw_gbps: float | None
    rows: int
    comparison: list[NcclComparisonJSON]


class NicSpeedJSON(TypedDict):
    nic: str
    path: str | None
    raw: str | None
    speed_gbit: float | None
    reason: str


class BenchJSON(TypedDict):
    """``nodeledger bench --json``."""

    schema_version: int
    machine: str
    quick: bool
    sizes: dict[str, str]  # disk, cards: the sizes and repeats, in words
    disk: list[DiskSectionJSON]
    cards: CardsPartJSON | None
    figures: list[FigureJSON]  # every figure of every part, in order
    nccl_tests: NcclTestsJSON | None
    notes: list[str]
    counts: dict[Verdict, int]
    seconds: float
    nic_speeds: NotRequired[list[NicSpeedJSON]]  # --save-profile: the NICs' link rates read


def bench_json_schema() -> dict[str, Any]:
    from nodeledger.schemas import json_schema

    return json_schema(BenchJSON, "nodeledger bench --json")


@dataclass
class BenchRun:
    """A bench run's report, and where its measured profile goes (``--save-profile``)."""

    report: BenchJSON
    profile: Any = None  # the probed MachineProfile the figures go into
    target: Path | None = None
    date: str = ""

    def to_json(self) -> BenchJSON:
        return self.report

    def save_profile(self) -> str | None:
        """Write the measured profile (after the report is out: a failed write loses no
        measurement); the line that says what was written, None without ``--save-profile``."""
        if self.target is None:
            return None
        from nodeledger.bench import save_profile as S

        saved = S.measured_profile(self.profile, dict(self.report), self.date)
        S.write_profile(saved, self.target)
        n = S.count_measured(saved, self.date)
        return f"machine profile {saved.name} with {n} measured figure(s) written to {self.target}"


def measure(*, cards: list[int] | None = None, quick: bool = False, dataset: Path | None = None,
            cache: Path | None = None, compare_nccl: str | None = None, nccl_op: str | None = None,
            no_cards: bool = False, save_to: str | None = None, kernels: bool = False,
            progress: Callable[[str], None] | None = None) -> BenchRun:  # fmt: skip
    """``nodeledger bench``: the save path checked and the machine probed first (a bad path
    loses nothing), then every part measured (``suite.run_bench``)."""
    from datetime import datetime, timezone

    from nodeledger.bench.suite import run_bench

    if kernels and no_cards:
        raise NodeledgerError("--kernels measures the cards: it cannot go with --no-cards")
    date = datetime.now(timezone.utc).date().isoformat()  # the run's UTC date
    profile = target = None
    if save_to is not None:
        from nodeledger.bench import save_profile as S

        target = S.check_target(save_to)
        if progress:
            progress("probing the machine")
        profile = S.probe_this_machine()
    rep = run_bench(cards=cards, quick=quick, dataset=dataset, cache=cache,
                    compare_nccl=compare_nccl, nccl_op=nccl_op, skip_cards=no_cards,
                    profile=profile, progress=progress, kernels=kernels, date=date)  # fmt: skip
    report: dict = {"schema_version": SCHEMA_VERSION, **rep}
    if target is not None:
        report["nic_speeds"] = S.read_nic_speeds(profile)
    return BenchRun(report, profile, target, date)  # type: ignore[arg-type]
