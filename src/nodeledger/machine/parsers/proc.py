"""Pure parsers of Linux /proc (and /proc-like /sys) text formats: text in, values out.

No file access and no Runner here: the callers read the files (through the probe Runner) and
hand the text over, so a fake tree, a support bundle and the live host parse the same way.

- ``meminfo``: /proc/meminfo and /sys/devices/system/node/node<N>/meminfo (kB -> bytes);
- ``pid_status``: /proc/<pid>/status (Name, State, VmRSS, Cpus_allowed_list, ...);
- ``pid_stat``: /proc/<pid>/stat (state, ppid, utime, stime, start time);
- ``mountinfo``: /proc/self/mountinfo;
- ``environ`` / ``cmdline``: /proc/<pid>/environ and /proc/<pid>/cmdline (NUL-separated).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


def meminfo(text: str | None) -> dict[str, int]:
    """/proc/meminfo (``MemTotal:  263762952 kB``) or a NUMA node's
    /sys/devices/system/node/node<N>/meminfo (``Node 0 MemTotal: ... kB``) -> {field: bytes}.

    Only fields given in kB are kept (kB x 1024); unit-less counts (``HugePages_Total``) are
    left out.  The first line of a field wins.  No text: an empty dict."""
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        m = re.match(r"^(?:Node \d+ )?([^:\s]+):\s*(\d+)\s*kB", line)
        if m and m.group(1) not in out:
            out[m.group(1)] = int(m.group(2)) * 1024
    return out


def kb_bytes(value: str | None) -> int | None:
    """A /proc size value (``"123456 kB"``) -> bytes; None if it is not one."""
    m = re.match(r"(\d+)\s*kB", (value or "").strip())
    return int(m.group(1)) * 1024 if m else None


@dataclass(frozen=True)
class PidStatus:
    """/proc/<pid>/status: every ``Key:\\tvalue`` line (``fields``, values stripped, the first
    line of a key wins) and the ones the callers use."""

    fields: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str | None:
        return self.fields.get("Name")

    @property
    def state(self) -> str | None:
        """The state letter (``R``, ``S``, ``Z`` ...) of ``State:\\tS (sleeping)``."""
        return self.fields.get("State", "")[:1] or None

    @property
    def rss_bytes(self) -> int | None:
        """VmRSS in bytes (None for kernel threads, which have no VmRSS line)."""
        return kb_bytes(self.fields.get("VmRSS"))

    @property
    def cpus_allowed_list(self) -> str | None:
        return self.fields.get("Cpus_allowed_list")

    @property
    def mems_allowed_list(self) -> str | None:
        return self.fields.get("Mems_allowed_list")


def pid_status(text: str | None) -> PidStatus:
    """/proc/<pid>/status text -> PidStatus (empty for no text)."""
    out: dict[str, str] = {}
    for line in (text or "").splitlines():
        k, sep, v = line.partition(":")
        if sep and k and k not in out:
            out[k] = v.strip()
    return PidStatus(out)


def _count(tok: str | None) -> int | None:
    return int(tok) if tok is not None and tok.isdigit() else None


@dataclass(frozen=True)
class PidStat:
    """/proc/<pid>/stat: the fields after ``(comm)``; a field missing or not a number is None."""

    comm: str
    state: str | None  # field 3
    ppid: int | None  # field 4
    utime: int | None  # field 14, clock ticks
    stime: int | None  # field 15, clock ticks
    starttime: int | None  # field 22, clock ticks since boot


def pid_stat(text: str | None) -> PidStat | None:
    """/proc/<pid>/stat text -> PidStat; None for no text.  The command name (field 2) is in
    parentheses and may itself hold spaces and ')': the fields start after the *last* ')'."""
    if not text:
        return None
    close = text.rfind(")")
    rest = text[close + 2 :].split()
    comm = text[text.find("(") + 1 : close] if close >= 0 else ""

    def at(i: int) -> str | None:
        return rest[i] if len(rest) > i else None

    return PidStat(comm=comm, state=at(0), ppid=_count(at(1)), utime=_count(at(11)),
                   stime=_count(at(12)), starttime=_count(at(19)))  # fmt: skip


@dataclass(frozen=True)
class MountInfoLine:
    """One line of /proc/<pid>/mountinfo."""

    mount_point: str  # octal escapes (\\040) decoded
    device: str  # major:minor of the filesystem (what st_dev says)
    fstype: str
    source: str  # the mounted device or remote path


def mountinfo(text: str | None) -> list[MountInfoLine]:
    """/proc/<pid>/mountinfo -> its lines (``36 35 98:0 /mnt1 /mnt/a rw - ext3 /dev/root rw``);
    lines without the `` - `` separator or with too few fields are skipped."""
    out = []
    for line in (text or "").splitlines():
        left, sep, right = line.partition(" - ")
        a, b = left.split(), right.split()
        if not sep or len(a) < 5 or len(b) < 2:
            continue
        mp = re.sub(r"\\(\d{3})", lambda m: chr(int(m.group(1), 8)), a[4])
        out.append(MountInfoLine(mount_point=mp, device=a[2], fstype=b[0], source=b[1]))
    return out


def environ(text: str | None, keys: tuple[str, ...] | None = None) -> dict[str, str]:
    """/proc/<pid>/environ (``KEY=value`` items separated by NUL; a text without NUL is read
    one item per line) -> {key: value}, only ``keys`` when given."""
    env: dict[str, str] = {}
    text = text or ""
    for item in text.split("\0") if "\0" in text else text.splitlines():
        key, sep, value = item.partition("=")
        if sep and (keys is None or key in keys):
            env[key] = value
    return env


def cmdline(text: str | None) -> str | None:
    """/proc/<pid>/cmdline (arguments separated by NUL) -> one line, arguments joined by a
    space; None for no text (kernel threads have an empty cmdline)."""
    return text.replace("\0", " ").strip() if text else None
