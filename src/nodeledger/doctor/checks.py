"""Read-only checks of one machine.  Each check has a stable id and returns exactly one Finding:
a severity, a one-line message with numbers, the evidence it saw (value + where it was read) and
the command that would fix it (printed, never run).

Severities: ``ok``, ``info``, ``warning``, ``error``; ``unknown`` when a fact it needs could not
be read (the reason is in the message); ``skip`` when the check does not apply (no accelerator,
one card, no --dataset).  Exit code: the worst of ok/info 0, warning 1, error 3 (unknown and
skip count as ok; 2 stays "bad input").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from nodeledger.doctor.machine_state import MachineState
from nodeledger.machine.parsers.common import pci_address
from nodeledger.machine.probe.facts import Facts, MountEntry, Proc, cpuset, hf_cache
from nodeledger.machine.probe.linux import NETWORK_FS
from nodeledger.machine.profile import Accelerator, MachineProfile
from nodeledger.machine.vendors import spec as vendor_spec
from nodeledger.units import GiB, MiB, gib_text

SEVERITIES = ("ok", "skip", "unknown", "info", "warning", "error")
RANK = {"ok": 0, "skip": 0, "unknown": 0, "info": 0, "warning": 1, "error": 2}
EXIT = {0: 0, 1: 1, 2: 3}
SWAP_WARN_BYTES = 256 * MiB  # less is noise (a few pages the kernel parked long ago)
BIG_RSS = 2 * GiB  # a process this large is "a big load running now"
SWAPPINESS_MAX = 10
RAM_WARN, RAM_ERROR = 0.25, 0.10  # MemAvailable / MemTotal below these
THP = "/sys/kernel/mm/transparent_hugepage"


@dataclass
class Evidence:
    what: str
    value: Any
    source: str


@dataclass
class Finding:
    id: str
    title: str
    severity: str
    message: str
    evidence: list[Evidence] = field(default_factory=list)
    fix: str | None = None  # a command for a person to run; doctor never runs it

    def to_json(self) -> dict:
        return asdict(self)


_gib = gib_text  # bytes as GiB, 1 decimal


def _unreadable(facts: Facts | None, path: str) -> str:
    if facts is None:
        return "no live state (a preset or profile file): use a live probe or --from BUNDLE"
    why = facts.file_problems.get(path)
    return f"{path} unreadable ({why})" if why else f"{path} not read"


def worst(findings: list[Finding]) -> str:
    ranked = [f for f in findings if RANK[f.severity] > 0]
    if not ranked:
        return "ok"
    return max(ranked, key=lambda f: RANK[f.severity]).severity


def exit_code(findings: list[Finding]) -> int:
    return EXIT[max((RANK[f.severity] for f in findings), default=0)]


def _ranges(indices) -> str:
    """[0,1,2,3,5] -> "0-3,5"."""
    from nodeledger.machine.parsers.numa import compress_cpus

    return compress_cpus(sorted(indices))


# -- host --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Knob:
    """One kernel setting doctor reads (sysfs / sysctl) and judges: where it is, what its
    evidence is called, and ``judge(value, state) -> (severity, message, fix)``."""

    id: str
    title: str
    field: str  # the HostProfile attribute
    path: str
    label: str  # the evidence's name
    judge: Callable[[Any, MachineState], tuple[str, str, str | None]]
    source_key: str | None = None  # the profile's own source for it, when it records one
    more: Callable[[MachineState], list[Evidence]] | None = None  # evidence beside the value


def _thp(name: str, path: str) -> Callable[[Any, MachineState], tuple[str, str, str | None]]:
    why = {"enabled": ("THP is 'always': many small allocations fragment memory and stall in "
                       "compaction; 'madvise' (or 'never') gives predictable latency"),
           "defrag": ("THP defrag is 'always': a page fault that finds no huge page compacts "
                      "memory synchronously (allocation stalls)")}[name]  # fmt: skip
    said = {"enabled": "THP is", "defrag": "THP defrag is"}[name]

    def judge(v, s):
        if v == "always":
            return "warning", why, f"echo madvise | sudo tee {path}"
        return "ok", f"{said} '{v}'", None

    return judge


def _numa_balancing(v, s) -> tuple[str, str, str | None]:
    nodes = len(s.profile.host.numa_nodes)
    if v and nodes > 1:
        return ("warning",
                f"automatic NUMA balancing is on with {nodes} NUMA nodes: the kernel migrates "
                "pages of jobs bound with numactl and unmaps pages to sample accesses (latency "
                "spikes)",
                "sudo sysctl -w kernel.numa_balancing=0   # persist: echo 'kernel.numa_balancing = 0' "
                "| sudo tee /etc/sysctl.d/90-numa-balancing.conf")  # fmt: skip
    if v:
        return (
            "ok",
            "automatic NUMA balancing is on, but the host has one NUMA node: no effect",
            None,
        )
    return "ok", "automatic NUMA balancing is off", None


def _swappiness(v, s) -> tuple[str, str, str | None]:
    if s.profile.host.swap_bytes == 0:
        return "ok", f"swappiness {v}, but no swap is configured: no effect", None
    if v > SWAPPINESS_MAX:
        return ("info",
                f"swappiness {v}: the kernel pages out anonymous memory (training processes) "
                f"early; {SWAPPINESS_MAX} or less keeps them in RAM",
                f"sudo sysctl -w vm.swappiness={SWAPPINESS_MAX}   # persist: echo 'vm.swappiness = "
                f"{SWAPPINESS_MAX}' | sudo tee /etc/sysctl.d/90-swappiness.conf")  # fmt: skip
    return "ok", f"swappiness {v}", None


# the kernel settings, one row each (doctor's checks of them are these rows, judged alike)
KNOBS = (
    Knob("thp-enabled", "Transparent huge pages", "thp_enabled", f"{THP}/enabled", "THP enabled",
         _thp("enabled", f"{THP}/enabled"), source_key="thp_enabled"),
    Knob("thp-defrag", "THP defragmentation", "thp_defrag", f"{THP}/defrag", "THP defrag",
         _thp("defrag", f"{THP}/defrag"), source_key="thp_defrag"),
    Knob("numa-balancing", "Automatic NUMA balancing", "numa_balancing",
         "/proc/sys/kernel/numa_balancing", "kernel.numa_balancing", _numa_balancing,
         more=lambda s: [Evidence("NUMA nodes", len(s.profile.host.numa_nodes) or "unknown",
                                  "/sys/devices/system/node")]),
    Knob("swappiness", "vm.swappiness", "swappiness", "/proc/sys/vm/swappiness",
         "vm.swappiness", _swappiness),
)  # fmt: skip


def knob_check(k: Knob) -> Callable[..., Finding]:
    """The check of one kernel setting: unknown (with why) when it could not be read, else its
    evidence and the row's judgement."""

    def check(s: MachineState, **_) -> Finding:
        h = s.profile.host
        f = Finding(k.id, k.title, "ok", "")
        value = getattr(h, k.field)
        if value is None:
            f.severity, f.message = "unknown", _unreadable(s.facts, k.path)
            return f
        source = h.sources.get(k.source_key, k.path) if k.source_key else k.path
        f.evidence.append(Evidence(k.label, value, source))
        if k.more is not None:
            f.evidence += k.more(s)
        f.severity, f.message, fix = k.judge(value, s)
        if fix:
            f.fix = fix
        return f

    check.__name__ = k.field
    return check


thp_enabled, thp_defrag, numa_balancing, swappiness = (knob_check(k) for k in KNOBS)


def swap_in_use(s: MachineState, **_) -> Finding:
    h = s.profile.host
    f = Finding("swap-in-use", "Swap in use", "ok", "")
    if h.swap_bytes == 0:
        f.message = "no swap configured"
        f.evidence.append(Evidence("SwapTotal", 0, "/proc/meminfo SwapTotal"))
        return f
    if h.swap_used_bytes is None:
        f.severity = "unknown"
        f.message = _unreadable(s.facts, "/proc/meminfo") + ": swap in use unknown"
        return f
    used = h.swap_used_bytes
    f.evidence.append(Evidence("swap in use", used, "/proc/meminfo SwapTotal - SwapFree"))
    f.evidence.append(Evidence("swap total", h.swap_bytes, "/proc/meminfo SwapTotal"))
    if used >= SWAP_WARN_BYTES:
        f.severity = "warning"
        f.message = (f"{_gib(used)} of {_gib(h.swap_bytes)} swap in use: something was paged "
                     "out; paging during training or loading is catastrophic")  # fmt: skip
        avail = h.available_bytes
        if avail is not None and avail > used:
            f.fix = "sudo swapoff -a && sudo swapon -a   # pages swap back into RAM (enough is free now)"
        else:
            f.fix = ("ps -eo pid,rss,comm --sort=-rss | head   # free RAM first, then: "
                     "sudo swapoff -a && sudo swapon -a")  # fmt: skip
    elif used:
        f.severity = "info"
        f.message = f"{used / MiB:,.0f} MiB swap in use (below {SWAP_WARN_BYTES // MiB} MiB: noise)"
    else:
        f.message = "no swap in use"
    return f


def host_ram_free(s: MachineState, **_) -> Finding:
    h = s.profile.host
    f = Finding("host-ram-free", "Free host RAM", "ok", "")
    if h.available_bytes is None or not h.ram_bytes:
        f.severity = "unknown"
        f.message = _unreadable(s.facts, "/proc/meminfo") + ": MemAvailable unknown"
        return f
    frac = h.available_bytes / h.ram_bytes
    f.evidence.append(Evidence("MemAvailable", h.available_bytes, "/proc/meminfo MemAvailable"))
    f.evidence.append(Evidence("MemTotal", h.ram_bytes, "/proc/meminfo MemTotal"))
    f.message = (f"{_gib(h.available_bytes)} of {_gib(h.ram_bytes)} available "
                 f"({100 * frac:.0f} %)")  # fmt: skip
    if frac < RAM_WARN:
        f.severity = "error" if frac < RAM_ERROR else "warning"
        f.message += (f": below {100 * (RAM_ERROR if frac < RAM_ERROR else RAM_WARN):.0f} %; "
                      "a big load now meets the oom-killer")  # fmt: skip
        f.fix = (
            "ps -eo pid,rss,comm --sort=-rss | head   # find what holds the RAM; stop it or wait"
        )
    big = big_processes(s.facts)
    for p in big[:5]:
        f.evidence.append(Evidence(f"pid {p.pid} ({p.name}) VmRSS", p.rss_bytes, p.source))
    return f


def big_processes(facts: Facts | None) -> list[Proc]:
    """The processes holding BIG_RSS or more, the biggest first ([] without a process table)."""
    if facts is None or not facts.processes:
        return []
    big = [p for p in facts.processes if p.rss_bytes and p.rss_bytes >= BIG_RSS]
    return sorted(big, key=lambda p: -p.rss_bytes)


# -- cards -------------------------------------------------------------------------------------


def _nv(a: Accelerator) -> bool:
    """The card has NVIDIA's driver settings and tools (persistence mode, MIG, MPS, nvidia-smi)."""
    return vendor_spec(a.vendor).nvidia_settings


def _cards_or_skip(s: MachineState, f: Finding, nvidia_only: bool = False) -> list[Accelerator]:
    cards = [a for a in s.profile.accelerators if not nvidia_only or _nv(a)]
    if not cards:
        f.severity = "skip"
        f.message = f"no {'NVIDIA ' if nvidia_only else ''}accelerator on this machine"
    return cards


def persistence_mode(s: MachineState, **_) -> Finding:
    f = Finding("persistence-mode", "Persistence mode (NVIDIA)", "ok", "")
    cards = _cards_or_skip(s, f, nvidia_only=True)
    if not cards:
        return f
    off = [a.index for a in cards if a.persistence_mode == "disabled"]
    unknown = [a.index for a in cards if a.persistence_mode is None]
    for a in cards:
        f.evidence.append(Evidence(f"card {a.index} persistence", a.persistence_mode or "unknown",
                                   a.sources.get("persistence_mode", "not reported")))  # fmt: skip
    if off:
        f.severity = "warning"
        f.message = (f"persistence mode off on cards {_ranges(off)}: the driver tears down when "
                     "the last client exits, and each short job pays its initialisation")  # fmt: skip
        f.fix = "sudo nvidia-smi -pm 1   # or: sudo systemctl enable --now nvidia-persistenced"
    elif unknown:
        f.severity = "unknown"
        f.message = f"persistence mode not reported for cards {_ranges(unknown)}"
    else:
        f.message = f"persistence mode on for all {len(cards)} cards"
    return f


def card_memory_errors(s: MachineState, **_) -> Finding:
    f = Finding("card-memory-errors", "ECC errors, retired pages, remapped rows", "ok", "")
    cards = _cards_or_skip(s, f)
    if not cards:
        return f
    errors, warnings, infos, bad = [], [], [], set()
    fields = ("ecc_mode", "ecc_errors_corrected", "ecc_errors_uncorrected", "retired_pages",
              "retired_pages_pending", "remapped_rows_pending", "remapped_rows_failed")  # fmt: skip
    known = False
    for a in cards:
        for k in fields:
            v = getattr(a, k)
            if v is not None:
                known = True
            if v not in (None, 0, "no", "enabled"):
                f.evidence.append(
                    Evidence(f"card {a.index} {k}", v, a.sources.get(k, "vendor tool"))
                )
        if a.ecc_errors_uncorrected:
            errors.append(
                f"card {a.index}: {a.ecc_errors_uncorrected} uncorrected ECC errors since the driver loaded"
            )
        if a.retired_pages_pending == "yes":
            errors.append(f"card {a.index}: a page retirement waits for a reset")
        if a.remapped_rows_failed == "yes":
            errors.append(f"card {a.index}: a row remap failed (the card needs service)")
        if a.remapped_rows_pending == "yes":
            warnings.append(f"card {a.index}: a row remap waits for a reset")
        if a.ecc_errors_uncorrected or "yes" in (a.retired_pages_pending, a.remapped_rows_failed,
                                                  a.remapped_rows_pending):  # fmt: skip
            bad.add(a.index)
        if a.ecc_errors_corrected:
            infos.append(f"card {a.index}: {a.ecc_errors_corrected} corrected ECC errors")
        if a.retired_pages:
            infos.append(f"card {a.index}: {a.retired_pages} retired pages")
        if a.ecc_mode == "disabled":
            infos.append(f"card {a.index}: ECC off (memory errors go undetected)")
    if not known:
        f.severity = "unknown"
        f.message = "no card reports ECC or page-retirement fields (tool or driver does not say)"
        return f
    if errors:
        f.severity, f.message = "error", "; ".join(errors + warnings)
    elif warnings:
        f.severity, f.message = "warning", "; ".join(warnings)
    elif infos:
        f.severity, f.message = "info", "; ".join(infos)
    else:
        f.message = f"no ECC error, retired page or pending remap on {len(cards)} cards"
    if bad:
        ids = ",".join(str(i) for i in sorted(bad))
        f.fix = (f"sudo nvidia-smi -r -i {ids}   # reset with no process on the card; details: "
                 f"nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER -i {ids}; errors that recur or a "
                 "failed remap: drain the card and ask the vendor (RMA)")  # fmt: skip
    return f


def _node_cpus(profile: MachineProfile) -> dict[int, set[int]]:
    out = {}
    for n in profile.host.numa_nodes:
        cs = cpuset(n.cpus)
        if cs:
            out[n.id] = cs
    return out


def card_numa_binding(s: MachineState, **_) -> Finding:
    f = Finding("card-numa-binding", "Card processes bound to the card's NUMA node", "ok", "")
    cards = _cards_or_skip(s, f)
    if not cards:
        return f
    holders = [(a, p) for a in cards for p in a.processes]
    if not holders:
        f.message = "no process holds a card: nothing to compare"
        return f
    if s.facts is None:
        f.severity, f.message = "unknown", _unreadable(None, "")
        return f
    nodes = _node_cpus(s.profile)
    wrong, unbound, unknown, fine = [], [], [], 0
    fixes, wrong_nodes = [], set()
    for a, cp in holders:
        pr = s.facts.card_procs.get(cp.pid)
        allowed = cpuset(pr.cpus_allowed) if pr and pr.exists else None
        if pr is not None and pr.exists is False:
            continue  # a gone process: card-dead-pid reports it
        if a.numa_node is None or a.numa_node not in nodes or allowed is None:
            why = ("card NUMA node unknown" if a.numa_node is None else
                   f"CPUs of NUMA {a.numa_node} unknown" if a.numa_node not in nodes else
                   f"{pr.source if pr else f'/proc/{cp.pid}/status'}: "
                   f"{(pr.problem if pr else None) or 'no Cpus_allowed_list'}")  # fmt: skip
            unknown.append(f"card {a.index} pid {cp.pid}: {why}")
            continue
        home = nodes[a.numa_node]
        on = sorted(n for n, cs in nodes.items() if cs & allowed)
        f.evidence.append(Evidence(f"card {a.index} NUMA node", a.numa_node,
                                   a.sources.get("numa_node", "vendor tool")))  # fmt: skip
        f.evidence.append(Evidence(f"pid {cp.pid} ({pr.name or cp.name}) Cpus_allowed_list",
                                   pr.cpus_allowed, pr.source))  # fmt: skip
        if allowed <= home:
            fine += 1
        elif not allowed & home:
            wrong.append(f"card {a.index} (NUMA {a.numa_node}): pid {cp.pid} ({pr.name or cp.name}) "
                         f"bound to CPUs {pr.cpus_allowed} (NUMA {_ranges(on)})")  # fmt: skip
            cpus = next(n.cpus for n in s.profile.host.numa_nodes if n.id == a.numa_node)
            fixes.append(f"sudo taskset -a -cp {cpus} {cp.pid}")
            wrong_nodes.add(a.numa_node)
        elif len(nodes) > 1:
            unbound.append(f"card {a.index} (NUMA {a.numa_node}): pid {cp.pid} "
                           f"({pr.name or cp.name}) may run on NUMA {_ranges(on)}")  # fmt: skip
        else:
            fine += 1
    if wrong:
        f.severity = "warning"
        f.message = ("a card's process runs on another NUMA node's CPUs (remote memory starves "
                     "the card): " + "; ".join(wrong))  # fmt: skip
        n = _ranges(wrong_nodes)
        f.fix = ("; ".join(fixes) + "   # threads move now, memory stays remote: restart the job "
                 f"under numactl --cpunodebind={n} --membind={n}")  # fmt: skip
    elif unbound:
        f.severity = "info"
        f.message = ("not bound to the card's NUMA node (binding gave +15-20 % in the field): "
                     + "; ".join(unbound))  # fmt: skip
        f.fix = "start each card's job under numactl --cpunodebind=N --membind=N (N: the card's NUMA node)"
    elif unknown and not fine:
        f.severity = "unknown"
        f.message = "; ".join(unknown)
    else:
        f.message = f"{fine} card process(es) run on their card's NUMA node"
        if unknown:
            f.message += f"; not judged: {'; '.join(unknown)}"
    return f


def card_dead_pid(s: MachineState, **_) -> Finding:
    f = Finding("card-dead-pid", "Cards held by processes that no longer exist", "ok", "")
    cards = _cards_or_skip(s, f)
    if not cards:
        return f
    holders = [(a, p) for a in cards for p in a.processes]
    if not holders:
        f.message = "no process holds a card"
        return f
    if s.facts is None:
        f.severity, f.message = "unknown", _unreadable(None, "")
        return f
    gone, unknown = [], []
    for a, cp in holders:
        pr = s.facts.card_procs.get(cp.pid)
        if pr is None or pr.exists is None:
            unknown.append(f"pid {cp.pid}: {(pr.problem if pr else None) or 'not read'}")
        elif pr.exists is False:
            gone.append((a, cp))
            f.evidence.append(Evidence(f"card {a.index} pid {cp.pid} ({cp.name or 'name unknown'}), "
                                       f"{_gib(cp.used_bytes)} on the card",
                                       f"{pr.source}: {pr.problem}",
                                       a.sources.get("processes", "vendor tool")))  # fmt: skip
    if gone:
        f.severity = "warning"
        f.message = ("cards held by processes that are not in /proc (exited with the card "
                     "context still open, or in another PID namespace when doctor runs in a "
                     "container): " + ", ".join(f"card {a.index} pid {cp.pid}" for a, cp in gone))  # fmt: skip
        idx = sorted({a.index for a, _ in gone})
        if all(_nv(a) for a, _ in gone):
            f.fix = (f"sudo fuser -v {' '.join(f'/dev/nvidia{i}' for i in idx)}   # who still holds it; "
                     f"none: sudo nvidia-smi --gpu-reset -i {','.join(map(str, idx))}")  # fmt: skip
        else:
            f.fix = ("sudo fuser -v /dev/kfd /dev/dri/renderD*   # who still holds it; none: reset "
                     f"cards {_ranges(idx)} with the vendor tool (amd-smi reset -G -g N / npu-smi set -t reset)")  # fmt: skip
    elif unknown:
        f.severity = "unknown"
        f.message = "; ".join(unknown)
    else:
        f.message = f"all {len(holders)} card process(es) are alive"
    return f


def _mig_on(a: Accelerator) -> bool:
    p = (a.partition or "").lower()
    if "mig" in p:
        return "enabled" in p
    # AMD: "NPS1, SPX" -> SPX is one partition; CPX / DPX / QPX / TPX split the card
    return any(x in p.upper().split(", ")[-1] for x in ("CPX", "DPX", "QPX", "TPX"))


def mig_state(s: MachineState, **_) -> Finding:
    f = Finding("mig-state", "MIG / compute partitions", "ok", "")
    cards = _cards_or_skip(s, f)
    if not cards:
        return f
    on = [a.index for a in cards if _mig_on(a)]
    for a in cards:
        if a.partition:
            f.evidence.append(Evidence(f"card {a.index} partition", a.partition,
                                       a.sources.get("partition", "vendor tool (MIG mode / partition)")))  # fmt: skip
    if on:
        f.severity = "info"
        f.message = (f"cards {_ranges(on)} are split (MIG / compute partitions): a job that needs "
                     "a whole card cannot use them; good for light work on the idle card")  # fmt: skip
        if all(_nv(a) for a in cards if a.index in on):
            f.fix = f"sudo nvidia-smi -i {','.join(map(str, on))} -mig 0   # after destroying its instances; takes effect on reset"
    elif all(a.partition is None for a in cards):
        f.severity, f.message = "unknown", "no card reports its MIG / partition state"
    else:
        f.message = "no card is split"
    return f


def mps_state(s: MachineState, **_) -> Finding:
    f = Finding("mps-state", "NVIDIA MPS (card sharing)", "ok", "")
    fa = s.facts
    if fa is None:
        f.severity, f.message = "unknown", _unreadable(None, "")
        return f
    env_pipe = (fa.env or {}).get("CUDA_MPS_PIPE_DIRECTORY")
    if env_pipe:
        f.evidence.append(Evidence("CUDA_MPS_PIPE_DIRECTORY", env_pipe, "/proc/self/environ"))
    for p in fa.mps_daemons:
        f.evidence.append(Evidence(f"pid {p.pid}", p.cmdline or p.name, f"/proc/{p.pid}/cmdline"))
    if fa.mps_pipe:
        f.evidence.append(Evidence("MPS control pipe", f"{fa.mps_pipe}/control", "glob"))
    if fa.mps_daemons or fa.mps_pipe:
        f.severity = "info"
        f.message = ("an MPS control daemon runs: CUDA processes share cards through it "
                     f"({len(fa.mps_daemons)} MPS process(es))")  # fmt: skip
        f.fix = "echo quit | nvidia-cuda-mps-control   # to stop MPS (wait for its clients first)"
    elif fa.processes is None:
        f.severity, f.message = "unknown", fa.problems.get("processes", "process table unknown")
    elif not any(_nv(a) for a in s.profile.accelerators):
        f.severity, f.message = "skip", "no NVIDIA card and no MPS daemon"
    else:
        f.message = "no MPS daemon"
        if env_pipe:
            f.message += f" (CUDA_MPS_PIPE_DIRECTORY={env_pipe} is set, but nothing listens there)"
    return f


# -- peer-to-peer --------------------------------------------------------------------------------


def iommu_p2p(s: MachineState, **_) -> Finding:
    f = Finding("iommu-p2p", "IOMMU mode for card peer-to-peer", "ok", "")
    cards = s.profile.accelerators
    if len(cards) < 2:
        f.severity, f.message = "skip", "fewer than two cards: no peer-to-peer"
        return f
    fa = s.facts
    if fa is None:
        f.severity, f.message = "unknown", _unreadable(None, "")
        return f
    flags = [t for t in (fa.cmdline or "").split() if "iommu" in t.split("=")[0]]
    if fa.cmdline is not None:
        f.evidence.append(
            Evidence("kernel iommu flags", " ".join(flags) or "none", "/proc/cmdline")
        )
    groups = fa.iommu_groups or {}
    card_groups = {a.index: groups.get(pci_address(a.pci_bus_id) or "") for a in cards}
    for i, g in card_groups.items():
        if g is not None:
            t = fa.iommu_types.get(g)
            f.evidence.append(Evidence(f"card {i} IOMMU group", f"{g} (type {t or 'unknown'})",
                                       f"/sys/kernel/iommu_groups/{g}/{{devices,type}}"))  # fmt: skip
    passthrough = any(t in ("iommu=pt", "iommu.passthrough=1", "iommu=off", "intel_iommu=off",
                            "amd_iommu=off") for t in flags)  # fmt: skip
    if not groups:
        f.message = "no IOMMU groups: the IOMMU is off, DMA is not translated"
        return f
    types = {fa.iommu_types.get(g) for g in card_groups.values() if g is not None}
    translating = [i for i, g in card_groups.items() if g is not None and
                   (fa.iommu_types.get(g) or "").startswith("DMA")]  # fmt: skip
    if translating:
        f.severity = "warning"
        f.message = (f"the IOMMU translates DMA of cards {_ranges(translating)} (group type DMA): "
                     "peer-to-peer between cards goes through the IOMMU, is slow or fails "
                     "(NCCL hangs); passthrough (iommu=pt) keeps isolation off the data path")  # fmt: skip
        f.fix = ("sudo grubby --update-kernel=ALL --args=iommu=pt   # Debian/Ubuntu: add iommu=pt to "
                 "GRUB_CMDLINE_LINUX in /etc/default/grub, sudo update-grub; then reboot")  # fmt: skip
    elif types == {"identity"} or passthrough:
        f.message = "IOMMU in passthrough: peer-to-peer DMA is not translated"
    elif None in types or not any(g is not None for g in card_groups.values()):
        f.severity = "unknown"
        f.message = ("IOMMU groups exist but the cards' DMA mode is unknown "
                     "(no bus id, no group, or no /sys/kernel/iommu_groups/N/type)")  # fmt: skip
    else:
        f.message = f"cards' IOMMU groups are of type {', '.join(sorted(t for t in types if t))}"
    return f


def pcie_acs(s: MachineState, **_) -> Finding:
    f = Finding("pcie-acs", "PCIe ACS redirecting card peer-to-peer", "ok", "")
    cards = s.profile.accelerators
    if len(cards) < 2:
        f.severity, f.message = "skip", "fewer than two cards: no peer-to-peer"
        return f
    fa = s.facts
    if fa is None:
        f.severity, f.message = "unknown", _unreadable(None, "")
        return f
    if fa.bridges is None:
        f.severity, f.message = "unknown", fa.problems.get("acs", "lspci not run")
        return f
    buses = []
    for a in cards:
        addr = pci_address(a.pci_bus_id)
        if addr:
            dom, bus = addr.split(":")[:2]
            buses.append((a.index, int(dom, 16), int(bus, 16)))
    if not buses:
        f.severity, f.message = "unknown", "no card has a PCI bus id"
        return f

    def below(b) -> list[int]:
        return [
            i for i, dom, bus in buses if dom == b.domain and b.secondary <= bus <= b.subordinate
        ]

    with_acs = [b for b in fa.bridges if b.acs_ctl is not None]
    if not with_acs:
        if fa.lspci_access_denied:
            f.severity = "unknown"
            f.message = ("lspci -vvv shows PCIe extended capabilities (ACS) only to root: run "
                         "doctor or bundle as root to check ACS")  # fmt: skip
        else:
            f.message = "no PCI bridge reports ACS control"
        return f
    flagged = []
    for b in with_acs:
        if not (b.acs_ctl.get("ReqRedir") or b.acs_ctl.get("CmpltRedir")) or not below(b):
            continue
        # a switch port: some wider bridge above it has two or more cards below it
        above = [u for u in fa.bridges if u is not b and u.domain == b.domain
                 and u.secondary <= b.secondary and b.subordinate <= u.subordinate
                 and (u.secondary, u.subordinate) != (b.secondary, b.subordinate)]  # fmt: skip
        if any(len(below(u)) >= 2 for u in above):
            flagged.append(b)
            f.evidence.append(Evidence(f"bridge {b.bdf} above cards {_ranges(below(b))} ACSCtl",
                                       " ".join(f"{k}{'+' if v else '-'}" for k, v in b.acs_ctl.items()),
                                       "lspci -D -vvv"))  # fmt: skip
    if flagged:
        f.severity = "warning"
        f.message = (f"ACS request/completion redirect is on at {len(flagged)} PCIe switch port(s) "
                     "above the cards: peer-to-peer between cards on one switch is sent up to the "
                     "root complex (slower, or blocked)")  # fmt: skip
        f.fix = "; ".join(f"sudo setpci -s {b.bdf} ECAP_ACS+0x6.w=0000" for b in flagged) + (
            "   # until reboot; for good: disable ACS in the BIOS"
        )
    else:
        f.message = "no switch port above the cards redirects peer-to-peer (ACS)"
    return f


# -- storage -----------------------------------------------------------------------------------


def _is_network(m: MountEntry) -> bool:
    return m.fstype in NETWORK_FS or (m.fstype.startswith("fuse.") and m.fstype != "fuse.lxcfs")


def _mount_ev(what: str, path: str, m: MountEntry, s: MachineState) -> Evidence:
    kind = next((x.kind for x in s.profile.storage.mounts if x.path == m.mount_point), None)
    return Evidence(what, f"{path} on {m.mount_point} ({m.fstype} {m.source}, dev {m.device}"
                          f"{', ' + kind if kind else ''})", "/proc/self/mountinfo")  # fmt: skip


def hf_cache_mount(s: MachineState, **_) -> Finding:
    f = Finding("hf-cache-mount", "HF cache and working directory on one filesystem", "ok", "")
    fa = s.facts
    if fa is None:
        f.severity, f.message = "unknown", _unreadable(None, "")
        return f
    missing = [fa.problems[k] for k in ("env", "cwd", "mounts") if k in fa.problems]
    if missing:
        f.severity, f.message = "unknown", "; ".join(missing)
        return f
    cache, decided = hf_cache(fa.env or {})
    if cache is None or fa.cwd is None:
        f.severity, f.message = "unknown", f"HF cache path unknown ({decided})"
        return f
    mc, mw = fa.mount_of(cache), fa.mount_of(fa.cwd)
    if mc is None or mw is None:
        f.severity, f.message = "unknown", "no mount in /proc/self/mountinfo holds these paths"
        return f
    f.evidence.append(_mount_ev(f"HF cache ({decided})", cache, mc, s))
    f.evidence.append(_mount_ev("working directory", fa.cwd, mw, s))
    problems = []
    if mc.device != mw.device:
        problems.append(f"the HF cache ({cache}) is on {mc.mount_point} (dev {mc.device}) and the "
                        f"working directory ({fa.cwd}) on {mw.mount_point} (dev {mw.device}): "
                        "saving or converting checkpoints copies across disks and leaves extra copies")  # fmt: skip
        f.fix = (f"export HF_HOME={fa.cwd.rstrip('/')}/.cache/huggingface   # a cache on the working "
                 f"directory's filesystem (move the old one: rsync -a {cache}/ $HF_HOME/hub/), or work "
                 f"from a directory under {mc.mount_point}")  # fmt: skip
    if _is_network(mc):
        problems.append(f"the HF cache is on a network filesystem ({mc.fstype}): every load reads "
                        "the checkpoint over the network")  # fmt: skip
        f.fix = f.fix or "export HF_HOME=/path/on/local/nvme/huggingface   # a local disk"
    if problems:
        f.severity, f.message = "warning", "; ".join(problems)
    else:
        f.message = f"HF cache and working directory are on {mc.mount_point} ({mc.fstype})"
    return f


def dataset_network(s: MachineState, datasets: tuple[str, ...] = (), **_) -> Finding:
    f = Finding("dataset-network", "Datasets on a network filesystem", "ok", "")
    if not datasets:
        f.severity, f.message = "skip", "no --dataset PATH given"
        return f
    fa = s.facts
    if fa is None or fa.mounts is None:
        f.severity = "unknown"
        f.message = (
            _unreadable(None, "") if fa is None else fa.problems.get("mounts", "mounts unknown")
        )
        return f
    remote = []
    for d in datasets:
        path = d if d.startswith("/") else f"{(fa.cwd or '').rstrip('/')}/{d}"
        m = fa.mount_of(path)
        if m is None:
            continue
        f.evidence.append(_mount_ev(f"dataset {d}", path, m, s))
        if _is_network(m):
            remote.append((d, m))
    if remote:
        f.severity = "warning"
        f.message = ("datasets on a network filesystem (random reads of tens of ms; shared-storage "
                     "contention starved every card in the field): "
                     + ", ".join(f"{d} ({m.fstype} {m.source})" for d, m in remote))  # fmt: skip
        f.fix = "; ".join(
            f"rsync -a {d}/ /local/nvme/{d.rstrip('/').rsplit('/', 1)[-1]}/" for d, _ in remote
        ) + ("   # then read from the local copy, prefetching asynchronously")
    elif not f.evidence:
        f.severity, f.message = "unknown", "no mount holds the dataset paths"
    else:
        f.message = f"{len(datasets)} dataset path(s) on local filesystems"
    return f


CHECKS = (thp_enabled, thp_defrag, numa_balancing, swap_in_use, swappiness, host_ram_free,
          persistence_mode, card_memory_errors, card_numa_binding, card_dead_pid, mig_state,
          mps_state, iommu_p2p, pcie_acs, hf_cache_mount, dataset_network)  # fmt: skip
CHECK_IDS = ("thp-enabled", "thp-defrag", "numa-balancing", "swap-in-use", "swappiness",
             "host-ram-free", "persistence-mode", "card-memory-errors", "card-numa-binding",
             "card-dead-pid", "mig-state", "mps-state", "iommu-p2p", "pcie-acs", "hf-cache-mount",
             "dataset-network")  # fmt: skip


def run_checks(state: MachineState, datasets: tuple[str, ...] = ()) -> list[Finding]:
    """Every check, in a fixed order; a check that meets a fact it cannot use says "unknown"."""
    out = []
    for check, cid in zip(CHECKS, CHECK_IDS, strict=True):
        try:
            out.append(check(state, datasets=datasets))
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            # a fact shaped as no check expected (a hand-made bundle): unknown, never a crash
            out.append(
                Finding(cid, cid, "unknown", f"could not judge: {type(exc).__name__}: {exc}")
            )
    return out
