"""Card-side out-of-memory messages in job logs (pure functions of text).

- PyTorch's caching allocator, every wording since 1.0 (c10/cuda/CUDACachingAllocator.cpp and
  the vendor forks that copy it):
  * 1.0–1.4: ``CUDA out of memory. Tried to allocate X (GPU N; T total capacity; A already
    allocated; F free; C cached)`` — "cached" there is cached-but-unallocated (the code prints
    ``amount_cached - amount_allocated``);
  * 1.5–2.0: ``… F free; [M allowed; ]R reserved in total by PyTorch)`` + from 1.10 a
    max_split_size_mb hint; torch_npu adds ``A current active;`` (``NPU out of memory … (NPU N;``);
  * ≥ 2.1: ``… Tried to allocate X. GPU N has a total capacity of T of which F is free.
    [Process P has U memory in use. …][Including non-PyTorch memory, this process has U memory
    in use. ][M allowed; ]Of the allocated memory A is allocated by PyTorch, [with P allocated in
    private pools (e.g., CUDA Graphs), ]and R is reserved by PyTorch but unallocated.`` (2.1 spells
    "capacty"; ≥ 2.2 hints ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``); the device word
    is ``CUDA``, ``HIP``, ``XPU``, ``NPU`` or none at all (newest builds: "Out of memory.").
- ``CUDA error: out of memory`` / ``HIP error: out of memory`` (a CUDA call outside the
  allocator: context creation, cuDNN/cuBLAS workspaces): no figures.
- ``CUBLAS_STATUS_ALLOC_FAILED`` (also HIPBLAS / ROCBLAS): cuBLAS could not get its workspace.
- NCCL: ``host:pid:tid [dev] file:line NCCL WARN Cuda failure 'out of memory'`` and ``… NCCL WARN
  Failed to CUDA calloc N bytes``; ``[dev]`` is the CUDA device index NCCL used; lines of one
  process and device a few lines apart are one incident (``occurrences`` counts the WARNs).
- vLLM: v0 ``The model's max seq len (L) is larger than the maximum number of tokens that can be
  stored in KV cache (K)``; v1 ``To serve at least one request with the model's max seq len (L),
  (N GiB KV cache is needed, which is larger than the available KV cache memory (A GiB). [Based on
  the available memory, the estimated maximum model length is E.]``; ``No available memory for the
  cache blocks``; ``Free memory on device [cuda:N] (F/T GiB) on startup is less than desired GPU
  memory utilization (U, R GiB)``.

A message wrapped over several lines (as pasted, or by a logger) is joined before parsing.
``card`` is the index the process saw (after CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES /
ASCEND_RT_VISIBLE_DEVICES), not necessarily the physical one.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from nodeledger.logs.incidents import Incident
from nodeledger.logs.lines import as_lines
from nodeledger.logs.logtime import LogTime, find_time
from nodeledger.logs.units import SIZE, clip_digits, parse_size

_DEV_KIND = {
    "CUDA": "torch-cuda-oom",
    "Cuda": "torch-cuda-oom",
    "HIP": "hip-oom",
    "NPU": "npu-oom",
    "XPU": "xpu-oom",
    None: "torch-cuda-oom",
}
_ENV_VAR = {
    "torch-cuda-oom": "PYTORCH_CUDA_ALLOC_CONF",
    "hip-oom": "PYTORCH_HIP_ALLOC_CONF",
    "npu-oom": "PYTORCH_NPU_ALLOC_CONF",
    "xpu-oom": "PYTORCH_XPU_ALLOC_CONF",
}

_TORCH_START = re.compile(
    r"\b(?P<dev>CUDA|Cuda|HIP|NPU|XPU) out of memory\.\s*(?:Tried to allocate|$)"
    r"|\bOut of memory\. Tried to allocate"
)
_TORCH_TRIED = re.compile(r"Tried to allocate (?P<req>" + SIZE + r")")
_LEGACY = re.compile(
    r"Tried to allocate (?P<req>" + SIZE + r") \((?P<devname>GPU|NPU) ?(?P<card>\d+); "
    r"(?P<total>" + SIZE + r") total capacity; (?P<alloc>" + SIZE + r") already allocated; "
    r"(?:(?P<active>" + SIZE + r") current active; )?(?P<free>" + SIZE + r") free; "
    r"(?:(?P<allowed>" + SIZE + r") allowed; )?"
    r"(?:(?P<reserved>"
    + SIZE
    + r") reserved in total by PyTorch|(?P<cached>"
    + SIZE
    + r") cached)\)"
)
_NEW_HEAD = re.compile(
    r"Tried to allocate (?P<req>" + SIZE + r")\. (?P<devname>GPU|NPU) (?P<card>\d+) has a total "
    r"capac(?:i)?ty of (?P<total>" + SIZE + r") of which (?P<free>" + SIZE + r") is free\."
)
_PROC = re.compile(r"Process (?P<pid>\d+) has (?P<used>" + SIZE + r") memory in use\.")
_THIS = re.compile(
    r"Including non-PyTorch memory, this process has (?P<used>" + SIZE + r") memory in use\."
)
_ALLOWED = re.compile(r"(?<!\d)(?P<allowed>" + SIZE + r") allowed;")  # one try per number
_OF_ALLOC = re.compile(
    r"Of the allocated memory (?P<alloc>" + SIZE + r") is allocated by PyTorch, "
    r"(?:with (?P<private>" + SIZE + r") allocated in private pools \([^)]*\), )?"
    r"and (?P<unalloc>" + SIZE + r") is reserved by PyTorch but unallocated"
)
_ENV_HINT = re.compile(r"(PYTORCH_(?:[A-Z]+_)?ALLOC_CONF)(?:=(\w+:\w+))?")
_CUDA_ERROR = re.compile(
    r"\b(?P<dev>CUDA|HIP) error: out of memory\b"
    r"|\b(?P<code>cudaErrorMemoryAllocation|hipErrorOutOfMemory)\b"
    r"|\bcuda runtime error \(2\) : out of memory"  # torch <= 0.4
)
_BLAS = re.compile(r"\b(?P<lib>CUBLAS|HIPBLAS|ROCBLAS|rocblas)_STATUS_ALLOC_FAILED\b")
_BLAS_CALL = re.compile(r"when calling `(?P<call>[^`]+)`")
# the host starts a run of host characters (lookbehind): one try per run, not one per character
_NCCL_PREFIX = re.compile(
    r"(?<![\w.-])(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
)
_NCCL_FAILURE = re.compile(
    r"(?:Cuda|CUDA|Hip|HIP) failure '(?:out of memory|an out of memory error)'"
)
_NCCL_WARN_OOM = re.compile(r"Failed to CUDA (?:calloc|malloc|host alloc)|out of memory")


def _is_nccl_oom(line: str) -> bool:
    """A CUDA/HIP failure 'out of memory', or an NCCL WARN followed by an allocation failure or
    'out of memory' (searched once after the first WARN: no rescan per repeated WARN)."""
    if "failure '" in line and _NCCL_FAILURE.search(line):
        return True
    k = line.find("NCCL WARN ")
    return k >= 0 and _NCCL_WARN_OOM.search(line, k + len("NCCL WARN ")) is not None


_NCCL_BYTES = re.compile(r"Failed to CUDA (?:calloc|malloc|host alloc) (?P<n>\d+) bytes")
_NCCL_LOC = re.compile(r"\] (?P<loc>[\w./-]+:\d+) NCCL WARN")
_VLLM_V0 = re.compile(
    r"The model's max seq len \((?P<max>\d+)\) is larger than the maximum number of tokens that "
    r"can be stored in KV cache \((?P<kv>\d+)\)"
)
_VLLM_V1 = re.compile(
    r"To serve at least one request with the models?'s max seq len \((?P<max>\d+)\),?\s*"
    r"\(?(?P<need>" + SIZE + r") KV cache is needed, which is larger than the available KV cache "
    r"memory \((?P<avail>" + SIZE + r")\)"
)
_VLLM_EST = re.compile(r"estimated maximum model length is (?P<est>\d+)")
_VLLM_NOBLOCKS = re.compile(r"No available memory for the cache blocks")
_VLLM_FREE = re.compile(
    r"Free memory on device(?: (?P<dev>\S+))? \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on "
    r"startup is less than desired GPU memory utilization \((?P<util>[\d.]+), "
    r"(?P<want>[\d.]+) GiB\)"
)
_CARD_FROM_DEV = re.compile(r"(?:cuda|hip|npu|xpu):(\d+)")

_EXCEPTION = re.compile(r"(torch(?:\.\w{1,64}){0,8}\.\w{0,64}OutOfMemoryError|RuntimeError)")
_MESSAGE_MAX = 2000  # characters of an incident's message kept
MAX_ALSO_AT = 1000  # places of a repeated message listed (every repeat is counted)
_JOIN_MAX = 8  # lines a wrapped message may span
_TIME_LOOKBACK = 50  # lines back to find the time of an untimestamped message (a traceback)
_NCCL_MERGE_LINES = 20


def _gib(x: str) -> int | None:
    return parse_size(f"{x} GiB")


def _joined(lines: _Window, i: int, done: re.Pattern[str]) -> tuple[str, int]:
    """Line i plus the following ones until the message's end marker; (text, lines used).

    Joining stops at a blank line, a line with its own timestamp or a new traceback, so a cut
    message never swallows the next record.
    """
    text = lines[i].strip()
    j = i + 1
    while not done.search(text) and lines.has(j) and j - i < _JOIN_MAX:
        nxt = lines[j].strip()
        if lines.time(j) is not None:
            # a logger that prefixes every line of one record ("ERROR 03-14 10:02:12 [core.py:586]")
            m = _RECORD_PREFIX.match(lines[j])
            if m is None or not lines[i].startswith(m.group(1)):
                break
            nxt = lines[j][m.end() :].strip()
        if not nxt or nxt.startswith(("Traceback", "File ")):
            break
        text = f"{text} {nxt}"
        j += 1
    return text, j - i


_RECORD_PREFIX = re.compile(r"^(.{0,100}?\]\s)")


_TORCH_DONE = re.compile(
    r"reserved in total by PyTorch\)|cached\)|is reserved by PyTorch but unallocated"
)
_VLLM_V1_DONE = re.compile(
    r"estimated maximum model length\s+is\s+\d+|Try increasing|initializing the engine"
)


class _Window:
    """The lines of a stream around the one being read (``i``): ``_TIME_LOOKBACK`` lines back,
    as many ahead as a wrapped message is looked for (``_JOIN_MAX``); memory bounded, one pass.
    Timestamps are parsed only when asked (an incident's time, a join's stop test), and each
    line's once: dense logs ask for the same lines' times again and again."""

    def __init__(self, lines: Iterable[str]):
        self._it: Iterator[str] = iter(lines)
        self._back: deque[str] = deque(maxlen=_TIME_LOOKBACK + 1)  # _back[-1] is line i
        self._ahead: deque[str] = deque()
        self._times: dict[int, LogTime | None] = {}  # line -> its stamp, for lines in reach
        self.i = -1

    def advance(self) -> str | None:
        """The next line (None at the end); it becomes line ``i``."""
        if self._ahead:
            line = self._ahead.popleft()
        else:
            line = next(self._it, None)
            if line is None:
                return None
            line = clip_digits(line)
        self._back.append(line)
        self.i += 1
        self._times.pop(self.i - _TIME_LOOKBACK - 1, None)  # out of reach now
        return line

    def has(self, j: int) -> bool:
        if j <= self.i:
            return j > self.i - len(self._back)
        while j - self.i > len(self._ahead):
            nxt = next(self._it, None)
            if nxt is None:
                return False
            self._ahead.append(clip_digits(nxt))
        return True

    def __getitem__(self, j: int) -> str:
        if not self.has(j):
            raise IndexError(j)
        if j <= self.i:
            return self._back[j - self.i - 1]
        return self._ahead[j - self.i - 1]

    def time(self, j: int) -> LogTime | None:
        if j in self._times:
            return self._times[j]
        t = self._times[j] = find_time(self[j])
        return t


class _Ctx:
    def __init__(self, text: str | Iterable[str], source: str, origin: str):
        self.lines = _Window(as_lines(text))
        self.source = source
        self.origin = origin

    def time_at(self, i: int) -> tuple[LogTime | None, int | None]:
        for j in range(i, max(-1, i - _TIME_LOOKBACK), -1):
            t = self.lines.time(j)
            if t is not None and (t.dt is not None or t.uptime_s is not None):
                return t, j
        return None, None

    def incident(self, kind: str, i: int, message: str, **kw: Any) -> Incident:
        t, at = self.time_at(i)
        inc = Incident(
            kind=kind,
            source=self.source,
            line=i + 1,
            last_line=kw.pop("last_line", i + 1),
            message=message[:_MESSAGE_MAX],
            time=t,
            origin=self.origin,
            **kw,
        )
        if t is not None and at is not None and at != i:
            inc.details["time_from_line"] = at + 1
        return inc


def parse_accel_log(
    text: str | Iterable[str], source: str, *, origin: str = "file"
) -> list[Incident]:
    # long: one pass over the lines; each message pattern tried in turn, sharing skip_until and seen
    """Every card-side out-of-memory message in ``text`` (a string, or its lines; pure; no I/O;
    one pass over a bounded window of lines)."""
    ctx = _Ctx(text, source, origin)
    out: list[Incident] = []
    nccl_open: dict[tuple[str, int, int], Incident] = {}
    seen: dict[tuple[str, str], Incident] = {}  # PyTorch messages by (kind, body): see _dedupe
    skip_until = -1
    win = ctx.lines
    while (line := win.advance()) is not None:
        i = win.i
        if i <= skip_until or not (  # a cheap superset of the lines a pattern starts on
            "ut of memory" in line
            or "NCCL WARN" in line
            or "_STATUS_ALLOC_FAILED" in line
            or "ErrorMemoryAllocation" in line
            or "ErrorOutOfMemory" in line
            or "max seq len" in line
            or "To serve at least" in line
            or "No available memory" in line
            or "Free memory on device" in line
        ):
            continue
        # each pattern is tried only on a line holding its fixed words (a kernel's "Out of
        # memory: Killed process" passes the test above and needs none of these)
        if _is_nccl_oom(line):
            _nccl(ctx, i, line, nccl_open, out)
            continue
        m = _TORCH_START.search(line) if "ut of memory." in line else None
        if m:
            msg, n = _joined(ctx.lines, i, _TORCH_DONE)
            key = (_DEV_KIND.get(m["dev"], "torch-cuda-oom"), _body(msg[:_MESSAGE_MAX]))
            first = seen.get(key)
            if first is not None:  # a repeat: counted where it is, not parsed again
                _repeat(first, f"{source}:{i + 1}")
                skip_until = i + n - 1
                continue
            inc = _torch(ctx, i, msg, m["dev"], n)
            if inc is not None:
                seen[key] = inc
                out.append(inc)
                skip_until = inc.last_line - 1
                continue
        m = _CUDA_ERROR.search(line) if _cuda_error_words(line) else None
        if m:
            dev = m["dev"] or ("HIP" if (m["code"] or "").startswith("hip") else "CUDA")
            kind = _DEV_KIND[dev]
            inc = ctx.incident(kind, i, line.strip())
            inc.figures = _torch_figures()
            inc.details.update(form="cuda-error", device=dev)
            inc.notes.append(
                f"'{dev} error: out of memory' comes from a {dev} call outside PyTorch's allocator "
                "(context creation, cuDNN/cuBLAS workspace, a library's own buffer): no figures"
            )
            out.append(inc)
            continue
        m = _BLAS.search(line) if "_STATUS_ALLOC_FAILED" in line else None
        if m:
            inc = ctx.incident("cublas-alloc", i, line.strip())
            inc.figures = {"requested_bytes": None}
            call = _BLAS_CALL.search(line)
            inc.details.update(library=m["lib"].upper(), call=call["call"] if call else None)
            out.append(inc)
            continue
        m = _VLLM_V0.search(line) if "max seq len" in line else None
        if m:
            inc = ctx.incident("vllm-kv-cache", i, line.strip())
            inc.figures = {"kv_cache_needed_bytes": None, "kv_cache_available_bytes": None}
            inc.details.update(
                form="v0",
                max_model_len_tokens=int(m["max"]),
                kv_cache_tokens=int(m["kv"]),
                estimated_max_model_len=None,
            )
            out.append(inc)
            continue
        if "To serve at least one request" in line:
            msg, n = _joined(ctx.lines, i, _VLLM_V1_DONE)
            m = _VLLM_V1.search(msg)
            if m:
                est = _VLLM_EST.search(msg)
                inc = ctx.incident("vllm-kv-cache", i, msg, last_line=i + n)
                inc.figures = {
                    "kv_cache_needed_bytes": parse_size(m["need"]),
                    "kv_cache_available_bytes": parse_size(m["avail"]),
                }
                inc.details.update(
                    form="v1",
                    max_model_len_tokens=int(m["max"]),
                    kv_cache_tokens=None,
                    estimated_max_model_len=int(est["est"]) if est else None,
                )
                out.append(inc)
                skip_until = i + n - 1
                continue
        if "No available memory" in line and _VLLM_NOBLOCKS.search(line):
            inc = ctx.incident("vllm-kv-cache", i, line.strip())
            inc.figures = {"kv_cache_needed_bytes": None, "kv_cache_available_bytes": 0}
            inc.details.update(
                form="no-cache-blocks",
                max_model_len_tokens=None,
                kv_cache_tokens=0,
                estimated_max_model_len=None,
            )
            out.append(inc)
            continue
        m = _VLLM_FREE.search(line) if "Free memory on device" in line else None
        if m:
            card = _CARD_FROM_DEV.search(m["dev"] or "")
            inc = ctx.incident(
                "vllm-free-memory", i, line.strip(), card=int(card[1]) if card else None
            )
            inc.figures = {
                "free_bytes": _gib(m["free"]),
                "total_bytes": _gib(m["total"]),
                "requested_bytes": _gib(m["want"]),
            }
            inc.details.update(gpu_memory_utilization=float(m["util"]), device=m["dev"])
            out.append(inc)
            continue
    return _dedupe(out)


def _cuda_error_words(line: str) -> bool:
    """The fixed words one of ``_CUDA_ERROR``'s forms needs."""
    return (
        "error: out of memory" in line
        or "ErrorMemoryAllocation" in line
        or "ErrorOutOfMemory" in line
        or "runtime error (2)" in line
    )


def _repeat(first: Incident, where: str) -> None:
    """``first``'s message seen again at ``where``: counted, and listed up to MAX_ALSO_AT."""
    first.occurrences += 1
    if len(first.also_at) < MAX_ALSO_AT:
        first.also_at.append(where)


def _torch_figures() -> dict[str, int | None]:
    return dict.fromkeys(
        (
            "requested_bytes",
            "total_bytes",
            "free_bytes",
            "allocated_bytes",
            "reserved_bytes",
            "reserved_unallocated_bytes",
            "active_bytes",
            "allowed_bytes",
            "private_pools_bytes",
            "this_process_bytes",
            "non_pytorch_bytes",
            "other_processes_bytes",
            "outside_pytorch_bytes",
        )
    )


def _torch(ctx: _Ctx, i: int, msg: str, dev: str | None, n: int) -> Incident | None:
    # long: one PyTorch OOM message: its forms (legacy, torch>=2.1, cut) fill one figures dict,
    # then the figures derived from them
    kind = _DEV_KIND.get(dev, "torch-cuda-oom")
    f = _torch_figures()
    details: dict[str, Any] = {"device": dev, "form": None, "processes": [], "derived": []}
    card: int | None = None
    legacy = _LEGACY.search(msg)
    new = _NEW_HEAD.search(msg)
    tried = _TORCH_TRIED.search(msg)
    if legacy:
        card = int(legacy["card"])
        f["requested_bytes"] = parse_size(legacy["req"])
        f["total_bytes"] = parse_size(legacy["total"])
        f["allocated_bytes"] = parse_size(legacy["alloc"])
        f["free_bytes"] = parse_size(legacy["free"])
        f["active_bytes"] = parse_size(legacy["active"])
        f["allowed_bytes"] = parse_size(legacy["allowed"])
        if legacy["cached"] is not None:
            details["form"] = "legacy-cached"  # torch 1.0–1.4
            f["reserved_unallocated_bytes"] = parse_size(legacy["cached"])
            if f["allocated_bytes"] is not None and f["reserved_unallocated_bytes"] is not None:
                f["reserved_bytes"] = f["allocated_bytes"] + f["reserved_unallocated_bytes"]
                details["derived"].append("reserved = already allocated + cached")
        else:
            details["form"] = "legacy-reserved"  # torch 1.5–2.0, torch_npu
            f["reserved_bytes"] = parse_size(legacy["reserved"])
            if f["allocated_bytes"] is not None and f["reserved_bytes"] is not None:
                f["reserved_unallocated_bytes"] = f["reserved_bytes"] - f["allocated_bytes"]
                details["derived"].append("reserved_unallocated = reserved − already allocated")
    elif new:
        details["form"] = "torch>=2.1"
        card = int(new["card"])
        f["requested_bytes"] = parse_size(new["req"])
        f["total_bytes"] = parse_size(new["total"])
        f["free_bytes"] = parse_size(new["free"])
        procs = [
            {"pid": int(p["pid"]), "used_bytes": parse_size(p["used"])} for p in _PROC.finditer(msg)
        ]
        details["processes"] = procs
        if procs:
            f["other_processes_bytes"] = sum(p["used_bytes"] or 0 for p in procs)
            details["derived"].append("other_processes = sum of 'Process P has …' figures")
        this = _THIS.search(msg)
        f["this_process_bytes"] = parse_size(this["used"]) if this else None
        details["process_may_be_self"] = None
        allowed = _ALLOWED.search(msg)
        f["allowed_bytes"] = parse_size(allowed["allowed"]) if allowed else None
        of = _OF_ALLOC.search(msg)
        if of:
            f["allocated_bytes"] = parse_size(of["alloc"])
            f["private_pools_bytes"] = parse_size(of["private"])
            f["reserved_unallocated_bytes"] = parse_size(of["unalloc"])
            if f["allocated_bytes"] is not None and f["reserved_unallocated_bytes"] is not None:
                f["reserved_bytes"] = f["allocated_bytes"] + f["reserved_unallocated_bytes"]
                details["derived"].append(
                    "reserved = allocated by PyTorch + reserved but unallocated"
                )
    elif tried:
        details["form"] = "partial"
        f["requested_bytes"] = parse_size(tried["req"])
    else:
        details["form"] = "partial"
    if details.get("process_may_be_self") is None and details["processes"]:
        # NVML lists host pids: inside a container the job itself shows up as "Process P"
        details["process_may_be_self"] = (
            f["this_process_bytes"] is None
            and len(details["processes"]) == 1
            and f["reserved_bytes"] is not None
            and (details["processes"][0]["used_bytes"] or 0) >= f["reserved_bytes"]
        )
    if f["this_process_bytes"] is not None and f["reserved_bytes"] is not None:
        f["non_pytorch_bytes"] = f["this_process_bytes"] - f["reserved_bytes"]
        details["derived"].append("non_pytorch = this process's use − reserved by PyTorch")
    if details["form"] in ("legacy-cached", "legacy-reserved") and None not in (
        f["total_bytes"],
        f["free_bytes"],
        f["reserved_bytes"],
    ):
        f["outside_pytorch_bytes"] = max(
            0, f["total_bytes"] - f["free_bytes"] - f["reserved_bytes"]
        )
        details["derived"].append(
            "outside_pytorch = total − free − reserved (other processes, the CUDA context, "
            "non-PyTorch allocations)"
        )
    hint = _ENV_HINT.search(msg)
    details["alloc_conf_var"] = hint[1] if hint else _ENV_VAR.get(kind)
    details["hint"] = (
        "expandable_segments"
        if "expandable_segments" in msg
        else ("max_split_size_mb" if "max_split_size_mb" in msg else None)
    )
    exc = _EXCEPTION.search(msg)
    details["exception"] = exc[1] if exc else None
    inc = ctx.incident(kind, i, msg, card=card, last_line=i + n)
    inc.figures = f
    inc.details.update(details)
    if details["form"] == "partial":
        inc.complete = False
        inc.notes.append("the message is cut: only the figures printed before the cut are kept")
    return inc


def _nccl(
    ctx: _Ctx,
    i: int,
    line: str,
    open_: dict[tuple[str, int, int], Incident],
    out: list[Incident],
) -> None:
    p = _NCCL_PREFIX.search(line)
    key = (p["host"], int(p["pid"]), int(p["dev"])) if p else ("", -1, -1)
    nb = _NCCL_BYTES.search(line)
    is_oom_line = "out of memory" in line
    prev = open_.get(key)
    if prev is not None and i + 1 - prev.last_line <= _NCCL_MERGE_LINES:
        prev.last_line = i + 1
        if is_oom_line:
            prev.occurrences += 1
        if nb and prev.figures.get("requested_bytes") is None:
            prev.figures["requested_bytes"] = int(nb["n"])
        return
    loc = _NCCL_LOC.search(line)
    inc = ctx.incident(
        "nccl-oom",
        i,
        line.strip(),
        pid=int(p["pid"]) if p else None,
        card=int(p["dev"]) if p else None,
    )
    inc.figures = {"requested_bytes": int(nb["n"]) if nb else None}
    inc.details.update(
        host=p["host"] if p else None,
        tid=int(p["tid"]) if p else None,
        location=loc["loc"] if loc else None,
    )
    if not is_oom_line:
        inc.occurrences = 0  # an allocation-failure line without the 'out of memory' WARN
    open_[key] = inc
    out.append(inc)


def _dedupe(incs: list[Incident]) -> list[Incident]:
    """The same message repeated in one log (a re-raised exception, a launcher's summary) is one
    incident with ``occurrences`` and ``also_at``."""
    out: list[Incident] = []
    seen: dict[tuple[str, str], Incident] = {}
    merged: set[int] = set()
    for inc in incs:
        if inc.kind == "nccl-oom":
            if inc.occurrences == 0:
                inc.occurrences = 1
            out.append(inc)
            continue
        body = _body(inc.message)
        key = (inc.kind, body)
        first = seen.get(key)
        if first is not None:
            first.occurrences += inc.occurrences  # a PyTorch message counts its own repeats
            first.also_at += [inc.where, *inc.also_at][: MAX_ALSO_AT - len(first.also_at)]
            merged.add(id(first))
            continue
        seen[key] = inc
        out.append(inc)
    for inc in out:
        if id(inc) in merged:  # places in line order, as they were met
            inc.also_at.sort(key=lambda w: int(w.rpartition(":")[2]))
        if inc.kind != "nccl-oom" and inc.occurrences - 1 > len(inc.also_at):
            inc.notes.append(
                f"seen {inc.occurrences:,} times: the first {len(inc.also_at):,} repeats' "
                "places are listed (also_at)"
            )
    return out


def _body(message: str) -> str:
    """A message without its log prefix (timestamps, logger names, exception class)."""
    for marker in (
        "out of memory",
        "Out of memory",
        "_STATUS_ALLOC_FAILED",
        "max seq len",
        "No available memory",
        "Free memory on device",
    ):
        k = message.find(marker)
        if k >= 0:
            return message[k:]
    return message
