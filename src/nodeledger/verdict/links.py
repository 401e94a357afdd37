"""Do the card links and the NIC carry a job's parallel traffic?  Terms in ledger/comm.py.

Per token one rank computes ``flops_per_token / (tp x pp)`` and sends the tensor-parallel bytes
of that token plus its share of the data-parallel sync of the step.  The ratio

    r = (bytes over each path / the path's GB/s) / compute seconds at the cards' peak x MFU

does not depend on batch or sequence length for TP (both scale with tokens).  Serving is judged
on prefill (compute-bound, so the most demanding case; decode is bound by memory bandwidth and
waits longer per token, which hides more traffic).  Tiers (documented thresholds):

    r <= 0.5  can     (communication hides behind compute)
    r <= 2    tight   (the link sets the pace: up to 3x slower than compute alone)
    r >  2    cannot  (the cards would wait on the link more than twice as long as they compute)

Paths: TP and DP traffic between cards of one machine rides the slowest card-to-card link of the
cards used; traffic between machines rides the NICs, shared by the machine's cards (each card's
share = the machine's compute-NIC GB/s / its card count: NCCL's inter-node bus bandwidth per
GPU cannot exceed it).  Pipeline-parallel activations (one hidden vector per token per stage
boundary) are left out: at least L/pp times smaller than TP traffic.
"""

from __future__ import annotations

from nodeledger.ledger import comm
from nodeledger.ledger.jobs import LoadJob, TrainJob
from nodeledger.machine.profile import MachineProfile
from nodeledger.model.spec import ModelSpec
from nodeledger.units import GB

RATIO_TIERS = ((0.5, "fits"), (2.0, "tight"))
ETHERNET_GBIT = (10, 25, 100)  # common plain-Ethernet port speeds, for break-even figures


def nic_gbps(machine: MachineProfile) -> tuple[float | None, str]:
    """GB/s of the NICs a cross-machine job would use: RDMA ports if any, else Ethernet."""
    nics = machine.network.nics
    rdma = [n for n in nics if n.kind in ("infiniband", "roce", "rdma")]
    use = rdma or [n for n in nics if n.kind in ("ethernet", "unknown")]
    if not use:
        return None, "no NIC in the profile"
    names = ", ".join(n.name for n in use)
    if any(n.speed_gbit is None for n in use):
        return None, f"{len(use)} NIC(s) ({names}), speed unknown"
    total = sum(n.speed_gbit for n in use) / 8  # Gbit/s -> GB/s
    kind = use[0].kind
    return total, f"{len(use)} x {kind} ({names}), {total:,.1f} GB/s in all"


def box_link(machine: MachineProfile, cards: int) -> tuple[float | None, str]:
    """Slowest link among the first ``cards`` cards (placement picks better groups later)."""
    idx = [a.index for a in machine.accelerators][:cards]
    worst = None
    label = ""
    for i, a in enumerate(idx):
        for b in idx[i + 1 :]:
            lk = machine.link(a, b)
            bw = lk.bandwidth_gbps
            text = lk.label or (
                "link of unknown kind" if lk.kind.value == "unknown" else lk.kind.value
            )
            if bw is None:
                return None, f"{text} between cards {a} and {b}, bandwidth unknown"
            if worst is None or bw < worst:
                worst, label = bw, f"{text} {bw:,.0f} GB/s per direction (cards {a}-{b})"
    return worst, label


def _tier(ratio: float) -> str:
    for limit, tier in RATIO_TIERS:
        if ratio <= limit:
            return tier
    return "cannot"


def link_check(
    spec: ModelSpec, job, machine: MachineProfile, machines: int = 1, mfu: float = comm.MFU_DEFAULT
) -> dict | None:
    """The traffic verdict of one job; None when the job moves nothing between cards."""
    if isinstance(job, LoadJob):
        return None
    p = job.parallel
    tp, pp, dp = p.tp, p.pp, (p.dp if isinstance(job, TrainJob) else 1)
    per_machine = max(1, len(machine.accelerators))
    if tp == 1 and dp == 1:
        return None
    training = isinstance(job, TrainJob)
    recompute = training and job.checkpointing == "full"
    active = spec.params_active()
    fl_token = comm.flops_per_token(active, training, recompute) / (tp * pp)
    elem = 2  # bf16 activations and gradients on the wire
    tp_b = comm.tp_bytes_per_token(spec.hidden_size, -(-spec.num_layers // pp), tp, elem, training)
    dp_b = dp_step = 0.0
    if training and dp > 1:
        trainable = spec.params_total() if not job.is_lora else _lora_params(spec, job)
        grad_elem = 4 if job.precision == "mixed" else 2
        grads = trainable * grad_elem / (tp * pp)
        params = spec.params_total() * 2 / (tp * pp)
        tokens_per_step = job.micro_batch * job.seq * job.grad_accum
        dp_step = comm.dp_bytes_per_step(grads, params, dp, job.shard)
        dp_b = dp_step / tokens_per_step
    cards_used = tp * pp * dp
    crosses_tp = machines > 1 and tp > per_machine
    crosses_dp = machines > 1 and not crosses_tp
    box_bw, box_label = box_link(machine, min(cards_used, per_machine))
    nic_total, nic_label = nic_gbps(machine)
    nic_bw = None if nic_total is None else nic_total / per_machine
    paths = []
    if tp > 1:
        paths.append(("network" if crosses_tp else "card links", "tensor parallel", tp_b))
    if dp_b:
        paths.append(("network" if crosses_dp else "card links", "data parallel", dp_b))
    if not paths:
        return None
    resource = "network" if any(r == "network" for r, _, _ in paths) else "card links"
    peaks = [a.bf16_dense_tflops for a in machine.accelerators]
    peak = None if not peaks or any(x is None for x in peaks) else min(peaks)
    out = {
        "resource": resource,
        "tp": tp,
        "dp": dp,
        "machines": machines,
        "bytes_per_token": {what: round(b) for _, what, b in paths},
        "flops_per_token_per_card": fl_token,
        "mfu": mfu,
        "card_bf16_tflops": peak,
        "path": nic_label if resource == "network" else box_label,
        "link_gbps_per_card": nic_bw if resource == "network" else box_bw,
        "basis": "prefill (compute-bound)" if not training else "training step",
        "source": "ledger/comm.py: Megatron-LM 2 (+2) all-reduces per layer, ring 2(n-1)/n, "
        "ZeRO 2x / 3x (n-1)/n per step, 2N / 6N / 8N FLOPs per token, MFU assumed "
        f"{mfu:.0%}",
    }
    total_b = sum(b for _, _, b in paths)
    out["dp_bytes_per_step"] = round(dp_step)
    volume = []
    if tp > 1:
        volume.append(f"TP {tp_b / 1e6:,.2f} MB per token per card")
    if dp_step:
        volume.append(f"{'ZeRO-3/FSDP' if job.shard in ('zero3', 'fsdp', 'fsdp_hybrid') else 'DP'} "
                      f"sync {dp_step / 1e9:,.2f} GB per step per card")  # fmt: skip
    moves = ", ".join(volume)
    # GB/s of link each card needs per TFLOPS of its own peak, so that traffic = compute time
    need_per_tflops = total_b * 1e12 * mfu / fl_token / GB
    out["needed_gbps_per_card_tflops"] = need_per_tflops
    bw = {"network": nic_bw, "card links": box_bw}
    unknown = [r for r, _, _ in paths if bw[r] is None]
    if peak is not None:
        out["needed_gbps_per_card"] = need_per_tflops * peak
    if unknown or peak is None:
        missing = []
        if peak is None:
            missing.append("card bf16 peak TFLOPS unknown")
        if unknown:
            missing.append(out["path"])
        need = (
            f"needs {out['needed_gbps_per_card']:,.1f} GB/s per card"
            if peak is not None
            else f"needs {need_per_tflops:,.2f} GB/s per card for each TFLOPS of card peak"
        )
        reason = f"{resource}: {moves}; {need} to keep pace with compute; {'; '.join(missing)}"
        if peak is None:
            # the card peak above which the link would bind (ratio > 2): what is unknown matters
            # only if the real card is slower than this
            shares = (
                [(f"{bw[resource]:,.1f} GB/s per card", bw[resource])]
                if bw.get(resource) is not None
                else [(f"{g} GbE", g / 8 / per_machine) for g in ETHERNET_GBIT]
                if resource == "network"
                else []
            )
            if shares and not any(bw[r] is None for r, _, _ in paths if r != resource):
                edges = {k: RATIO_TIERS[-1][0] * v / need_per_tflops for k, v in shares}
                out["cannot_above_card_tflops"] = edges
                reason += "; cannot for any card faster than " + ", ".join(
                    f"{t:,.1f} TFLOPS at {k}" for k, t in edges.items()
                )
        out.update(tier="unknown", ratio=None, reason=reason)
        return out
    comm_s = sum(b / (bw[r] * GB) for r, _, b in paths)
    comp_s = comm.compute_seconds(fl_token, peak, mfu)
    ratio = comm_s / comp_s
    out.update(
        tier=_tier(ratio),
        ratio=round(ratio, 3),
        comm_seconds_per_token=comm_s,
        compute_seconds_per_token=comp_s,
        reason=(
            f"{resource}: {moves}; needs {out['needed_gbps_per_card']:,.1f} GB/s per card, "
            f"{'the NIC share gives' if resource == 'network' else 'the link gives'} "
            f"{out['link_gbps_per_card']:,.1f} GB/s ({out['path']}); traffic takes "
            f"{ratio:.2f}x the compute time"
        ),
    )
    return out


def _lora_params(spec: ModelSpec, job: TrainJob) -> int:
    from nodeledger.ledger import model_state

    return model_state.trainable_params(spec, job)
