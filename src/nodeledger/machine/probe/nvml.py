"""NVIDIA through NVML (nvidia-ml-py, the `nvidia` extra): the single choke point for NVML.
This is the one module that imports pynvml; :class:`NvmlSession` is the one NVML client (init /
shutdown, every call run in the session's one worker thread with a deadline so a hung driver
cannot hang the caller, NVML errors named), used by the probe here and by the watch's
``NvmlBackend`` (watch/backends.py).

Probe: falls back (the caller tries nvidia-smi) when the package is missing or NVML fails.
Health and state per card (persistence, ECC mode and volatile counts, retired pages, remapped
rows, used memory, running processes): each call is guarded on its own; a query the card or
driver does not support leaves that field unknown (None), never the card."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from typing import Any

from nodeledger.errors import NodeledgerError
from nodeledger.machine.probe.runner import Runner
from nodeledger.machine.profile import (
    Accelerator,
    CardProcess,
    Interconnect,
    Link,
    LinkKind,
    LinkPair,
)

# nvmlGpuTopologyLevel_t -> (normalised kind, nvidia-smi topo label)
TOPO_LEVEL = {0: ("pix", "PIX"), 10: ("pix", "PIX"), 20: ("pxb", "PXB"), 30: ("phb", "PHB"),
              40: ("node", "NODE"), 50: ("sys", "SYS")}  # fmt: skip
MAX_NVLINKS = 18
# NVML enum values (nvml.h), kept here so a partial binding cannot change them
CORRECTED, UNCORRECTED = 0, 1  # nvmlMemoryErrorType_t
VOLATILE = 0  # nvmlEccCounterType_t
CAUSE_SBE, CAUSE_DBE = 0, 1  # nvmlPageRetirementCause_t: multiple single-bit, double-bit
NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED
NOT_AVAILABLE_U64 = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE (unsigned long long)


def as_text(v: Any) -> str:
    """An NVML string (bytes on older bindings) as text."""
    return v.decode() if isinstance(v, bytes) else str(v)


def err_name(exc: Exception) -> str:
    """The NVML error's name ("NotSupported", "NoPermission": NVMLError_* classes), else the
    exception's type."""
    name = type(exc).__name__
    if getattr(exc, "value", None) == NOT_SUPPORTED or "NOT_SUPPORTED" in str(exc):
        return "NotSupported"
    return name.removeprefix("NVMLError_") if name.startswith("NVMLError_") else name


def err_text(exc: Exception) -> str:
    """An NVML failure in one line: "NVMLError_DriverNotLoaded: Driver Not Loaded"."""
    return f"{type(exc).__name__}: {exc}"


# -- the gateway ------------------------------------------------------------------------------


class LibraryQuery:
    """The one gateway for a call into a card library (NVML, amdsmi) whose failure leaves a field
    unknown: ``q("nvmlDeviceGetUUID", handle)`` is the call's value, or ``default`` when the
    library says no (not supported on this card or driver, no permission, a lost card, a binding
    this release lacks).  Each refusal is kept in ``errors`` (function -> :func:`err_name`), so a
    caller can tell a card without ECC from an unread one.  ``then`` turns the value into the
    field inside the same guard (a struct without the attribute is unknown too).  Modelled on
    nvitop's ``nvmlQuery(func, *args, default=NA)``.  Runs where it is called: inside a session's
    worker (:meth:`NvmlSession.call`), never dispatching to it."""

    def __init__(self, lib: Any):
        self.lib = lib
        self.errors: dict[str, str] = {}

    def __call__(self, fn: Any, *args: Any, default: Any = None, then: Any = None) -> Any:
        """``fn``: the library function's name, or a function of several library calls."""
        try:
            value = (getattr(self.lib, fn) if isinstance(fn, str) else fn)(*args)
            return then(value) if then is not None else value
        except Exception as exc:  # NVMLError_* / AmdSmiLibraryException, a missing binding
            self.errors[fn if isinstance(fn, str) else fn.__name__] = err_name(exc)
            return default


# -- the session ------------------------------------------------------------------------------


class NvmlHung(NodeledgerError):
    """An NVML call missed its deadline, or an earlier one has not returned (hung driver?)."""


class NvmlSession:
    """One NVML client.  ``nv`` is the pynvml module (imported here, at construction, so a test
    can put a fake in ``sys.modules["pynvml"]``; ImportError when nvidia-ml-py is missing: the
    caller falls back).  Every :meth:`call` runs in the session's one daemon worker thread and
    waits at most ``timeout`` s; a call that misses it raises :class:`NvmlHung`, and no new
    call starts until the stuck one returns (a hung driver costs one thread, never the caller,
    and does not keep the process from exiting).  NVML's own errors (NVMLError_*) are raised
    in the caller's thread as they are; :func:`err_name` / :func:`err_text` name them."""

    label = "NVML"  # names the library in the deadline messages
    INIT, SHUTDOWN = "nvmlInit", "nvmlShutdown"  # the library's own calls (open / close)

    @staticmethod
    def _library():
        import pynvml  # nvidia-ml-py; the only import of it in nodeledger

        return pynvml

    def __init__(self, timeout: float = 5.0):
        self.nv = self._library()
        self.timeout = timeout
        self.opened = False
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._stuck: threading.Event | None = None

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, box, done = job
            try:
                box["value"] = fn()
            except Exception as exc:  # NVMLError_*: reported in the caller's thread
                box["error"] = exc
            finally:
                done.set()

    def call(self, fn, timeout: float | None = None):
        """``fn()`` in the worker thread; its value, or its exception re-raised here.
        ``timeout``: this call's deadline (default: the session's)."""
        if self._stuck is not None and not self._stuck.is_set():
            raise NvmlHung(f"{self.label}: the previous call has not returned (hung driver?)")
        self._stuck = None
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, name=self.label.lower(), daemon=True)
            self._worker.start()
        wait = self.timeout if timeout is None else timeout
        box: dict = {}
        done = threading.Event()
        self._jobs.put((fn, box, done))
        if not done.wait(max(wait, 0.0)):
            self._stuck = done
            raise NvmlHung(f"{self.label}: no answer within {wait:g} s (hung driver?)")
        if "error" in box:
            raise box["error"]
        return box["value"]

    def open(self, timeout: float | None = None) -> None:
        """The library's init (nvmlInit)."""
        self.call(getattr(self.nv, self.INIT), timeout)
        self.opened = True

    def handles(self, timeout: float | None = None) -> list:
        """One device handle per card, in NVML's index order."""
        nv = self.nv
        return self.call(
            lambda: [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())],
            timeout,
        )

    def close(self) -> None:
        """The library's shutdown (nvmlShutdown; after a successful open, its errors ignored),
        then end the worker (at once when idle, after the stuck call returns otherwise)."""
        if self.opened:
            self.opened = False
            with contextlib.suppress(Exception):
                self.call(getattr(self.nv, self.SHUTDOWN))
        if self._worker is not None:
            self._jobs.put(None)
            self._worker = None


def _health(nv, h, mem) -> tuple[dict, dict]:
    """One card's state and health; (values, errors: NVML function -> error name)."""
    val: dict = {}
    q = LibraryQuery(nv)
    err = q.errors

    def call(fn: str, *args):
        return q(fn, h, *args)

    used = getattr(mem, "used", None)
    val["memory_used"] = int(used) if isinstance(used, int) and used >= 0 else None
    ecc = call("nvmlDeviceGetEccMode")
    if isinstance(ecc, (list, tuple)) and ecc and ecc[0] in (0, 1):
        val["ecc_mode"] = "enabled" if ecc[0] else "disabled"
    # the counters need ECC on; a card without ECC (or with it off) has no count to read
    if val.get("ecc_mode") != "disabled" and err.get("nvmlDeviceGetEccMode") != "NotSupported":
        for key, kind in (("ecc_corrected", CORRECTED), ("ecc_uncorrected", UNCORRECTED)):
            n = call("nvmlDeviceGetTotalEccErrors", kind, VOLATILE)
            if isinstance(n, int) and 0 <= n < NOT_AVAILABLE_U64:
                val[key] = n
        sbe = call("nvmlDeviceGetRetiredPages", CAUSE_SBE)
        dbe = call("nvmlDeviceGetRetiredPages", CAUSE_DBE) if sbe is not None else None
        if isinstance(sbe, list) and isinstance(dbe, list):
            val["retired_pages"] = len(sbe) + len(dbe)
        pend = call("nvmlDeviceGetRetiredPagesPendingStatus")
        if pend in (0, 1):
            val["retired_pending"] = "yes" if pend else "no"
    rows = call("nvmlDeviceGetRemappedRows")
    if isinstance(rows, (list, tuple)) and len(rows) >= 4:
        val["remapped_pending"] = "yes" if rows[2] else "no"
        val["remapped_failed"] = "yes" if rows[3] else "no"
    procs: dict[int, dict] = {}
    listed = []
    for fn, kind in (("nvmlDeviceGetComputeRunningProcesses", "C"),
                     ("nvmlDeviceGetGraphicsRunningProcesses", "G")):  # fmt: skip
        found = call(fn)
        if found is None:
            continue
        listed.append(fn)
        for p in found:
            pid = getattr(p, "pid", None)
            if not isinstance(pid, int) or pid < 0:
                continue
            m = getattr(p, "usedGpuMemory", None)
            m = m if isinstance(m, int) and 0 <= m < NOT_AVAILABLE_U64 else None
            if pid in procs:  # in both lists: a compute and a graphics context
                procs[pid]["kind"] = "C+G"
                procs[pid]["used"] = procs[pid]["used"] if procs[pid]["used"] is not None else m
            else:
                procs[pid] = {"pid": pid, "kind": kind, "used": m}
    val["processes"] = list(procs.values()) if listed else None
    val["processes_from"] = listed
    return val, err


def _collect(nv, handles: list) -> dict:
    """Everything the probe reads, after nvmlInit: driver, cards (memory, bus, persistence, MIG,
    NUMA, health) and per pair the NVLink count and the PCIe common ancestor."""
    out: dict = {"driver": as_text(nv.nvmlSystemGetDriverVersion()), "cards": [], "links": {}}
    q = LibraryQuery(nv)
    n = len(handles)
    bus_of = {}
    for i, h in enumerate(handles):
        mem = nv.nvmlDeviceGetMemoryInfo(h)
        card: dict = {
            "index": i,
            "name": as_text(nv.nvmlDeviceGetName(h)),
            "memory": int(mem.total),
        }
        bus = as_text(nv.nvmlDeviceGetPciInfo(h).busId)
        card["bus"] = bus
        bus_of[bus.lower()] = i
        for key, fn in (("persistence", "nvmlDeviceGetPersistenceMode"), ("mig", "nvmlDeviceGetMigMode"),
                        ("numa", "nvmlDeviceGetNumaNodeId"), ("uuid", "nvmlDeviceGetUUID")):  # fmt: skip
            card[key] = q(fn, h)  # an unsupported query on this card/driver is unknown, not fatal
        card["health"], card["errors"] = _health(nv, h, mem)
        out["cards"].append(card)
    for i, h in enumerate(handles):
        counts: dict[int, int] = {}
        for link in range(MAX_NVLINKS):
            state = q("nvmlDeviceGetNvLinkState", h, link)
            if state is None:  # past the card's last link, or no NVLink query at all
                break
            if not state:
                continue
            peer = q("nvmlDeviceGetNvLinkRemotePciInfo", h, link,
                     then=lambda pci: as_text(pci.busId).lower())  # fmt: skip
            if peer is None:
                break
            j = bus_of.get(peer)
            if j is not None:
                counts[j] = counts.get(j, 0) + 1
        for j in range(i + 1, n):
            # unsupported on some drivers: unknown
            level = q("nvmlDeviceGetTopologyCommonAncestor", h, handles[j])
            out["links"][(i, j)] = (counts.get(j, 0), level)
    return out


HEALTH_SOURCES = {
    "persistence_mode": "NVML nvmlDeviceGetPersistenceMode",
    "ecc_mode": "NVML nvmlDeviceGetEccMode (current)",
    "ecc_errors_corrected": "NVML nvmlDeviceGetTotalEccErrors(CORRECTED, VOLATILE)",
    "ecc_errors_uncorrected": "NVML nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)",
    "retired_pages": "NVML nvmlDeviceGetRetiredPages (multiple single-bit + double-bit)",
    "retired_pages_pending": "NVML nvmlDeviceGetRetiredPagesPendingStatus",
    "remapped_rows_pending": "NVML nvmlDeviceGetRemappedRows (isPending)",
    "remapped_rows_failed": "NVML nvmlDeviceGetRemappedRows (failureOccurred)",
    "memory_used_bytes": "NVML nvmlDeviceGetMemoryInfo.used (at probe time)",
}
HEALTH_KEYS = {"ecc_mode": "ecc_mode", "ecc_errors_corrected": "ecc_corrected",
               "ecc_errors_uncorrected": "ecc_uncorrected", "retired_pages": "retired_pages",
               "retired_pages_pending": "retired_pending", "remapped_rows_pending": "remapped_pending",
               "remapped_rows_failed": "remapped_failed", "memory_used_bytes": "memory_used"}  # fmt: skip


def _card_processes(c: dict, runner: Runner | None) -> list[CardProcess]:
    out = []
    for p in c["health"].get("processes") or []:
        name = None
        if runner is not None:  # through the Runner, so a bundle keeps what was read
            name = (runner.read(f"/proc/{p['pid']}/comm") or "").strip() or None
        out.append(CardProcess(pid=p["pid"], name=name, used_bytes=p["used"], kind=p["kind"]))
    return out


def _error_notes(cards: list[dict]) -> list[str]:
    """One note per (NVML function, error) naming the cards; NotSupported is said only for ECC
    (it tells a card without ECC from an unread one), the rest of NotSupported is expected
    (retired pages on Ampere+, remapped rows before Ampere)."""
    seen: dict[tuple[str, str], list[int]] = {}
    for c in cards:
        for fn, name in c["errors"].items():
            if name == "NotSupported" and fn != "nvmlDeviceGetEccMode":
                continue
            seen.setdefault((fn, name), []).append(c["index"])
    notes = []
    for (fn, name), idx in seen.items():
        which = ", ".join(str(i) for i in idx)
        if name == "NotSupported":
            notes.append(f"NVML: ECC not supported on card(s) {which}; ECC fields unknown")
        elif name == "AttributeError":
            notes.append(f"NVML: {fn} missing in this nvidia-ml-py; that field is unknown")
        else:
            notes.append(f"NVML: {fn} failed on card(s) {which} ({name}); that field is unknown")
    return notes


def probe(notes: list[str], timeout: float = 5.0, runner: Runner | None = None):
    """Cards and links through one :class:`NvmlSession`, all of it (init, the reads) within one
    deadline of ``timeout`` s; None (with a note) when nvidia-ml-py is missing, NVML fails or
    does not answer in time."""
    try:
        session = NvmlSession(timeout)
    except ImportError:
        notes.append(
            "NVML: nvidia-ml-py not installed (pip install 'nodeledger[nvidia]'); using nvidia-smi"
        )
        return None
    end = time.monotonic() + timeout
    try:
        session.open()
        handles = session.handles(end - time.monotonic())
        data = session.call(lambda: _collect(session.nv, handles), end - time.monotonic())
    except NvmlHung:
        notes.append(f"NVML: no answer within {timeout:g} s (hung driver?); using nvidia-smi")
        return None
    except Exception as exc:  # NVML errors (no driver, no permission) are notes
        notes.append(f"NVML: {err_text(exc)[:160]}; using nvidia-smi")
        return None
    finally:
        session.close()
    cards = []
    for c in data["cards"]:
        mig = c.get("mig")
        mig_txt = None
        if isinstance(mig, (tuple, list)) and mig:
            mig_txt = "MIG enabled" if mig[0] else "MIG disabled"
        p = c.get("persistence")
        pers = {1: "enabled", 0: "disabled"}.get(p) if isinstance(p, int) else None
        health = c["health"]
        fields = {f: health.get(k) for f, k in HEALTH_KEYS.items()}
        fields["persistence_mode"] = pers
        sources = {
            "memory_bytes": "NVML nvmlDeviceGetMemoryInfo.total",
            "product": "NVML nvmlDeviceGetName",
        }
        sources.update({f: HEALTH_SOURCES[f] for f, v in fields.items() if v is not None})
        uuid = as_text(c["uuid"]).strip() if c.get("uuid") else ""
        numa = c["numa"] if isinstance(c.get("numa"), int) and c["numa"] >= 0 else None
        if uuid:
            sources["uuid"] = "NVML nvmlDeviceGetUUID"
        if numa is not None:
            sources["numa_node"] = "NVML nvmlDeviceGetNumaNodeId"
        procs = _card_processes(c, runner)
        if health.get("processes") is not None:
            sources["processes"] = (
                "NVML "
                + " + ".join(health["processes_from"])
                + ("; names from /proc/<pid>/comm" if runner is not None else "")
            )
        cards.append(Accelerator(
            index=c["index"], vendor="nvidia", product=c["name"] or "unknown NVIDIA GPU",
            memory_bytes=c["memory"] or None, pci_bus_id=c["bus"] or None, partition=mig_txt,
            numa_node=numa, uuid=uuid[:128] or None, processes=procs, sources=sources, **fields,
        ))  # fmt: skip
    pairs = []
    for (i, j), (count, level) in data["links"].items():
        if count:
            pairs.append(LinkPair(a=i, b=j, kind=LinkKind.nvlink, lanes=count, label=f"NV{count}",
                                  source="NVML nvmlDeviceGetNvLinkState/RemotePciInfo"))  # fmt: skip
        elif level in TOPO_LEVEL:
            kind, label = TOPO_LEVEL[level]
            pairs.append(LinkPair(a=i, b=j, kind=LinkKind(kind), label=label,
                                  source="NVML nvmlDeviceGetTopologyCommonAncestor"))  # fmt: skip
    notes.append(f"NVML: {len(cards)} GPU(s), driver {data['driver']}")
    notes.extend(_error_notes(data["cards"]))
    return cards, Interconnect(default=Link(), pairs=pairs)
