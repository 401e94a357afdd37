"""Search the layouts (TP / sharding / micro-batch / checkpointing; serving TP and KV dtype)
that fit, and rank them.

Ranking is a stated preference order, not a throughput model:
  training: most tokens per optimizer step across the box (micro_batch x seq x dp), then the
            least recomputation (none < selective < full), then the lowest sharding stage, then
            the lowest TP and PP (each of these costs communication or compute), then mixed
            precision over pure bf16 (fp32 master weights), then the fused optimizer;
  serving:  most concurrent sequences across the box at the requested context with every
            card in the "fits" tier, keeping the lifeboat card free (replicas = (cards -
            lifeboat) // cards per replica), then the lowest TP.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from nodeledger.errors import InputError
from nodeledger.ledger import frameworks
from nodeledger.ledger.build import SERVE_ENGINES, card_capacity
from nodeledger.ledger.jobs import FRAMEWORK_SHARDS, Parallel, ServeJob, TrainJob, default_framework
from nodeledger.machine.profile import MachineProfile
from nodeledger.model.spec import ModelSpec
from nodeledger.verdict.fit import _largest, largest_serving, ledger_for, verdict_of


def _tier(spec, job, n: int, machine) -> str:
    return verdict_of(ledger_for(spec, dataclasses.replace(job, concurrency=n), machine)).tier


CKPT_COST = {"none": 0, "selective": 1, "full": 2}
TIER_ORDER = {"fits": 1, "tight": 0}


@dataclass
class Layout:
    options: str
    tier: str
    score: tuple
    peak_card_bytes: int
    host_bytes: int
    detail: str


def _divisors(n: int, most: int) -> list[int]:
    return [d for d in range(1, min(n, most) + 1) if n % d == 0]


def _train_layouts(spec: ModelSpec, job: TrainJob, cards: int):
    """Every layout on up to ``cards`` cards, as (score, tp, pp, dp, shard, precision,
    micro_batch, checkpointing): tp dividing the attention heads, pp dividing the layers (with
    --shard none / zero1 only, as the ledger requires), every dp from 1 to what is left (not
    only powers of two), each sharding stage the job's framework takes (no --framework:
    DeepSpeed's ZeRO stages and FSDP2's full sharding), precision (when not given), micro-batch
    and checkpointing.  Tuples, not jobs: the search builds a job only for what it tries."""
    heads = spec.num_attention_heads or 1
    tps = _divisors(heads, cards)
    pps = _divisors(max(1, spec.num_layers), min(cards, 4))
    if job.framework_source == "given":
        shards = FRAMEWORK_SHARDS[job.framework]
    else:
        shards = ("none", "zero1", "zero2", "zero3", "fsdp")
    given_fw = job.framework if job.framework_source == "given" else None
    precs = (job.precision,) if job.precision_source == "given" else ("bf16", "mixed")
    for tp in tps:
        for pp in pps:
            for dp in range(1, cards // (tp * pp) + 1):
                for shard in shards:
                    if (shard != "none" and dp == 1) or (pp > 1 and shard not in ("none", "zero1")):
                        continue
                    fw = given_fw or default_framework(shard)
                    for prec in precs:
                        if fw in ("deepspeed", "megatron") and prec == "mixed" and len(precs) > 1:
                            continue  # the same layout as their bf16 mode
                        for mb in (1, 2, 4, 8, 16, 32):
                            for ckpt in ("none", "selective", "full"):
                                score = (mb * job.seq * dp, -CKPT_COST[ckpt], -frameworks.STAGE[shard],
                                         -tp, -pp, prec == "mixed")  # fmt: skip
                                yield (score, tp, pp, dp, shard, prec, mb, ckpt)


def _state_exceeds(spec: ModelSpec, cand: TrainJob, capacity: int | None) -> bool:
    """The model state alone (the framework layout's bytes per parameter / tp / pp) is more
    than a card: the layout cannot fit whatever the activations (a bound; the ledger is not
    asked)."""
    if capacity is None or cand.is_lora or cand.ep > 1:  # experts split by ep: the ledger decides
        return False
    lay = frameworks.layout(cand)
    per = lay.state_bytes_per_param(frameworks.STAGE[cand.shard], cand.parallel.dp)
    return per * spec.params_total() / (cand.parallel.tp * cand.parallel.pp) > capacity


def _with_fused(cand: TrainJob) -> TrainJob | None:
    """The candidate stepping with the fused optimizer (no state-sized temporaries), when its
    implementation was a default and PyTorch's optimizer has a fused one."""
    if cand.optimizer_impl_source == "given" or cand.optimizer_impl == "fused":
        return None
    if cand.optimizer not in ("adamw", "sgd"):
        return None
    return cand.rechoose(optimizer_impl="fused")


def search_train(
    spec: ModelSpec, job: TrainJob, machine: MachineProfile, top: int = 5, lifeboat: int = 1
):
    """The ``top`` best layouts that fit (tier "fits"), then the best ``top`` that are tight
    (marked), and how many layouts the search covers.

    The score is known before the ledger runs, so the candidates are tried best first (a stable
    sort: equal scores keep the enumeration order) and the search stops once ``top`` layouts
    fit: every layout not tried scores no better than the ones returned, so the answer is the
    one a full sweep would give (the tight ones listed are those met on the way, each re-checked
    by the ledger).  ``tried`` counts the layouts covered (all candidates)."""
    cards = max(1, len(machine.accelerators) - lifeboat)
    candidates = sorted(_train_layouts(spec, job, cards), key=lambda c: c[0], reverse=True)
    found: list[Layout] = []
    tight: list[Layout] = []
    capacity = card_capacity(machine, len(machine.accelerators))
    # whether the model state alone exceeds a card depends on the layout, not on the
    # micro-batch or the checkpointing: judged once per layout
    state_over: dict[tuple, bool] = {}
    for score, tp, pp, dp, shard, prec, mb, ckpt in candidates:
        if len(found) >= top:
            break
        if state_over.get((tp, pp, dp, shard, prec)):
            continue
        try:
            cand = job.rechoose(micro_batch=mb, checkpointing=ckpt, shard=shard, offload="none",
                                precision=prec, parallel=Parallel(tp=tp, pp=pp, dp=dp))  # fmt: skip
        except InputError:
            continue
        over = state_over.setdefault(
            (tp, pp, dp, shard, prec), _state_exceeds(spec, cand, capacity)
        )
        if over:
            continue
        try:
            lg = ledger_for(spec, cand, machine)
            v = verdict_of(lg)
            fused = _with_fused(cand) if v.tier != "fits" else None
            if fused is not None:  # the same layout without the optimizer's temporaries
                lg2 = ledger_for(spec, fused, machine)
                v2 = verdict_of(lg2)
                if TIER_ORDER.get(v2.tier, -1) > TIER_ORDER.get(v.tier, -1):
                    cand, lg, v = fused, lg2, v2
        except InputError:
            continue
        if v.tier not in TIER_ORDER or (v.tier == "tight" and len(tight) >= top):
            continue
        p = cand.parallel
        opts = (f"--tp {p.tp}" + (f" --pp {p.pp}" if p.pp > 1 else "") + f" --dp {p.dp} --shard {cand.shard} "
                f"--micro-batch {cand.micro_batch} --checkpointing {cand.checkpointing} "
                f"--optimizer-impl {cand.optimizer_impl} --precision {cand.precision}"
                + (f" --ep {cand.ep}" if cand.ep > 1 else "")
                + (f" --virtual-pipeline {cand.virtual_pipeline}" if cand.virtual_pipeline > 1 else "")
                + (" --fp8" if cand.fp8 else "") + (" --fused-kernels" if cand.fused_kernels else "")
                + f" (framework {cand.framework})")  # fmt: skip
        card = max(c.total_bytes for c in lg.cards)
        lay = Layout(opts, v.tier, score, card, lg.host.peak_bytes, f"{score[0]:,} tokens per step")
        (found if v.tier == "fits" else tight).append(lay)
    return found + tight, len(candidates)


def search_serve(
    spec: ModelSpec, job: ServeJob, machine: MachineProfile, top: int = 5, lifeboat: int = 1
):
    cards = max(1, len(machine.accelerators) - lifeboat)
    found: list[Layout] = []
    tried = 0
    for tp in (1, 2, 4, 8):
        if tp > cards or (job.dp_attention and tp < 2):  # DP attention spans 2+ TP ranks
            continue
        for kv in ("bf16", "fp8"):
            cand = dataclasses.replace(
                job, parallel=Parallel(tp=tp), kv_dtype=kv, concurrency=1, replicas=1
            )
            tried += 1
            try:
                per_replica = (
                    largest_serving(spec, cand, machine)["max_concurrency_at_context"] or 0
                )
                if per_replica < 1:
                    continue
                if not SERVE_ENGINES[cand.engine].preallocates_pool:
                    # a pool that grows with the batch: keep the card in the "fits" tier
                    # (<= 90 %), not at the edge
                    per_replica = _largest(
                        lambda n, c=cand: _tier(spec, c, n, machine) == "fits", 1, per_replica
                    )
                    if per_replica < 1:
                        continue
                cand = dataclasses.replace(cand, concurrency=per_replica)
                lg = ledger_for(spec, cand, machine)
            except InputError:
                continue
            v = verdict_of(lg)
            if v.tier != "fits":
                continue
            replicas = cards // tp
            total = per_replica * replicas
            score = (total, -tp, kv == "bf16")
            opts = f"--tp {tp} --replicas {replicas} --kv-dtype {kv} --concurrency {per_replica}"
            card = max(c.total_bytes for c in lg.cards)
            found.append(Layout(opts, v.tier, score, card, lg.host.peak_bytes,
                                f"{total:,} sequences of {job.context:,} tokens on {replicas * tp} cards"))  # fmt: skip
    found.sort(key=lambda x: x.score, reverse=True)
    return found[:top], tried
