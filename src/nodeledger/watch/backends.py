"""Card samplers: one interface (watch/base.py), one backend per vendor path.

``describe()`` -> the static facts of each card (index, name, uuid, pci_bus_id, total_bytes,
numa_node); ``sample()`` -> per card now: used_bytes, total_bytes, util_pct (None where the tool
does not say) and processes ([{pid, name, used_bytes}], None when the backend cannot list them).

- ``nvml``: NVML through the probe's NVML session (machine/probe/nvml.py, the one NVML client:
  no subprocess; each sample is one call in its worker thread with a deadline, so a hung driver
  cannot stall the watch).
- ``nvidia-smi``: ``--query-gpu=index,memory.used,memory.total,utilization.gpu
  --format=csv,noheader,nounits`` + ``--query-compute-apps=gpu_bus_id,pid,process_name,used_memory``
  (parsed in machine/parsers/nvidia_query.py and nvidia_smi.py).
- ``rocm-smi`` / ``hy-smi``: ``--showuse --showmemuse --showmeminfo vram --showbus --json``, and
  ``--showpids --showpidgpus`` (text) for the processes (parsed in machine/parsers/amd_smi.py).
  rocm-smi is a Python program that takes 0.2-0.5 s per call: use ``--interval`` of 2 s or more.
- ``npu-smi``: ``npu-smi info`` (HBM used / total, AICore %, the process table; parsed in
  machine/parsers/npu_smi.py).
- ``fake``: a scenario (watch/fake.py), for tests and benchmarks.

Subprocesses run through the probe's Runner (timeouts; its records are cleared after each
sample).  The NUMA node of a card comes from NVML, else /sys/bus/pci/devices/<bus>/numa_node.
"""

from __future__ import annotations

import contextlib

from nodeledger.errors import NodeledgerError
from nodeledger.machine.parsers.amd_smi import parse_concise, parse_rocm_json, parse_rocm_pids
from nodeledger.machine.parsers.common import ParseError, pci_address
from nodeledger.machine.parsers.npu_smi import parse_npu
from nodeledger.machine.parsers.nvidia_query import (
    APPS,
    DESCRIBE_QUERY,
    GPU_QUERY,
    parse_describe_query,
    parse_gpu_query,
)
from nodeledger.machine.parsers.nvidia_smi import parse_compute_apps
from nodeledger.machine.probe.nvml import LibraryQuery, NvmlHung, NvmlSession, as_text
from nodeledger.machine.probe.runner import Runner
from nodeledger.machine.vendors import load_probe
from nodeledger.machine.vendors import samplers as vendor_samplers
from nodeledger.units import MiB
from nodeledger.watch.base import Backend, WatchError

__all__ = ["Backend", "WatchError", "backend_names", "clear_records", "open_backend"]


def backend_names() -> tuple[str, ...]:
    """``auto`` and every registered vendor's samplers (machine/vendors), in the vendors' order."""
    return ("auto", *(s.name for s in vendor_samplers()))


# each vendor module names its samplers' factories here (VendorSpec.samplers):
# (name, runner, timeout) -> the backend, its cards not yet described


def _library_backend(cls, label: str, r: Runner, timeout: float) -> Backend:
    """A backend over a card library (NVML, amdsmi): in-process calls, so live runs only."""
    if not r.live:
        raise WatchError(f"{label} is asked only on live runs")
    return cls(timeout=timeout, runner=r)


def open_nvml(name: str, r: Runner, timeout: float) -> Backend:
    return _library_backend(NvmlBackend, "NVML", r, timeout)


def open_nvidia_smi(name: str, r: Runner, timeout: float) -> Backend:
    return NvidiaSmiBackend(r)


def open_amdsmi(name: str, r: Runner, timeout: float) -> Backend:
    return _library_backend(AmdsmiBackend, "amdsmi", r, timeout)


def open_amd_smi(name: str, r: Runner, timeout: float) -> Backend:
    return AmdSmiBackend(r)


def open_rocm_smi(name: str, r: Runner, timeout: float) -> Backend:
    return RocmSmiBackend(name, r)  # rocm-smi, or DTK's hy-smi (the same flags and JSON)


def open_npu_smi(name: str, r: Runner, timeout: float) -> Backend:
    return NpuSmiBackend(r)


def _sys_numa(r: Runner, bus: str | None) -> int | None:
    key = pci_address(bus)
    if not key:
        return None
    v = (r.read(f"/sys/bus/pci/devices/{key}/numa_node") or "").strip()
    return int(v) if v.isdigit() else None


def clear_records(r: Runner) -> None:
    """Forget what the Runner recorded for support bundles (runs, reads, which, globs): a watch
    runs for hours and must not accumulate them.  A Runner collecting a support bundle's watch
    samples (``keep_records``) keeps them: the bundle is what it collects."""
    if getattr(r, "keep_records", False):
        return
    r.log.clear()
    r.files.clear()
    r.problems.clear()
    r.tools.clear()
    r.globs.clear()


# -- NVML -------------------------------------------------------------------------------------


@contextlib.contextmanager
def _hung_is_watch_error():
    """A missed NVML deadline fails the sample (WatchError, same words)."""
    try:
        yield
    except NvmlHung as exc:
        raise WatchError(str(exc)) from None


class _SessionBackend(Backend):
    """A backend over a vendor library session (NVML, amdsmi): opened once, every call in the
    session's worker thread under its deadline; a missed deadline is a WatchError."""

    def _open(self, session, runner: Runner | None) -> None:
        self.session = session
        self.r = runner or Runner(live=True)
        try:
            with _hung_is_watch_error():
                session.open()
                self.handles = session.handles()
        except BaseException:
            session.close()
            raise

    def _call(self, fn):
        with _hung_is_watch_error():
            return self.session.call(fn)

    def _described(self, work) -> list[dict]:
        """``work()``'s cards in the session, each NUMA node the library did not give read
        from sysfs by its PCI bus id."""
        cards = self._call(work)
        for d in cards:
            if d["numa_node"] is None:
                d["numa_node"] = _sys_numa(self.r, d["pci_bus_id"])
        clear_records(self.r)
        return cards

    def close(self) -> None:
        self.session.close()


class NvmlBackend(_SessionBackend):
    """NVML through one :class:`NvmlSession`; each call runs in its worker thread with a
    deadline.  A call that misses it marks the sample failed (WatchError), and no new call starts
    until the stuck one returns (a hung driver costs one thread, never the watch, and does not
    keep the process from exiting)."""

    name = "nvml"

    def __init__(self, timeout: float = 5.0, runner: Runner | None = None):
        self._open(NvmlSession(timeout), runner)  # ImportError: the caller falls back
        self.nv = self.session.nv
        self.timeout = timeout

    def describe(self) -> list[dict]:
        nv = self.nv
        q = LibraryQuery(nv)

        def work():
            out = []
            for i, h in enumerate(self.handles):
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                d = {"index": i, "name": as_text(nv.nvmlDeviceGetName(h)),
                     "uuid": q("nvmlDeviceGetUUID", h, then=as_text),
                     "pci_bus_id": q("nvmlDeviceGetPciInfo", h, then=lambda p: as_text(p.busId)),
                     "total_bytes": int(mem.total),
                     "numa_node": q("nvmlDeviceGetNumaNodeId", h,
                                    then=lambda n: n if isinstance(n, int) and n >= 0 else None)}  # fmt: skip
                out.append(d)
            return out

        return self._described(work)

    def sample(self) -> list[dict]:
        nv = self.nv
        q = LibraryQuery(nv)

        def work():
            out = []
            for i, h in enumerate(self.handles):
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                util = q("nvmlDeviceGetUtilizationRates", h, then=lambda u: float(u.gpu))
                procs: dict[int, dict] | None = None
                for fn in ("nvmlDeviceGetComputeRunningProcesses",
                           "nvmlDeviceGetGraphicsRunningProcesses"):  # fmt: skip
                    found = q(fn, h)
                    if found is None:
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


# -- nvidia-smi -------------------------------------------------------------------------------


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
        cards = parse_describe_query(text)
        for c in cards:
            c["numa_node"] = _sys_numa(self.r, c["pci_bus_id"])
            self.bus_index[pci_address(c["pci_bus_id"]) or ""] = c["index"]
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
            res = self.r.run(["nvidia-smi", f"--query-compute-apps={APPS}",
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
            c = by_index.get(self.bus_index.get(pci_address(a["gpu_bus_id"]) or "", -1))
            if c is not None:
                c["processes"].append(
                    {"pid": a["pid"], "name": a["process_name"], "used_bytes": a["used_bytes"]}
                )
        return cards


# -- rocm-smi / hy-smi ------------------------------------------------------------------------


class RocmSmiBackend(Backend):
    def __init__(self, tool: str = "rocm-smi", runner: Runner | None = None):
        self.name = tool
        self.tool = tool
        self.r = runner or Runner(live=True)

    def _cards(self) -> list[dict]:
        """Each card's figures from ``--json`` (VRAM in bytes, bus id); where that fails (an
        old DTK, a bundle holding only the default view), from the tool's default table:
        VRAM as a percentage (``used_pct``, bytes unknown: the table has no size) and busy %."""
        res = self.r.run([self.tool, "--showuse", "--showmemuse", "--showmeminfo", "vram",
                          "--showbus", "--json"])  # fmt: skip
        try:
            if not res.ok:
                raise WatchError(f"{self.tool} --json: {res.problem}")
            return parse_rocm_json(res.stdout)
        except (WatchError, ParseError) as exc:
            table = self.r.run([self.tool])
            if not table.ok:
                raise WatchError(f"{exc}; {self.tool}: {table.problem}") from None
            try:
                concise = parse_concise(table.stdout)
            except ParseError as exc2:
                raise WatchError(f"{exc}; {self.tool}: {exc2}") from None
            self.describe_note = (
                f"cards read from `{self.tool}`'s default table ({str(exc)[:120]}): VRAM as a "
                "percentage of the card, its bytes and the card's size unknown"
            )
            return [{"index": c.index, "name": c.name, "pci_bus_id": None, "total_bytes": None,
                     "used_bytes": None, "used_pct": c.vram_used_pct, "util_pct": c.util_pct}
                    for c in concise.cards]  # fmt: skip

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
        pids = None  # unknown, not none, when the tool or its output fails
        if res.ok:
            with contextlib.suppress(ParseError):
                pids = parse_rocm_pids(res.stdout)
        return [{"index": c["index"], "used_bytes": c["used_bytes"], "total_bytes": c["total_bytes"],
                 "util_pct": c["util_pct"],
                 **({"used_pct": c["used_pct"]} if c.get("used_pct") is not None else {}),
                 "processes": None if pids is None else pids.get(c["index"], [])} for c in cards]  # fmt: skip


# -- amdsmi (the library) ---------------------------------------------------------------------


class AmdsmiBackend(_SessionBackend):
    """AMD's amdsmi library through one AmdsmiSession (machine/probe/amdsmi_lib.py): every
    call in its worker thread with a deadline; a call that misses it fails the sample
    (WatchError), as with NVML."""

    name = "amdsmi"

    def __init__(self, timeout: float = 5.0, runner: Runner | None = None):
        from nodeledger.machine.probe.amdsmi_lib import AmdsmiSession

        self._open(AmdsmiSession(timeout), runner)  # ImportError: the caller falls back
        self.lib = self.session.nv

    def describe(self) -> list[dict]:
        lib = self.lib
        q = LibraryQuery(lib)

        def work():
            out = []
            for i, h in enumerate(self.handles):
                d = {"index": i,
                     "name": q("amdsmi_get_gpu_asic_info", h,
                               then=lambda a: str(a.get("market_name") or "") or None),
                     "uuid": q("amdsmi_get_gpu_device_uuid", h, then=str),
                     "pci_bus_id": q("amdsmi_get_gpu_device_bdf", h, then=str),
                     "total_bytes": q("amdsmi_get_gpu_vram_usage", h,
                                      then=lambda v: int(v["vram_total"]) * MiB),
                     "numa_node": q("amdsmi_topo_get_numa_node_number", h,
                                    then=lambda n: n if isinstance(n, int) and 0 <= n < 2**20 else None)}  # fmt: skip
                out.append(d)
            return out

        return self._described(work)

    def sample(self) -> list[dict]:
        from nodeledger.machine.probe.amdsmi_lib import processes

        lib = self.lib
        q = LibraryQuery(lib)

        def work():
            out = []
            for i, h in enumerate(self.handles):
                vram = lib.amdsmi_get_gpu_vram_usage(h)  # MB, i.e. MiB
                util = q("amdsmi_get_gpu_activity", h, then=lambda a: float(a["gfx_activity"]))
                procs = q(processes, lib, h)
                out.append({"index": i, "used_bytes": int(vram["vram_used"]) * MiB,
                            "total_bytes": int(vram["vram_total"]) * MiB, "util_pct": util,
                            "processes": procs})  # fmt: skip
            return out

        return self._call(work)


# -- amd-smi ----------------------------------------------------------------------------------


class AmdSmiBackend(Backend):
    """ROCm's current tool (rocm-smi is deprecated): `amd-smi static --json` for the cards,
    `amd-smi monitor -u -v` (utilisation, VRAM used/total) and `amd-smi process --csv` (each
    process's VRAM in bytes) for a sample; each command under the Runner's deadline."""

    name = "amd-smi"
    MONITOR = ("amd-smi", "monitor", "-u", "-v")

    def __init__(self, runner: Runner | None = None):
        self.r = runner or Runner(live=True)

    def describe(self) -> list[dict]:
        """The cards from `amd-smi static --json`; where that fails (an older amd-smi, a
        bundle without it), from the sample's own `amd-smi monitor -u -v` table: index and
        VRAM total where it prints them, name and bus unknown (``self.describe_note`` says
        why)."""
        from nodeledger.machine.parsers.amd_smi import parse_amd_smi_static_json
        from nodeledger.machine.parsers.amd_smi_live import parse_amd_smi_monitor

        try:
            res = self.r.run(["amd-smi", "static", "--json"])
            try:
                if not res.ok:
                    raise WatchError(f"amd-smi static --json: {res.problem}")
                cards = parse_amd_smi_static_json(res.stdout)
            except (WatchError, ParseError) as exc:
                mon = self.r.run(list(self.MONITOR))
                if not mon.ok:
                    raise WatchError(f"{exc}; amd-smi monitor: {mon.problem}") from None
                try:
                    listed = parse_amd_smi_monitor(mon.stdout)["cards"]
                except ParseError as exc2:
                    raise WatchError(f"{exc}; amd-smi monitor: {exc2}") from None
                self.describe_note = (
                    f"cards listed by `amd-smi monitor` ({str(exc)[:120]}): names and PCI bus "
                    "ids unknown"
                )
                return [{"index": c["index"], "name": None, "uuid": None, "pci_bus_id": None,
                         "total_bytes": c.get("vram_total_bytes"), "numa_node": None}
                        for c in listed]  # fmt: skip
            return [{"index": c["index"], "name": c["name"], "uuid": None, "pci_bus_id": c["pci_bus"],
                     "total_bytes": c["vram_total_bytes"],
                     "numa_node": c.get("numa_node") if c.get("numa_node") is not None
                     else _sys_numa(self.r, c["pci_bus"])} for c in cards]  # fmt: skip
        finally:
            clear_records(self.r)

    def sample(self) -> list[dict]:
        from nodeledger.machine.parsers.amd_smi_live import (
            parse_amd_smi_monitor,
            parse_amd_smi_process,
        )

        try:
            mon = self.r.run(list(self.MONITOR))
            procs = self.r.run(["amd-smi", "process", "--csv"])
        finally:
            clear_records(self.r)
        if not mon.ok:
            raise WatchError(f"amd-smi monitor: {mon.problem}")
        try:
            cards = parse_amd_smi_monitor(mon.stdout)["cards"]
        except ParseError as exc:
            raise WatchError(str(exc)) from None
        per: dict[int, list[dict]] | None = None
        if procs.ok:
            try:
                per = {}
                for p in parse_amd_smi_process(procs.stdout)["processes"]:
                    per.setdefault(p["card"], []).append(
                        {"pid": p["pid"], "name": p["name"], "used_bytes": p.get("vram_bytes")}
                    )
            except ParseError:
                per = None  # processes unknown, not none
        return [{"index": c["index"], "used_bytes": c.get("vram_used_bytes"),
                 "total_bytes": c.get("vram_total_bytes"), "util_pct": c.get("gfx_util_pct"),
                 "processes": None if per is None else per.get(c["index"], [])} for c in cards]  # fmt: skip


# -- npu-smi ----------------------------------------------------------------------------------


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


class HostOnlyBackend(Backend):
    """No card tool answered: no cards, so the watch and the exporter sample the host alone
    (RAM, swap, paging, NUMA) and say why in ``reason``."""

    def __init__(self, reason: str):
        self.reason = reason
        self.name = "host only"
        self.cards: list[dict] = []

    def describe(self) -> list[dict]:
        return []

    def sample(self) -> list[dict]:
        return []


def open_backend(
    name: str = "auto", runner: Runner | None = None, timeout: float = 5.0,
    host_only: bool = False,
):  # fmt: skip
    """The backend by name; ``auto``: NVML, nvidia-smi, hy-smi, rocm-smi, npu-smi — the first
    that lists cards.  ``fake:SCENARIO`` is the scenario backend.  WatchError (exit 4) when none
    answers, or with ``host_only`` (``auto`` only) a HostOnlyBackend naming what was tried; an
    unknown name is bad input (exit 2)."""
    if name.startswith("fake:"):
        from nodeledger.watch.fake import FakeBackend, scenario

        return FakeBackend(scenario(name.split(":", 1)[1]))
    known = backend_names()
    if name not in known:
        raise NodeledgerError(f"--backend {name!r} is not one of {', '.join(known)}, fake:SCENARIO")
    r = runner or Runner(timeout=timeout, live=True)
    every = vendor_samplers()
    order = (sorted(every, key=lambda s: s.auto_rank) if name == "auto"
             else [s for s in every if s.name == name])  # fmt: skip
    tried = []
    for sm in order:
        n = sm.name
        try:
            b = load_probe(sm.factory)(n, r, timeout)
            cards = b.describe()
            if not cards:
                raise WatchError("no card listed")
            b.cards = cards
            return b
        except ImportError:
            tried.append(f"{n}: {sm.library or 'its library'} not installed")
        except Exception as exc:  # a vendor library's own errors (NVMLError_*) included
            tried.append(f"{n}: {str(exc)[:120]}")
        finally:
            clear_records(r)
    why = "no card could be sampled (" + "; ".join(tried) + ")"
    if host_only and name == "auto":
        return HostOnlyBackend(why)
    raise WatchError(why)
