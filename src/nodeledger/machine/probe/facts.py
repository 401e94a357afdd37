"""Live facts `nodeledger doctor` needs beyond the machine profile: the process table (each
card process's CPU affinity, every process's resident memory, MPS daemons), the kernel command
line, IOMMU groups and their DMA mode, PCIe ACS (``lspci -vvv``), the mount table
(``/proc/self/mountinfo``), and the environment-derived paths (HF cache, working directory).

Every fact is read through the probe Runner, so a support bundle holds them and
``doctor --from BUNDLE`` replays the same findings; a fake tree serves tests.  A fact that cannot
be read is ``None`` with the reason in ``Facts.problems`` — never an exception.

Privacy: ``/proc/self/environ`` is kept in the runner (and so in a bundle) only for the variables
in ``ENV_KEYS``; everything else (tokens, keys) is dropped right after reading.
Links (``/proc/self/cwd``) are kept as their target's text: a replay reads them as files.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from nodeledger.machine.parsers import proc as P
from nodeledger.machine.parsers.common import cpulist_ids, pci_address
from nodeledger.machine.parsers.hf_cache import DEFAULT as HF_DEFAULT
from nodeledger.machine.parsers.hf_cache import hf_hub_cache
from nodeledger.machine.parsers.lspci import PciBridge, parse_lspci
from nodeledger.machine.probe.runner import Runner
from nodeledger.machine.profile import MachineProfile

ENV_KEYS = ("HOME", "PWD", "XDG_CACHE_HOME", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE",
            "TRANSFORMERS_CACHE", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY",
            "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES")  # fmt: skip
NO_SUCH_FILE = os.strerror(2)  # "No such file or directory": the kernel's answer for a gone pid
PROC_GLOB = "/proc/[0-9]*/status"
LSPCI = ["lspci", "-D", "-vvv"]
MPS_DEFAULT_PIPE = "/tmp/nvidia-mps"


@dataclass
class Proc:
    """One process as /proc/<pid>/status shows it.  ``exists``: True, False (no /proc/<pid>:
    exited, or in another PID namespace), None (unknown: unreadable for another reason)."""

    pid: int
    exists: bool | None
    name: str | None = None
    rss_bytes: int | None = None  # VmRSS
    cpus_allowed: str | None = None  # Cpus_allowed_list (kernel cpulist syntax)
    cmdline: str | None = None  # read for MPS daemons only
    problem: str | None = None

    @property
    def source(self) -> str:
        return f"/proc/{self.pid}/status"


@dataclass
class MountEntry:
    """One line of /proc/self/mountinfo."""

    mount_point: str
    device: str  # major:minor of the filesystem (what st_dev says)
    fstype: str
    source: str  # the mounted device or remote path


@dataclass
class Facts:
    problems: dict[str, str] = field(default_factory=dict)  # fact -> why it is unknown
    sources: dict[str, str] = field(default_factory=dict)  # fact -> where it was read
    file_problems: dict[str, str] = field(default_factory=dict)  # the runner's unreadable files
    cmdline: str | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    mounts: list[MountEntry] | None = None
    processes: list[Proc] | None = None  # every process in /proc
    card_procs: dict[int, Proc] = field(default_factory=dict)  # pid -> the process a card lists
    iommu_groups: dict[str, str] | None = None  # PCI address (0000:18:00.0) -> IOMMU group
    iommu_types: dict[str, str | None] = field(default_factory=dict)  # group -> DMA / identity
    bridges: list[PciBridge] | None = None  # from lspci -D -vvv
    lspci_access_denied: bool = False  # lspci ran but could not read extended capabilities
    mps_daemons: list[Proc] = field(default_factory=list)
    mps_pipe: str | None = None  # the MPS pipe directory whose control pipe exists

    def mount_of(self, path: str) -> MountEntry | None:
        """The mount a path lives on: the longest mount point that is a prefix (the last such
        line wins, as later mounts hide earlier ones).  Symlinks are not resolved."""
        if not self.mounts:
            return None
        path = os.path.normpath(path)
        best = None
        for m in self.mounts:
            mp = m.mount_point.rstrip("/") or "/"
            if (mp == "/" or path == mp or path.startswith(mp + "/")) and (
                best is None or len(mp) >= len(best.mount_point.rstrip("/") or "/")
            ):
                best = m
        return best


def cpuset(text: str | None) -> set[int] | None:
    """Kernel cpulist ("0-3,8,10-11") -> set of CPU numbers; None if not a cpulist."""
    return cpulist_ids(text)


def read_proc(r: Runner, pid: int) -> Proc:
    path = f"/proc/{pid}/status"
    text = r.read(path)
    if text is None:
        why = r.problems.get(path, "unreadable")
        return Proc(pid, False if why == NO_SUCH_FILE else None, problem=why)
    st = P.pid_status(text)
    return Proc(pid, True, name=st.name, rss_bytes=st.rss_bytes,
                cpus_allowed=st.cpus_allowed_list)  # fmt: skip


def _env(r: Runner, f: Facts) -> None:
    path = "/proc/self/environ"
    text = r.read(path)
    if text is None:
        f.problems["env"] = f"{path} unreadable ({r.problems.get(path, 'unreadable')})"
        return
    env = P.environ(text, ENV_KEYS)
    # never keep tokens or keys: only the variables doctor reads
    r.files[path] = "\0".join(f"{k}={v}" for k, v in env.items())
    f.env = env
    f.sources["env"] = f"{path} ({', '.join(ENV_KEYS)} only)"


def _mounts(r: Runner, f: Facts) -> None:
    path = "/proc/self/mountinfo"
    text = r.read(path)
    if text is None:
        f.problems["mounts"] = f"{path} unreadable ({r.problems.get(path, 'unreadable')})"
        return
    out = [MountEntry(m.mount_point, m.device, m.fstype, m.source) for m in P.mountinfo(text)]
    if not out:
        f.problems["mounts"] = f"{path} holds no mount line"
        return
    f.mounts = out
    f.sources["mounts"] = path


def _processes(r: Runner, profile: MachineProfile, f: Facts) -> None:
    paths = r.glob(PROC_GLOB)
    procs: dict[int, Proc] = {}
    for p in paths:
        m = re.match(r"/proc/(\d+)/status$", p)
        if not m:
            continue
        pr = read_proc(r, int(m.group(1)))
        if pr.exists:  # a process that exited between the listing and the read is not listed
            procs[pr.pid] = pr
    if procs:
        f.processes = sorted(procs.values(), key=lambda x: x.pid)
        f.sources["processes"] = f"{PROC_GLOB} (Name, VmRSS, Cpus_allowed_list)"
    else:
        f.problems["processes"] = f"no readable {PROC_GLOB}"
    for card in profile.accelerators:
        for cp in card.processes:
            if cp.pid not in f.card_procs:
                f.card_procs[cp.pid] = procs.get(cp.pid) or read_proc(r, cp.pid)
    for pr in f.processes or []:
        if (pr.name or "").startswith("nvidia-cuda-mps"):
            text = r.read(f"/proc/{pr.pid}/cmdline")
            pr.cmdline = P.cmdline(text)
            f.mps_daemons.append(pr)
    pipe = (f.env or {}).get("CUDA_MPS_PIPE_DIRECTORY") or MPS_DEFAULT_PIPE
    if r.glob(f"{pipe.rstrip('/')}/control"):
        f.mps_pipe = pipe


def _iommu(r: Runner, profile: MachineProfile, f: Facts) -> None:
    groups: dict[str, str] = {}
    for p in r.glob("/sys/kernel/iommu_groups/*/devices/*"):
        m = re.match(r"/sys/kernel/iommu_groups/([^/]+)/devices/([^/]+)$", p)
        if m:
            groups[m.group(2).lower()] = m.group(1)
    f.iommu_groups = groups
    f.sources["iommu_groups"] = "/sys/kernel/iommu_groups/*/devices/*"
    for card in profile.accelerators:
        g = groups.get(pci_address(card.pci_bus_id) or "")
        if g is not None and g not in f.iommu_types:
            t = r.read(f"/sys/kernel/iommu_groups/{g}/type")
            f.iommu_types[g] = t.strip() if t else None


def _acs(r: Runner, profile: MachineProfile, f: Facts) -> None:
    if len(profile.accelerators) < 2:
        return  # peer-to-peer needs two cards: lspci is not run
    if r.which("lspci") is None:
        f.problems["acs"] = "lspci absent (not on PATH; pciutils)"
        return
    res = r.run(LSPCI)
    if not res.ok and not res.stdout:
        f.problems["acs"] = f"{' '.join(LSPCI)}: {res.problem}"
        return
    f.bridges, f.lspci_access_denied = parse_lspci(res.stdout)
    f.sources["acs"] = "lspci -D -vvv (Bus: secondary/subordinate, ACSCtl)"


def collect(r: Runner, profile: MachineProfile) -> Facts:
    """Read every live fact doctor needs, through ``r``; never raises on an unreadable fact."""
    f = Facts()
    text = r.read("/proc/cmdline")
    if text is None:
        f.problems["cmdline"] = f"/proc/cmdline unreadable ({r.problems.get('/proc/cmdline')})"
    else:
        f.cmdline = text.strip()
        f.sources["cmdline"] = "/proc/cmdline"
    _env(r, f)
    cwd = r.readlink("/proc/self/cwd")
    if cwd:
        f.cwd = cwd
        f.sources["cwd"] = "/proc/self/cwd"
    elif f.env and f.env.get("PWD"):
        f.cwd = f.env["PWD"]
        f.sources["cwd"] = "PWD in /proc/self/environ (/proc/self/cwd unreadable)"
    else:
        f.problems["cwd"] = (
            f"/proc/self/cwd unreadable ({r.problems.get('/proc/self/cwd', 'unreadable')})"
        )
    _mounts(r, f)
    _processes(r, profile, f)
    _iommu(r, profile, f)
    _acs(r, profile, f)
    f.file_problems = dict(r.problems)
    return f


def home_of(env: dict[str, str]) -> str | None:
    return env.get("HOME") or None


def hf_cache(env: dict[str, str]) -> tuple[str | None, str]:
    """Where huggingface_hub keeps the Hub cache, as it decides (``machine.parsers.hf_cache``),
    with ``~`` from the recorded HOME.  Returns (path or None, what decided it)."""
    path, rule = hf_hub_cache(env, home_of(env))
    if rule != HF_DEFAULT:
        return path, rule
    if path:
        return path, "~/.cache/huggingface/hub (HOME)"
    return None, "HOME unknown"
