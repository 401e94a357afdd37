"""Do the card links and the NIC carry a job's parallel traffic?  A time ratio:

    r = seconds the traffic of one token takes over its path / seconds the token's compute takes

Traffic per token and rank (ledger/comm.py): tensor-parallel all-reduces (2 per layer forward,
+2 backward) and the token's share of the data-parallel sync of a step.  The path's speed is its
bus bandwidth (speed/figures.py: bench-measured, else the weakest link of the cards x the
achieved fraction of its kind; across machines the NICs x the transport's achieved fraction),
so bytes x bus factor / busbw is the time nccl-tests would measure.  Compute: FLOPs per token
per rank / (card peak x the achieved fraction: [efficiency.mfu_prefill] serving,
[efficiency.mfu_train] training; speed/hardware.toml).  Serving is judged on prefill (compute-
bound: the most traffic per second of compute); training on the step.  Tiers (documented):

    r <= 0.5  can     (communication hides behind compute)
    r <= 2    tight   (the link sets the pace: up to 3x slower than compute alone)
    r >  2    cannot  (the cards would wait on the link more than twice as long as they compute)

r does not depend on batch or sequence length (both sides scale with tokens).

Unknown figures: r grows with the card peak and falls with the path's bandwidth, so a lower
bound on the peak (the slowest card of the same class and memory in the hardware data) and an
upper bound on the path (a measured transport ceiling, e.g. NCCL's socket transport over plain
Ethernet) give a lower bound on r: above 2 it is "cannot" whatever the unknowns are, and the
verdict says which bounds decided it.  With the path known (measured) and only the peak
unknown, the fastest card in the data gives an upper bound on r: at most 0.5 is "can".  Otherwise the row stays unknown and names what would
decide it (the bench part that measures the link, or the figure to put in the profile).
Pipeline-parallel activations (one hidden vector per token per stage boundary) are left out: at
least L/pp times smaller than TP traffic.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeledger.ledger import comm, model_state
from nodeledger.ledger.jobs import LoadJob, TrainJob
from nodeledger.machine.profile import MachineProfile
from nodeledger.model.spec import ModelSpec
from nodeledger.speed import figures as F
from nodeledger.speed import hardware as H
from nodeledger.speed import work as W
from nodeledger.units import GB

RATIO_TIERS = ((0.5, "fits"), (2.0, "tight"))
ETHERNET_GBIT = (10, 25, 100)  # common plain-Ethernet port speeds, for break-even figures


def _tier(ratio: float) -> str:
    for limit, tier in RATIO_TIERS:
        if ratio <= limit:
            return tier
    return "cannot"


def traffic(spec: ModelSpec, job, machine: MachineProfile, machines: int) -> dict | None:
    """Bytes per token per rank on each path, FLOPs per token per rank; None if nothing moves."""
    p = job.parallel
    tp, pp, dp = p.tp, p.pp, (p.dp if isinstance(job, TrainJob) else 1)
    if tp == 1 and dp == 1:
        return None
    training = isinstance(job, TrainJob)
    # the same FLOPs the speed model counts (speed/work.py, speed/train.py): body parameters
    # (no embedding lookup), logits where computed, attention, recomputation, LoRA
    if training:
        from nodeledger.speed.train import flops_per_token as train_flops

        fl_token = train_flops(spec, job) / (tp * pp)
    else:
        fl_token = 2.0 * W.body_params(spec) / (tp * pp)
    tp_b = comm.tp_bytes_per_token(spec.hidden_size, -(-spec.num_layers // pp), tp, 2, training)
    dp_b = dp_step = 0.0
    if training and dp > 1:
        tokens_per_step = job.micro_batch * job.seq * job.grad_accum
        dp_step = model_state.dp_sync_bytes_per_step(spec, job)
        dp_b = dp_step / tokens_per_step
    per_machine = max(1, len(machine.accelerators))
    crosses_tp = machines > 1 and tp > per_machine
    crosses_dp = machines > 1 and not crosses_tp
    paths = []
    if tp > 1:
        paths.append(("network" if crosses_tp else "card links", "tensor parallel", tp_b))
    if dp_b:
        paths.append(("network" if crosses_dp else "card links", "data parallel", dp_b))
    return {"tp": tp, "pp": pp, "dp": dp, "training": training, "flops": fl_token,
            "paths": paths, "dp_step": dp_step, "cards": min(tp * pp * dp, per_machine),
            "tp_bytes": tp_b, "dp_rings_sharing_nics": max(1, min(tp * pp, per_machine)),
            "dp_op": "all_gather" if training and not job.is_lora
            and job.shard in ("zero3", "fsdp", "fsdp_hybrid") else "all_reduce"}  # fmt: skip


def _path_bw(machine: MachineProfile, resource: str, what: str, t: dict) -> tuple:
    """(bus bandwidth Figure, upper-bound Figure or None) of a path: tensor parallel over one
    TP group's cards, data parallel over all the job's cards; across machines the NICs, shared
    by the data-parallel rings that cross them at once."""
    if resource == "network":
        bw, _ = F.network_busbw(machine)
        ceil = F.network_busbw_ceiling(machine) if bw.value is None else None
        rings = t["dp_rings_sharing_nics"] if what == "data parallel" else 1
        if rings > 1:
            share = f", shared by {rings} data-parallel rings crossing the machine boundary at once"
            bw = bw if bw.value is None else F.Figure(bw.value / rings, "GB/s", bw.source + share)
            if ceil is not None and ceil.value is not None:
                ceil = F.Figure(ceil.value / rings, "GB/s", ceil.source + share)
        return bw, ceil
    n = min(t["tp"], t["cards"]) if what == "tensor parallel" else t["cards"]
    idx = [a.index for a in machine.accelerators][:n]
    bw, _, _ = F.busbw(machine, "all_reduce" if what == "tensor parallel" else t["dp_op"], idx)
    return bw, None


def link_check(spec: ModelSpec, job, machine: MachineProfile, machines: int = 1) -> dict | None:
    """The traffic verdict of one job; None when the job moves nothing between cards.  The
    ratio r = traffic time / compute time is decided from known figures (``_decided``), else
    bounded: a lower bound that already says cannot (``_cannot_at_least``), an upper bound that
    says can, or a range the card peak decides (``_within_bounds``), else unknown with what
    would measure it (``_undecided``)."""
    if isinstance(job, LoadJob):
        return None
    t = traffic(spec, job, machine, machines)
    if t is None or not t["paths"]:
        return None
    training = t["training"]
    resource = "network" if any(r == "network" for r, _, _ in t["paths"]) else "card links"
    first = machine.accelerators[0].product if machine.accelerators else None
    eff = H.efficiency("mfu_train" if training else "mfu_prefill", first)
    peak = F.card_peak(machine, [a.index for a in machine.accelerators][: t["cards"]])
    bws = _path_bandwidths(machine, t)
    out = {
        "resource": resource,
        "tp": t["tp"],
        "dp": t["dp"],
        "machines": machines,
        "bytes_per_token": {what: round(b) for _, what, b in t["paths"]},
        "dp_bytes_per_step": round(t["dp_step"]),
        "flops_per_token_per_card": t["flops"],
        "efficiency": eff.value,
        "efficiency_source": eff.source,
        "card_bf16_tflops": peak.value,
        "card_peak_source": peak.source,
        "path": bws[resource][0].source,
        "busbw_gbps": bws[resource][0].value,
        "basis": "training step" if training else "prefill (compute-bound)",
        "source": "verdict/links.py: traffic seconds (ledger/comm.py bytes / bus bandwidth, "
        "speed/figures.py) over compute seconds (FLOPs / peak x efficiency, speed/hardware.toml)",
    }
    volume = []
    if t["tp"] > 1:
        volume.append(f"TP {t['tp_bytes'] / 1e6:,.2f} MB per token per card")
    if t["dp_step"]:
        sharded = getattr(job, "shard", "none") in ("zero3", "fsdp", "fsdp_hybrid")
        volume.append(f"{'ZeRO-3/FSDP' if sharded else 'DP'} sync {t['dp_step'] / 1e9:,.2f} GB per step per card")  # fmt: skip
    say = _Say(resource, f" across {machines} machines" if resource == "network" else "",
               ", ".join(volume))  # fmt: skip
    if eff.value is None:
        out.update(tier="unknown", ratio=None, reason=f"{resource}: {say.moves}; {eff.source}")
        return out
    # GB/s of bus bandwidth each card needs per TFLOPS of its own peak for traffic = compute
    total_b = sum(b for _, _, b in t["paths"])
    need_per_tflops = total_b * 1e12 * eff.value / t["flops"] / GB
    out["needed_gbps_per_card_tflops"] = need_per_tflops
    known_bw = {r: f.value for r, (f, _) in bws.items() if f.value is not None}
    if peak.value is not None and len(known_bw) == len(bws):
        return _decided(out, t, eff.value, peak.value, known_bw, need_per_tflops, say)
    # unknowns: a lower bound on r from a lower bound on the peak and upper bounds on the paths
    floor = peak if peak.value is not None else F.card_peak_floor(machine)
    upper = {}
    for r_name, (f, ceil) in bws.items():
        if f.value is not None:
            upper[r_name] = (f.value, f.source)
        elif ceil is not None and ceil.value is not None:
            upper[r_name] = (ceil.value, ceil.source)
    missing = []
    if peak.value is None:
        missing.append(f"card peak unknown ({peak.source.split(' (')[0]})")
    for r_name, (f, _) in bws.items():
        if f.value is None:
            missing.append(f"{r_name}: {f.source}")
    out["unknown"] = missing
    if (
        floor.value is not None
        and len(upper) == len(bws)
        and _cannot_at_least(out, t, eff.value, peak, floor, upper, bws, need_per_tflops, say)
    ):
        return out  # fmt: skip
    # paths known, peak unknown: an upper bound on r from the fastest card in the data decides
    # "can" when even that card would not wait on the link
    if (
        peak.value is None
        and len(known_bw) == len(bws)
        and _within_bounds(out, t, eff.value, machine, floor, known_bw, need_per_tflops, say)
    ):
        return out  # fmt: skip
    return _undecided(out, t, machine, peak, known_bw, need_per_tflops, missing, say)


@dataclass(frozen=True)
class _Say:
    """The words every reason of one link check starts with."""

    resource: str
    where: str  # " across N machines" for the network
    moves: str  # what moves: "TP x MB per token per card, ..."

    @property
    def head(self) -> str:
        return f"{self.resource}{self.where}: {self.moves}"


def _path_bandwidths(machine: MachineProfile, t: dict) -> dict:
    """resource -> (bus bandwidth figure, its ceiling): a resource's slowest path prices all
    its traffic."""
    bws: dict = {}
    for r, what, _ in t["paths"]:
        f = _path_bw(machine, r, what, t)
        cur = bws.get(r)
        if cur is None or (cur[0].value is not None
                           and (f[0].value is None or f[0].value < cur[0].value)):  # fmt: skip
            bws[r] = f
    return bws


def _ratio(t: dict, eff: float, peak_tflops: float, bw_of: dict) -> float:
    """traffic seconds / compute seconds per token at ``peak_tflops`` and the paths' ``bw_of``."""
    comm_s = sum(b / (bw_of[r] * GB) for r, _, b in t["paths"])
    comp_s = t["flops"] / (peak_tflops * 1e12 * eff)
    return comm_s / comp_s


def _decided(out: dict, t: dict, eff: float, peak: float, known_bw: dict, need_per_tflops: float,
             say: _Say) -> dict:  # fmt: skip
    """Every figure known: the ratio and its tier."""
    r = _ratio(t, eff, peak, known_bw)
    comm_s = sum(b / (known_bw[x] * GB) for x, _, b in t["paths"])
    out.update(
        tier=_tier(r), ratio=round(r, 3), bound=None,
        comm_seconds_per_token=comm_s,
        compute_seconds_per_token=comm_s / r,
        needed_gbps_per_card=need_per_tflops * peak,
        link_gbps_per_card=out["busbw_gbps"],
        reason=(
            f"{say.head}; traffic takes {r:.2f}x the compute time "
            f"({comm_s * 1e6:,.1f} us vs {comm_s / r * 1e6:,.1f} us per token: "
            f"{out['busbw_gbps']:,.1f} GB/s bus bandwidth, {peak:,.0f} TFLOPS x {eff:g})"
        ),
    )  # fmt: skip
    return out


def _cannot_at_least(out: dict, t: dict, eff: float, peak, floor, upper: dict, bws: dict,
                     need_per_tflops: float, say: _Say) -> bool:  # fmt: skip
    """The lower bound on r (the card peak at least ``floor``, the paths at most ``upper``);
    True when it already says cannot (``out`` then holds the verdict)."""
    lo = _ratio(t, eff, floor.value, {k: v for k, (v, _) in upper.items()})
    out["ratio_lower_bound"] = round(lo, 3)
    bounds = []
    if peak.value is None:
        bounds.append(f"card peak at least {floor.value:,.0f} TFLOPS ({floor.source})")
    for r_name, (f, _) in bws.items():
        if f.value is None:
            bounds.append(
                f"{r_name} at most {upper[r_name][0]:,.1f} GB/s bus bandwidth ({upper[r_name][1]})"
            )
    # the peak above which the path binds beyond the cannot threshold, at the bound
    bw_res = upper.get(say.resource, (None,))[0]
    edge = RATIO_TIERS[-1][0] * bw_res / need_per_tflops if bw_res else None
    out["cannot_above_card_tflops"] = edge
    if lo <= RATIO_TIERS[-1][0]:
        return False
    out.update(
        tier="cannot", ratio=round(lo, 3), bound="lower",
        reason=(
            f"{say.head}; traffic takes at least {lo:.1f}x the compute "
            f"time: {'; '.join(bounds)}; cannot for any card faster than "
            f"{edge:,.1f} TFLOPS at that bandwidth"
        ),
    )  # fmt: skip
    return True


def _within_bounds(out: dict, t: dict, eff: float, machine: MachineProfile, floor, known_bw: dict,
                   need_per_tflops: float, say: _Say) -> bool:  # fmt: skip
    """Paths known, peak unknown: the upper bound from the fastest card in the data says can,
    or the range between the slowest and fastest cards leaves it to the card peak; True when
    ``out`` holds one of those verdicts."""
    ceil = F.card_peak_ceiling(machine)
    if ceil.value is None:
        return False
    hi = _ratio(t, eff, ceil.value, known_bw)
    out["ratio_upper_bound"] = round(hi, 3)
    lo_r = out.get("ratio_lower_bound")
    can_edge = RATIO_TIERS[0][0] * known_bw[say.resource] / need_per_tflops
    out["can_below_card_tflops"] = can_edge
    if lo_r is not None and hi > RATIO_TIERS[0][0]:
        out.update(
            tier="unknown", ratio=None, bound="range",
            reason=(
                f"{say.head}; traffic takes {lo_r:.2f}x-{hi:.2f}x the compute "
                f"time over {out['busbw_gbps']:,.1f} GB/s bus bandwidth ({out['path']}), for "
                f"a card peak of {floor.value:,.0f}-{ceil.value:,.0f} TFLOPS (the slowest "
                f"and fastest cards that could be it); can for any card up to "
                f"{can_edge:,.0f} TFLOPS; decided by the card peak: put bf16_dense_tflops "
                "in the profile"
            ),
        )  # fmt: skip
        return True
    if hi <= RATIO_TIERS[0][0]:
        out.update(
            tier="fits", ratio=round(hi, 3), bound="upper",
            reason=(
                f"{say.head}; traffic takes at most {hi:.2f}x the compute "
                f"time: {out['busbw_gbps']:,.1f} GB/s bus bandwidth ({out['path']}) against "
                f"a card peak of at most {ceil.value:,.0f} TFLOPS ({ceil.source})"
            ),
        )  # fmt: skip
        return True
    return False


def _undecided(out: dict, t: dict, machine: MachineProfile, peak, known_bw: dict,
               need_per_tflops: float, missing: list[str], say: _Say) -> dict:  # fmt: skip
    """Unknown: what the job needs, what is missing, and what would measure it (on plain
    Ethernet, the card peak above which it cannot at each common port speed)."""
    resource = say.resource
    hint = F.BENCH_HINT["link"] if resource == "card links" else F.BENCH_HINT["nic"]
    need = (
        f"needs {need_per_tflops * peak.value:,.1f} GB/s bus bandwidth per card"
        if peak.value is not None
        else f"needs {need_per_tflops:,.2f} GB/s bus bandwidth per card for each TFLOPS of card peak"
    )
    edges = ""
    if resource == "network" and not known_bw.get("network"):
        eff_sock = H.efficiency("busbw_socket").value
        _, nic_kind = F.nic(machine)
        if eff_sock is not None and nic_kind == "ethernet":
            rings = t["dp_rings_sharing_nics"] if any(w == "data parallel" and r == "network"
                                                      for r, w, _ in t["paths"]) else 1  # fmt: skip
            parts = [f"{RATIO_TIERS[-1][0] * g / 8 * eff_sock / rings / need_per_tflops:,.1f} "
                     f"TFLOPS at {g} GbE" for g in ETHERNET_GBIT]  # fmt: skip
            edges = "; cannot for any card faster than " + ", ".join(parts)
    out.update(
        tier="unknown", ratio=None, bound=None,
        reason=f"{say.head}; {need} to keep pace with compute; "
        f"{'; '.join(missing)}{edges}; decided by measuring: {hint}",
    )  # fmt: skip
    return out
