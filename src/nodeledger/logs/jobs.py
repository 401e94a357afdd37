"""Host-side traces in job logs: the job (or one of its processes) was killed by SIGKILL — what
the kernel oom-killer sends — or a batch system / container runtime reports an OOM kill.

- ``DataLoader worker (pid(s) 123, 456) is killed by signal: Killed.`` (PyTorch DataLoader)
- ``failed (exitcode: -9) local_rank: 0 (pid: 1234) of binary: …`` and the summary block's
  ``exitcode  : -9 (pid: 1234)`` (torchrun / torch.distributed.elastic)
- ``./train.sh: line 12: 4321 Killed  python train.py`` and a bare ``Killed`` (bash)
- ``slurmstepd: error: Detected 1 oom_kill event in StepId=…`` (Slurm's memory cgroup)
- ``OOMKilled`` (Docker / Kubernetes container status)

SIGKILL alone does not prove the oom-killer (anyone may send it): a ``job-killed`` incident is
confirmed when it links to a kernel kill (by pid or time, see ``report.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from nodeledger.logs.incidents import Incident
from nodeledger.logs.lines import as_lines
from nodeledger.logs.logtime import RecentTimes
from nodeledger.logs.units import clip_digits

_DATALOADER = re.compile(
    r"DataLoader worker \(pid\(?s?\)? (?P<pids>[\d, ]+)\) is killed by signal: (?P<sig>Killed)"
)
# "exitcode: -9 … pid: N": the pid searched after the first exitcode (one scan, not one per
# exitcode repeated in the line)
_ELASTIC_NOPID = re.compile(r"exitcode\s*:\s*-9\b")
_ELASTIC_PID = re.compile(r"\(?pid\s*:\s*(?P<pid>\d+)")
_BASH = re.compile(r"line \d+:\s+(?P<pid>\d+) Killed\s+(?P<cmd>.+)$")  # cmd right-stripped
_BARE = re.compile(r"^\s*Killed\s*$")
_SLURM = re.compile(
    r"slurmstepd: error: Detected (?P<n>\d+) oom[-_]kill event\(?s?\)? in (?P<step>\S+?)\.?(?:\s|$)"
)
_OOMKILLED = re.compile(r"\bOOMKilled\b")


def _elastic(line: str) -> tuple[bool, re.Match[str] | None]:
    """(an "exitcode: -9" is in the line, the "pid: N" after it)."""
    m = _ELASTIC_NOPID.search(line)
    if m is None:
        return False, None
    return True, _ELASTIC_PID.search(line, m.end())


def _may_match(line: str) -> bool:
    """A cheap superset of the lines a pattern below matches: each one's fixed words (a kernel's
    "Killed process N" line, in a job log's neighbour, needs none of them)."""
    if "Killed" in line:
        return (
            "killed by signal" in line  # DataLoader
            or "line " in line  # bash
            or line.strip() == "Killed"
            or "OOMKilled" in line
            or "exitcode" in line
            or "slurmstepd" in line
        )
    return "exitcode" in line or "slurmstepd" in line


def parse_job_log(
    text: str | Iterable[str], source: str, *, origin: str = "file"
) -> list[Incident]:
    # long: one pass over the lines; each kill-trace pattern tried in turn, sharing seen_pids
    """Every host-side kill trace in a job log (pure; no I/O; one pass)."""
    out: list[Incident] = []
    seen_pids: set[int] = set()
    clock = RecentTimes()
    pending, window = clock.pending, clock.window
    for i, line in enumerate(as_lines(text)):
        if not _may_match(line):
            pending.append(line)  # a line no pattern can match: skipped unparsed
            if len(pending) >= window:
                clock.settle()
            continue
        line = clip_digits(line)
        _, last_time = clock.at(line)

        def add(
            kind: str, how: str, pid: int | None = None, *, i=i, line=line, t=last_time, **details
        ) -> Incident:
            inc = Incident(
                kind=kind,
                source=source,
                line=i + 1,
                last_line=i + 1,
                message=line.strip()[:2000],
                time=t,
                pid=pid,
                origin=origin,
            )
            inc.details.update(how=how, **details)
            out.append(inc)
            return inc

        m = _DATALOADER.search(line)
        if m:
            pids = [int(p) for p in re.findall(r"\d+", m["pids"])]
            new = [p for p in pids if p not in seen_pids]
            seen_pids.update(pids)
            if new:
                add("job-killed", "dataloader-worker", new[0], pids=new, signal="SIGKILL")
            continue
        has_exit, m = _elastic(line)
        if m:
            pid = int(m["pid"])
            if pid not in seen_pids:
                seen_pids.add(pid)
                add("job-killed", "torchrun-exitcode-9", pid, pids=[pid], signal="SIGKILL")
            continue
        if has_exit:
            add("job-killed", "exitcode-9", None, pids=[], signal="SIGKILL")
            continue
        m = _BASH.search(line)
        if m:
            pid = int(m["pid"])
            if pid not in seen_pids:
                seen_pids.add(pid)
                add(
                    "job-killed",
                    "shell",
                    pid,
                    pids=[pid],
                    signal="SIGKILL",
                    command=m["cmd"].rstrip(),
                )
            continue
        if _BARE.match(line):
            add("job-killed", "shell", None, pids=[], signal="SIGKILL")
            continue
        m = _SLURM.search(line)
        if m:
            inc = add("memcg-oom", "slurm", None, events=int(m["n"]), step=m["step"])
            inc.complete = False
            inc.notes.append(
                "Slurm counted oom-kill events in the job's memory cgroup (its --mem limit): "
                "the kernel's report has the figures"
            )
            continue
        if _OOMKILLED.search(line):
            inc = add("memcg-oom", "container-runtime", None)
            inc.complete = False
            inc.notes.append(
                "the container runtime reports OOMKilled: the container's memory limit was hit; "
                "the kernel's report has the figures"
            )
            continue
    for inc in out:
        inc.figures = {}
    return out
