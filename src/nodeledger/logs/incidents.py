"""One out-of-memory incident: what ran out (host or card), where it was logged, its figures.

``side``: ``host`` (host RAM: the kernel oom-killer, a memory cgroup, a job killed by SIGKILL)
or ``card`` (accelerator memory: PyTorch / HIP / NPU allocator, cuBLAS, NCCL, vLLM's KV cache).
One log message is always one side; a report with incidents of both sides says ``both`` in its
verdict (see ``report.py``).

``figures`` holds sizes in bytes, every key of the kind present, ``None`` where the log does not
print it — never a guess. Figures derived from printed ones (e.g. reserved = allocated +
reserved-but-unallocated) are listed in ``details["derived"]`` with their formula.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nodeledger.logs.logtime import LogTime

HOST_KINDS = ("kernel-oom-killer", "memcg-oom", "job-killed")
CARD_KINDS = (
    "torch-cuda-oom",
    "hip-oom",
    "npu-oom",
    "xpu-oom",
    "cublas-alloc",
    "nccl-oom",
    "vllm-kv-cache",
    "vllm-free-memory",
)
KINDS = HOST_KINDS + CARD_KINDS


def side_of(kind: str) -> str:
    return "host" if kind in HOST_KINDS else "card"


@dataclass
class Incident:
    kind: str
    source: str  # the file (or kernel-log command) it came from
    line: int  # first line of the incident, 1-based
    message: str  # the line that names it, trimmed
    last_line: int = 0
    time: LogTime | None = None
    process: str | None = None
    pid: int | None = None
    card: int | None = None
    complete: bool = True
    figures: dict[str, int | None] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    occurrences: int = 1
    also_at: list[str] = field(default_factory=list)
    links: list[dict[str, Any]] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    origin: str = "file"  # "file" or "kernel-log" (read live from this machine)
    id: int = 0

    @property
    def side(self) -> str:
        return side_of(self.kind)

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"

    def to_dict(self) -> dict[str, Any]:
        t = self.time
        return {
            "id": self.id,
            "kind": self.kind,
            "side": self.side,
            "source": self.where,
            "lines": [self.line, self.last_line or self.line],
            "time": t.text if t and t.dt is not None else None,
            "time_iso": t.iso if t else None,
            "uptime_s": t.uptime_s if t else None,
            "process": self.process,
            "pid": self.pid,
            "card": self.card,
            "complete": self.complete,
            "figures": dict(self.figures),
            "details": self.details,
            "message": self.message,
            "occurrences": self.occurrences,
            "also_at": list(self.also_at),
            "links": list(self.links),
            "fixes": list(self.fixes),
            "notes": list(self.notes),
        }
