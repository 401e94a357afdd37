"""The ``oom`` use case: the kernel log (dmesg / journalctl) and the job logs read, each
out-of-memory incident found and linked, the report made.  The CLI parses, calls
:func:`diagnose` once and renders (``oom --json`` streams ``report.json_chunks()``).  Never
prints, never exits."""

from __future__ import annotations

from dataclasses import dataclass

from nodeledger.errors import NodeledgerError


@dataclass(frozen=True)
class OomRequest:
    files: tuple[str, ...] = ()  # job logs; "-" for standard input
    since: str | None = None  # 2h, 30m, 1d ...
    no_kernel_log: bool = False
    window_s: float = 60.0  # the link window between a kernel kill and a job's last line
    timeout: float = 5.0  # seconds dmesg / journalctl may run


def diagnose(req: OomRequest):
    """The triage report (triage.report.TriageReport) of the logs the request names."""
    from nodeledger.machine.probe.runner import Runner
    from nodeledger.triage.collect import cleanup, now, parse_duration, read_files, read_kernel_log
    from nodeledger.triage.report import build_report

    if not req.timeout > 0:
        raise NodeledgerError(f"--timeout must be > 0, got {req.timeout}")
    if not req.window_s >= 0:
        raise NodeledgerError(f"--link-window must be >= 0, got {req.window_s}")
    since_s = parse_duration(req.since) if req.since is not None else None
    try:
        sources = read_files(list(req.files))  # a missing file / a device: one line, exit 2
        notes: list[str] = []
        unread: str | None = None
        if req.no_kernel_log:
            notes.append("kernel log not read (--no-kernel-log)")
        else:
            kl = read_kernel_log(Runner(timeout=req.timeout, live=True), since_s)
            notes += kl.notes
            if kl.source is not None:
                sources.insert(0, kl.source)
            else:
                unread = "; ".join(kl.notes[:-1]) or "no tool could read it"
        return build_report(sources, notes=notes, since_s=since_s, since_text=req.since,
                            now=now(), window_s=req.window_s, kernel_log_unread=unread)  # fmt: skip
    finally:
        cleanup()
