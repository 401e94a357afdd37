"""Card parts of the bench (torch, optional: ``pip install 'nodeledger[bench]'``).

- host <-> card copies per card: pinned and pageable host buffers, with the process bound to
  the CPUs of the card's NUMA node and then to another node's (``os.sched_setaffinity``; the
  host buffer is allocated and first touched after binding, so it lives on that node);
- card <-> card copies for every ordered pair (``dst.copy_(src)``: the driver's peer copy,
  staged through host memory where peer access is off);
- all-reduce and all-gather over the card set with ``torch.distributed`` (NCCL on NVIDIA,
  RCCL behind the same "nccl" name on ROCm, HCCL on Ascend), one process per card (the
  ``nodeledger.bench.collective`` worker), reported as nccl-tests does: algbw = size ÷ time,
  busbw = algbw x 2(n-1)/n (all-reduce) or x (n-1)/n (all-gather), time averaged over ranks;
- allocatable bytes per card: 1 GiB, then 64 MiB blocks until the allocator refuses, vs the
  card's total (cards that another process holds are skipped).

Timing: device events on the copying stream where the backend has them (CUDA / ROCm / NPU),
else wall time after a device synchronize.  Host <-> card copies are measured as nvbandwidth
and rocm_bandwidth_test do: each copy timed alone after warm-up, a size sweep up to >= 1 GiB,
the median per size, the figure at the plateau; a pinned buffer is checked to be pinned and
copied with non_blocking (cudaMemcpyAsync).  Sizes (``CardSizes``): quick = host copies 64 MiB,
256 MiB, 1 GiB x 5, card copies 64 MiB x 5, collectives at 256 MiB x 10 (2 warm-up); full =
host copies 16 MiB - 1 GiB x 10, card copies 256 MiB x 20, collectives at 64 MiB, 256 MiB and
1 GiB x 20 (5 warm-up).

Without torch, or with no card visible to it, every part is ``unavailable`` with what it needs.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from nodeledger.machine.parsers.common import cpulist_ids, parse_link_speed, pci_address
from nodeledger.machine.probe.runner import Runner
from nodeledger.units import GiB, MiB

NEEDS_TORCH = "needs torch: pip install 'nodeledger[bench]'"


@dataclass(frozen=True)
class CardSizes:
    copy_bytes: int  # card <-> card copies
    copy_iters: int
    coll_bytes: tuple[int, ...]
    coll_iters: int
    coll_warmup: int
    coll_timeout: float
    # host <-> card: a size sweep up to >= 1 GiB, each copy timed alone (nvbandwidth's way)
    host_sweep: tuple[int, ...] = (64 * MiB, 256 * MiB, GiB)
    host_reps: int = 5

    def describe(self) -> str:
        sizes = ", ".join(f"{b / MiB:,.0f} MiB" for b in self.coll_bytes)
        sweep = ", ".join(f"{b / MiB:,.0f} MiB" for b in self.host_sweep)
        return (f"host<->card copies {sweep} x {self.host_reps} each (+2 warm-up, events around "
                f"each copy, the plateau taken); card copies {self.copy_bytes / MiB:,.0f} MiB x "
                f"{self.copy_iters} (+1 warm-up); collectives {sizes} x {self.coll_iters} "
                f"(+{self.coll_warmup} warm-up)")  # fmt: skip


QUICK = CardSizes(64 * MiB, 5, (256 * MiB,), 10, 2, 45.0)
FULL = CardSizes(256 * MiB, 20, (64 * MiB, 256 * MiB, GiB), 20, 5, 300.0,
                 (16 * MiB, 64 * MiB, 256 * MiB, GiB), 10)  # fmt: skip


# ---------------------------------------------------------------------------------------
# the backend: which torch device family, or why none
# ---------------------------------------------------------------------------------------


class TorchCards:
    """The few device operations the bench needs, over torch.cuda (CUDA / ROCm), torch.npu
    (Ascend) or plain CPU tensors (tests only: the code paths, no card figures)."""

    def __init__(self, torch, kind: str):
        self.torch = torch
        self.kind = kind  # "cuda" | "npu" | "cpu"
        self.mod = getattr(torch, kind, None) if kind != "cpu" else None

    @property
    def label(self) -> str:
        t = self.torch
        if self.kind == "cuda":
            hip = getattr(t.version, "hip", None)
            return f"torch {t.__version__}, " + (
                f"ROCm/HIP {hip}" if hip else f"CUDA {t.version.cuda}"
            )
        return f"torch {t.__version__}, {self.kind}"

    @property
    def dist_backend(self) -> str:
        return {"cuda": "nccl", "npu": "hccl"}.get(self.kind, "gloo")

    def count(self) -> int:
        return self.mod.device_count() if self.mod is not None else 2

    def device(self, i: int):
        return self.torch.device(self.kind, i) if self.mod is not None else self.torch.device("cpu")

    def sync(self, i: int) -> None:
        if self.mod is not None:
            self.mod.synchronize(i)

    def props(self, i: int) -> dict:
        if self.mod is None:
            return {"name": "cpu", "total_bytes": None, "bus_id": None}
        p = self.mod.get_device_properties(i)
        bus = None
        if getattr(p, "pci_bus_id", None) is not None:
            bus = f"{getattr(p, 'pci_domain_id', 0):04x}:{p.pci_bus_id:02x}:{getattr(p, 'pci_device_id', 0):02x}.0"
        return {"name": p.name, "total_bytes": int(p.total_memory), "bus_id": bus}

    def can_peer(self, a: int, b: int) -> bool | None:
        f = getattr(self.mod, "can_device_access_peer", None) if self.mod is not None else None
        try:
            return bool(f(a, b)) if f else None
        except Exception:
            return None

    def mem_get_info(self, i: int) -> tuple[int, int] | None:
        f = getattr(self.mod, "mem_get_info", None) if self.mod is not None else None
        return tuple(int(x) for x in f(i)) if f else None

    def empty_cache(self) -> None:
        if self.mod is not None:
            self.mod.empty_cache()

    def oom_errors(self) -> tuple[type, ...]:
        errs: list[type] = [RuntimeError, MemoryError]
        oom = getattr(self.torch, "OutOfMemoryError", None) or getattr(
            self.mod, "OutOfMemoryError", None
        )
        if oom is not None:
            errs.insert(0, oom)
        return tuple(errs)

    def time(self, i: int, fn, iters: int) -> float:
        """Seconds for ``iters`` calls of ``fn`` after one warm-up, on device ``i``'s stream."""
        fn()
        self.sync(i)
        ev = getattr(self.mod, "Event", None) if self.mod is not None else None
        if ev is not None:
            with self.mod.device(i):
                s, e = ev(enable_timing=True), ev(enable_timing=True)
                s.record()
                for _ in range(iters):
                    fn()
                e.record()
                e.synchronize()
                return s.elapsed_time(e) / 1000.0
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        self.sync(i)
        return time.perf_counter() - t0

    def time_each(self, i: int, fn, reps: int, warmup: int = 2) -> list[float]:
        """Seconds of each of ``reps`` calls of ``fn`` on device ``i``, events recorded around
        each call and waited on (nvbandwidth / rocm_bandwidth_test time each copy alone), after
        ``warmup`` untimed calls; wall time after a synchronize where there are no events."""
        for _ in range(warmup):
            fn()
        self.sync(i)
        ev = getattr(self.mod, "Event", None) if self.mod is not None else None
        out = []
        for _ in range(reps):
            if ev is not None:
                with self.mod.device(i):
                    s, e = ev(enable_timing=True), ev(enable_timing=True)
                    s.record()
                    fn()
                    e.record()
                    e.synchronize()
                    out.append(s.elapsed_time(e) / 1000.0)
            else:
                t0 = time.perf_counter()
                fn()
                self.sync(i)
                out.append(time.perf_counter() - t0)
        return out

    def host_buffer(self, nbytes: int, pinned: bool):
        """A host byte buffer, page-locked when ``pinned`` (and a card backend can pin)."""
        t = self.torch
        return t.empty(nbytes, dtype=t.uint8, pin_memory=pinned and self.mod is not None)

    def is_pinned(self, tensor) -> bool | None:
        f = getattr(tensor, "is_pinned", None)
        try:
            return bool(f()) if f is not None else None
        except Exception:
            return None


def load_backend(kind: str | None = None) -> tuple[TorchCards | None, str]:
    """(backend, "") or (None, what the card parts need).  ``kind="cpu"`` is for tests.
    The process environment is left as it is: torch numbers the cards in the order
    ``CUDA_DEVICE_ORDER`` of this process says, and the collective workers inherit that order."""
    try:
        import torch
    except ImportError:
        return None, NEEDS_TORCH
    except Exception as exc:  # a broken install
        return None, f"torch failed to import ({type(exc).__name__}: {exc}); {NEEDS_TORCH}"
    if kind == "cpu":
        return TorchCards(torch, "cpu"), ""
    try:
        if torch.cuda.is_available() and torch.cuda.device_count() > 0:
            return TorchCards(torch, "cuda"), ""
    except Exception as exc:
        return (
            None,
            f"torch {torch.__version__} cannot reach the cards ({type(exc).__name__}: {exc})",
        )
    try:
        import torch_npu  # noqa: F401  (registers torch.npu)

        if torch.npu.is_available() and torch.npu.device_count() > 0:
            return TorchCards(torch, "npu"), ""
    except Exception:
        pass
    build = ("CPU-only build" if not getattr(torch.version, "cuda", None)
             and not getattr(torch.version, "hip", None) else "no device visible")  # fmt: skip
    return None, (f"needs a card visible to torch: torch {torch.__version__} ({build}) sees no "
                  "CUDA / ROCm device (and torch_npu no NPU)")  # fmt: skip


# ---------------------------------------------------------------------------------------
# host facts: NUMA CPU sets, PCIe links from sysfs
# ---------------------------------------------------------------------------------------


def parse_cpulist(text: str | None) -> set[int]:
    """A kernel cpulist -> CPU ids; empty for no text, ValueError for text that is not one."""
    if not (text or "").strip():
        return set()
    ids = cpulist_ids(text)
    if ids is None:
        raise ValueError(f"not a kernel cpulist: {text!r}")
    return ids


def _runner(runner: Runner | None) -> Runner:
    return runner if runner is not None else Runner(live=True)


def numa_cpus(profile, runner: Runner | None = None) -> dict[int, set[int]]:
    """NUMA node -> CPUs (the profile's, else sysfs through ``runner``; default: live)."""
    nodes = (
        {n.id: parse_cpulist(n.cpus) for n in profile.host.numa_nodes if n.cpus} if profile else {}
    )
    if nodes:
        return nodes
    r = _runner(runner)
    for d in sorted(r.glob("/sys/devices/system/node/node[0-9]*")):
        text = r.read(f"{d}/cpulist")
        if text is None:
            continue
        with contextlib.suppress(ValueError):
            nodes[int(d.rsplit("/", 1)[1][4:])] = parse_cpulist(text)
    return nodes


def node_distance(node: int, runner: Runner | None = None) -> list[int] | None:
    text = _runner(runner).read(f"/sys/devices/system/node/node{node}/distance")
    if text is None:
        return None
    try:
        return [int(x) for x in text.split()]
    except ValueError:
        return None


def binding_sets(card_node: int | None, nodes: dict[int, set[int]], allowed: set[int],
                 runner: Runner | None = None) -> tuple[set[int] | None, set[int] | None, int | None, str]:  # fmt: skip
    """(local CPUs, remote CPUs, remote node, why-not) for a card on ``card_node``: the remote
    node is the farthest other node (sysfs distance) with CPUs this process may use."""
    if card_node is None:
        return None, None, None, "the card's NUMA node is unknown"
    local = nodes.get(card_node, set()) & allowed
    if not local:
        return None, None, None, f"no CPU of NUMA node {card_node} is usable by this process"
    others = [(n, c & allowed) for n, c in nodes.items() if n != card_node and c & allowed]
    if not others:
        return local, None, None, "one NUMA node only: no remote binding to compare"
    dist = node_distance(card_node, runner)
    others.sort(key=lambda nc: (-(dist[nc[0]] if dist and nc[0] < len(dist) else 0), nc[0]))
    return local, others[0][1], others[0][0], ""


def pcie_link(bus: str | None, runner: Runner | None = None) -> dict:
    """The card's PCIe link from sysfs (through ``runner``; default: live): max and current
    speed (GT/s) and width, limited by the port above it (a Gen4 card in a Gen3 slot runs Gen3)."""
    out = {"max_gts": None, "max_width": None, "cur_gts": None, "cur_width": None, "source": None}
    b = pci_address(bus)
    if not b:
        return out
    r = _runner(runner)
    dev = f"/sys/bus/pci/devices/{b}"

    def rd(p: str, name: str) -> str | None:
        text = r.read(f"{p}/{name}")
        return None if text is None else text.strip()

    gts, width = parse_link_speed(rd(dev, "max_link_speed")), rd(dev, "max_link_width")
    if gts is None or not (width or "").isdigit():
        return out
    mw = int(width)
    real = r.realpath(dev)
    up = posixpath.dirname(real) if real is not None else None
    src = f"{dev}/max_link_speed, max_link_width"
    if up is not None:
        ugts, uw = parse_link_speed(rd(up, "max_link_speed")), rd(up, "max_link_width")
        if ugts:
            gts = min(gts, ugts)
        if (uw or "").isdigit():
            mw = min(mw, int(uw))
        if ugts or uw:
            src += " (and the port above)"
    cw = rd(dev, "current_link_width")
    out.update(max_gts=gts, max_width=mw, cur_gts=parse_link_speed(rd(dev, "current_link_speed")),
               cur_width=int(cw) if (cw or "").isdigit() else None, source=src)  # fmt: skip
    return out


# ---------------------------------------------------------------------------------------
# measurements
# ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def bound(cpus: set[int] | None):
    if not cpus or not hasattr(os, "sched_setaffinity"):
        yield
        return
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, old)


def host_copy(be: TorchCards, i: int, sizes: tuple[int, ...], reps: int, pinned: bool,
              cpus: set[int] | None) -> dict:  # fmt: skip
    """GB/s host->card and card->host for one host-buffer kind under one CPU binding, measured
    as nvbandwidth does: one buffer of the largest size (first touched after binding, so its
    pages live on that node), a sweep of sizes, each copy timed alone with events after
    warm-up, the median per size and the figure at the plateau (the best size's median).
    A pinned buffer is checked to be pinned and copied asynchronously (``non_blocking``, the
    cudaMemcpyAsync a pinned copy is); where it is not pinned, ``pinned_checked`` says so."""
    import statistics

    t = be.torch
    with bound(cpus):
        top = max(sizes)
        host = be.host_buffer(top, pinned)
        host.fill_(1)  # first touch: pages on the bound node
        checked = be.is_pinned(host) if pinned else None
        dev = t.empty(top, dtype=t.uint8, device=be.device(i))
        sweep = []
        for nb in sorted(sizes):
            h, d = host[:nb], dev[:nb]
            up = be.time_each(i, lambda h=h, d=d: d.copy_(h, non_blocking=pinned), reps)
            down = be.time_each(i, lambda h=h, d=d: h.copy_(d, non_blocking=pinned), reps)
            if pinned:
                be.sync(i)
            sweep.append({"bytes": nb, "h2d_gbps": nb / statistics.median(up) / 1e9,
                          "d2h_gbps": nb / statistics.median(down) / 1e9})  # fmt: skip
        del host, dev
    return {"h2d_gbps": max(r["h2d_gbps"] for r in sweep),
            "d2h_gbps": max(r["d2h_gbps"] for r in sweep),
            "sweep": sweep, "pinned_checked": checked}  # fmt: skip


def peer_copy(be: TorchCards, a: int, b: int, nbytes: int, iters: int) -> float:
    t = be.torch
    src = t.empty(nbytes, dtype=t.uint8, device=be.device(a))
    dst = t.empty(nbytes, dtype=t.uint8, device=be.device(b))
    src.fill_(1)
    sec = be.time(a, lambda: dst.copy_(src), iters)
    be.sync(b)
    return nbytes * iters / sec / 1e9


def allocatable(be: TorchCards, i: int, cap: int | None = None) -> int:
    """Bytes torch can hold on card ``i``: 1 GiB blocks, then 64 MiB, until refused (``cap``
    stops early, for tests)."""
    t = be.torch
    held, total = [], 0
    errs = be.oom_errors()
    be.empty_cache()
    try:
        for block in (GiB, 64 * MiB):
            while cap is None or total + block <= cap:
                try:
                    held.append(t.empty(block, dtype=t.uint8, device=be.device(i)))
                except errs:
                    break
                total += block
    finally:
        del held
        be.empty_cache()
    return total


# ---------------------------------------------------------------------------------------
# collectives: one worker process per card
# ---------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_collectives(kind: str, cards: list[int], sizes: CardSizes,
                    cpus: dict[int, set[int] | None] | None = None,
                    ops: tuple[str, ...] = ("all_reduce", "all_gather")) -> tuple[list[dict], str]:  # fmt: skip
    """Start one worker per card; returns (results of rank 0, error text or "")."""
    n = len(cards)
    port = free_port()
    # the workers' environment (this process's own is never changed); CUDA_DEVICE_ORDER is
    # inherited, so a worker's --device index names the card this process's torch index does
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(n))
    procs = []
    for rank, card in enumerate(cards):
        argv = [sys.executable, "-m", "nodeledger.bench.collective", "--kind", kind,
                "--rank", str(rank), "--world", str(n), "--device", str(card),
                "--ops", ",".join(ops), "--sizes", ",".join(map(str, sizes.coll_bytes)),
                "--iters", str(sizes.coll_iters), "--warmup", str(sizes.coll_warmup)]  # fmt: skip
        c = (cpus or {}).get(card)
        if c:
            argv += ["--cpus", ",".join(map(str, sorted(c)))]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=dict(env, RANK=str(rank)),
                                      stdin=subprocess.DEVNULL))  # fmt: skip
    deadline = time.monotonic() + sizes.coll_timeout
    outs: list[tuple[str, str, int | None]] = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            outs.append((o, e, p.returncode))
        except subprocess.TimeoutExpired:
            for q in procs:
                with contextlib.suppress(OSError):
                    q.kill()
            for q in procs:
                with contextlib.suppress(Exception):
                    q.communicate(timeout=5)
            return (
                [],
                f"timed out after {sizes.coll_timeout:g} s (a rank hung: check the links / NCCL_DEBUG=INFO)",
            )
    bad = [(k, e) for k, (_, e, rc) in enumerate(outs) if rc != 0]
    if bad:
        k, e = bad[0]
        tail = [ln for ln in e.strip().splitlines() if ln.strip()][-1:] or ["no message"]
        return [], f"rank {k} exited {outs[k][2]}: {tail[0][:300]}"
    results = []
    for line in outs[0][0].splitlines():
        with contextlib.suppress(ValueError):
            results.append(json.loads(line))
    return results, "" if results else "rank 0 printed no result"
