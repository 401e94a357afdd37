"""Host side of a watch sample: RAM, swap, paging, CPU time and IO wait, per-NUMA-node memory,
and for each process that owns a card its liveness, CPU/memory binding and CPU time (itself and
its children, e.g. DataLoader workers).

Every read goes through the probe's Runner (``root`` can be a fake tree).  The Runner keeps what
it read for support bundles; a watch runs for hours, so those records are cleared after each
sample to keep memory flat.

Files read per sample (all cheap, no subprocess):
  /proc/meminfo (MemTotal, MemAvailable, Cached + Buffers = page cache, SwapTotal, SwapFree)
  /proc/vmstat (pswpin, pswpout: pages swapped in / out since boot)
  /proc/stat first line (CPU jiffies: total, idle, iowait)
  /sys/devices/system/node/node<N>/meminfo (MemTotal, MemFree per node)
  /proc/<pid>/status (Name, State, Cpus_allowed_list, Mems_allowed_list), /proc/<pid>/stat
  (utime + stime), /proc/<pid>/task/<pid>/children (first MAX_CHILDREN children, same files)
"""

from __future__ import annotations

import os
import re
import socket

from nodeledger.machine.parsers.proc import meminfo, pid_stat, pid_status
from nodeledger.machine.probe.runner import Runner
from nodeledger.watch.backends import clear_records

MAX_CHILDREN = 64  # children read per owner process (DataLoader workers)
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


_VM = re.compile(r"^(pswpin|pswpout) (\d+)$", re.M)


def vm_counters(text: str) -> dict[str, int]:
    """/proc/vmstat -> {"pswpin": pages, "pswpout": pages} (those present)."""
    return {k: int(v) for k, v in _VM.findall(text)}


def cpu_jiffies(text: str | None) -> dict[str, int] | None:
    """/proc/stat "cpu" line -> {"total", "idle", "iowait"} (jiffies since boot; guest time is
    already inside user/nice and is not added twice)."""
    if not text or not text.startswith("cpu "):
        return None
    vals = [int(x) for x in text[: text.find("\n")].split()[1:9] if x.isdigit()]
    if len(vals) < 5:
        return None
    return {"total": sum(vals), "idle": vals[3], "iowait": vals[4]}


class HostSampler:
    """Reads the host figures of one sample (see the module doc)."""

    def __init__(self, runner: Runner | None = None):
        self.r = runner or Runner(live=True)
        self.nodes: dict[int, str] = {}  # NUMA node -> cpulist (static)
        self._node_dirs: list[tuple[int, str]] = []

    def describe(self) -> dict:
        """Static facts for the stream header: hostname, CPU count, NUMA nodes and their CPUs."""
        for d in self.r.glob("/sys/devices/system/node/node[0-9]*"):
            m = re.search(r"/node(\d+)$", d)
            if m:
                nid = int(m.group(1))
                self._node_dirs.append((nid, d))
                self.nodes[nid] = (self.r.read(f"{d}/cpulist") or "").strip()
        self._node_dirs.sort()
        online = (self.r.read("/sys/devices/system/cpu/online") or "").strip()
        clear_records(self.r)
        return {
            "hostname": socket.gethostname(),
            "cpus": online or None,
            "numa_nodes": {str(k): v or None for k, v in sorted(self.nodes.items())},
        }

    def sample(self, pids) -> tuple[dict, dict]:
        """(host figures, {pid: process facts}) now."""
        r = self.r
        host: dict = {}
        mem = meminfo(r.read("/proc/meminfo"))
        host["mem_total"] = mem.get("MemTotal")
        host["mem_available"] = mem.get("MemAvailable")
        cached, buffers = mem.get("Cached"), mem.get("Buffers")
        host["page_cache"] = None if cached is None or buffers is None else cached + buffers
        host["swap_total"] = mem.get("SwapTotal")
        host["swap_free"] = mem.get("SwapFree")
        vm = vm_counters(r.read("/proc/vmstat") or "")
        host["pswpin"] = vm.get("pswpin")
        host["pswpout"] = vm.get("pswpout")
        host["cpu"] = cpu_jiffies(r.read("/proc/stat"))
        numa = {}
        for nid, d in self._node_dirs:
            f = {k: v for k, v in meminfo(r.read(f"{d}/meminfo")).items()
                 if k in ("MemTotal", "MemFree")}  # fmt: skip
            if f:
                numa[str(nid)] = [f.get("MemTotal"), f.get("MemFree")]
        host["numa"] = numa
        procs = {str(pid): self.process(pid, children=True) for pid in sorted(set(pids))}
        clear_records(self.r)
        return host, procs

    def process(self, pid: int, children: bool = False) -> dict:
        """{"alive", "name", "state", "cpus", "mems", "cpu_s"[, "children": [...]]}; a pid
        without /proc entry, or a zombie, is not alive."""
        r = self.r
        status = r.read(f"/proc/{pid}/status")
        if status is None:
            if r.problems.get(f"/proc/{pid}/status") == "not in the bundle":
                return {"alive": None}  # a replayed bundle that did not read it: unknown
            return {"alive": False}
        f = pid_status(status)
        state = f.state
        out: dict = {"alive": state not in ("Z", "X"), "name": f.name, "state": state,
                     "cpus": f.cpus_allowed_list, "mems": f.mems_allowed_list}  # fmt: skip
        st = pid_stat(r.read(f"/proc/{pid}/stat"))
        if st is not None and st.utime is not None and st.stime is not None:
            out["cpu_s"] = round((st.utime + st.stime) / _CLK_TCK, 2)
        if children:
            kids = (r.read(f"/proc/{pid}/task/{pid}/children") or "").split()
            out["children"] = [
                dict(self.process(int(k)), pid=int(k)) for k in kids[:MAX_CHILDREN] if k.isdigit()
            ]
        return out
