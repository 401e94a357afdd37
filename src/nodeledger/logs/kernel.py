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


class _Parse:
    """The state of one pass over a kernel log: the reports found, the one open, the kills by
    pid (for the reaper's line), and the current line's time (parsed only where it is needed)."""

    def __init__(self, boot: datetime | None) -> None:
        self.reports: list[_Report] = []
        self.cur: _Report | None = None
        self.by_pid: dict[int, _Report] = {}
        self.clock = RecentTimes(boot)
        self.raw, self.same, self.t = "", False, None

    def when(self) -> LogTime | None:
        """The current line's time: parsed now where its stamp was skipped as the same second."""
        return self.clock.at(self.raw)[1] if self.same else self.t

    def open_new(self, i: int, msg: str) -> _Report:
        self.cur = _Report(start=i, last=i, time=self.when(), first_message=msg)
        self.reports.append(self.cur)
        return self.cur

    def current(self, i: int, msg: str, taken: bool) -> _Report:
        """The open report, or a new one when none is open, the one open has this line's field
        already (``taken``) or ended with its kill line."""
        cur = self.cur
        if cur is None or taken or cur.done:
            cur = self.open_new(i, msg)
        cur.last = i
        return cur

    # -- one method per line rule (``_RULES``): True when the line is taken -----------------

    def invoked(self, m: re.Match, msg: str, i: int) -> bool:
        r = self.open_new(i, msg)
        r.invoked = {"process": m["comm"], "pid": None, "gfp_mask": m["gfp"],
                     "gfp_flags": m["flags"], "order": int(m["order"]),
                     "oom_score_adj": int(m["adj"])}  # fmt: skip
        if m["nodemask"] is not None:
            r.invoked["nodemask"] = m["nodemask"]
        return True

    def reaped(self, m: re.Match, msg: str, i: int) -> bool:
        r = self.by_pid.get(int(m["pid"]))
        if r is not None:
            r.reaped = True
            r.last = max(r.last, i)
        return True

    def alloc_failure(self, m: re.Match, msg: str, i: int) -> bool:
        self.cur = None  # an allocation-failure warning is not an oom-killer report
        return True

    def kill_old(self, m: re.Match, msg: str, i: int) -> bool:
        cur = self.cur
        r = self.current(i, msg, cur is not None and cur.chosen is not None)
        r.chosen = {"pid": int(m["pid"]), "process": m["comm"], "score": int(m["score"])}
        if m["why"].startswith("Memory cgroup"):
            r.memcg_evidence.append("Memory cgroup out of memory")
        return True

    def killed(self, m: re.Match, msg: str, i: int) -> bool:
        r = self.current(i, msg, False)
        vals: dict[str, Any] = {}
        for f in _FIELD_KB.finditer(m["rest"]):
            vals[f["key"].lower().replace("-", "_")] = (f["val"], bool(f["kb"]))
        r.killed = {
            "pid": int(m["pid"]),
            "process": m["comm"],
            "uid": _int(m["uid"]) if m["uid"] else _int(vals.get("uid", (None,))[0]),
            "fields": vals,
        }
        if m["why"] and m["why"].startswith("Memory cgroup"):
            r.memcg_evidence.append("Memory cgroup out of memory")
        r.kill_time, r.kill_line, r.kill_message = self.when(), i, msg
        self.by_pid[int(m["pid"])] = r
        self.cur = None  # the kill line ends a report (the reaper line finds it by pid)
        return True

    def oom_kill(self, m: re.Match, msg: str, i: int) -> bool:
        cur = self.cur
        r = self.current(i, msg, cur is not None and cur.oom_kill is not None)
        r.oom_kill = _kv_line(m["kv"])
        if r.oom_kill.get("constraint") == "CONSTRAINT_MEMCG" or "oom_memcg" in r.oom_kill:
            r.memcg_evidence.append("oom-kill: constraint=CONSTRAINT_MEMCG")
        return True

    def task_in(self, m: re.Match, msg: str, i: int) -> bool:
        cur = self.cur
        r = self.current(i, msg, cur is not None and cur.task_in is not None)
        r.task_in = {"task_memcg": m["task"], "oom_memcg": m["oom"]}
        r.memcg_evidence.append("Task in … killed as a result of limit of …")
        return True

    def memcg_usage(self, m: re.Match, msg: str, i: int) -> bool:
        cur = self.cur
        r = self.current(i, msg, cur is not None and m["what"] in cur.memcg)
        limit_kb = int(m["limit"])
        r.memcg[m["what"]] = {
            "usage": kernel_kb(m["usage"]),
            "limit": None if limit_kb >= UNLIMITED_KB else kernel_kb(limit_kb),
            "failcnt": int(m["failcnt"]),
            "unlimited": limit_kb >= UNLIMITED_KB,
        }
        if m["what"] == "memory":
            r.memcg_evidence.append("memory: usage …, limit …")
        return True

    def memcg_stats(self, m: re.Match, msg: str, i: int) -> bool:
        cur = self.cur
        r = self.current(i, msg, cur is not None and cur.memcg_path is not None)
        r.memcg_path = m["cg"].strip()
        for s in _STATS_KB.finditer(m["rest"]):
            r.memcg_stats[s["key"]] = int(s["val"]) * 1024
        r.memcg_evidence.append("Memory cgroup stats for …")
        return True

    def task_header(self, m: re.Match, msg: str, i: int) -> bool:
        cur = self.cur
        self.current(i, msg, cur is not None and cur.task_cols is not None).task_cols = m[
            "cols"
        ].split()
        return True

    def tasks_state(self, m: re.Match, msg: str, i: int) -> bool:
        cur = self.cur
        self.current(i, msg, cur is not None and cur.task_cols is not None)
        return True

    def task_row(self, m: None, msg: str, i: int) -> bool:
        cur = self.cur
        if cur is None or not cur.task_cols:
            return False
        row_m = _TASK_ROW.match(msg)
        if row_m is None:
            return False
        row = _task_row(int(row_m["pid"]), row_m["rest"].strip(), cur.task_cols)
        if row is not None:  # a row whose columns do not read is taken, not kept
            if len(cur.tasks) < _MAX_TASKS:
                cur.tasks.append(row)
            else:
                cur.tasks_dropped += 1
            cur.last = i
        return True

    def mem_info(self, m: None, msg: str, i: int) -> bool:
        cur = self.cur
        if cur is None:
            return True  # Mem-Info also follows allocation failures: not an oom report alone
        cur.in_mem_info = True
        for k, v in _KV.findall(msg, len("Mem-Info:")):
            cur.mem_info[k] = int(v)
        cur.last = i
        return True

    def stack(self, m: re.Match, msg: str, i: int) -> bool:
        if self.cur is None:
            self.open_new(i, msg)  # a report whose start is cut off
        else:
            self.cur.last = i
        return True

    def cpu(self, m: re.Match, msg: str, i: int) -> bool:
        cur = self.cur
        if cur is None or cur.invoked is None or cur.invoker_pid is not None:
            return False
        cur.invoker_pid, cur.last = int(m["pid"]), i
        return True

    def cpuset(self, m: re.Match, msg: str, i: int) -> bool:
        cur = self.cur
        if cur is None or cur.cpuset is not None:
            return False
        cur.cpuset, cur.last = {"cpuset": m["cpuset"], "mems_allowed": m["mems"]}, i
        return True

    def swap(self, m: re.Match, msg: str, i: int) -> bool:
        if self.cur is not None:
            self.cur.swap[m["which"].lower()] = int(m["kb"]) * 1024
            self.cur.last = i
        return True

    def ram_pages(self, m: re.Match, msg: str, i: int) -> bool:
        if self.cur is not None:
            self.cur.ram_pages, self.cur.last = int(m["n"]), i
        return True

    def trace(self, m: None, msg: str, i: int) -> bool:
        if self.cur is not None:
            self.cur.last = i
        return True


# The line rules of an oom-killer report, tried in order on each message inside one (and on the
# lines that can open one): (the fixed text the line holds, whether it must start with it, the
# pattern then matched (searched where the flag says), the _Parse method that takes it).  The
# fixed text is tested first, so most lines of a report (its call trace and task table) cost a
# few substring tests, not a regex each.
_RULES: tuple[tuple[str | tuple[str, ...], bool, re.Pattern | None, bool, str], ...] = (
    (" invoked oom-killer: ", False, _INVOKED, False, "invoked"),
    ("oom_reaper: ", True, _REAPED, False, "reaped"),
    ("allocation failure", False, _ALLOC_FAIL, True, "alloc_failure"),
    ("Kill process ", False, _KILL_OLD, False, "kill_old"),
    ("Killed process ", False, _KILLED, False, "killed"),
    ("oom-kill:", True, _OOM_KILL, False, "oom_kill"),
    ("Task in ", True, _TASK_IN, False, "task_in"),
    (": usage ", False, _MEMCG_USAGE, False, "memcg_usage"),
    ("Memory cgroup stats for", True, _MEMCG_STATS, False, "memcg_stats"),
    ("[", True, _TASK_HEADER, False, "task_header"),
    ("Tasks state", True, _TASKS_STATE, False, "tasks_state"),
    ("[", True, None, False, "task_row"),
    ("Mem-Info:", True, None, False, "mem_info"),
    ("oom_kill_process", False, _STACK_OOM, True, "stack"),
    ("out_of_memory", False, _STACK_OOM, True, "stack"),
    ("CPU: ", True, _CPU, False, "cpu"),
    (" cpuset=", False, _CPUSET, False, "cpuset"),
    (("Free swap", "Total swap"), True, _SWAP, False, "swap"),
    (" pages RAM", False, _RAM_PAGES, False, "ram_pages"),
    (("Call Trace", "Call trace", "Hardware name"), True, None, False, "trace"),
)
_RULE_FNS = tuple(
    (
        word,
        start,
        (rx.search if search else rx.match) if rx is not None else None,
        getattr(_Parse, name),
    )
    for word, start, rx, search, name in _RULES
)


def _could_open(raw: str) -> bool:
    """Outside a report, only a line holding one of these can start one (the rest is skipped
    unparsed)."""
    return (
        "oom" in raw
        or "Kill" in raw
        or "Task" in raw
        or "kB, limit " in raw
        or "cgroup stats" in raw
        or "out_of_memory" in raw
        or ("pid" in raw and _PID_HEADER_HINT.search(raw) is not None)
    )


def parse_kernel_log(
    text: str | Iterable[str], source: str, *, origin: str = "file", boot: datetime | None = None
) -> list[Incident]:
    """Every oom-killer report in ``text`` (a string, or its lines) as an :class:`Incident`
    (pure; no I/O; one pass, lines outside a report skipped unparsed; each line of a report
    taken by the first rule of ``_RULES`` that matches it).

    ``boot`` (the machine's boot time) places uptime-only stamps on the wall clock; give it only
    for the live kernel log of this machine.
    """
    st = _Parse(boot)
    clock = st.clock
    pending, window = clock.pending, clock.window
    last_stamp: LogTime | None = None
    last_head = None
    rules = _RULE_FNS
    for i, raw in enumerate(as_lines(text), 1):
        if st.cur is None and not _could_open(raw):
            pending.append(raw)
            if len(pending) >= window:
                clock.settle()
            continue
        raw = st.raw = clip_digits(raw)
        # inside a report, a line whose first characters (its stamp down to the second, in the
        # ISO, ctime and syslog formats) repeat the previous stamped line's has that line's time:
        # neither parsed again nor checked for a gap (the exact time is parsed only where a line
        # needs it: one that opens a report or kills a process, through ``_Parse.when``)
        head = raw[:_SAME_SECOND]
        same = st.same = st.cur is not None and last_stamp is not None and head == last_head
        if same:
            stamp = st.t = None
        else:
            stamp, st.t = clock.at(raw)
            if stamp is not None:
                last_stamp, last_head = stamp, head
        msg = kernel_message(raw)
        if not msg:
            continue
        cur = st.cur
        # a report left open (truncated) does not swallow lines of a much later event
        if not same and cur is not None and stamp is not None and cur.time is not None:
            gap = seconds_apart(stamp, cur.time)
            if gap is not None and gap > _GAP_S:
                cur = st.cur = None
        if cur is not None and cur.in_mem_info:  # Mem-Info's continuation lines
            if _PAGES_KV.match(msg):
                for k, v in _KV.findall(msg):
                    cur.mem_info[k] = int(v)
                cur.last = i
                continue
            cur.in_mem_info = False
        for word, start, find, take in rules:
            if not (msg.startswith(word) if start else word in msg):
                continue
            m = find(msg) if find is not None else None
            if (find is None or m is not None) and take(st, m, msg, i):
                break
    return [_incident(r, source, origin) for r in st.reports]


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
