"""Card samplers: one interface, one backend per vendor path.

``describe()`` -> the static facts of each card (index, name, uuid, pci_bus_id, total_bytes,
numa_node); ``sample()`` -> per card now: used_bytes, total_bytes, util_pct (None where the tool
does not say) and processes ([{pid, name, used_bytes}], None when the backend cannot list them).

- ``nvml``: NVML through nvidia-ml-py (the fast path: no subprocess; each sample is one call in
  a worker thread with a deadline, so a hung driver cannot stall the watch).
- ``nvidia-smi``: ``--query-gpu=index,memory.used,memory.total,utilization.gpu
  --format=csv,noheader,nounits`` + ``--query-compute-apps=gpu_bus_id,pid,process_name,used_memory``.
- ``rocm-smi`` / ``hy-smi``: ``--showuse --showmemuse --showmeminfo vram --showbus --json``, and
  ``--showpids --showpidgpus`` (text) for the processes.  rocm-smi is a Python program that
  takes 0.2-0.5 s per call: use ``--interval`` of 2 s or more.
- ``npu-smi``: ``npu-smi info`` (HBM used / total, AICore %, the process table).
- ``fake``: a scenario (watch/fake.py), for tests and benchmarks.

Subprocesses run through the probe's Runner (timeouts; its records are cleared after each
sample).  The NUMA node of a card comes from NVML, else /sys/bus/pci/devices/<bus>/numa_node.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading

from nodeledger.errors import NodeledgerError
from nodeledger.machine.parsers import npu_smi
from nodeledger.machine.parsers.nvidia_smi import bus_key, parse_compute_apps
from nodeledger.machine.probe.runner import Runner

MiB = 2**20
BACKENDS = ("auto", "nvml", "nvidia-smi", "rocm-smi", "hy-smi", "npu-smi")


class WatchError(NodeledgerError):
    """No card could be sampled: nothing to watch (exit 4)."""

    exit_code = 4


class Backend:
    name = "base"

    def describe(self) -> list[dict]:  # pragma: no cover - interface
        raise NotImplementedError

    def sample(self) -> list[dict]:  # pragma: no cover - interface
        raise NotImplementedError

    def close(self) -> None:
        pass


def _sys_numa(r: Runner, bus: str | None) -> int | None:
    key = bus_key(bus)
    if not key:
        return None
    v = (r.read(f"/sys/bus/pci/devices/{key}/numa_node") or "").strip()
    return int(v) if v.isdigit() else None


def clear_records(r: Runner) -> None:
    """Forget what the Runner recorded for support bundles (runs, reads, which, globs): a watch
    runs for hours and must not accumulate them."""
    r.log.clear()
    r.files.clear()
    r.problems.clear()
    r.tools.clear()
    r.globs.clear()


# -- NVML -------------------------------------------------------------------------------------


class NvmlBackend(Backend):
    """NVML; each call runs in a daemon thread with a deadline.  A call that misses it marks the
    sample failed, and no new call starts until the stuck one returns (a hung driver costs one
    thread, never the watch, and does not keep the process from exiting)."""

    name = "nvml"

    def __init__(self, timeout: float = 5.0, runner: Runner | None = None):
        import pynvml  # ImportError: the caller falls back

        self.nv = pynvml
        self.timeout = timeout
        self.r = runner or Runner(live=True)
        self._pending: threading.Thread | None = None
        self._call(self.nv.nvmlInit)
        self.handles = self._call(
            lambda: [
                self.nv.nvmlDeviceGetHandleByIndex(i) for i in range(self.nv.nvmlDeviceGetCount())
            ]
        )

    def _call(self, fn):
        if self._pending is not None and self._pending.is_alive():
            raise WatchError("NVML: the previous call has not returned (hung driver?)")
        box: dict = {}

        def work():
            try:
                box["value"] = fn()
            except Exception as exc:  # NVMLError_*: reported in the caller's thread
                box["error"] = exc

        t = threading.Thread(target=work, name="nvml", daemon=True)
        t.start()
        t.join(self.timeout)
        if t.is_alive():
            self._pending = t
            raise WatchError(f"NVML: no answer within {self.timeout:g} s (hung driver?)")
        if "error" in box:
            raise box["error"]
        return box["value"]

    def describe(self) -> list[dict]:
        nv = self.nv

        def work():
            out = []
            for i, h in enumerate(self.handles):
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                d = {"index": i, "name": _text(nv.nvmlDeviceGetName(h)), "uuid": None,
                     "pci_bus_id": None, "total_bytes": int(mem.total), "numa_node": None}  # fmt: skip
                with contextlib.suppress(Exception):
                    d["uuid"] = _text(nv.nvmlDeviceGetUUID(h))
                with contextlib.suppress(Exception):
                    d["pci_bus_id"] = _text(nv.nvmlDeviceGetPciInfo(h).busId)
                with contextlib.suppress(Exception):
                    n = nv.nvmlDeviceGetNumaNodeId(h)
                    d["numa_node"] = n if isinstance(n, int) and n >= 0 else None
                out.append(d)
            return out

        cards = self._call(work)
        for d in cards:
            if d["numa_node"] is None:
                d["numa_node"] = _sys_numa(self.r, d["pci_bus_id"])
        clear_records(self.r)
        return cards

    def sample(self) -> list[dict]:
        nv = self.nv

        def work():
            out = []
            for i, h in enumerate(self.handles):
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                util = None
                with contextlib.suppress(Exception):
                    util = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
                procs: dict[int, dict] | None = None
                for fn in ("nvmlDeviceGetComputeRunningProcesses",
                           "nvmlDeviceGetGraphicsRunningProcesses"):  # fmt: skip
                    try:
                        found = getattr(nv, fn)(h)
                    except Exception:
                        continue
                    procs = procs if procs is not None else {}
                    for p in found:
                        m = getattr(p, "usedGpuMemory", None)
                        m = m if isinstance(m, int) and 0 <= m < 2**63 else None
                        procs.setdefault(p.pid, {"pid": p.pid, "name": None, "used_bytes": m})
                out.append({"index": i, "used_bytes": int(mem.used), "total_bytes": int(mem.total),
                            "util_pct": util,
                            "processes": None if procs is None else list(procs.values())})  # fmt: skip
            return out

        return self._call(work)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._call(self.nv.nvmlShutdown)


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


# -- nvidia-smi -------------------------------------------------------------------------------

GPU_QUERY = "index,memory.used,memory.total,utilization.gpu"
DESCRIBE_QUERY = "index,name,uuid,pci.bus_id,memory.total"
APPS_QUERY = "gpu_bus_id,pid,process_name,used_memory"


def _num(v: str) -> float | None:
    v = v.strip()
    try:
        return float(v)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def parse_gpu_query(text: str) -> list[dict]:
    """``--query-gpu=index,memory.used,memory.total,utilization.gpu --format=csv,noheader,nounits``
    -> [{index, used_bytes, total_bytes, util_pct}] (MiB -> bytes; "[N/A]" -> None)."""
    out = []
    for n, line in enumerate(text.strip().splitlines(), 1):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4 or not parts[0].isdigit():
            raise NodeledgerError(f"nvidia-smi --query-gpu row {n} not understood: {line[:80]!r}")
        used, total, util = (_num(p) for p in parts[1:])
        out.append({"index": int(parts[0]),
                    "used_bytes": None if used is None else int(used * MiB),
                    "total_bytes": None if total is None else int(total * MiB), "util_pct": util})  # fmt: skip
    return out


class NvidiaSmiBackend(Backend):
    name = "nvidia-smi"

    def __init__(self, runner: Runner | None = None):
        self.r = runner or Runner(live=True)
        self.bus_index: dict[str, int] = {}

    def _run(self, *args: str) -> str:
        res = self.r.run(["nvidia-smi", *args])
        if not res.ok:
            raise WatchError(f"nvidia-smi {args[0]}: {res.problem}")
        return res.stdout

    def describe(self) -> list[dict]:
        text = self._run(f"--query-gpu={DESCRIBE_QUERY}", "--format=csv,noheader,nounits")
        cards = []
        for line in text.strip().splitlines():
            p = [x.strip() for x in line.split(",")]
            if len(p) != 5 or not p[0].isdigit():
                continue
            total = _num(p[4])
            cards.append({"index": int(p[0]), "name": p[1], "uuid": p[2] or None,
                          "pci_bus_id": p[3] or None,
                          "total_bytes": None if total is None else int(total * MiB),
                          "numa_node": _sys_numa(self.r, p[3])})  # fmt: skip
            self.bus_index[bus_key(p[3]) or ""] = int(p[0])
        clear_records(self.r)
        if not cards:
            raise WatchError("nvidia-smi lists no GPU")
        return cards

    def sample(self) -> list[dict]:
        try:
            cards = parse_gpu_query(
                self._run(f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits")
            )
            apps = None
            res = self.r.run(["nvidia-smi", f"--query-compute-apps={APPS_QUERY}",
                              "--format=csv,noheader,nounits"])  # fmt: skip
            if res.ok:
                with contextlib.suppress(NodeledgerError):
                    apps = parse_compute_apps(res.stdout)
        finally:
            clear_records(self.r)
        by_index = {c["index"]: c for c in cards}
        for c in cards:
            c["processes"] = None if apps is None else []
        for a in apps or []:
            c = by_index.get(self.bus_index.get(bus_key(a["gpu_bus_id"]) or "", -1))
            if c is not None:
                c["processes"].append(
                    {"pid": a["pid"], "name": a["process_name"], "used_bytes": a["used_bytes"]}
                )
        return cards


# -- rocm-smi / hy-smi ------------------------------------------------------------------------

_USE = re.compile(r"^(GPU|DCU|HCU) use \(%\)$")
_KFD = re.compile(r"^(\d+)\s+(.+?)\s+(\d+)\s+(\d+)\s+\S+\s+\S+\s*$")
_PIDGPU = re.compile(r"PID (\d+) is using (\d+) DRM device\(s\):?\s*\n?\s*([\d ,]*)")


def parse_rocm_json(text: str) -> list[dict]:
    """``rocm-smi/hy-smi --showuse --showmemuse --showmeminfo vram --showbus --json`` ->
    [{index, used_bytes, total_bytes, util_pct, pci_bus_id}]."""
    start = text.find("{")
    try:
        data = json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError as exc:
        raise NodeledgerError(f"rocm-smi --json output is not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise NodeledgerError("rocm-smi --json output is not an object")
    out = []
    for key, f in data.items():
        m = re.fullmatch(r"card(\d+)", key)
        if not m or not isinstance(f, dict):
            continue
        total = next((v for k, v in f.items() if k.startswith("VRAM Total Memory")), None)
        used = next((v for k, v in f.items() if k.startswith("VRAM Total Used Memory")), None)
        util = next((v for k, v in f.items() if _USE.match(k)), None)
        out.append({
            "index": int(m.group(1)),
            "used_bytes": int(used) if str(used).isdigit() else None,
            "total_bytes": int(total) if str(total).isdigit() else None,
            "util_pct": _num(str(util)) if util is not None else None,
            "pci_bus_id": f.get("PCI Bus"),
            "name": f.get("Card Series") or f.get("Card series") or f.get("Card Model"),
        })  # fmt: skip
    if not out:
        raise NodeledgerError("rocm-smi --json lists no cardN entries")
    return sorted(out, key=lambda c: c["index"])


def parse_rocm_pids(text: str) -> dict[int, list[dict]]:
    """``rocm-smi --showpids --showpidgpus`` (text) -> {card index: [{pid, name, used_bytes}]};
    a process on several cards is listed on each, its VRAM (a total over its cards) unknown."""
    procs: dict[int, dict] = {}
    for line in text.splitlines():
        m = _KFD.match(line.strip())
        if m:
            procs[int(m.group(1))] = {"name": m.group(2).strip(), "ngpus": int(m.group(3)),
                                      "vram": int(m.group(4))}  # fmt: skip
    out: dict[int, list[dict]] = {}
    for m in _PIDGPU.finditer(text):
        pid = int(m.group(1))
        cards = [int(x) for x in re.findall(r"\d+", m.group(3))]
        p = procs.get(pid, {"name": None, "vram": None})
        for c in cards:
            out.setdefault(c, []).append({"pid": pid, "name": p["name"],
                                          "used_bytes": p["vram"] if len(cards) == 1 else None})  # fmt: skip
    return out


class RocmSmiBackend(Backend):
    def __init__(self, tool: str = "rocm-smi", runner: Runner | None = None):
        self.name = tool
        self.tool = tool
        self.r = runner or Runner(live=True)

    def _cards(self) -> list[dict]:
        res = self.r.run([self.tool, "--showuse", "--showmemuse", "--showmeminfo", "vram",
                          "--showbus", "--json"])  # fmt: skip
        if not res.ok:
            raise WatchError(f"{self.tool}: {res.problem}")
        return parse_rocm_json(res.stdout)

    def describe(self) -> list[dict]:
        try:
            cards = self._cards()
            return [{"index": c["index"], "name": c["name"], "uuid": None,
                     "pci_bus_id": c["pci_bus_id"], "total_bytes": c["total_bytes"],
                     "numa_node": _sys_numa(self.r, c["pci_bus_id"])} for c in cards]  # fmt: skip
        finally:
            clear_records(self.r)

    def sample(self) -> list[dict]:
        try:
            cards = self._cards()
            res = self.r.run([self.tool, "--showpids", "--showpidgpus"])
        finally:
            clear_records(self.r)
        pids = parse_rocm_pids(res.stdout) if res.ok else None
        return [{"index": c["index"], "used_bytes": c["used_bytes"], "total_bytes": c["total_bytes"],
                 "util_pct": c["util_pct"],
                 "processes": None if pids is None else pids.get(c["index"], [])} for c in cards]  # fmt: skip


# -- npu-smi ----------------------------------------------------------------------------------

_AICORE = re.compile(
    r"^\|\s*\d+\s*\d*\s*\|\s*[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\s*\|\s*(\d+|-)\s",
    re.M,
)


def parse_npu(text: str) -> tuple[list[dict], list[dict]]:
    """``npu-smi info`` -> (cards: [{index, name, pci_bus_id, used_bytes, total_bytes, util_pct
    (AICore %)}], processes: [{card, pid, name, used_bytes}]); chips are numbered in order."""
    info = npu_smi.parse(text)
    utils = [_num(u) for u in _AICORE.findall(text)]
    order = {(c.npu, c.chip): i for i, c in enumerate(info.chips)}
    cards = [{"index": i, "name": c.name, "pci_bus_id": c.bus_id, "used_bytes": c.hbm_used_bytes,
              "total_bytes": c.hbm_total_bytes,
              "util_pct": utils[i] if i < len(utils) and len(utils) == len(info.chips) else None}
             for i, c in enumerate(info.chips)]  # fmt: skip
    procs = [{"card": order.get((p["npu"], p["chip"])), "pid": p["pid"], "name": p["name"],
              "used_bytes": p["memory_bytes"]} for p in info.processes]  # fmt: skip
    return cards, procs


class NpuSmiBackend(Backend):
    name = "npu-smi"

    def __init__(self, runner: Runner | None = None):
        self.r = runner or Runner(live=True)

    def _read(self) -> tuple[list[dict], list[dict]]:
        try:
            res = self.r.run(["npu-smi", "info"])
        finally:
            clear_records(self.r)
        if not res.ok:
            raise WatchError(f"npu-smi info: {res.problem}")
        return parse_npu(res.stdout)

    def describe(self) -> list[dict]:
        cards, _ = self._read()
        out = [{"index": c["index"], "name": c["name"], "uuid": None, "pci_bus_id": c["pci_bus_id"],
                "total_bytes": c["total_bytes"], "numa_node": _sys_numa(self.r, c["pci_bus_id"])}
               for c in cards]  # fmt: skip
        clear_records(self.r)
        return out

    def sample(self) -> list[dict]:
        cards, procs = self._read()
        for c in cards:
            c.pop("name")
            c.pop("pci_bus_id")
            c["processes"] = [
                {k: p[k] for k in ("pid", "name", "used_bytes")}
                for p in procs
                if p["card"] == c["index"]
            ]
        return cards


# -- choice -----------------------------------------------------------------------------------


def open_backend(name: str = "auto", runner: Runner | None = None, timeout: float = 5.0):
    """The backend by name; ``auto``: NVML, nvidia-smi, hy-smi, rocm-smi, npu-smi — the first
    that lists cards.  ``fake:SCENARIO`` is the scenario backend.  WatchError (exit 4) when none
    answers; an unknown name is bad input (exit 2)."""
    if name.startswith("fake:"):
        from nodeledger.watch.fake import FakeBackend, scenario

        return FakeBackend(scenario(name.split(":", 1)[1]))
    if name not in BACKENDS:
        raise NodeledgerError(
            f"--backend {name!r} is not one of {', '.join(BACKENDS)}, fake:SCENARIO"
        )
    r = runner or Runner(timeout=timeout, live=True)
    order = ("nvml", "nvidia-smi", "hy-smi", "rocm-smi", "npu-smi") if name == "auto" else (name,)
    tried = []
    for n in order:
        try:
            if n == "nvml":
                if not r.live:
                    raise WatchError("NVML is asked only on live runs")
                b = NvmlBackend(timeout=timeout, runner=r)
            elif n == "nvidia-smi":
                b = NvidiaSmiBackend(r)
            elif n in ("rocm-smi", "hy-smi"):
                b = RocmSmiBackend(n, r)
            else:
                b = NpuSmiBackend(r)
            cards = b.describe()
            if not cards:
                raise WatchError("no card listed")
            b.cards = cards
            return b
        except ImportError:
            tried.append(f"{n}: nvidia-ml-py not installed")
        except Exception as exc:  # a vendor library's own errors (NVMLError_*) included
            tried.append(f"{n}: {str(exc)[:120]}")
        finally:
            clear_records(r)
    raise WatchError("no card could be sampled (" + "; ".join(tried) + ")")
