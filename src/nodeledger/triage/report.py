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

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nodeledger.triage.accel import parse_accel_log
from nodeledger.triage.fixes import fixes_for, verdict_line
from nodeledger.triage.incidents import Incident
from nodeledger.triage.jobs import parse_job_log
from nodeledger.triage.kernel import KERNEL_FIGURES, parse_kernel_log
from nodeledger.triage.logtime import seconds_apart

LINK_WINDOW_S = 60.0
_KERNEL_KINDS = ("kernel-oom-killer", "memcg-oom")


@dataclass
class Source:
    """One text to read: a job log / saved kernel log file, or the live kernel log."""

    label: str  # file path as given, or the command that produced it
    text: str
    origin: str = "file"  # "file" | "kernel-log"
    boot: datetime | None = None  # boot time, for the live kernel log's uptime stamps


@dataclass
class OomReport:
    incidents: list[Incident]
    notes: list[str] = field(default_factory=list)
    sources_read: list[dict[str, Any]] = field(default_factory=list)
    verdict: dict[str, Any] = field(default_factory=dict)
    link_window_s: float = LINK_WINDOW_S
    since: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "incidents": [i.to_dict() for i in self.incidents],
            "notes": list(self.notes),
            "sources_read": list(self.sources_read),
            "link_window_s": self.link_window_s,
            "since": self.since,
        }


def parse_text(
    text: str, label: str, *, origin: str = "file", boot: datetime | None = None
) -> list[Incident]:
    """Every incident in one text, in line order (kernel, card and job-kill parsers together)."""
    incs = parse_kernel_log(text, label, origin=origin, boot=boot)
    incs += parse_accel_log(text, label, origin=origin)
    for j in parse_job_log(text, label, origin=origin):
        if j.kind == "memcg-oom":
            j.figures = dict.fromkeys(KERNEL_FIGURES)
        incs.append(j)
    incs.sort(key=lambda i: i.line)
    return incs


def link(incidents: list[Incident], window_s: float = LINK_WINDOW_S) -> None:
    kernel = [i for i in incidents if i.kind in _KERNEL_KINDS and i.details.get("how") is None]
    others = [i for i in incidents if i not in kernel]
    for k in kernel:
        kpids = {p for p in (k.pid, (k.details.get("chosen") or {}).get("pid")) if p is not None}
        for j in others:
            jpids = set(j.details.get("pids") or []) | ({j.pid} if j.pid is not None else set())
            common = kpids & jpids
            if common:
                _add_link(k, j, "pid", f"pid {min(common)}")
                continue
            dt = seconds_apart(k.time, j.time)
            if (
                dt is not None
                and dt <= window_s
                and k.time is not None
                and j.time is not None
                and k.time.dt is not None
                and j.time.dt is not None
            ):
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
) -> OomReport:
    notes = list(notes or [])
    incidents: list[Incident] = []
    read: list[dict[str, Any]] = []
    for s in sources:
        incs = parse_text(s.text, s.label, origin=s.origin, boot=s.boot)
        read.append(
            {
                "source": s.label,
                "kind": s.origin,
                "lines": len(s.text.splitlines()),
                "incidents": len(incs),
            }
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
    if not incidents and not sources:
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
