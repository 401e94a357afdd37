"""The one module that imports AMD's `amdsmi` Python library (the analogue of nvidia-ml-py;
PyPI `amdsmi`, installed with ROCm).  :class:`AmdsmiSession` runs every call in one daemon
worker thread with a deadline, as :class:`~nodeledger.machine.probe.nvml.NvmlSession` does:
a hung driver costs one thread, never the caller.

The calls used (amdsmi_interface.py, ROCm/amdsmi): ``amdsmi_init``,
``amdsmi_get_processor_handles``, ``amdsmi_get_gpu_device_bdf``, ``amdsmi_get_gpu_asic_info``
(``market_name``), ``amdsmi_get_gpu_vram_usage`` (``vram_total`` / ``vram_used`` in MB, i.e.
MiB), ``amdsmi_get_gpu_activity`` (``gfx_activity`` %), ``amdsmi_topo_get_numa_node_number``,
``amdsmi_get_gpu_process_list`` (newer releases: a list of dicts with ``pid``, ``name`` and
``memory_usage.vram_mem`` in bytes; ROCm 6.0: process handles, read with
``amdsmi_get_gpu_process_info``) and ``amdsmi_shut_down``.
"""

from __future__ import annotations

from nodeledger.machine.probe.nvml import NvmlSession


class AmdsmiSession(NvmlSession):
    """NvmlSession's worker thread and deadlines over amdsmi's init, handles and shutdown."""

    label = "amdsmi"
    INIT, SHUTDOWN = "amdsmi_init", "amdsmi_shut_down"

    @staticmethod
    def _library():
        import amdsmi  # ROCm's Python library; the only import of it in nodeledger

        return amdsmi

    def handles(self, timeout: float | None = None) -> list:
        return self.call(self.nv.amdsmi_get_processor_handles, timeout)


def processes(lib, handle) -> list[dict]:
    """[{pid, name, used_bytes}] on one card, from either shape of the process list."""
    out = []
    for p in lib.amdsmi_get_gpu_process_list(handle) or []:
        if not isinstance(p, dict):  # ROCm 6.0: a handle
            p = lib.amdsmi_get_gpu_process_info(handle, p)
        mem = (p.get("memory_usage") or {}).get("vram_mem")
        name = p.get("name")
        out.append({"pid": int(p["pid"]), "name": None if name in (None, "", "N/A") else str(name),
                    "used_bytes": int(mem) if isinstance(mem, (int, float)) else None})  # fmt: skip
    return out
