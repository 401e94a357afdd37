"""Kernel oom-killer reports, from ``dmesg`` / ``journalctl -k`` / kern.log / syslog text.

A report (mm/oom_kill.c, kernels 2.6 → 6.x) runs, in order::

    <comm> invoked oom-killer: gfp_mask=0x…(…), order=N, oom_score_adj=N
    CPU: N PID: N Comm: …            (3.x: "<comm> cpuset=… mems_allowed=…")
    Call Trace: …
    Mem-Info: …  / "Free swap  = …kB" / "Total swap = …kB" / "N pages RAM"
    (memory cgroup) "Task in … killed as a result of limit of …" / "memory: usage …kB, limit …kB,
        failcnt N" / "Memory cgroup stats for …: cache:…KB rss:…KB …"
    "Tasks state (memory values in pages):" / [  pid  ]   uid  tgid total_vm      rss … name
    oom-kill:constraint=CONSTRAINT_…,nodemask=…,cpuset=…,mems_allowed=…,global_oom|oom_memcg=…,
        task_memcg=…,task=…,pid=…,uid=…                                      (≥ 4.19)
    Out of memory: Killed process N (comm) total-vm:…kB, anon-rss:…kB, file-rss:…kB,
        shmem-rss:…kB, UID:N pgtables:…kB oom_score_adj:N                    (≥ 5.x)
      or (old) "Out of memory: Kill process N (comm) score S or sacrifice child" +
        "Killed process M (comm) total-vm:…kB, anon-rss:…kB, file-rss:…kB[, shmem-rss:…kB]"
    oom_reaper: reaped process N (comm), now anon-rss:…kB, …

Excerpts are common (grep-filtered, cut at either end): each report found becomes an incident
with ``complete`` false and a note when its kill line is missing. Line prefixes (ISO / ``-T`` /
syslog timestamps, ``host kernel:``, ``<6>``, ``[uptime]``, VMware ``Guest:``) are stripped first.

Sizes: the kernel's kB is 1024 bytes. Task-table columns are in pages (``pgtables_bytes`` in
bytes); they become bytes only when the report itself shows the page size (the killed task's
total-vm in kB ÷ its total_vm in pages) — else they stay in pages.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nodeledger.logs.incidents import Incident
from nodeledger.logs.lines import as_lines
from nodeledger.logs.logtime import LogTime, RecentTimes, seconds_apart
from nodeledger.logs.units import UNLIMITED_KB, clip_digits, kernel_kb

_MON = "(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
# matched at a position (``rx.match(s, pos)``), never by slicing; every repetition is bounded, so
# stripping costs time linear in the line whatever it holds
_PREFIXES = [
    re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d\S{0,64}\s{1,64}"),  # ISO: dmesg iso, journal
    re.compile(
        rf"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) {_MON} {{1,8}}\d\d? \d\d:\d\d:\d\d \d{{4}}\]\s?"
    ),  # dmesg -T
    re.compile(rf"{_MON} {{1,8}}\d\d? \d\d:\d\d:\d\d\s{{1,64}}"),  # syslog
    re.compile(r"\S{1,255} kernel:\s?"),  # "host kernel:" (syslog, journalctl)
    re.compile(r"kernel:\s?"),
    re.compile(r"In\(\d{1,20}\) \S{1,255} - Guest:\s{0,64}"),  # VMware vmware.log
    re.compile(r"<\d{1,20}>"),  # syslog priority (dmesg -r, /dev/kmsg)
    re.compile(r"\[\s{0,64}\d{1,20}\.\d{1,20}\]\s?"),  # [uptime]
]
_MAX_PREFIXES = 32  # prefixes stripped from one line at most
# _FROM[k]: prefixes k, k+1, ... as one alternation, each its own group: one call finds the
# next prefix of a pass that matches (the first, in order, as trying them one by one would)
_FROM = [re.compile("|".join(f"({rx.pattern})" for rx in _PREFIXES[k:]))
         for k in range(len(_PREFIXES))]  # fmt: skip

_INVOKED = re.compile(
    r"^(?P<comm>.+?) invoked oom-killer: gfp_mask=(?P<gfp>0x[0-9a-fA-F]+)(?:\((?P<flags>[^)]*)\))?,"
    r"(?: nodemask=(?P<nodemask>[^,]*),)? order=(?P<order>-?\d+), oom_score_adj=(?P<adj>-?\d+)"
)
_CPU = re.compile(r"^CPU: \d+ (?:UID: \d+ )?PID: (?P<pid>\d+) Comm: (?P<comm>\S+)")
_CPUSET = re.compile(r"^(?P<comm>.+?) cpuset=(?P<cpuset>\S+) mems_allowed=(?P<mems>\S+)")
# a kernel stack frame of the oom path: x86/arm64 "oom_kill_process.cold+0xb/0x10", ARM32
# "oom_kill_process from out_of_memory+0x218/0x34c" (not any text that says out_of_memory)
_STACK_OOM = re.compile(
    r"\b(?:oom_kill_process|out_of_memory)(?:\.[\w.]{1,64})?"
    r"(?:\+0x[0-9a-f]{1,16}/0x[0-9a-f]{1,16}| from )"
)
_MEMINFO = re.compile(r"^Mem-Info:")
# linear: a key never starts with a digit, so a run of digits is never re-split between a value
# and the next key (no possessive quantifiers: those need Python 3.11)
_PAGES_KV = re.compile(r"^(?:[^\W\d]\w*:\d+\s*)+$")
# a key starts a run of word characters (lookbehind): one try per run, linear in the line
_KV = re.compile(r"(?<!\w)(\w+):(\d+)")
_SWAP = re.compile(r"^(?P<which>Free|Total) swap\s*=\s*(?P<kb>\d+)kB")
_RAM_PAGES = re.compile(r"^(?P<n>\d+) pages RAM\b")
_MEMCG_USAGE = re.compile(
    r"^(?P<what>memory|memory\+swap|swap|kmem): usage (?P<usage>\d+)kB, limit (?P<limit>\d+)kB,"
    r" failcnt (?P<failcnt>\d+)"
)
_TASK_IN = re.compile(r"^Task in (?P<task>\S+) killed as a result of limit of (?P<oom>\S+)")
_MEMCG_STATS = re.compile(r"^Memory cgroup stats for (?P<cg>[^:]*):(?P<rest>.*)$")
_TASKS_STATE = re.compile(r"^Tasks state \(memory values in pages\):")
_TASK_HEADER = re.compile(r"^\[\s*pid\s*\]\s(?P<cols>.+)$")  # cols stripped by the caller
_TASK_ROW = re.compile(r"^\[\s*(?P<pid>\d+)\]\s(?P<rest>.+)$")
_PID_HEADER_HINT = re.compile(r"\[\s*pid\s*\]")
_OOM_KILL = re.compile(r"^oom-kill:(?P<kv>.+)$")
_KILL_OLD = re.compile(
    r"^(?P<why>Memory cgroup out of memory|Out of memory(?: \(oom_kill_allocating_task\))?): "
    r"Kill process (?P<pid>\d+) \((?P<comm>.*?)\) score (?P<score>-?\d+) or sacrifice child"
)
_KILLED = re.compile(
    r"^(?:(?P<why>Memory cgroup out of memory|Out of memory(?: \(oom_kill_allocating_task\))?): )?"
    r"Killed process (?P<pid>\d+),? (?:UID (?P<uid>\d+), )?\((?P<comm>.*?)\),? ?(?P<rest>.*)$"
)
_REAPED = re.compile(r"^oom_reaper: reaped process (?P<pid>\d+) \((?P<comm>.*?)\)")
_ALLOC_FAIL = re.compile(r"(?:page allocation failure|vmalloc: allocation failure)")
# a key starts a run of key characters (lookbehind): one try per run, not one per character
_FIELD_KB = re.compile(r"(?<![\w-])(?P<key>[\w-]+):(?P<val>-?\d+)(?P<kb>kB)?")
_STATS_KB = re.compile(r"(?<!\w)(?P<key>\w+):(?P<val>\d+)KB", re.I)

_PAGE_SIZES = (4096, 8192, 16384, 65536)
KERNEL_FIGURES = (
    "total_vm_bytes",
    "anon_rss_bytes",
    "file_rss_bytes",
    "shmem_rss_bytes",
    "pgtables_bytes",
    "memcg_usage_bytes",
    "memcg_limit_bytes",
    "memcg_swap_usage_bytes",
    "memcg_swap_limit_bytes",
    "memcg_rss_bytes",
    "memcg_cache_bytes",
    "swap_total_bytes",
    "swap_free_bytes",
    "tasks_rss_bytes",
)
_MAX_TASKS = 100_000  # task-table rows kept per report (the rest counted in a note)
_GAP_S = 30.0  # a report prints within seconds; lines further apart belong to another event


def kernel_message(raw: str) -> str:
    """The kernel's own text of a log line: timestamps, host and priority prefixes removed."""
    s = raw.rstrip("\r\n")
    pos = 0
    n = len(_PREFIXES)
    for _ in range(_MAX_PREFIXES):  # passes over the prefixes in order, each from where the
        start, k = pos, 0  # previous left off, until a pass strips nothing
        while k < n:
            m = _FROM[k].match(s, pos)
            if m is None:
                break
            pos, k = m.end(), k + m.lastindex  # prefix k + lastindex - 1 matched (never empty)
        if pos == start:
            break
    return s[pos:].strip()


@dataclass
class _Report:
    start: int
    last: int
    time: LogTime | None = None
    kill_time: LogTime | None = None
    kill_line: int | None = None
    kill_message: str | None = None
    invoked: dict[str, Any] | None = None
    invoker_pid: int | None = None
    cpuset: dict[str, str] | None = None
    memcg_evidence: list[str] = field(default_factory=list)
    oom_kill: dict[str, Any] | None = None
    chosen: dict[str, Any] | None = None
    killed: dict[str, Any] | None = None
    reaped: bool = False
    mem_info: dict[str, int] = field(default_factory=dict)
    in_mem_info: bool = False
    swap: dict[str, int] = field(default_factory=dict)
    ram_pages: int | None = None
    memcg: dict[str, dict[str, int | None]] = field(default_factory=dict)
    memcg_path: str | None = None
    memcg_stats: dict[str, int] = field(default_factory=dict)
    task_in: dict[str, str] | None = None
    task_cols: list[str] | None = None
    tasks: list[dict[str, Any]] = field(default_factory=list)
    first_message: str = ""
    tasks_dropped: int = 0

    @property
    def done(self) -> bool:
        return self.killed is not None


def _kv_line(text: str) -> dict[str, Any]:
    """``constraint=CONSTRAINT_NONE,nodemask=(null),…,global_oom,…`` -> dict (flags -> True)."""
    out: dict[str, Any] = {}
    last: str | None = None
    for tok in text.split(","):
        if "=" in tok:
            k, v = tok.split("=", 1)
            out[k.strip()] = v.strip()
            last = k.strip()
        elif tok.strip() in ("global_oom",):
            out[tok.strip()] = True
        elif last is not None and isinstance(out.get(last), str):
            out[last] += "," + tok  # a value with commas, e.g. mems_allowed=0,2
    return out


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


_SAME_SECOND = 20  # "2025-03-14T09:26:53," / "[Thu Dec  4 12:00:01" / "Dec  4 12:00:01 host"


def parse_kernel_log(
    text: str | Iterable[str], source: str, *, origin: str = "file", boot: datetime | None = None
) -> list[Incident]:
    """Every oom-killer report in ``text`` (a string, or its lines) as an :class:`Incident`
    (pure; no I/O; one pass, lines outside a report skipped unparsed).

    ``boot`` (the machine's boot time) places uptime-only stamps on the wall clock; give it only
    for the live kernel log of this machine.
    """
    reports: list[_Report] = []
    cur: _Report | None = None
    clock = RecentTimes(boot)
    by_pid: dict[int, _Report] = {}

    def open_new(i: int, t: LogTime | None, msg: str) -> _Report:
        nonlocal cur
        cur = _Report(start=i, last=i, time=t, first_message=msg)
        reports.append(cur)
        return cur

    pending, window = clock.pending, clock.window
    last_stamp: LogTime | None = None
    last_head = None
    raw, same, t = "", False, None

    def when() -> LogTime | None:
        """The current line's time: parsed now where its stamp was skipped as the same second."""
        return clock.at(raw)[1] if same else t

    for i, raw in enumerate(as_lines(text), 1):  # ``when`` reads raw, same and t of this line
        # outside a report, a line that cannot start one is skipped unparsed
        if cur is None and not (
            "oom" in raw
            or "Kill" in raw
            or "Task" in raw
            or "kB, limit " in raw
            or "cgroup stats" in raw
            or "out_of_memory" in raw
            or ("pid" in raw and _PID_HEADER_HINT.search(raw) is not None)
        ):
            pending.append(raw)
            if len(pending) >= window:
                clock.settle()
            continue
        raw = clip_digits(raw)
        # inside a report, a line whose first characters (its stamp down to the second, in the
        # ISO, ctime and syslog formats) repeat the previous stamped line's has that line's time:
        # neither parsed again nor checked for a gap (the same second)
        # (the exact time is parsed only where a line needs it: one that opens a report or
        # kills a process, through ``when``)
        head = raw[:_SAME_SECOND]
        same = cur is not None and last_stamp is not None and head == last_head
        if same:
            stamp = t = None
        else:
            stamp, t = clock.at(raw)
            if stamp is not None:
                last_stamp, last_head = stamp, head

        msg = kernel_message(raw)
        if not msg:
            continue
        # a report left open (truncated) does not swallow lines of a much later event
        if not same and cur is not None and stamp is not None and cur.time is not None:
            gap = seconds_apart(stamp, cur.time)
            if gap is not None and gap > _GAP_S:
                cur = None
        if cur is not None and cur.in_mem_info:
            if _PAGES_KV.match(msg):
                for k, v in _KV.findall(msg):
                    cur.mem_info[k] = int(v)
                cur.last = i
                continue
            cur.in_mem_info = False

        # each pattern is tried only on a message holding its fixed words (most lines of a
        # report, its call trace and task table, need two or three tests, not twenty regexes)
        m = _INVOKED.match(msg) if " invoked oom-killer: " in msg else None
        if m:
            r = open_new(i, when(), msg)
            r.invoked = {
                "process": m["comm"],
                "pid": None,
                "gfp_mask": m["gfp"],
                "gfp_flags": m["flags"],
                "order": int(m["order"]),
                "oom_score_adj": int(m["adj"]),
            }
            if m["nodemask"] is not None:
                r.invoked["nodemask"] = m["nodemask"]
            continue
        m = _REAPED.match(msg) if msg.startswith("oom_reaper: ") else None
        if m:
            r = by_pid.get(int(m["pid"]))
            if r is not None:
                r.reaped = True
                r.last = max(r.last, i)
            continue
        if "allocation failure" in msg and _ALLOC_FAIL.search(msg):
            cur = None  # an allocation-failure warning is not an oom-killer report
            continue

        m = _KILL_OLD.match(msg) if "Kill process " in msg else None
        if m:
            if cur is None or cur.chosen is not None or cur.done:
                open_new(i, when(), msg)
            assert cur is not None
            cur.chosen = {
                "pid": int(m["pid"]),
                "process": m["comm"],
                "score": int(m["score"]),
            }
            if m["why"].startswith("Memory cgroup"):
                cur.memcg_evidence.append("Memory cgroup out of memory")
            cur.last = i
            continue
        m = _KILLED.match(msg) if "Killed process " in msg else None
        if m:
            if cur is None or cur.done:
                open_new(i, when(), msg)
            assert cur is not None
            rest = m["rest"]
            vals: dict[str, Any] = {}
            for f in _FIELD_KB.finditer(rest):
                key = f["key"].lower().replace("-", "_")
                vals[key] = (f["val"], bool(f["kb"]))
            cur.killed = {
                "pid": int(m["pid"]),
                "process": m["comm"],
                "uid": _int(m["uid"]) if m["uid"] else _int(vals.get("uid", (None,))[0]),
                "fields": vals,
            }
            if m["why"] and m["why"].startswith("Memory cgroup"):
                cur.memcg_evidence.append("Memory cgroup out of memory")
            cur.kill_time = when()
            cur.kill_line = i
            cur.kill_message = msg
            cur.last = i
            by_pid[int(m["pid"])] = cur
            cur = None  # the kill line ends a report (the reaper line finds it by pid)
            continue
        m = _OOM_KILL.match(msg) if msg.startswith("oom-kill:") else None
        if m:
            if cur is None or cur.oom_kill is not None or cur.done:
                open_new(i, when(), msg)
            assert cur is not None
            cur.oom_kill = _kv_line(m["kv"])
            if cur.oom_kill.get("constraint") == "CONSTRAINT_MEMCG" or "oom_memcg" in cur.oom_kill:
                cur.memcg_evidence.append("oom-kill: constraint=CONSTRAINT_MEMCG")
            cur.last = i
            continue
        m = _TASK_IN.match(msg) if msg.startswith("Task in ") else None
        if m:
            if cur is None or cur.task_in is not None or cur.done:
                open_new(i, when(), msg)
            assert cur is not None
            cur.task_in = {"task_memcg": m["task"], "oom_memcg": m["oom"]}
            cur.memcg_evidence.append("Task in … killed as a result of limit of …")
            cur.last = i
            continue
        m = _MEMCG_USAGE.match(msg) if ": usage " in msg else None
        if m:
            if cur is None or m["what"] in cur.memcg or cur.done:
                open_new(i, when(), msg)
            assert cur is not None
            limit_kb = int(m["limit"])
            cur.memcg[m["what"]] = {
                "usage": kernel_kb(m["usage"]),
                "limit": None if limit_kb >= UNLIMITED_KB else kernel_kb(limit_kb),
                "failcnt": int(m["failcnt"]),
                "unlimited": limit_kb >= UNLIMITED_KB,
            }
            if m["what"] == "memory":
                cur.memcg_evidence.append("memory: usage …, limit …")
            cur.last = i
            continue
        m = _MEMCG_STATS.match(msg) if msg.startswith("Memory cgroup stats for") else None
        if m:
            if cur is None or cur.memcg_path is not None or cur.done:
                open_new(i, when(), msg)
            assert cur is not None
            cur.memcg_path = m["cg"].strip()
            for s in _STATS_KB.finditer(m["rest"]):
                cur.memcg_stats[s["key"]] = int(s["val"]) * 1024
            cur.memcg_evidence.append("Memory cgroup stats for …")
            cur.last = i
            continue
        bracket = msg.startswith("[")
        m = _TASK_HEADER.match(msg) if bracket else None
        if m:
            if cur is None or cur.task_cols is not None or cur.done:
                open_new(i, when(), msg)
            assert cur is not None
            cur.task_cols = m["cols"].split()
            cur.last = i
            continue
        if msg.startswith("Tasks state") and _TASKS_STATE.match(msg):
            if cur is None or cur.task_cols is not None or cur.done:
                open_new(i, when(), msg)
            assert cur is not None
            cur.last = i
            continue
        if cur is not None and cur.task_cols and bracket:
            m = _TASK_ROW.match(msg)
            if m:
                row = _task_row(int(m["pid"]), m["rest"].strip(), cur.task_cols)
                if row is not None:
                    if len(cur.tasks) < _MAX_TASKS:
                        cur.tasks.append(row)
                    else:
                        cur.tasks_dropped += 1
                    cur.last = i
                continue
        if msg.startswith("Mem-Info:"):
            if cur is None:
                continue  # Mem-Info also follows allocation failures: not an oom report alone
            cur.in_mem_info = True
            for k, v in _KV.findall(msg, len("Mem-Info:")):
                cur.mem_info[k] = int(v)
            cur.last = i
            continue
        stack = ("oom_kill_process" in msg or "out_of_memory" in msg) and bool(
            _STACK_OOM.search(msg)
        )
        if cur is None and stack:
            open_new(i, when(), msg)  # a report whose start is cut off
            continue
        if cur is None:
            continue
        m = _CPU.match(msg) if msg.startswith("CPU: ") else None
        if m and cur.invoked is not None and cur.invoker_pid is None:
            cur.invoker_pid = int(m["pid"])
            cur.last = i
            continue
        m = _CPUSET.match(msg) if " cpuset=" in msg else None
        if m and cur.cpuset is None:
            cur.cpuset = {"cpuset": m["cpuset"], "mems_allowed": m["mems"]}
            cur.last = i
            continue
        m = _SWAP.match(msg) if msg.startswith(("Free swap", "Total swap")) else None
        if m:
            cur.swap[m["which"].lower()] = int(m["kb"]) * 1024
            cur.last = i
            continue
        m = _RAM_PAGES.match(msg) if " pages RAM" in msg else None
        if m:
            cur.ram_pages = int(m["n"])
            cur.last = i
            continue
        if stack or msg.startswith(("Call Trace", "Call trace", "Hardware name")):
            cur.last = i

    return [_incident(r, source, origin) for r in reports]


def _task_row(pid: int, rest: str, cols: list[str]) -> dict[str, Any] | None:
    """One task-table row by its header's columns (the name, last, may contain spaces)."""
    parts = rest.split(None, len(cols) - 1)
    if len(parts) < len(cols):
        return None
    row: dict[str, Any] = {"pid": pid}
    for col, val in zip(cols[:-1], parts[:-1], strict=True):
        v = _int(val)
        if v is None:
            return None
        row[col] = v
    row[cols[-1]] = parts[-1]
    return row


def _page_size(r: _Report) -> tuple[int | None, str | None]:
    """The page size the report itself shows: the killed task's total-vm kB ÷ its pages."""
    if r.killed is None or not r.tasks:
        return None, None
    kb = r.killed["fields"].get("total_vm")
    if kb is None:
        return None, None
    row = next((t for t in r.tasks if t["pid"] == r.killed["pid"]), None)
    if row is None or not row.get("total_vm"):
        return None, None
    total = int(kb[0]) * 1024
    if total % row["total_vm"]:
        return None, None
    size = total // row["total_vm"]
    if size not in _PAGE_SIZES:
        return None, None
    how = (
        f"pid {row['pid']}: total-vm {kb[0]} kB in the kill line = {row['total_vm']} pages "
        "in the task table"
    )
    return size, how


def _incident(r: _Report, source: str, origin: str) -> Incident:
    # long: a builder: one Incident from a parsed report; figures and details are flat dicts
    memcg = bool(r.memcg_evidence)
    kind = "memcg-oom" if memcg else "kernel-oom-killer"
    killed = r.killed or {}
    fields = killed.get("fields", {})
    ok = r.oom_kill or {}

    def kb(key: str) -> int | None:
        v = fields.get(key)
        return kernel_kb(v[0]) if v and v[1] else None

    pid = killed.get("pid")
    if pid is None:
        pid = _int(ok.get("pid"))
    process = killed.get("process") or ok.get("task")
    uid = killed.get("uid")
    if uid is None:
        uid = _int(ok.get("uid"))
    page, page_how = _page_size(r)
    mem = r.memcg.get("memory", {})
    memsw = r.memcg.get("memory+swap", {})
    swap_cg = r.memcg.get("swap", {})

    figures: dict[str, int | None] = {
        "total_vm_bytes": kb("total_vm"),
        "anon_rss_bytes": kb("anon_rss"),
        "file_rss_bytes": kb("file_rss"),
        "shmem_rss_bytes": kb("shmem_rss"),
        "pgtables_bytes": kb("pgtables"),
        "memcg_usage_bytes": mem.get("usage"),
        "memcg_limit_bytes": mem.get("limit"),
        "memcg_swap_usage_bytes": (memsw or swap_cg).get("usage"),
        "memcg_swap_limit_bytes": (memsw or swap_cg).get("limit"),
        "memcg_rss_bytes": r.memcg_stats.get("rss"),
        "memcg_cache_bytes": r.memcg_stats.get("cache"),
        "swap_total_bytes": r.swap.get("total"),
        "swap_free_bytes": r.swap.get("free"),
        "tasks_rss_bytes": None,
    }
    derived: list[str] = []
    tasks_rss_pages = sum(t.get("rss", 0) for t in r.tasks) if r.tasks else None
    if page is not None and tasks_rss_pages is not None:
        figures["tasks_rss_bytes"] = tasks_rss_pages * page
        derived.append("tasks_rss_bytes = sum of the task table's rss pages × page size")

    details: dict[str, Any] = {
        "constraint": ok.get("constraint"),
        "global_oom": bool(ok.get("global_oom")) if ok else None,
        "oom_memcg": ok.get("oom_memcg") or (r.task_in or {}).get("oom_memcg"),
        "task_memcg": ok.get("task_memcg") or (r.task_in or {}).get("task_memcg"),
        "cgroup": r.memcg_path,
        "cpuset": ok.get("cpuset") or (r.cpuset or {}).get("cpuset"),
        "mems_allowed": ok.get("mems_allowed") or (r.cpuset or {}).get("mems_allowed"),
        "nodemask": ok.get("nodemask"),
        "uid": uid,
        "oom_score_adj": _int(fields.get("oom_score_adj", (None,))[0]),
        "invoked_by": dict(r.invoked, pid=r.invoker_pid) if r.invoked else None,
        "chosen": r.chosen,
        "reaped": r.reaped,
        "memcg_failcnt": mem.get("failcnt"),
        "memcg_limit_unlimited": mem.get("unlimited"),
        "memcg_evidence": sorted(set(r.memcg_evidence)),
        "mem_info_pages": dict(r.mem_info) or None,
        "ram_pages": r.ram_pages,
        "page_size_bytes": page,
        "page_size_from": page_how,
        "tasks_count": len(r.tasks) if r.task_cols else None,
        "tasks_rss_pages": tasks_rss_pages,
        "tasks_top": _top_tasks(r.tasks, page),
        "same_name_tasks": _same_name(r.tasks, process, page),
        "derived": derived,
    }
    notes: list[str] = []
    if r.killed is None:
        notes.append(
            "the report is cut before its kill line: which process was killed is not in this text"
        )
    if r.invoked is None:
        notes.append(
            "the report's first line ('… invoked oom-killer') is not in this text: "
            "the allocation that triggered it is unknown"
        )
    if r.tasks_dropped:
        notes.append(
            f"the task table has more than {_MAX_TASKS:,} rows: {r.tasks_dropped:,} rows past "
            "that were counted, not kept"
        )
    if r.tasks and page is None:
        notes.append(
            "task-table memory is in pages and this report does not show the page size: "
            "kept in pages (details.tasks_top)"
        )
    last = max(r.last, r.kill_line or 0)
    inc = Incident(
        kind=kind,
        source=source,
        line=r.start,
        last_line=last,
        message=r.kill_message or r.first_message,
        time=r.kill_time or r.time,
        process=process,
        pid=pid,
        card=None,
        complete=r.killed is not None,
        figures=figures,
        details=details,
        notes=notes,
        origin=origin,
    )
    return inc


def _top_tasks(tasks: list[dict[str, Any]], page: int | None, n: int = 10) -> list[dict[str, Any]]:
    top = sorted(tasks, key=lambda t: t.get("rss", 0), reverse=True)[:n]
    out = []
    for t in top:
        row = dict(t)
        row["rss_bytes"] = t["rss"] * page if page is not None and "rss" in t else None
        out.append(row)
    return out


def _same_name(
    tasks: list[dict[str, Any]], name: str | None, page: int | None
) -> dict[str, Any] | None:
    """How many tasks share the killed task's name (DataLoader workers carry the trainer's)."""
    if not tasks or not name:
        return None
    rows = [t for t in tasks if t.get("name") == name]
    if not rows:
        return None
    pages = sum(t.get("rss", 0) for t in rows)
    return {
        "name": name,
        "count": len(rows),
        "rss_pages": pages,
        "rss_bytes": pages * page if page is not None else None,
    }
