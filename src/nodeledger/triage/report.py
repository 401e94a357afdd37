"""Assemble the oom report: parse every source, link kernel kills to job-log incidents, attach
the fixes, filter by ``--since``.

Linking (both directions, recorded in each incident's ``links``):
- by pid: a kernel kill's killed pid (or the old format's chosen pid) equals a job-log
  incident's pid (a DataLoader worker, torchrun's ``exitcode: -9 (pid: N)``, a shell's
  ``N Killed``, an NCCL line's pid);
- by time: both carry a wall-clock time and they are at most ``window_s`` apart (default 60 s:
  DataLoader checks its workers every 5 s, torchrun's agent polls every few seconds, and
  ``dmesg -T`` can drift by seconds; a minute keeps the link to one event). Times without a year
  borrow the other's year; times without a zone are read in the other's zone. A pid link wins
  over a time link to the same incident.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, BinaryIO, Literal

from typing_extensions import NotRequired, TypedDict  # pydantic needs these on Python < 3.12

from nodeledger.logs.accel import parse_accel_log
from nodeledger.logs.incidents import Incident
from nodeledger.logs.jobs import parse_job_log
from nodeledger.logs.kernel import KERNEL_FIGURES, parse_kernel_log
from nodeledger.logs.lines import MAX_LINE_BYTES, LineStats, read_lines, text_lines
from nodeledger.logs.logtime import seconds_apart
from nodeledger.logs.units import MAX_BYTES, MAX_RSS_BYTES
from nodeledger.schemas import json_schema
from nodeledger.triage.fixes import fixes_for, verdict_line

LINK_WINDOW_S = 60.0
_KERNEL_KINDS = ("kernel-oom-killer", "memcg-oom")


@dataclass
class Source:
    """One text to read: a job log / saved kernel log file, or the live kernel log."""

    label: str  # file path as given, or the command that produced it
    text: str | None = None  # the text in memory (the live kernel log), or None: read ``path``
    origin: str = "file"  # "file" | "kernel-log"
    boot: datetime | None = None  # boot time, for the live kernel log's uptime stamps
    path: str | None = None  # a regular file, streamed line by line (never held whole)
    stats: LineStats = field(default_factory=LineStats)  # of the last pass over the lines
    stream: BinaryIO | None = None  # an open seekable file (standard input's spooled copy)

    def lines(self) -> Iterator[str]:
        """One pass over the lines, bounded (see ``lines.py``); ``stats`` counts it."""
        self.stats = stats = LineStats(truncated_bytes=self.stats.truncated_bytes)
        if self.text is not None:
            yield from text_lines(self.text, stats)
            return
        if self.stream is not None:
            self.stream.seek(0)
            yield from read_lines(self.stream, stats)
            return
        if self.path is None:
            return
        with open(self.path, "rb") as f:
            yield from read_lines(f, stats)


# ``oom --json``: the machine-readable contract (issue 31), its JSON Schema generated from these
# types and shipped as nodeledger/schemas/oom.schema.json
SCHEMA_VERSION = 1
Side = Literal["host", "card"]


class OomVerdictJSON(TypedDict):
    side: Literal["none", "host", "card", "both"]
    summary: str
    verdict: Literal["found", "none", "inconclusive"]


class OomLinkJSON(TypedDict):
    to: int  # the linked incident's id
    kind: str
    side: Side
    source: str  # file:line
    by: str  # what links them: a pid, a process name, the time
    detail: str
    pid: int | None
    process: str | None
    seconds: NotRequired[float]  # how far apart in time, where they are linked by it


class OomIncidentJSON(TypedDict):
    id: int
    kind: str  # logs.incidents KINDS: kernel-oom-killer, memcg-oom, job-killed, cuda-oom ...
    side: Side
    source: str  # file:line
    lines: list[int]  # first and last line of the incident
    time: str | None  # as the log wrote it
    time_iso: str | None
    uptime_s: float | None  # the kernel's seconds since boot, where it stamped that
    process: str | None
    pid: int | None
    card: int | None
    complete: bool
    figures: dict[str, int | None]  # bytes in *_bytes keys; None where the log does not say
    details: dict[str, Any]  # what the log names beyond the figures, per kind
    message: str
    occurrences: int
    also_at: list[str]
    links: list[OomLinkJSON]
    fixes: list[str]
    notes: list[str]


class OomSourceJSON(TypedDict):
    source: str
    kind: Literal["file", "kernel-log"]
    lines: int
    incidents: int


class OomJSON(TypedDict):
    schema_version: int
    verdict: OomVerdictJSON
    incidents: list[OomIncidentJSON]
    notes: list[str]
    sources_read: list[OomSourceJSON]
    link_window_s: float
    since: str | None


def oom_json_schema() -> dict[str, Any]:
    """The JSON Schema of ``oom --json``, generated from :class:`OomJSON`."""
    return json_schema(OomJSON, "nodeledger oom --json")


@dataclass
class OomReport:
    incidents: list[Incident]
    notes: list[str] = field(default_factory=list)
    sources_read: list[dict[str, Any]] = field(default_factory=list)
    verdict: dict[str, Any] = field(default_factory=dict)
    link_window_s: float = LINK_WINDOW_S
    since: str | None = None

    def _fields(self, incidents: list[dict[str, Any]] | None) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "verdict": self.verdict,
            "incidents": incidents,
            "notes": list(self.notes),
            "sources_read": list(self.sources_read),
            "link_window_s": self.link_window_s,
            "since": self.since,
        }

    def to_dict(self) -> dict[str, Any]:
        return self._fields([i.to_dict() for i in self.incidents])

    def json_chunks(self) -> Iterator[str]:
        """``json.dumps(self.to_dict(), indent=2, allow_nan=False)``, character for character,
        in pieces: one incident's dict at a time, so a report of tens of thousands of
        incidents never holds all their dicts and all their text at once.  Past
        COMPACT_INCIDENTS incidents each is written on one line (the same JSON value)."""
        dumps = functools.partial(json.dumps, indent=2, allow_nan=False)
        yield "{"
        for n, (key, value) in enumerate(self._fields(None).items()):
            yield ("," if n else "") + "\n  " + json.dumps(key) + ": "
            if key != "incidents":  # JSON text holds no raw newline: each one is indentation
                yield dumps(value).replace("\n", "\n  ")
            elif not self.incidents:
                yield "[]"
            else:
                yield "["
                # past COMPACT_INCIDENTS each incident is one line (json's C encoder; indenting
                # tens of thousands of them took most of the time): the same JSON value
                many = len(self.incidents) > COMPACT_INCIDENTS
                for k, inc in enumerate(self.incidents):
                    if many:
                        yield (
                            ("," if k else "")
                            + "\n    "
                            + json.dumps(inc.to_dict(), allow_nan=False, separators=(", ", ": "))
                        )
                        continue
                    yield (
                        ("," if k else "") + "\n    " + dumps(inc.to_dict()).replace("\n", "\n    ")
                    )
                yield "\n  ]"
        yield "\n}"


COMPACT_INCIDENTS = 1000  # incidents written indented; more: one line each


def parse_text(
    text: str, label: str, *, origin: str = "file", boot: datetime | None = None
) -> list[Incident]:
    """Every incident in one text, in line order (kernel, card and job-kill parsers together)."""
    return _parse(lambda: text.splitlines(), label, origin=origin, boot=boot)


def parse_source(s: Source) -> list[Incident]:
    """Every incident of one source, its lines streamed once per parser (memory bounded)."""
    return _parse(s.lines, s.label, origin=s.origin, boot=s.boot)


def _parse(
    lines: Callable[[], Iterable[str]], label: str, *, origin: str, boot: datetime | None
) -> list[Incident]:
    incs = parse_kernel_log(lines(), label, origin=origin, boot=boot)
    incs += parse_accel_log(lines(), label, origin=origin)
    for j in parse_job_log(lines(), label, origin=origin):
        if j.kind == "memcg-oom":
            j.figures = dict.fromkeys(KERNEL_FIGURES)
        incs.append(j)
    incs.sort(key=lambda i: i.line)
    for inc in incs:
        check_figures(inc)
    return incs


_RSS_KEYS = ("anon_rss_bytes", "file_rss_bytes", "shmem_rss_bytes")


def _magnitude(v: int) -> str:
    """A size for a note, even one too large to print or to turn into a float."""
    if v < 0:
        return "a negative size"
    if v < 10**15:
        return f"{v:,} bytes"
    return f"about 2**{v.bit_length() - 1} bytes"


def check_figures(inc: Incident) -> None:
    """Impossible figures become unknown, with a note; implausible ones are flagged.

    A size is impossible when it is negative or not below 2**64 bytes (nothing in a 64-bit
    address space is that large); a process's or cgroup's resident memory above 2**57 bytes (the
    largest virtual address space of x86-64 / arm64, 128 PiB) is impossible too. An rss larger
    than the process's total-vm cannot be: both are kept, and a note says the log disagrees with
    itself.
    """
    f = inc.figures
    for key, v in list(f.items()):
        if v is None:
            continue
        cap = MAX_RSS_BYTES if key in _RSS_KEYS or key.startswith("memcg_") else MAX_BYTES
        if not isinstance(v, int) or isinstance(v, bool) or v < 0 or v >= cap:
            f[key] = None
            what = _magnitude(v) if isinstance(v, int) else repr(v)[:40]
            inc.notes.append(
                f"{key}: {what} is not a possible size "
                f"({'negative' if isinstance(v, int) and v < 0 else 'too large'}): left unknown"
            )
    vm = f.get("total_vm_bytes")
    if vm is not None:
        for key in _RSS_KEYS:
            v = f.get(key)
            if v is not None and v > vm:
                inc.notes.append(
                    f"{key} ({_magnitude(v)}) is larger than total_vm_bytes ({_magnitude(vm)}): "
                    "impossible for one process — the log is inconsistent (both kept as printed)"
                )


def link(incidents: list[Incident], window_s: float = LINK_WINDOW_S) -> None:
    kernel = [i for i in incidents if i.kind in _KERNEL_KINDS and i.details.get("how") is None]
    kernel_ids = {id(i) for i in kernel}  # identity, not dataclass equality (linear, not N²)
    others = [i for i in incidents if id(i) not in kernel_ids]
    others_by_pid: dict[int, list[Incident]] = {}
    for j in others:
        for p in set(j.details.get("pids") or []) | ({j.pid} if j.pid is not None else set()):
            others_by_pid.setdefault(p, []).append(j)
    timed = [j for j in others if j.time is not None and j.time.dt is not None]
    for k in kernel:
        kpids = {p for p in (k.pid, (k.details.get("chosen") or {}).get("pid")) if p is not None}
        by_pid: dict[int, int] = {}  # id(j) -> the smallest common pid
        for p in kpids:
            for j in others_by_pid.get(p, ()):
                q = by_pid.get(id(j))
                by_pid[id(j)] = p if q is None else min(p, q)
        if not by_pid and (k.time is None or k.time.dt is None):
            continue
        for j in others if by_pid else timed:
            if id(j) in by_pid:
                _add_link(k, j, "pid", f"pid {by_pid[id(j)]}")
                continue
            if k.time is None or k.time.dt is None or j.time is None or j.time.dt is None:
                continue
            dt = seconds_apart(k.time, j.time)
            if dt is not None and dt <= window_s:
                _add_link(k, j, "time", f"{dt:.0f} s apart", seconds=dt)


def _add_link(a: Incident, b: Incident, by: str, detail: str, seconds: float | None = None):
    for x, y in ((a, b), (b, a)):
        entry: dict[str, Any] = {
            "to": y.id,
            "kind": y.kind,
            "side": y.side,
            "source": y.where,
            "by": by,
            "detail": detail,
            "pid": y.pid,
            "process": y.process,
        }
        if seconds is not None:
            entry["seconds"] = round(seconds, 3)
        x.links.append(entry)


def build_report(
    sources: list[Source],
    *,
    notes: list[str] | None = None,
    since_s: float | None = None,
    since_text: str | None = None,
    now: datetime | None = None,
    window_s: float = LINK_WINDOW_S,
    kernel_log_unread: str | None = None,
) -> OomReport:
    """The report over ``sources``.

    ``kernel_log_unread``: why this machine's kernel log could not be read, when it was meant to
    be (not with --no-kernel-log). With no incident found the verdict is then ``inconclusive``,
    not ``none``: a kernel oom-killer kill would not show in what was read.
    """
    with _without_gc_pauses():
        return _build_report(sources, notes, since_s, since_text, now, window_s,
                             kernel_log_unread)  # fmt: skip


@contextlib.contextmanager
def _without_gc_pauses() -> Iterator[None]:
    """Python's cyclic collector off while a log is read: a dense log makes tens of thousands of
    incidents (dicts, lists: no reference cycles), and the collector re-walking all of them as
    they pile up was half the time of reading them.  Back as it was afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _build_report(sources, notes, since_s, since_text, now, window_s, kernel_log_unread):
    notes = list(notes or [])
    incidents: list[Incident] = []
    read: list[dict[str, Any]] = []
    for s in sources:
        incs = parse_source(s)
        read.append(
            {
                "source": s.label,
                "kind": s.origin,
                "lines": s.stats.lines,
                "incidents": len(incs),
            }
        )
        if s.stats.cut:
            notes.append(
                f"{s.label}: {s.stats.cut:,} line(s) longer than {MAX_LINE_BYTES // 1024} KiB "
                "were cut to that length (the rest of each was skipped, not read)"
            )
        if s.stats.truncated_bytes:
            notes.append(
                f"{s.label}: input past the size cap was not read "
                f"({s.stats.truncated_bytes:,} bytes or more left out)"
            )
        incidents += incs
    if since_s is not None:
        incidents = _since(incidents, since_s, now or datetime.now().astimezone(), notes)
    for n, inc in enumerate(incidents, 1):
        inc.id = n
    link(incidents, window_s)
    for inc in incidents:
        inc.fixes = fixes_for(inc)
    report = OomReport(
        incidents=incidents,
        notes=notes,
        sources_read=read,
        link_window_s=window_s,
        since=since_text,
    )
    report.verdict = verdict_line(incidents, notes)
    report.verdict["verdict"] = "found" if incidents else "none"
    if not incidents and kernel_log_unread is not None:
        report.verdict["verdict"] = "inconclusive"
        report.verdict["summary"] = (
            "no out-of-memory incident found in what was read, but this machine's kernel log "
            f"could not be read ({kernel_log_unread}): inconclusive — a kernel oom-killer kill "
            "would not show here" + ("" if sources else "; no log file was given either")
        )
    elif not incidents and not sources:
        report.verdict["summary"] += (
            " — nothing was read: no log file given and the kernel log was not readable"
        )
    return report


def _since(
    incidents: list[Incident], since_s: float, now: datetime, notes: list[str]
) -> list[Incident]:
    kept, dropped, undated = [], 0, 0
    for inc in incidents:
        t = inc.time
        if t is None or t.dt is None or not t.has_year:
            undated += 1
            kept.append(inc)
            continue
        dt = t.dt if t.dt.tzinfo is not None else t.dt.replace(tzinfo=now.tzinfo)
        if (now - dt).total_seconds() <= since_s:
            kept.append(inc)
        else:
            dropped += 1
    if dropped:
        notes.append(f"--since: {dropped} incident(s) older than the window left out")
    if undated:
        notes.append(
            f"--since: {undated} incident(s) carry no full date (uptime or no year) and were kept"
        )
    return kept
