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

from nodeledger.triage.incidents import Incident
from nodeledger.triage.logtime import find_time

_DATALOADER = re.compile(
    r"DataLoader worker \(pid\(?s?\)? (?P<pids>[\d, ]+)\) is killed by signal: (?P<sig>Killed)"
)
_ELASTIC = re.compile(r"exitcode\s*:\s*-9\b.*?\(?pid\s*:\s*(?P<pid>\d+)\)?")
_ELASTIC_NOPID = re.compile(r"exitcode\s*:\s*-9\b")
_BASH = re.compile(r"line \d+:\s+(?P<pid>\d+) Killed\s+(?P<cmd>.+?)\s*$")
_BARE = re.compile(r"^\s*Killed\s*$")
_SLURM = re.compile(
    r"slurmstepd: error: Detected (?P<n>\d+) oom[-_]kill event\(?s?\)? in (?P<step>\S+?)\.?(?:\s|$)"
)
_OOMKILLED = re.compile(r"\bOOMKilled\b")


def parse_job_log(text: str, source: str, *, origin: str = "file") -> list[Incident]:
    """Every host-side kill trace in a job log (pure; no I/O)."""
    out: list[Incident] = []
    seen_pids: set[int] = set()
    lines = text.splitlines()
    last_time = None
    for i, line in enumerate(lines):
        t = find_time(line)
        if t is not None and (t.dt is not None or t.uptime_s is not None):
            last_time = t

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
        m = _ELASTIC.search(line)
        if m:
            pid = int(m["pid"])
            if pid not in seen_pids:
                seen_pids.add(pid)
                add("job-killed", "torchrun-exitcode-9", pid, pids=[pid], signal="SIGKILL")
            continue
        if _ELASTIC_NOPID.search(line):
            add("job-killed", "exitcode-9", None, pids=[], signal="SIGKILL")
            continue
        m = _BASH.search(line)
        if m:
            pid = int(m["pid"])
            if pid not in seen_pids:
                seen_pids.add(pid)
                add("job-killed", "shell", pid, pids=[pid], signal="SIGKILL", command=m["cmd"])
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
