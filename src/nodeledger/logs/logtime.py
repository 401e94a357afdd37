"""Timestamps found at the start of log lines, and how far apart two of them are.

Recognised (searched near the start of a line, after any logger/CI prefix):
- ISO 8601: ``2024-04-29T14:55:41,678628+02:00`` (``dmesg --time-format iso``),
  ``2024-04-29T14:55:41+0200`` (``journalctl -o short-iso``), ``2025-11-14T08:52:38.37Z`` (CI),
  ``2024-05-01 10:00:00,123`` (Python logging);
- ``[Thu Dec  7 00:05:14 2017]`` (``dmesg -T``);
- ``May 15 23:01:53`` (syslog / kern.log: no year);
- ``INFO 04-05 01:12:55`` (vLLM's logger: no year);
- ``E0314 09:26:58.402000 140213 …]`` (glog: torch C++, torchrun ≥ 2.2: no year);
- ``[  152.700479]`` seconds since boot (plain ``dmesg``): kept as ``uptime_s``.

A time without a year borrows the other side's year when two times are compared; a time without
a zone is read in the other side's zone (both logs normally come from the same machine).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

_MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}
_MON = "(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_DOW = "(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"

_ISO = re.compile(
    r"(?P<date>\d{4}-\d\d-\d\d)[T ](?P<time>\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d+))?"
    r"(?P<tz>Z|[+-]\d\d:?\d\d)?(?![\d:])"
)
_CTIME = re.compile(
    rf"\[{_DOW} (?P<mon>{_MON}) +(?P<day>\d\d?) (?P<time>\d\d:\d\d:\d\d) (?P<year>\d{{4}})\]"
)
_SYSLOG = re.compile(rf"^(?P<mon>{_MON}) +(?P<day>\d\d?) (?P<time>\d\d:\d\d:\d\d)\b")
_VLLM = re.compile(
    r"\b(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) (?P<mon>\d\d)-(?P<day>\d\d) "
    r"(?P<time>\d\d:\d\d:\d\d)\b"
)
_GLOG = re.compile(
    r"^[IWEF](?P<mon>\d\d)(?P<day>\d\d) (?P<time>\d\d:\d\d:\d\d)(?:\.\d+)?\s+\d+ "
)  # glog (torch C++ / torchrun >= 2.2): "E0314 09:26:58.402000 140213 file.py:869] ..."
_UPTIME = re.compile(r"\[\s*(?P<up>\d+\.\d+)\]")
# every wall-clock form above holds hh:mm:ss: one search tells whether any of them can match
_CLOCK_TIME = re.compile(r"\d\d:\d\d:\d\d")

_HEAD = 64  # a line's timestamp sits in its first characters (after a short prefix)
_HEAD_UPTIME = 128  # "[uptime]" may follow a syslog stamp and a long host name


@dataclass(frozen=True)
class LogTime:
    """One timestamp as printed; ``dt`` is None for an uptime-only stamp."""

    text: str
    dt: datetime | None = None
    has_year: bool = True
    uptime_s: float | None = None

    @property
    def iso(self) -> str | None:
        """ISO 8601 when the date is complete (year included), else None."""
        if self.dt is None or not self.has_year:
            return None
        return self.dt.isoformat()

    def with_boot(self, boot: datetime | None) -> LogTime:
        """An uptime-only stamp placed on the wall clock: boot time + uptime."""
        if self.dt is not None or self.uptime_s is None or boot is None:
            return self
        return replace(self, dt=boot + timedelta(seconds=self.uptime_s), has_year=True)


def _clock(t: str) -> tuple[int, int, int]:
    h, m, s = t.split(":")
    return int(h), int(m), int(s)


def find_time(line: str) -> LogTime | None:
    """The timestamp at the start of ``line`` (None when it has none)."""
    head = line[:_HEAD]
    up_head = line[:_HEAD_UPTIME]
    up = _UPTIME.search(up_head) if "[" in up_head else None
    uptime = float(up["up"]) if up else None
    m = _ISO.search(head) if "-" in head else None  # the common stamp first: one search
    if m is None and _CLOCK_TIME.search(head) is None:  # no wall-clock stamp: at most uptime
        return LogTime(up.group(0), None, True, uptime) if up is not None else None
    if m:
        frac = (m["frac"] or "")[:6]
        tz = m["tz"] or ""
        text = f"{m['date']}T{m['time']}" + (f".{frac}" if frac else "") + tz
        try:
            dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            dt = None
        if dt is not None:
            return LogTime(m.group(0), dt, True, uptime)
    m = _CTIME.search(head)
    if m:
        h, mi, s = _clock(m["time"])
        try:
            dt = datetime(int(m["year"]), _MONTHS[m["mon"]], int(m["day"]), h, mi, s)
        except ValueError:
            dt = None
        if dt is not None:
            return LogTime(m.group(0).strip("[]"), dt, True, uptime)
    m = _SYSLOG.search(head)
    if m:
        h, mi, s = _clock(m["time"])
        try:
            dt = datetime(1904, _MONTHS[m["mon"]], int(m["day"]), h, mi, s)  # leap placeholder
        except ValueError:
            dt = None
        if dt is not None:
            return LogTime(m.group(0), dt, False, uptime)
    m = _VLLM.search(head) or _GLOG.search(head)
    if m:
        h, mi, s = _clock(m["time"])
        try:
            dt = datetime(1904, int(m["mon"]), int(m["day"]), h, mi, s)
        except ValueError:
            dt = None
        if dt is not None:
            return LogTime(f"{m['mon']}-{m['day']} {m['time']}", dt, False, uptime)
    if uptime is not None:
        return LogTime(up.group(0), None, True, uptime)
    return None


def seconds_apart(a: LogTime | None, b: LogTime | None) -> float | None:
    """|a - b| in seconds, or None when the two cannot be placed on one clock."""
    if a is None or b is None:
        return None
    if a.dt is None or b.dt is None:
        if a.uptime_s is not None and b.uptime_s is not None and a.dt is None and b.dt is None:
            return abs(a.uptime_s - b.uptime_s)  # same boot assumed (same kernel log)
        return None
    x, y = a.dt, b.dt
    if not a.has_year and b.has_year:
        x = _borrow_year(x, y)
    elif a.has_year and not b.has_year:
        y = _borrow_year(y, x)
    if (x.tzinfo is None) != (y.tzinfo is None):
        if x.tzinfo is None:
            x = x.replace(tzinfo=y.tzinfo)
        else:
            y = y.replace(tzinfo=x.tzinfo)
    return abs((x - y).total_seconds())


def _borrow_year(dt: datetime, other: datetime) -> datetime:
    try:
        return dt.replace(year=other.year)
    except ValueError:  # 29 Feb borrowed into a common year
        return dt.replace(year=other.year, day=28)


class RecentTimes:
    """The latest timestamp at or before a line, found lazily (a parser's "last time seen").

    Parsers skip most lines of a long log without looking at them (``skip``); only lines they
    read (``at``) have their stamp parsed, and the lines skipped since the last one are searched
    backwards only when the line read has no stamp of its own. Held lines are settled every
    ``window`` lines (newest first, usually one parse), so memory stays bounded and the answer is
    the same as parsing every line.
    """

    def __init__(self, boot: datetime | None = None, window: int = 4096):
        # lines skipped since the last one read; a hot loop may append to it directly and call
        # settle() when it holds ``window`` lines
        self.pending: list[str] = []
        self.window = window
        self._last: LogTime | None = None
        self._boot = boot

    def _find(self, raw: str) -> LogTime | None:
        t = find_time(raw)
        if t is not None and self._boot is not None:
            t = t.with_boot(self._boot)
        return t

    def skip(self, raw: str) -> None:
        self.pending.append(raw)
        if len(self.pending) >= self.window:
            self.settle()

    def settle(self) -> None:
        """Find the latest stamp among the lines held (newest first) and let them go."""
        for raw in reversed(self.pending):
            t = self._find(raw)
            if t is not None:
                self._last = t
                break
        self.pending.clear()

    def at(self, raw: str) -> tuple[LogTime | None, LogTime | None]:
        """(the line's own stamp, that stamp or the latest one before it)."""
        stamp = self._find(raw)
        if stamp is None:
            self.settle()
            return None, self._last
        self.pending.clear()
        self._last = stamp
        return stamp, stamp
