"""Collection: the live kernel log (through the probe ``Runner``: no shell, a timeout) and the
job-log files. Everything that cannot be read becomes a note, except a file the user named that
does not exist or cannot be read — that is bad input (one line, exit 2).

Kernel log, in order:
1. ``dmesg --time-format iso`` (util-linux ≥ 2.26), else ``dmesg -T``, else plain ``dmesg``
   (seconds since boot; placed on the wall clock with /proc/uptime);
2. when dmesg is absent, denied (``kernel.dmesg_restrict=1``), hung or failing:
   ``journalctl -k -o short-iso [--since …]`` (readable by the systemd-journal / adm groups).
"""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from nodeledger.errors import InputError
from nodeledger.logs.lines import LineStats, file_problem, spool_stdin
from nodeledger.machine.probe.runner import RawResult, Runner
from nodeledger.triage.report import Source

_DMESG_VARIANTS = (["dmesg", "--time-format", "iso"], ["dmesg", "-T"], ["dmesg"])
_DENIED = re.compile(r"operation not permitted|permission denied|EPERM", re.I)
_JOURNAL_DENIED = re.compile(r"insufficient permissions|not seeing messages from other users", re.I)
_DURATION = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*([smhdw])", re.I)  # one try per number
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass
class KernelLog:
    source: Source | None
    notes: list[str] = field(default_factory=list)
    attempts: list[RawResult] = field(default_factory=list)


def parse_duration(text: str) -> float:
    """``90s``, ``30m``, ``2h``, ``1d``, ``1h30m`` -> seconds; InputError otherwise."""
    s = text.strip().replace(" ", "")
    pos, total = 0, 0.0
    for m in _DURATION.finditer(s):
        if m.start() != pos:
            break
        total += float(m[1]) * _UNIT_S[m[2].lower()]
        pos = m.end()
    if not s or pos != len(s) or total <= 0:
        raise InputError(f"--since {text!r}: not a duration (use e.g. 90s, 30m, 2h, 1d or 1h30m)")
    return total


def _denied(res: RawResult) -> bool:
    return bool(
        res.problem
        and (res.problem == "permission denied" or _DENIED.search(res.stderr or res.problem))
    )


def _restrict_hint(runner: Runner) -> str:
    v = runner.read("/proc/sys/kernel/dmesg_restrict")
    if v is not None and v.strip() == "1":
        return " (kernel.dmesg_restrict=1)"
    return ""


def _boot_time(runner: Runner) -> datetime | None:
    up = runner.read("/proc/uptime")
    try:
        seconds = float(up.split()[0]) if up else None
    except (ValueError, IndexError):
        seconds = None
    if seconds is None:
        return None
    return datetime.now().astimezone() - timedelta(seconds=seconds)


def read_kernel_log(runner: Runner, since_s: float | None = None) -> KernelLog:
    """This machine's kernel log, or notes saying why it could not be read (never raises)."""
    out = KernelLog(source=None)
    dmesg_problem: str | None = None
    for argv in _DMESG_VARIANTS:
        res = runner.run(list(argv))
        out.attempts.append(res)
        if res.ok:
            label = " ".join(argv)
            boot = _boot_time(runner) if argv == ["dmesg"] else None
            out.source = Source(label, res.stdout, origin="kernel-log", boot=boot)
            if argv == ["dmesg", "-T"]:
                out.notes.append(
                    "dmesg -T: wall-clock times are computed from uptime and drift after a "
                    "suspend/resume"
                )
            elif argv == ["dmesg"]:
                out.notes.append(
                    "plain dmesg: times are seconds since boot"
                    + (", placed on the wall clock with /proc/uptime" if boot else "")
                )
            return out
        if res.problem and res.problem.startswith("absent"):
            dmesg_problem = "dmesg: not found on PATH"
            break
        if _denied(res):
            dmesg_problem = (
                f"dmesg: permission denied{_restrict_hint(runner)}: run as root or pass the "
                "log file"
            )
            break
        if res.problem and res.problem.startswith("timed out"):
            dmesg_problem = f"dmesg: {res.problem}"
            break
        dmesg_problem = f"{' '.join(argv)}: {res.problem}"  # e.g. an option this dmesg lacks
    if dmesg_problem:
        out.notes.append(dmesg_problem)

    argv = ["journalctl", "-k", "-o", "short-iso", "--no-pager", "-q"]
    if since_s is not None:
        start = datetime.now() - timedelta(seconds=since_s)
        argv += ["--since", start.strftime("%Y-%m-%d %H:%M:%S")]
    res = runner.run(argv)
    out.attempts.append(res)
    label = " ".join(argv[:4])
    if res.ok and not _JOURNAL_DENIED.search(res.stderr or ""):
        out.source = Source(label, res.stdout, origin="kernel-log")
        out.notes.append(f"kernel log read with {label} instead")
        return out
    if res.problem and res.problem.startswith("absent"):
        out.notes.append("journalctl: not found on PATH")
    elif _denied(res) or _JOURNAL_DENIED.search(res.stderr or ""):
        out.notes.append(
            "journalctl: permission denied: run as root, join the systemd-journal group, or pass "
            "the log file"
        )
    else:
        out.notes.append(f"journalctl: {res.problem}")
    out.notes.append(
        "no kernel log could be read: kernel oom-killer kills are not in this report (pass a "
        "saved dmesg / kern.log / journalctl -k output as a FILE)"
    )
    return out


def read_files(paths: list[str]) -> list[Source]:
    """Each named file as a Source streamed line by line (never held whole); ``-`` is standard
    input (spooled to an anonymous temporary file up to a size cap: see ``lines.py``; close it
    with :func:`cleanup`, or let the process end). A missing or unreadable file, or one that is
    not a regular file (a device, FIFO, socket or directory), is bad input (InputError: one
    line, exit 2)."""
    out = []
    for p in paths:
        if p == "-":
            stats = LineStats()
            spooled = spool_stdin(stats)
            _SPOOLED.append(spooled)
            out.append(Source("-", None, origin="file", stream=spooled, stats=stats))
            continue
        problem = file_problem(p)
        if problem is not None:
            raise InputError(f"{p}: {problem}")
        try:
            with open(p, "rb") as f:
                f.read(1)
        except OSError as exc:
            raise InputError(f"{p}: cannot read: {exc.strerror or exc}") from None
        out.append(Source(p, None, origin="file", path=p))
    return out


_SPOOLED: list = []  # the anonymous copies of standard input, open


def cleanup() -> None:
    """Close (and so free) the temporary copies of standard input made by :func:`read_files`."""
    while _SPOOLED:
        with contextlib.suppress(OSError):
            _SPOOLED.pop().close()


def now() -> datetime:
    return datetime.fromtimestamp(time.time()).astimezone()
