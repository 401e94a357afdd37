"""Scenario backend: cards, processes and host figures played from a script, for tests,
benchmarks and the recorded fixture streams (tests/fixtures/watch/).  Deterministic: step k of a
scenario is always the same (its noise comes from a generator seeded with the step).

The machine is the bundled reference box (field_notes.toml "reference_machine"): 8 x 64 GiB cards (K100_AI), card i on NUMA
node i, node i = CPUs 12i..12i+11, 125 GiB of host RAM.  Scenarios (``--backend fake:NAME``):

- ``fsdp-sharded``: Qwen3-32B full fine-tune, pure-bf16 FSDP2 over 8 cards (--precision bf16),
  each card near the ledger's sharded figure (51.8 GiB busiest card with full checkpointing).
- ``fsdp-unsharded``: the same job with sharding silently off: card 0 fills to 62.5 GiB, the
  other seven hold a context and NCCL buffers (1.3 GiB) and wait.
- ``dead-owner``: 7 serving replicas busy; card 5 keeps 20.3 GiB of a notebook the kernel
  OOM killer took at t = 25 s (host RAM ran out just before); card 7 runs short jobs (pid churn).
- ``remote-numa``: DDP LoRA on 8 cards; rank 3 and its DataLoader workers were bound to NUMA
  node 1 (a copied numactl line) while card 3 sits on node 3: card 3 idles at ~5 %.
- ``extra-contexts``: the same DDP job where ranks 1-7 also opened a 0.5 GiB context on card 0
  (torch.cuda calls before set_device).
- ``two-loads``: the field notes' broken rule: a ~60 GB checkpoint loads onto card 0 through host
  RAM and, at t = 30 s, a second one onto card 1 while the first is still resident: MemAvailable
  falls to ~3 GiB of 125, the host swaps (~5,000 pages/s); from t = 10 s a stray notebook holds
  3 GiB on card 7 (the plan's lifeboat, when the expectations name one).  400 steps.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from nodeledger.errors import InputError
from nodeledger.units import GiB
from nodeledger.watch.base import Backend

CARDS = 8
CPUS_PER_NODE = 12
HOST_RAM = 125 * GiB
NODE_RAM = HOST_RAM // CARDS
T0 = 1_760_000_000.0  # fixed start time of scenario clocks (recordings are reproducible)


def node_cpus(n: int) -> str:
    return f"{CPUS_PER_NODE * n}-{CPUS_PER_NODE * n + CPUS_PER_NODE - 1}"


@dataclass
class Proc:
    """One process in a frame: where it is bound, how much CPU it burns (cores)."""

    alive: bool = True
    name: str = "python"
    node: int | None = None  # bound to this NUMA node (CPUs and memory); None: unbound
    cpu: float = 1.0  # cores in use
    children: list[tuple[int, float]] = field(default_factory=list)  # (pid, cores)


@dataclass
class Frame:
    """What the machine shows at one instant."""

    cards: dict[int, tuple[int, float, list[tuple[int, int]]]]  # i -> (used, util %, [(pid, used)])
    procs: dict[int, Proc]
    mem_available: int = 80 * GiB
    swap_used: int = 0
    swap_pages_s: float = 0.0
    iowait: float = 0.01  # share of CPU time
    busy: float = 0.2  # share of CPU time not idle (iowait excluded)


@dataclass
class Scenario:
    name: str
    frame: Callable[[float, random.Random], Frame]
    steps: int = 90  # length of the recorded fixture
    interval: float = 1.0
    expect: dict | None = None  # {"model", "job", "options", "machine"}: the ledger's prediction
    seed: int = 7


def _describe_cards() -> list[dict]:
    return [{"index": i, "name": "K100_AI", "uuid": f"DCU-fake-{i:04d}",
             "pci_bus_id": f"0000:{0x1a + i * 0x10:02x}:00.0", "total_bytes": 64 * GiB,
             "numa_node": i} for i in range(CARDS)]  # fmt: skip


def _ramp(t: float, t0: float, t1: float, a: float, b: float) -> float:
    if t <= t0:
        return a
    if t >= t1:
        return b
    return a + (b - a) * (t - t0) / (t1 - t0)


def _owner(node: int | None, workers: int, pid: int, cpu: float = 1.2, wcpu: float = 0.3) -> Proc:
    return Proc(node=node, cpu=cpu, children=[(pid * 100 + k, wcpu) for k in range(workers)])


CTX = GiB // 2  # a CUDA/HIP context as nvidia-smi / rocm-smi show it
DRIVER = GiB // 4  # used memory no process accounts for (driver reservations)


def _fsdp(sharded: bool) -> Callable[[float, random.Random], Frame]:
    def frame(t: float, rng: random.Random) -> Frame:
        cards, procs = {}, {}
        for i in range(CARDS):
            pid = 1000 + i
            procs[pid] = _owner(i, 0, pid)
            if sharded or i == 0:
                # nvidia-smi shows what the caching allocator reserved: it climbs to the first
                # optimizer step's peak and stays there
                step = 27 if sharded else 42
                if t < step:
                    gib = _ramp(t, 5, 20 if sharded else 35, 0.5, 44.0 if sharded else 56.0)
                else:
                    gib = 49.6 if sharded else 62.5
                gib += rng.uniform(-0.2, 0.2) if t >= 5 else 0
                util = 0.0 if t < 5 else (20.0 if t < 20 else rng.uniform(88, 97))
            else:  # a context and NCCL buffers; the rank waits in a collective
                gib = _ramp(t, 5, 8, 0.5, 1.3)
                util = rng.uniform(0, 2)
            used = int(gib * GiB)
            cards[i] = (used, round(util, 1), [(pid, used - DRIVER)])
        return Frame(cards, procs, mem_available=int((77 + rng.uniform(-1, 1)) * GiB))

    return frame


def _dead_owner(t: float, rng: random.Random) -> Frame:
    cards, procs = {}, {}
    for i in range(CARDS):
        if i in (5, 7):
            continue
        pid = 2000 + i
        procs[pid] = _owner(i, 0, pid, cpu=1.5)
        used = int((57.6 + rng.uniform(-0.1, 0.1)) * GiB)
        cards[i] = (used, round(rng.uniform(40, 85), 1), [(pid, used - DRIVER)])
    # card 5: a notebook with a 20 GiB model; host RAM runs out at t=20..25, the OOM killer
    # takes it at t=25, the card keeps its memory (the driver still lists the pid)
    nb = 2105
    procs[nb] = Proc(alive=t < 25, node=None, cpu=0.8 if t < 25 else 0.0)
    used5 = int(20.3 * GiB)
    cards[5] = (used5, round(rng.uniform(20, 40), 1) if t < 25 else 0.0, [(nb, used5 - DRIVER)])
    # card 7: a queue of short jobs, a new pid every 15 s
    job = 2200 + int(t // 15)
    procs[job] = _owner(7, 0, job, cpu=1.0)
    used7 = int(_ramp(t % 15, 0, 3, 0.5, 12.0) * GiB)
    cards[7] = (used7, round(rng.uniform(50, 90), 1), [(job, used7 - DRIVER)])
    avail = 1.2 if 20 <= t < 25 else (31.0 if t < 20 else 52.0)
    return Frame(cards, procs, mem_available=int((avail + rng.uniform(-0.1, 0.1)) * GiB))


def _ddp(remote_rank: int | None, extra_contexts: bool) -> Callable[[float, random.Random], Frame]:
    def frame(t: float, rng: random.Random) -> Frame:
        cards, procs = {}, {}
        for i in range(CARDS):
            pid = 3000 + i if not extra_contexts else 5000 + i
            remote = i == remote_rank
            node = 1 if remote else i
            procs[pid] = _owner(node, 2, pid, wcpu=0.95 if remote else 0.35)
            used = int((_ramp(t, 3, 12, 0.5, 21.5) + rng.uniform(-0.2, 0.2)) * GiB)
            util = rng.uniform(2, 9) if remote else rng.uniform(86, 96)
            cards[i] = (used, round(util if t >= 12 else 10.0, 1), [(pid, used - DRIVER)])
        if extra_contexts:
            used0, util0, plist = cards[0]
            extra = [(5000 + i, CTX) for i in range(1, CARDS)]
            cards[0] = (used0 + CTX * (CARDS - 1), util0, plist + extra)
        return Frame(cards, procs, mem_available=int((88 + rng.uniform(-1, 1)) * GiB))

    return frame


def _two_loads(t: float, rng: random.Random) -> Frame:
    cards, procs = {}, {}
    for i, start in ((0, 0.0), (1, 30.0)):
        if t < start:
            continue
        pid = 4000 + i
        procs[pid] = _owner(i, 0, pid, cpu=2.0)
        used = int((_ramp(t - start, 0, 60, 0.5, 56.0) + rng.uniform(-0.1, 0.1)) * GiB)
        cards[i] = (used, round(rng.uniform(0, 5), 1), [(pid, used - DRIVER)])
    if t >= 10:
        procs[4007] = _owner(None, 0, 4007, cpu=0.2)
        cards[7] = (3 * GiB, 0.0, [(4007, 3 * GiB - DRIVER)])
    two = t >= 30
    avail = (3.0 if two else 62.0) + rng.uniform(-0.2, 0.2)
    return Frame(cards, procs, mem_available=int(avail * GiB), swap_used=(2 * GiB if two else 0),
                 swap_pages_s=5000.0 if two else 0.0)  # fmt: skip


FSDP_32B = {"model": "qwen3-32b", "job": "train", "machine": "k100-ai-8x64g",
            "options": {"dp": 8, "shard": "fsdp", "precision": "bf16", "checkpointing": "full"}}  # fmt: skip
LORA_8B = {"model": "qwen3-8b", "job": "lora", "machine": "k100-ai-8x64g",
           "options": {"dp": 8, "rank": 16, "checkpointing": "full"}}  # fmt: skip

SCENARIOS: dict[str, Callable[[], Scenario]] = {
    "fsdp-sharded": lambda: Scenario("fsdp-sharded", _fsdp(True), 90, expect=FSDP_32B),
    "fsdp-unsharded": lambda: Scenario("fsdp-unsharded", _fsdp(False), 90, expect=FSDP_32B),
    "dead-owner": lambda: Scenario("dead-owner", _dead_owner, 90),
    "remote-numa": lambda: Scenario("remote-numa", _ddp(3, False), 45, interval=2.0),
    "extra-contexts": lambda: Scenario("extra-contexts", _ddp(None, True), 30, expect=LORA_8B),
    "two-loads": lambda: Scenario("two-loads", _two_loads, 400),
}


def scenario(name: str) -> Scenario:
    if name not in SCENARIOS:
        raise InputError(f"fake scenario {name!r} is not one of {', '.join(SCENARIOS)}")
    return SCENARIOS[name]()


class FakeBackend(Backend):
    """Plays a scenario; ``clock()`` is the scenario's time (T0 + k x interval), so a recording
    made from it is the same every time.  ``host`` is the matching host sampler."""

    def __init__(self, sc: Scenario):
        self.sc = sc
        self.name = f"fake:{sc.name}"
        self.k = -1
        self.frame: Frame | None = None
        self.cards = self.describe()
        self.host = FakeHost(self)

    def clock(self) -> float:
        return T0 + max(self.k + 1, 0) * self.sc.interval

    def describe(self) -> list[dict]:
        return _describe_cards()

    def sample(self) -> list[dict]:
        self.k += 1
        t = self.k * self.sc.interval
        self.frame = self.sc.frame(t, random.Random(self.sc.seed * 1_000_003 + self.k))
        out = []
        for i in range(CARDS):
            used, util, plist = self.frame.cards.get(i, (0, 0.0, []))
            out.append({"index": i, "used_bytes": used, "total_bytes": 64 * GiB, "util_pct": util,
                        "processes": [{"pid": p, "name": None, "used_bytes": u} for p, u in plist]})  # fmt: skip
        return out


class FakeHost:
    """Host figures of the scenario; counters (CPU jiffies, swap pages, CPU seconds per process)
    accumulate from the frames' rates."""

    HZ = 100

    def __init__(self, backend: FakeBackend):
        self.b = backend
        self.jiffies = {"total": 10**8, "idle": 8 * 10**7, "iowait": 10**6}
        self.pswp = [1000, 2000]
        self.cpu_s: dict[int, float] = {}

    def describe(self) -> dict:
        return {"hostname": "fake-k100", "cpus": f"0-{CARDS * CPUS_PER_NODE - 1}",
                "numa_nodes": {str(n): node_cpus(n) for n in range(CARDS)}}  # fmt: skip

    def sample(self, pids) -> tuple[dict, dict]:
        f = self.b.frame
        dt = self.b.sc.interval
        ticks = int(CARDS * CPUS_PER_NODE * self.HZ * dt)
        j = self.jiffies
        j["total"] += ticks
        j["iowait"] += int(ticks * f.iowait)
        j["idle"] += int(ticks * max(0.0, 1 - f.busy - f.iowait))
        self.pswp[0] += int(f.swap_pages_s * dt / 2)
        self.pswp[1] += int(f.swap_pages_s * dt / 2)
        host = {"mem_total": HOST_RAM, "mem_available": f.mem_available,
                "swap_total": 8 * GiB, "swap_free": 8 * GiB - f.swap_used,
                "pswpin": self.pswp[0], "pswpout": self.pswp[1], "cpu": dict(j),
                "numa": {str(n): [NODE_RAM, NODE_RAM // 2] for n in range(CARDS)}}  # fmt: skip
        procs = {}
        for pid in sorted(set(pids)):
            procs[str(pid)] = self._proc(pid, f.procs.get(pid), dt, children=True)
        live = set(f.procs) | {c for p in f.procs.values() for c, _ in p.children}
        for pid in [p for p in self.cpu_s if p not in live]:  # pid churn stays bounded
            del self.cpu_s[pid]
        return host, procs

    def _proc(self, pid: int, p: Proc | None, dt: float, children: bool = False) -> dict:
        if p is None or not p.alive:
            return {"alive": False}
        self.cpu_s[pid] = self.cpu_s.get(pid, 0.0) + p.cpu * dt
        all_cpus = f"0-{CARDS * CPUS_PER_NODE - 1}"
        out = {"alive": True, "name": p.name, "state": "R" if p.cpu > 0.5 else "S",
               "cpus": all_cpus if p.node is None else node_cpus(p.node),
               "mems": f"0-{CARDS - 1}" if p.node is None else str(p.node),
               "cpu_s": round(self.cpu_s[pid], 2)}  # fmt: skip
        if children:
            out["children"] = [
                dict(self._proc(c, Proc(name="pt_data_worker", node=p.node, cpu=cpu), dt), pid=c)
                for c, cpu in p.children
            ]
        return out


def record_scenario(name: str, path) -> int:
    """Record a scenario through the real Watcher and Recorder (the fixture streams under
    tests/fixtures/watch/ are made this way); the header carries the ledger's expectations.
    Returns the number of samples."""
    from nodeledger.watch.record import Recorder
    from nodeledger.watch.watcher import Watcher

    sc = scenario(name)
    b = FakeBackend(sc)
    w = Watcher(b, b.host, sc.interval)
    expect, profile = None, None
    if sc.expect:
        from nodeledger.ledger.jobs import build_job
        from nodeledger.machine import resolve_machine
        from nodeledger.model import load_model
        from nodeledger.watch.expect import from_job

        profile = sc.expect["machine"]
        spec = load_model(sc.expect["model"])[0]
        job = build_job(sc.expect["job"], dict(sc.expect["options"]))
        expect = from_job(sc.expect["model"], spec, job, resolve_machine(profile))
    rec = Recorder(path, w.header(expect, profile))
    try:
        # the time a fake sample took is not part of the scenario: 0, so recordings are stable
        n = w.run(lambda s: rec.write(dict(s, sample_s=0.0)), samples=sc.steps,
                  sleep=lambda _s: None)  # fmt: skip
    finally:
        rec.close()
    return n
