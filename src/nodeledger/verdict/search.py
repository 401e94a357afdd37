"""Search the layouts (TP / sharding / micro-batch / checkpointing; serving TP and KV dtype)
that fit, and rank them.

Ranking is a stated preference order, not a throughput model:
  training: most tokens per optimizer step across the box (micro_batch x seq x dp), then the
            least recomputation (none < selective < full), then the lowest sharding stage, then
            the lowest TP (each of these costs communication or compute);
  serving:  most concurrent sequences across the box at the requested context with every
            card in the "fits" tier, keeping the lifeboat card free (replicas = (cards -
            lifeboat) // cards per replica), then the lowest TP.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from nodeledger.errors import InputError
from nodeledger.ledger.jobs import Parallel, ServeJob, TrainJob
from nodeledger.machine.profile import MachineProfile
from nodeledger.model.spec import ModelSpec
from nodeledger.verdict.fit import _largest, largest_serving, ledger_for, verdict_of


def _tier(spec, job, n: int, machine) -> str:
    return verdict_of(ledger_for(spec, dataclasses.replace(job, concurrency=n), machine)).tier


CKPT_COST = {"none": 0, "selective": 1, "full": 2}
SHARD_ORDER = {"none": 0, "zero1": 1, "zero2": 2, "zero3": 3}


@dataclass
class Layout:
    options: str
    tier: str
    score: tuple
    peak_card_bytes: int
    host_bytes: int
    detail: str


def _train_layouts(job: TrainJob, cards: int):
    for tp in (1, 2, 4, 8):
        for dp in range(1, cards // tp + 1):
            for shard in ("none", "zero1", "zero2", "zero3"):
                if shard != "none" and dp == 1:
                    continue
                for mb in (1, 2, 4, 8, 16, 32):
                    for ckpt in ("none", "selective", "full"):
                        yield dataclasses.replace(
                            job, micro_batch=mb, checkpointing=ckpt, shard=shard, offload="none",
                            parallel=Parallel(tp=tp, pp=1, dp=dp),
                        )  # fmt: skip


def _train_score(cand: TrainJob) -> tuple:
    """The ranking of the module docstring, computed from the layout alone."""
    p = cand.parallel
    tokens = cand.micro_batch * cand.seq * p.dp
    return (tokens, -CKPT_COST[cand.checkpointing], -SHARD_ORDER[cand.shard], -p.tp)


def search_train(
    spec: ModelSpec, job: TrainJob, machine: MachineProfile, top: int = 5, lifeboat: int = 1
):
    """The ``top`` best layouts that fit, and how many layouts the search covers.

    The score is known before the ledger runs, so the candidates are tried best first (a stable
    sort: equal scores keep the enumeration order) and the search stops at the ``top``-th that
    fits: every layout not tried scores no better than the ones returned, so the answer is the
    one a full sweep would give.  ``tried`` counts the layouts covered (all candidates)."""
    cards = max(1, len(machine.accelerators) - lifeboat)
    candidates = sorted(_train_layouts(job, cards), key=_train_score, reverse=True)
    found: list[Layout] = []
    for cand in candidates:
        if len(found) >= top:
            break
        try:
            lg = ledger_for(spec, cand, machine)
        except InputError:
            continue
        v = verdict_of(lg)
        if v.tier != "fits":
            continue
        p = cand.parallel
        score = _train_score(cand)
        opts = (f"--tp {p.tp} --dp {p.dp} --shard {cand.shard} --micro-batch {cand.micro_batch} "
                f"--checkpointing {cand.checkpointing}")  # fmt: skip
        card = max(c.total_bytes for c in lg.cards)
        found.append(
            Layout(opts, v.tier, score, card, lg.host.peak_bytes, f"{score[0]:,} tokens per step")
        )
    return found, len(candidates)


def search_serve(
    spec: ModelSpec, job: ServeJob, machine: MachineProfile, top: int = 5, lifeboat: int = 1
):
    cards = max(1, len(machine.accelerators) - lifeboat)
    found: list[Layout] = []
    tried = 0
    for tp in (1, 2, 4, 8):
        if tp > cards:
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
                if (
                    cand.engine == "hf"
                ):  # keep the card in the "fits" tier (<= 90 %), not at the edge
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
