"""Judging measured figures: ``ok`` / ``low`` / ``bad`` against what the device class or the
machine's topology says they should be.  Pure functions, no I/O; every expectation carries its
thresholds and where they come from, and the report prints both beside the figure.

Verdicts:
- ``ok``: at or beyond the ``ok`` threshold;
- ``low``: between the thresholds (works, but below its class: look at it);
- ``bad``: beyond the ``bad`` threshold (something is wrong: a link trained down, a dataset on a
  contended network share, a card another process holds);
- ``unknown``: measured, but there is nothing to judge it against (the profile does not say the
  link's bandwidth, the page cache could not be dropped, ...); the reason is in the figure;
- ``unavailable``: not measured (no torch, no card, a path not writable); the reason says what
  it needs.  Never a failure.

Thresholds and their sources (also in each ``Expect.source``):

Disk, by mount kind (``machine probe``'s storage section).  Sequential = one stream of 4 MiB
reads; latency = one 4 KiB read in flight (QD1), mean; parallel = 16 reads of 4 KiB in flight.

| kind    | sequential ok / bad  | QD1 latency ok / bad | why |
|---------|----------------------|----------------------|-----|
| nvme    | >= 1000 / < 300 MB/s | <= 0.3 / > 1 ms      | PCIe 3.0 x4 = 3.94 GB/s, 4.0 x4 = 7.88 GB/s line rate; NAND page read (tR) 50-100 us |
| ssd     | >= 400 / < 150 MB/s  | <= 0.5 / > 2 ms      | SATA III: 6 Gb/s with 8b/10b = 600 MB/s line rate; SATA SSDs read 500-550 MB/s |
| hdd     | >= 100 / < 40 MB/s   | <= 15 / > 30 ms      | 7200 rpm: 60/7200/2 = 4.17 ms average rotational latency + ~8.5 ms average seek |
| network | >= 300 / < 100 MB/s  | <= 2 / > 10 ms       | 1 GbE = 125 MB/s line rate; field claim "network_fs": tens of ms random reads starved every card |
| unknown | as network           | as network           | kind unknown: judged as a dataset feed must be |

Parallel random reads must do at least what one read in flight does on a healthy device of
the class: ok >= 4 KiB / ok-latency, bad < 4 KiB / bad-latency (MB/s).

Host <-> card copies (pinned): PCIe raw rate per direction = GT/s x lanes x encoding / 8
(8b/10b for Gen1-2, 128b/130b for Gen3-5, 242/256 FLIT for Gen6): Gen3 x16 15.75 GB/s, Gen4 x16
31.5 GB/s, Gen5 x16 63 GB/s.  Achievable = 0.8 x raw (TLP/DLLP overhead at 256 B payloads:
Gen4 x16 ~25 GB/s, as nvbandwidth and NVIDIA's bandwidthTest report).  ok >= 0.8 x
achievable; bad < 0.45 x achievable (a card trained at Gen3 x8 on a Gen4 x16 slot reaches 1/4
of it).  Pageable copies stage through a driver buffer: ok >= 0.35 x achievable, bad < 0.15 x.

Card <-> card copies: NVLink = the profile's ``bandwidth_gbps`` per direction, else lanes x
25 GB/s (NVLink 2/3/4: V100 6 links 300 GB/s, A100 12 links 600 GB/s, H100 18 links 900 GB/s,
both directions summed) or x 50 GB/s (NVLink 5, Blackwell: 18 links 1.8 TB/s).  xGMI / HCCS:
the profile's figure, else unknown.  ok >= 0.7 x link; bad < 0.35 x link.  PCIe PIX/PXB: as a
pinned host copy of the slower card; PHB/NODE/SYS: ok >= 0.5 x, bad < 0.25 x (peer traffic
through the host bridge or between sockets is often staged through host memory).

Collectives (nccl-tests' bus bandwidth, which is comparable with the link's per-direction rate):
all-reduce busbw = algbw x 2(n-1)/n, all-gather = algbw x (n-1)/n (nccl-tests
doc/PERFORMANCE.md).  Expected against the weakest pair link of the card set: ok >= 0.6 x,
bad < 0.3 x (8 x A100 SXM4 NV12, 300 GB/s per direction: nccl-tests all-reduce busbw 235 GB/s
= 0.78, /work/shared/fixtures/real/nccl-tests).

Card memory: allocatable ÷ total: ok >= 0.9, bad < 0.75 (a CUDA context costs ~0.3-0.6 GiB of
a card; more missing means another process or a leaked context holds it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from nodeledger import field_notes
from nodeledger.machine.parsers.nccl_tests import BUS_FACTOR
from nodeledger.speed import figures as F

VERDICTS = ("ok", "low", "bad", "unknown", "unavailable")


@dataclass(frozen=True)
class Expect:
    """What a figure should be: ``ok`` and ``bad`` thresholds in ``unit``; ``higher`` says which
    way is better; ``typical`` the expected range in words; ``source`` where it comes from."""

    ok: float
    bad: float
    unit: str
    higher: bool = True
    typical: str = ""
    source: str = ""

    def verdict(self, value: float | None) -> str:
        if value is None:
            return "unknown"
        if self.higher:
            return "ok" if value >= self.ok else ("bad" if value < self.bad else "low")
        return "ok" if value <= self.ok else ("bad" if value > self.bad else "low")

    def describe(self) -> str:
        ge, lt = (">=", "<") if self.higher else ("<=", ">")
        text = f"ok {ge} {_fmt(self.ok)} {self.unit}, bad {lt} {_fmt(self.bad)} {self.unit}"
        return text + (f" (typical {self.typical})" if self.typical else "")

    def as_dict(self) -> dict:
        return asdict(self)


def _fmt(x: float) -> str:
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}".rstrip("0").rstrip(".")
    return f"{x:.2f}".rstrip("0").rstrip(".")


def figure(part: str, subject: str, metric: str, value: float | None, unit: str,
           expect: Expect | None = None, *, verdict: str | None = None, evidence: str = "",
           expected_text: str = "") -> dict:  # fmt: skip
    """One measured figure with its verdict.  ``verdict`` overrides the judged one (e.g.
    ``unknown`` when the page cache could not be dropped); ``expected_text`` stands in for the
    expectation when there is none (what it would need)."""
    v = verdict or (expect.verdict(value) if expect is not None else "unknown")
    if v not in VERDICTS:
        raise ValueError(f"verdict {v!r} not one of {VERDICTS}")
    return {
        "part": part,
        "subject": subject,
        "metric": metric,
        "value": None if value is None else round(float(value), 4),
        "unit": unit,
        "verdict": v,
        "expected": expect.describe() if expect is not None else (expected_text or "unknown"),
        "source": expect.source if expect is not None else "",
        "evidence": evidence,
    }


def unavailable(part: str, subject: str, metric: str, reason: str) -> dict:
    """A figure that was not measured: what it needs, never a failure."""
    return {
        "part": part, "subject": subject, "metric": metric, "value": None, "unit": "",
        "verdict": "unavailable", "expected": "", "source": "", "evidence": reason,
    }  # fmt: skip


def figure_text(f: dict) -> str:
    """A bench figure (value and unit) as printed by bench and golive."""
    v, unit = f["value"], f["unit"]
    if v is None:
        return "—"
    if unit == "%":
        return f"{v:+.1f} %"
    if unit == "of total":
        return f"{v:.1%}"
    if abs(v) >= 100:
        text = f"{v:,.0f}"
    elif abs(v) >= 1:
        text = f"{v:,.2f}"
    else:
        text = f"{v:.3f}"
    return f"{text} {unit}".strip()


# ---------------------------------------------------------------------------------------
# disks
# ---------------------------------------------------------------------------------------

DISK_KINDS = ("nvme", "ssd", "hdd", "network", "unknown")

_SEQ = {
    "nvme": (1000.0, 300.0, "1,500-7,000 MB/s",
             "NVMe on PCIe 3.0 x4 = 3.94 GB/s, 4.0 x4 = 7.88 GB/s line rate; below 300 MB/s it is slower than a SATA SSD"),
    "ssd": (400.0, 150.0, "450-550 MB/s",
            "SATA III: 6 Gb/s with 8b/10b encoding = 600 MB/s line rate; SATA SSDs read 500-550 MB/s"),
    "hdd": (100.0, 40.0, "100-250 MB/s",
            "7200 rpm disk: 150-250 MB/s on outer tracks, about half on inner tracks"),
    "network": (300.0, 100.0, "100-1,200 MB/s by link",
                "1 GbE = 125 MB/s line rate (bad: below a gigabit link), 10 GbE = 1.25 GB/s; 8 cards need their dataset fed"),
    "unknown": (300.0, 100.0, "",
                "mount kind unknown: judged as a dataset feed must be (network class: 1 GbE = 125 MB/s line rate)"),
}  # fmt: skip

_LAT = {
    "nvme": (0.3, 1.0, "0.05-0.2 ms",
             "NAND page read (tR) 50-100 us plus the NVMe stack; above 1 ms it behaves like a network block device"),
    "ssd": (0.5, 2.0, "0.1-0.3 ms",
            "SATA SSD 4 KiB QD1 read: NAND tR 50-100 us plus AHCI/SATA; above 2 ms it is no SSD figure"),
    "hdd": (15.0, 30.0, "8-15 ms",
            "7200 rpm: 60 s / 7200 / 2 = 4.17 ms average rotational latency + ~8.5 ms average seek"),
    "network": (2.0, 10.0, "0.2-2 ms",
                f"{field_notes.cited('network_fs')}; NFS on a quiet 10 GbE link answers in 0.2-1 ms"),
    "unknown": (2.0, 10.0, "",
                f"mount kind unknown: judged as a dataset on a network filesystem ({field_notes.cited('network_fs')})"),
}  # fmt: skip


def _kind(kind: str | None) -> str:
    return kind if kind in DISK_KINDS else "unknown"


def disk_seq_expect(kind: str | None) -> Expect:
    ok, bad, typ, src = _SEQ[_kind(kind)]
    return Expect(ok, bad, "MB/s", True, typ, f"{_kind(kind)}: {src}")


def disk_latency_expect(kind: str | None) -> Expect:
    ok, bad, typ, src = _LAT[_kind(kind)]
    return Expect(ok, bad, "ms", False, typ, f"{_kind(kind)}: {src}")


def disk_parallel_expect(kind: str | None) -> Expect:
    """16 random 4 KiB reads in flight: at least the QD1 rate of a healthy device of the class."""
    ok_ms, bad_ms, _, _ = _LAT[_kind(kind)]
    page_mb = 4096 / 1e6
    return Expect(
        page_mb / (ok_ms / 1000), page_mb / (bad_ms / 1000), "MB/s", True, "",
        f"{_kind(kind)}: with 16 reads in flight at least the QD1 rate of a healthy device "
        f"(4 KiB / {_fmt(ok_ms)} ms ok, 4 KiB / {_fmt(bad_ms)} ms bad)",
    )  # fmt: skip


# ---------------------------------------------------------------------------------------
# PCIe
# ---------------------------------------------------------------------------------------

# the link physics is the speed model's (speed/figures.py, from speed/hardware.toml): one copy
PCIE_GEN = F.PCIE_GEN
pcie_encoding = F.pcie_encoding
pcie_raw_gbps = F.pcie_raw_gbps


def achievable(gts: float) -> float:
    return F.pcie_achievable(gts)[0]


def pcie_label(gts: float | None, width: int | None) -> str:
    if gts is None or width is None:
        return "unknown"
    gen = PCIE_GEN.get(float(gts))
    return f"Gen{gen} x{width}" if gen else f"{gts:g} GT/s x{width}"


PAGEABLE_OK_GBPS, PAGEABLE_BAD_GBPS = 5.0, 2.0
PAGEABLE_SOURCE = ("pageable copies measured with CUDA events on a healthy H200 host (PCIe Gen5 "
                   "x16, torch 2.11, 2026-12-04): 6.5 GB/s at 2 GiB, 8-10 GB/s at 64 MiB, "
                   "bounded by the host's staging memcpy, not the link")  # fmt: skip


def host_card_expect(gts: float | None, width: int | None, pinned: bool = True) -> Expect | None:
    if not gts or not width:
        return None
    raw = pcie_raw_gbps(gts, width)
    frac, frac_src = F.pcie_achievable(gts)
    ach = frac * raw
    ok_f, bad_f = (0.8, 0.45) if pinned else (0.35, 0.15)
    what = "pinned" if pinned else "pageable (staged through a driver buffer)"
    ok, bad = ok_f * ach, bad_f * ach
    cap = ""
    if not pinned and ok > PAGEABLE_OK_GBPS:
        # a pageable copy is staged by one CPU thread through the driver's pinned buffer: the
        # host's memcpy bounds it whatever the link (a healthy H200 host, Gen5 x16: 6.5-10 GB/s)
        ok, bad = PAGEABLE_OK_GBPS, min(bad, PAGEABLE_BAD_GBPS)
        cap = (
            f"; capped at ok >= {PAGEABLE_OK_GBPS:g}, bad < {PAGEABLE_BAD_GBPS:g} GB/s: "
            f"{PAGEABLE_SOURCE}"
        )
    return Expect(
        ok, bad, "GB/s", True, f"~{ach:.1f} GB/s" if pinned else "",
        f"PCIe {pcie_label(gts, width)}: {raw:.1f} GB/s raw per direction, ~{ach:.1f} achievable "
        f"({frac_src}); {what}: ok >= {ok_f:g} x, bad < {bad_f:g} x achievable"
        + cap,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------
# card <-> card links and collectives
# ---------------------------------------------------------------------------------------


def nvlink_lane_gbps(product: str | None) -> tuple[float, str]:
    """GB/s per NVLink link per direction of the card (speed/figures.py: the hardware data)."""
    return F.nvlink_per_link(product)


def link_gbps(kind: str, lanes: int | None, bandwidth: float | None, product: str | None,
              pcie_a: float | None, pcie_b: float | None, label: str | None = None,
              source: str | None = None) -> tuple[float | None, str]:  # fmt: skip
    """Per-direction rate of the path between two cards and where it comes from; ``pcie_a`` /
    ``pcie_b`` are the cards' own achievable PCIe rates (GB/s) for PCIe paths."""
    name = label or kind
    if kind in ("nvlink", "xgmi", "hccs"):
        if bandwidth:
            return (
                bandwidth,
                f"{name}: {bandwidth:g} GB/s per direction ({source or 'machine profile'})",
            )
        if kind == "nvlink" and lanes:
            per, why = nvlink_lane_gbps(product)
            return lanes * per, f"{name}: {lanes} links x {per:g} GB/s ({why})"
        return None, f"{name}: link bandwidth not in the machine profile"
    pcie = [x for x in (pcie_a, pcie_b) if x]
    if kind in ("pix", "pxb", "phb", "node", "sys", "pcie", "unknown") and len(pcie) == 2:
        return min(
            pcie
        ), f"{name} (PCIe path): the slower card's achievable PCIe rate {min(pcie):.1f} GB/s"
    if bandwidth:
        return (
            bandwidth,
            f"{name}: {bandwidth:g} GB/s per direction ({source or 'machine profile'})",
        )
    return None, f"{name}: neither the profile nor sysfs says this path's bandwidth"


def peer_expect(kind: str, gbps: float | None, why: str) -> Expect | None:
    if not gbps:
        return None
    if kind in ("phb", "node", "sys"):
        ok_f, bad_f = 0.5, 0.25
        note = "; through the host bridge / between sockets peer copies are often staged through host memory"
    else:
        ok_f, bad_f = (0.8, 0.45) if kind in ("pix", "pxb", "pcie", "unknown") else (0.7, 0.35)
        note = ""
    return Expect(ok_f * gbps, bad_f * gbps, "GB/s", True, "",
                  f"{why}: ok >= {ok_f:g} x, bad < {bad_f:g} x{note}")  # fmt: skip


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' bus bandwidth factor (doc/PERFORMANCE.md)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return BUS_FACTOR[op](n)


def busbw(op: str, size_bytes: float, seconds: float, n: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9) as nccl-tests computes them: algbw = size / time, where size
    is the buffer (all-reduce) or the whole gathered output (all-gather)."""
    alg = size_bytes / seconds / 1e9
    return alg, alg * bus_factor(op, n)


def collective_expect(weakest_gbps: float | None, why: str) -> Expect | None:
    if not weakest_gbps:
        return None
    return Expect(0.6 * weakest_gbps, 0.3 * weakest_gbps, "GB/s", True,
                  f"{0.75 * weakest_gbps:.0f}-{0.85 * weakest_gbps:.0f} GB/s",
                  f"bus bandwidth against the weakest pair link of the set ({why}): ok >= 0.6 x, "
                  "bad < 0.3 x; 8 x A100 SXM4 NV12 (300 GB/s): nccl-tests all-reduce busbw 235 GB/s = 0.78 x")  # fmt: skip


MEMORY = Expect(
    0.9, 0.75, "of total", True, "0.93-0.99",
    "a CUDA / HIP context takes ~0.3-0.6 GiB of a card; more missing means another process or a "
    "leaked context holds it",
)  # fmt: skip


def ratio_verdict(ratio: float | None) -> str:
    """nodeledger's busbw ÷ nccl-tests' at the same collective, ranks and size: within 5 %
    either way ok, within 20 % low, else bad (the same definition should give the same figure)."""
    if ratio is None:
        return "unknown"
    off = abs(ratio - 1)
    return "ok" if off <= 0.05 + 1e-9 else ("low" if off <= 0.2 + 1e-9 else "bad")


def numa_verdict(local: float | None, remote: float | None) -> tuple[str, str]:
    """Local vs remote CPU binding of a pinned host->card copy: local should never lose."""
    if not local or not remote:
        return "unknown", "needs both a local and a remote figure"
    if local >= 0.95 * remote:
        return "ok", "NUMA-local binding at least as fast as remote (within 5 %)"
    return "low", (
        "NUMA-local binding slower than remote: the card's NUMA node as reported may be wrong "
        "(check numa_node in sysfs / nvidia-smi topo -m)"
    )
