"""NVIDIA backend through NVML (nvidia-ml-py, the `nvidia` extra): the single choke point for
NVML calls, run in a worker thread with a deadline so a hung driver cannot hang the probe.
Falls back (the caller tries nvidia-smi) when the package is missing or NVML fails."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from nodeledger.machine.profile import Accelerator, Interconnect, Link, LinkKind, LinkPair

# nvmlGpuTopologyLevel_t -> (normalised kind, nvidia-smi topo label)
TOPO_LEVEL = {0: ("pix", "PIX"), 10: ("pix", "PIX"), 20: ("pxb", "PXB"), 30: ("phb", "PHB"),
              40: ("node", "NODE"), 50: ("sys", "SYS")}  # fmt: skip
MAX_NVLINKS = 18


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _collect(nv) -> dict:
    nv.nvmlInit()
    try:
        out: dict = {"driver": _text(nv.nvmlSystemGetDriverVersion()), "cards": [], "links": {}}
        n = nv.nvmlDeviceGetCount()
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        bus_of = {}
        for i, h in enumerate(handles):
            card: dict = {"index": i, "name": _text(nv.nvmlDeviceGetName(h)),
                          "memory": int(nv.nvmlDeviceGetMemoryInfo(h).total)}  # fmt: skip
            bus = _text(nv.nvmlDeviceGetPciInfo(h).busId)
            card["bus"] = bus
            bus_of[bus.lower()] = i
            for key, fn in (("persistence", "nvmlDeviceGetPersistenceMode"), ("mig", "nvmlDeviceGetMigMode"),
                            ("numa", "nvmlDeviceGetNumaNodeId")):  # fmt: skip
                try:
                    card[key] = getattr(nv, fn)(h)
                except Exception:  # an unsupported query on this card/driver is unknown, not fatal
                    card[key] = None
            out["cards"].append(card)
        for i, h in enumerate(handles):
            counts: dict[int, int] = {}
            for link in range(MAX_NVLINKS):
                try:
                    if not nv.nvmlDeviceGetNvLinkState(h, link):
                        continue
                    peer = _text(nv.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId).lower()
                except Exception:
                    break
                j = bus_of.get(peer)
                if j is not None:
                    counts[j] = counts.get(j, 0) + 1
            for j in range(i + 1, n):
                level = None
                with contextlib.suppress(Exception):  # unsupported on some drivers: unknown
                    level = nv.nvmlDeviceGetTopologyCommonAncestor(h, handles[j])
                out["links"][(i, j)] = (counts.get(j, 0), level)
        return out
    finally:
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()


def probe(notes: list[str], timeout: float = 5.0):
    try:
        import pynvml as nv  # nvidia-ml-py
    except ImportError:
        notes.append(
            "NVML: nvidia-ml-py not installed (pip install 'nodeledger[nvidia]'); using nvidia-smi"
        )
        return None
    box: dict = {}

    def work():
        try:
            box["data"] = _collect(nv)
        except Exception as exc:  # NVML errors (no driver, no permission) are notes
            box["error"] = f"{type(exc).__name__}: {exc}"

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        notes.append(f"NVML: no answer within {timeout:g} s (hung driver?); using nvidia-smi")
        return None
    if "error" in box:
        notes.append(f"NVML: {box['error'][:160]}; using nvidia-smi")
        return None
    data = box["data"]
    cards = []
    for c in data["cards"]:
        mig = c.get("mig")
        mig_txt = None
        if isinstance(mig, (tuple, list)) and mig:
            mig_txt = "MIG enabled" if mig[0] else "MIG disabled"
        cards.append(Accelerator(
            index=c["index"], vendor="nvidia", product=c["name"] or "unknown NVIDIA GPU",
            memory_bytes=c["memory"] or None, pci_bus_id=c["bus"] or None, partition=mig_txt,
            numa_node=c["numa"] if isinstance(c.get("numa"), int) and c["numa"] >= 0 else None,
            sources={"memory_bytes": "NVML nvmlDeviceGetMemoryInfo.total", "product": "NVML nvmlDeviceGetName"},
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
    return cards, Interconnect(default=Link(), pairs=pairs)
