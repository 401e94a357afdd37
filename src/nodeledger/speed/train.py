"""Training step time and tokens/s per card (speed/terms.py numbers the formulas).

1. Compute per card per step: grad_accum micro-batches of the slowest pipeline stage, each the
   sum of its operators timed from the card's kernel table (speed/train_ops.py: GEMMs by
   shape, grouped experts, attention forward + backward, elementwise kernels eager or fused,
   the LM head and its fp32 loss, the recomputation, fp8 casts, the host's dispatch), + the
   optimizer step (memory-bound).  Without a kernel table (a card with no datasheet peak or
   bandwidth to move one by) the old bound: hardware FLOPs per token (3 x forward; 4 x with
   full recomputation: terms (2)) / (tp x pp) / (peak x a cited training efficiency).  LoRA /
   QLoRA: frozen weights need no weight gradient, so the backward costs one forward instead of
   two (Hu et al. 2021, "LoRA", 4.2).
2. The pipeline bubble (pp - 1) / (grad_accum x virtual_pipeline) of the compute (terms (6)).
3. Tensor parallel: 4 all-reduces per layer and micro-batch of micro_batch x seq x hidden bf16
   (2 forward, 2 backward; Megatron-LM), on the critical path: exposed in full (terms (7)).
4. Data parallel: the sync of one optimizer step (ledger/comm.py (4): DDP / ZeRO-1/2
   all-reduce the gradients; ZeRO-3 / FSDP all-gather the parameters twice and
   reduce-scatter the gradients) at the ring's bus bandwidth; it hides behind the backward
   (DDP, ZeRO-1/2: 2/3 of the compute) or the whole step (FSDP / ZeRO-3 prefetch); the rest
   is exposed (terms (7)).  Across machines the ring's bus bandwidth is the network's.
4b. Expert parallel (--ep): 4 all-to-alls per MoE layer and micro-batch (dispatch and combine,
   forward and backward) of the routed tokens' hidden states, exposed (no overlap modelled).
5. step = micro-batches x (1 + bubble) + optimizer + TP + EP all-to-alls + exposed DP;
   tokens/s per card = global tokens / step / cards.
"""

from __future__ import annotations

from nodeledger.ledger import model_state
from nodeledger.ledger.dims import dims_of
from nodeledger.ledger.jobs import TrainJob
from nodeledger.machine.profile import MachineProfile
from nodeledger.model.spec import ModelSpec
from nodeledger.speed import figures as F
from nodeledger.speed import hardware as H
from nodeledger.speed import operators as O
from nodeledger.speed import terms as T
from nodeledger.speed import train_ops as TO
from nodeledger.speed import work as W

SHARDED = ("zero3", "fsdp", "fsdp_hybrid")


def _fig(f) -> dict | None:
    return None if f is None else {"value": f.value, "unit": f.unit, "source": f.source}


def _matmul_params(spec: ModelSpec) -> int:
    """Training computes every token's logits: body + output projection (speed/work.py)."""
    return W.body_params(spec) + W.lm_head_params(spec)


def flops_per_token(spec: ModelSpec, job: TrainJob) -> float:
    """1.: hardware FLOPs per trained token."""
    attn = W.attention_flops_prompt(spec, job.seq) / job.seq
    n = _matmul_params(spec)
    if job.is_lora:
        fwd = T.dense_flops_per_token(n) + attn
        extra = fwd if job.checkpointing == "full" else 0.0
        return 2.0 * fwd + 6.0 * model_state.trainable_params(spec, job) + extra
    if job.checkpointing == "selective_op":  # the linears it does not keep, once more
        redo = TO.op_sac_recomputed_share(dims_of(spec)) * W.body_params(spec)
        extra = 0.0 if job.attention == "sdpa" else attn
        return T.train_flops_per_token(n, attn, "none") + 2.0 * redo + extra
    return T.train_flops_per_token(n, attn, job.checkpointing)


def model_flops_per_token(spec: ModelSpec, job: TrainJob) -> float:
    """MFU numerator (PaLM appendix B, with causal attention): the FLOPs the job needs without
    recomputation: 3 x forward; LoRA: forward + input gradients + the adapters' 6 N."""
    attn = W.attention_flops_prompt(spec, job.seq) / job.seq
    if job.is_lora:
        fwd = T.dense_flops_per_token(_matmul_params(spec)) + attn
        return 2.0 * fwd + 6.0 * model_state.trainable_params(spec, job)
    return T.train_flops_per_token(_matmul_params(spec), attn, "none")


def train_speed(spec: ModelSpec, job: TrainJob, machine: MachineProfile, machines: int = 1) -> dict:
    p = job.parallel
    tp, pp, dp = p.tp, p.pp, p.dp
    n_cards = tp * pp * dp
    per_machine = max(1, len(machine.accelerators))
    idx = [a.index for a in machine.accelerators]
    cards = idx[: min(n_cards, per_machine)]
    peak = F.card_peak(machine, cards)
    by = {a.index: a for a in machine.accelerators}
    product = by[cards[0]].product if cards else None
    hbm = F.card_hbm(machine, cards)
    ck = None if not cards else O.card_kernels(product, peak.value, hbm.value,
                                               machine.kernels.get(product))  # fmt: skip
    # the constant efficiency only where no kernel table can time the operators
    eff = None if ck is not None else H.efficiency("mfu_train", product)
    tokens_replica = job.micro_batch * job.seq * job.grad_accum
    tokens_step = tokens_replica * dp
    fl = flops_per_token(spec, job)
    out: dict = {
        "tokens_per_step": tokens_step,
        "cards": n_cards,
        "machines": machines,
        "flops_per_token": fl,
        "model_flops_per_token": model_flops_per_token(spec, job),
        "inputs": {"card_bf16_tflops": _fig(peak)},
        "source": "nodeledger.speed.train: "
        + (
            "operators from the kernel table (speed/train_ops.py)"
            if ck is not None
            else "compute at the training efficiency"
        )
        + " + pipeline bubble "
        "+ tensor-parallel all-reduces + exposed data-parallel sync; speed/terms.py",
    }
    # 3. TP traffic per micro-batch, 4. DP sync per step, 4b. expert all-to-all
    tp_bw, tp_alpha, crosses_tp = _tp_bandwidth(machine, tp, cards, per_machine, machines, out)
    dp_bw, dp_bytes = _dp_sync(spec, job, machine, cards, per_machine, machines, crosses_tp, out)
    ep_bw, ep_bytes = _expert_alltoall(spec, job, machine, cards, per_machine, out)
    if eff is not None:
        out["inputs"]["train_efficiency"] = _fig(eff)
    fp8_peak = None
    if job.fp8:  # an fp8 GEMM needs the card's fp8 mode: the table's fp8 rows move only to one
        fp8_peak = F.card_peak_fp8(machine, cards)
        out["inputs"]["card_fp8_tflops"] = _fig(fp8_peak)
    if job.offload in ("optimizer", "params"):
        out["optimizer_on_host"] = ("--offload: the optimizer step runs on the host's CPU Adam; "
                                    "its time is not modelled (left out of the step)")  # fmt: skip
    if job.attention != "sdpa":
        out["attention_bound"] = (f"--attention {job.attention}: timed at the fused SDPA's rate "
                                  "from the kernel table, a lower bound on its time")  # fmt: skip
    unknown = [x for x in (peak, eff, tp_bw, dp_bw, ep_bw, fp8_peak)
               if x is not None and x.value is None]  # fmt: skip
    out["unknown"] = [u.source for u in unknown]
    if unknown:
        out.update(step_s=None, tokens_per_s_per_card=None, binding=None)
        return out
    compute_s, opt_s = _compute_seconds(spec, job, ck, tokens_replica * fl / (tp * pp), peak,
                                        eff, out)  # fmt: skip
    bubble = T.pipeline_bubble_fraction(pp, job.grad_accum, job.virtual_pipeline)
    tp_s = 0.0
    if tp > 1:
        a = tp_alpha.value if tp_alpha is not None and tp_alpha.value is not None else 0.0
        buf = W.tp_allreduce_bytes(spec, job.micro_batch * job.seq)
        one = T.collective_seconds("all_reduce", buf, tp, tp_bw.value, a)
        layers_here = -(-spec.num_layers // pp)
        tp_s = 4 * layers_here * one * job.grad_accum
    if tp > 1 and (tp_alpha is None or tp_alpha.value is None):
        out["lower_bound"] = ("per-hop latency of the tensor-parallel all-reduces unknown: left "
                              "out, so the step time is a lower bound")  # fmt: skip
    dp_s = 0.0 if dp <= 1 else dp_bytes / (dp_bw.value * T.GBPS)
    ep_s = 0.0
    if ep_bw is not None:
        share = out.get("ep_cross_machine_share", (job.ep - 1) / job.ep)
        ep_s = ep_bytes * share / (ep_bw.value * T.GBPS)
    # the sync overlaps the forward / backward, not the optimizer step that waits for it
    hide = (compute_s - opt_s) if job.shard in SHARDED else (compute_s - opt_s) * 2 / 3
    dp_exposed = T.exposed_seconds(dp_s, hide)
    # the bubble idles the micro-batches' pipeline, not the optimizer step after it
    compute_step = compute_s + (compute_s - opt_s) * bubble
    step_s = compute_step + tp_s + dp_exposed + ep_s
    terms = {"compute": compute_step, "card links" if not machines > 1 else "network":
             tp_s + dp_exposed + ep_s}  # fmt: skip
    tps_card = tokens_step / step_s / n_cards
    out.update(
        compute_s=compute_step,  # with the bubble
        bubble_fraction=bubble,
        tp_s=tp_s,
        ep_alltoall_s=ep_s,
        dp_sync_s=dp_s,
        dp_exposed_s=dp_exposed,
        step_s=step_s,
        tokens_per_s_per_card=tps_card,
        tokens_per_s=tps_card * n_cards,
        mfu=out["model_flops_per_token"] * tps_card / (peak.value * T.TFLOPS),
        binding=max(terms, key=terms.get),
        comm_to_compute=(tp_s + dp_s) / compute_s,
    )
    return out


def _tp_bandwidth(machine: MachineProfile, tp: int, cards: list[int], per_machine: int,
                  machines: int, out: dict):  # fmt: skip
    """The tensor-parallel all-reduce's bus bandwidth and per-hop latency: over the card links,
    or over the network when TP spans machines; (bandwidth, latency, whether TP crosses)."""
    tp_cards = cards[:tp]
    crosses_tp = machines > 1 and tp > per_machine
    tp_bw = tp_alpha = None
    if tp > 1:
        if crosses_tp:
            tp_bw, _ = F.network_busbw(machine)
            tp_alpha = None
        else:
            tp_bw, tp_alpha, _ = F.busbw(machine, "all_reduce", tp_cards)
        out["inputs"]["tp_busbw_gbps"] = _fig(tp_bw)
    return tp_bw, tp_alpha, crosses_tp


def _dp_sync(spec: ModelSpec, job: TrainJob, machine: MachineProfile, cards: list[int],
             per_machine: int, machines: int, crosses_tp: bool, out: dict):  # fmt: skip
    """The data-parallel sync of one step: (its bus bandwidth, bytes per card)."""
    tp, pp, dp = job.parallel.tp, job.parallel.pp, job.parallel.dp
    dp_bw = None
    dp_bytes = 0.0
    if dp > 1:
        dp_bytes = model_state.dp_sync_bytes_per_step(spec, job)
        if machines > 1 and not crosses_tp:
            net, _ = F.network_busbw(machine)
            rings = max(1, min(tp * pp, per_machine))  # DP rings crossing the same NICs at once
            dp_bw = net if net.value is None or rings == 1 else F.Figure(
                net.value / rings, "GB/s", f"{net.source}, shared by the {rings} data-parallel "
                "rings (one per tp x pp position) that cross the machine boundary at once")  # fmt: skip
        else:  # ZeRO-3 / FSDP gather and scatter (no NVLS); DDP, ZeRO-1/2 all-reduce
            op = "all_gather" if job.shard in SHARDED and not job.is_lora else "all_reduce"
            dp_bw, _, _ = F.busbw(machine, op, cards)
        out["inputs"]["dp_busbw_gbps"] = _fig(dp_bw)
        out["dp_bytes_per_step_per_card"] = dp_bytes
    return dp_bw, dp_bytes


def _expert_alltoall(spec: ModelSpec, job: TrainJob, machine: MachineProfile, cards: list[int],
                     per_machine: int, out: dict):  # fmt: skip
    """Expert parallelism: each MoE layer's tokens go to their experts' cards and back
    (dispatch + combine), forward and backward: 4 all-to-alls of micro_batch x seq x top_k x
    hidden x 2 B per card, of which (ep - 1) / ep leaves the card; over the card links within
    a machine, over the NICs (shared by the machine's cards) for the part beyond it.
    (bandwidth, bytes per step per card)."""
    tp, pp = job.parallel.tp, job.parallel.pp
    ep_bw = None
    ep_bytes = 0.0
    if job.ep > 1 and spec.moe is not None:
        moe_here = -(-spec.moe.moe_layers // pp)
        # each TP rank dispatches its 1/tp share of the tokens (sequence parallel under MoE + TP)
        ep_bytes = (4 * moe_here * job.micro_batch * job.seq * spec.moe.top_k
                    * spec.hidden_size * 2 * job.grad_accum / tp)  # fmt: skip
        inside = min(job.ep, per_machine)
        ep_bw, _, _ = F.busbw(machine, "alltoall", cards[:inside])
        out["inputs"]["ep_alltoall_busbw_gbps"] = _fig(ep_bw)
        if job.ep > per_machine:
            net, _ = F.network_busbw(machine)
            out["inputs"]["ep_network_busbw_gbps"] = _fig(net)
            ep_bw = net if net.value is None or ep_bw.value is None else F.Figure(
                net.value / per_machine, "GB/s", f"{net.source}, shared by the machine's "
                f"{per_machine} cards")  # fmt: skip
            out["ep_cross_machine_share"] = (job.ep - per_machine) / job.ep
    return ep_bw, ep_bytes


def _compute_seconds(spec: ModelSpec, job: TrainJob, ck, flops_per_card: float, peak, eff,
                     out: dict) -> tuple[float, float]:  # fmt: skip
    """One step's compute on a card: the operators timed from the kernel table (the micro-
    batches and the optimizer step), else the FLOPs at the training efficiency;
    (seconds, of which the optimizer step)."""
    if ck is None:
        return T.compute_seconds(flops_per_card, peak.value, eff.value), 0.0
    mb = TO.micro_batch_seconds(spec, job, ck)
    opt_s = TO.optimizer_seconds(spec, job, ck)
    out["operators"] = {
        "micro_batch_s": mb["seconds"],
        "parts_s": {k: v for k, v in mb["parts"].items() if v},
        "optimizer_s": opt_s,
        "host_dispatch_s": mb["dispatch_s"],
        "host_bound": mb["host_bound"],
        "elementwise": mb["elementwise"],
        "kernel_table": ck.source,
    }
    return mb["seconds"] * job.grad_accum + opt_s, opt_s
