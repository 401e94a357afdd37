"""Verdicts on a ledger: fits / tight / cannot per resource, the binding resource, and what
would fit instead (each suggestion re-checked by the ledger itself).

Margins for "tight" (documented in docs/reference.md):
  card memory: used > 90 % of the card's memory (the allocator, fragmentation and run-to-run
               variance eat the last 10 %).  A serving engine (vLLM, SGLang) takes a fixed
               share of the card by design (gpu_memory_utilization, mem_fraction_static) and
               fills it with its KV pool: its card is judged by what the job needs inside that
               budget — cannot when the budget and what it leaves outside exceed the card or
               the requested sequences do not fit the pool, tight when they fill more than 90 %
               of the pool, else fits;
  host RAM:    used > 50 % of RAM: another job of the same size would not fit beside it
               (field notes: host RAM is the machine's shortest plank; "a 62 GB checkpoint can
               take half the host RAM in one copy" is its example of tight, and rule 1 is never
               to run two such loads at once).  "used" is what the job's processes hold; the
               page cache a load fills is evictable and shown beside it, never counted.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from nodeledger.errors import InputError, NodeledgerError
from nodeledger.ledger.build import (
    SERVE_ENGINES,
    Ledger,
    card_capacity,
    load_ledger,
    resolve_job,
    serve_ledger,
    train_ledger,
)
from nodeledger.ledger.jobs import ENGINE_NAMES, LoadJob, ServeJob, TrainJob
from nodeledger.ledger.weights import config_scheme
from nodeledger.machine.profile import MachineProfile
from nodeledger.model.spec import ModelSpec
from nodeledger.units import count, gib_num

TIGHT = {"card memory": 0.90, "host RAM": 0.50}
TIERS = ("fits", "tight", "cannot")


@dataclass
class ResourceVerdict:
    resource: str
    used_bytes: int
    capacity_bytes: int | None
    tier: str  # fits / tight / cannot / unknown
    headroom_bytes: int | None
    headroom_pct: float | None


@dataclass
class Verdict:
    tier: str
    binding: str | None
    resources: list[ResourceVerdict]
    reason: str
    suggestions: list[dict] = field(default_factory=list)


@dataclass
class FitResult:
    ledger: Ledger
    verdict: Verdict
    job_options: dict = field(
        default_factory=dict
    )  # every option the ledger used, defaults included


_ENGINE_FIELDS = {
    "hf": {"new_tokens", "experts", "ssm_kernels"},
    "vllm": {"engine_version", "gpu_memory_utilization", "block_size", "block_size_asked",
             "max_num_batched_tokens", "max_num_seqs", "cuda_graphs", "prefix_caching"},
    "sglang": {"engine_version", "mem_fraction_static", "max_num_batched_tokens", "cuda_graphs"},
}  # fmt: skip


def job_options(job) -> dict:
    """The options the ledger used; a serve job lists only its own engine's settings."""
    d = dataclasses.asdict(job)
    d.pop("settings", None)  # a resolved serve job's sources (shown apart, as engine settings)
    d.pop("resolved_as", None)
    d.pop("given", None)
    if isinstance(job, ServeJob):
        mine = _ENGINE_FIELDS.get(job.engine, set())
        for k in set().union(*_ENGINE_FIELDS.values()) - mine:
            d.pop(k, None)
        if d.get("block_size_asked") is None:  # vLLM kept the block asked (not a hybrid)
            d.pop("block_size_asked", None)
    # at their defaults these two say nothing a model without such layers needs: the path taken
    # is named where it counts (the activations' source, the engine's mamba_cache_mode)
    if d.get("ssm_kernels") == "auto":
        d.pop("ssm_kernels")
    if "prefix_caching" in d and d["prefix_caching"] is None:
        d.pop("prefix_caching")
    if not isinstance(job, ServeJob) and d.get("experts") == "grouped_mm":
        d.pop("experts")  # training's default experts path, shown when another is asked
    d.update(d.pop("parallel", None) or {})
    host = d.pop("host", None)
    if host and d.get("micro_batch") is not None:
        d.update(workers=host["workers"], prefetch=host["prefetch"])
    if not getattr(job, "is_lora", False):
        for k in ("lora_targets", "rank", "qlora", "adapter_dtype"):
            d.pop(k, None)
    for k in ("framework_source", "precision_source"):  # the verdict line says how they were chosen
        d.pop(k, None)
    return d


def ledger_for(spec: ModelSpec, job, machine: MachineProfile) -> Ledger:
    if isinstance(job, ServeJob):
        return serve_ledger(spec, job, machine)
    if isinstance(job, TrainJob):
        return train_ledger(spec, job, machine)
    return load_ledger(spec, job, machine)


def _judge(resource: str, used: int, cap: int | None) -> ResourceVerdict:
    if cap is None:
        return ResourceVerdict(resource, used, None, "unknown", None, None)
    head = cap - used
    ratio = used / cap
    tier = "cannot" if ratio > 1 else ("tight" if ratio > TIGHT[resource] else "fits")
    return ResourceVerdict(resource, used, cap, tier, head, round(100 * head / cap, 1))


def engine_budget_note(extras: dict) -> tuple[str | None, float | None]:
    """(the engine's by-design budget as the verdict names it, the share of its KV pool the
    requested sequences fill) for a vLLM / SGLang ledger; (None, None) for any other job."""
    eng = extras.get("engine")
    if not isinstance(eng, dict) or eng.get("name") not in ENGINE_NAMES:
        return None, None
    name = ENGINE_NAMES[eng["name"]]
    share = eng.get("gpu_memory_utilization", eng.get("mem_fraction_static"))
    knob = "gpu_memory_utilization" if "gpu_memory_utilization" in eng else "mem_fraction_static"
    of = "the card" if knob == "gpu_memory_utilization" else "the card's free memory"
    what = f"{name} reserves {share:g} of {of} by design ({knob})" if share else None
    fit_seqs = extras.get("max_concurrency_printed")
    asked = extras.get("concurrency")
    if not fit_seqs or not asked or fit_seqs <= 0:
        return what, None
    return what, asked / fit_seqs


def verdict_of(ledger: Ledger) -> Verdict:
    card = max(ledger.cards, key=lambda c: c.total_bytes)
    res = [_judge("card memory", card.total_bytes, card.capacity_bytes),
           _judge("host RAM", ledger.host.peak_bytes, ledger.host.capacity_bytes)]  # fmt: skip
    shortfall = ledger.extras.get("kv_shortfall")
    budget, pool_share = engine_budget_note(ledger.extras)
    if budget and res[0].tier == "tight":
        # the engine's own budget, not the 90 % line, decides: the pool is full by design
        by_max = ledger.extras.get("concurrency_source") == "max"
        res[0].tier = (
            "tight" if pool_share is not None and pool_share > 0.9 and not by_max else "fits"
        )
    if shortfall and res[0].tier != "unknown":
        res[0].tier = "cannot"  # vLLM: the requested sequences do not fit its KV pool
    known = [r for r in res if r.capacity_bytes]
    unknown = [r.resource for r in res if r.tier == "unknown"]
    if not known:
        return Verdict("unknown", None, res, "capacities unknown: no verdict")
    order = {"fits": 0, "tight": 1, "cannot": 2}
    worst = max(known, key=lambda r: (order[r.tier], r.used_bytes / r.capacity_bytes))
    tier = worst.tier
    if "card memory" in unknown and tier != "cannot":
        # the cards are what every job needs: with their memory unknown there is no "fits"
        tier = "unknown"
    gib = 2**30
    reason = (
        f"{worst.resource}: {worst.used_bytes / gib:.1f} GiB of {worst.capacity_bytes / gib:.1f} GiB "
        f"({100 * worst.used_bytes / worst.capacity_bytes:.0f} %)"
    )
    if worst.resource == "host RAM" and ledger.host.reclaimable_bytes:
        reason += f" + {ledger.host.reclaimable_bytes / gib:.1f} GiB evictable page cache"
    if shortfall:
        reason += f"; {shortfall}"
    elif budget and worst.resource == "card memory" and tier != "unknown":
        reason += f"; {budget}" + (
            f": the requested sequences fill {100 * pool_share:.1f} % of its KV pool"
            if pool_share is not None
            else ""
        )
    largest = ledger.extras.get("largest")
    if (
        ledger.job_kind == "serve"
        and largest
        and largest.get("max_concurrency_at_context") is not None
    ):
        reason += (
            f"; at most {count(largest['max_concurrency_at_context'], 'sequence')} of "
            f"{largest['context']:,} tokens fit per replica"
        )
    if unknown:
        reason += f"; {', '.join(unknown)} unknown: not judged"
    binding = worst.resource if tier != "unknown" else unknown[0]
    return Verdict(tier, binding, res, reason)


def _within(spec, job, machine) -> bool:
    """The job's busiest card stays within its memory (tier fits or tight)."""
    try:
        lg = ledger_for(spec, job, machine)
    except NodeledgerError:
        return False
    card = max(lg.cards, key=lambda c: c.total_bytes)
    return card.capacity_bytes is not None and card.total_bytes <= card.capacity_bytes


def _largest(ok, lo: int, hi: int) -> int:
    """Largest n in [lo, hi] with ok(n), assuming ok is monotone; lo - 1 if none."""
    if not ok(lo):
        return lo - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def largest_serving(spec: ModelSpec, job: ServeJob, machine: MachineProfile) -> dict:
    """The largest concurrency at the job's context and the largest context at its
    concurrency.  hf: binary search over the ledger (every card within its memory); vLLM: what
    its preallocated KV pool holds (capped by max_num_seqs).  Contexts are capped by the model's
    max_position_embeddings when the config gives it.  None = unknown (card memory unknown)."""
    b = job.concurrency or 1
    cap_ctx = spec.max_position_embeddings or (1 << 24)
    out = {
        "context": job.context,
        "concurrency": b,
        "max_position_embeddings": spec.max_position_embeddings,
    }
    if _capacity_unknown(job, machine):
        out.update(max_concurrency_at_context=None, max_context_at_concurrency=None,
                   criterion="card memory unknown")  # fmt: skip
        return out
    engine = SERVE_ENGINES[job.engine]
    if engine.preallocates_pool:
        lg = ledger_for(spec, dataclasses.replace(job, concurrency=1), machine)
        pool_tokens = lg.extras.get("kv_pool_tokens") or 0
        name = ENGINE_NAMES[job.engine]
        out.update(
            max_concurrency_at_context=lg.extras.get("max_concurrency") or 0,
            max_context_at_concurrency=min(cap_ctx, pool_tokens // b),
            criterion=f"sequences whose KV fits {name}'s preallocated pool" + engine.pool_criterion,
        )
        return out
    conc = _largest(
        lambda n: _within(spec, dataclasses.replace(job, concurrency=n), machine), 1, 1 << 16
    )
    ctx = _largest(
        lambda n: _within(spec, dataclasses.replace(job, context=n, concurrency=b), machine),
        job.new_tokens + 1,
        cap_ctx,
    )
    out.update(
        max_concurrency_at_context=max(conc, 0),
        max_context_at_concurrency=ctx if ctx > job.new_tokens else 0,
        criterion="busiest card's total_bytes <= its memory (tier fits or tight)",
    )
    return out


def _capacity_unknown(job, machine: MachineProfile) -> bool:
    n = job.parallel.tp * job.parallel.pp * getattr(job, "replicas", 1)
    return card_capacity(machine, n) is None


def fit(spec: ModelSpec, job, machine: MachineProfile, suggest: bool = True) -> FitResult:
    largest = None
    if isinstance(job, ServeJob):
        job, _ = resolve_job(job, machine, spec)
    if isinstance(job, ServeJob) and suggest:
        largest = largest_serving(spec, job, machine)
        if job.concurrency is None and largest["max_concurrency_at_context"]:
            job = dataclasses.replace(job, concurrency=largest["max_concurrency_at_context"])
    by_max = isinstance(job, ServeJob) and largest is not None and job.concurrency is not None
    by_max = by_max and largest.get("concurrency") != job.concurrency
    ledger = ledger_for(spec, job, machine)
    refuse_absurd(ledger, job, machine)
    if largest is not None:
        ledger.extras["largest"] = largest
    if isinstance(job, ServeJob):
        ledger.extras["concurrency"] = job.concurrency
        if by_max:
            ledger.extras["concurrency_source"] = "max"
    v = verdict_of(ledger)
    if suggest and v.tier in ("cannot", "tight"):
        v.suggestions = suggestions(spec, job, machine, v)
    opts = job_options(job)
    if "dtype" in opts and opts["dtype"] is None:  # the config's own scheme: say which, and why
        scheme = config_scheme(spec)
        opts.update(dtype=scheme.name, dtype_source=scheme.source)
    return FitResult(ledger, v, opts)


def flips(spec, job, machine: MachineProfile, tier: str) -> list[str]:
    """The defaulted choices that would change the verdict, each as "with OPTION: TIER": for a
    training job whose precision was the framework's default, the other precision.  Each is a
    ledger run of that variant (no suggestions)."""
    out = []
    if isinstance(job, TrainJob) and job.precision_source != "given" and not job.is_lora:
        other = "mixed" if job.precision == "bf16" else "bf16"
        try:
            alt = verdict_of(ledger_for(spec, job.rechoose(precision=other), machine))
        except InputError:
            alt = None
        if alt is not None and alt.tier != tier:
            out.append(f"with --precision {other}: {alt.tier.upper()}")
    return out


ABSURD_MACHINES = 100
# the options that size each kind of ledger item, named when one of them is absurd
_ITEM_OPTIONS = (("KV", "--concurrency / --context"), ("saved activations", "--micro-batch / --seq"),
                 ("loss", "--micro-batch / --seq"), ("transient", "--concurrency / --context"),
                 ("adapters", "--rank"), ("parameters", "--rank"), ("gradients", "--rank"),
                 ("optimizer", "--rank"))  # fmt: skip


def refuse_absurd(ledger: Ledger, job, machine: MachineProfile) -> None:
    """A job one card of which would need more than the card memory of ABSURD_MACHINES such
    machines is nonsense input, not a verdict: JobError naming the largest item and the options
    that size it (no job a user means to run is priced at 10^12 % of a card)."""
    total = sum(a.memory_bytes or 0 for a in machine.accelerators)
    if not total:
        return
    card = max(ledger.cards, key=lambda c: c.total_bytes)
    limit = ABSURD_MACHINES * total
    if card.total_bytes <= limit:
        return
    from nodeledger.ledger.jobs import JobError

    item = max(card.items, key=lambda i: i.bytes)
    opts = next((o for key, o in _ITEM_OPTIONS if key in item.name), "the job's sizes")
    raise JobError(
        f"{item.name} alone is {gib_num(item.bytes, 0)} GiB on one card, more than the card "
        f"memory of {ABSURD_MACHINES} {machine.name} machines ({gib_num(limit, 0)} GiB): not a "
        f"job to price; check {opts}"
    )


def _try(spec, job, machine, what: str) -> dict | None:
    try:
        lg = ledger_for(spec, job, machine)
    except NodeledgerError:
        return None
    v = verdict_of(lg)
    if v.tier != "fits":
        return None
    return {"change": what, "tier": v.tier, "reason": v.reason}


def _variant(job, **changes):
    """The job with changes, or None when the combination is not a valid job."""
    from nodeledger.ledger.jobs import JobError

    try:
        return dataclasses.replace(job, **changes)
    except JobError:
        return None


def _variants(job, machine: MachineProfile):
    n = len(machine.accelerators)
    p = getattr(job, "parallel", None)
    if isinstance(job, ServeJob):
        for tp in (2, 4, 8):
            if tp > p.tp and tp * p.pp * job.replicas <= n:
                yield f"--tp {tp}", _variant(job, parallel=dataclasses.replace(p, tp=tp))
        if job.kv_dtype != "fp8":
            yield "--kv-dtype fp8", _variant(job, kv_dtype="fp8")
        for dt in ("fp8", "int4"):
            yield f"--dtype {dt}", _variant(job, dtype=dt)
        if job.concurrency and job.concurrency > 1:
            yield (
                f"--concurrency {job.concurrency // 2}",
                _variant(job, concurrency=job.concurrency // 2),
            )
        if job.context > 2048:
            yield (
                f"--context {job.context // 2}",
                _variant(
                    job, context=job.context // 2, new_tokens=min(job.new_tokens, job.context // 4)
                ),
            )
    elif isinstance(job, TrainJob):
        if job.checkpointing != "full":
            yield "--checkpointing full", _variant(job, checkpointing="full")
        if job.micro_batch > 1:
            mb = job.micro_batch // 2
            yield (
                f"--micro-batch {mb} --grad-accum {job.grad_accum * 2}",
                _variant(job, micro_batch=mb, grad_accum=job.grad_accum * 2),
            )
        dp = n // (p.tp * p.pp)
        if dp > 1:
            for shard in ("zero2", "zero3", "fsdp"):
                if shard != job.shard:
                    yield (
                        f"--shard {shard} --dp {dp}",
                        _rechosen(job, shard=shard, parallel=dataclasses.replace(p, dp=dp)),
                    )
            for shard in ("zero3", "fsdp"):
                yield (
                    f"--shard {shard} --dp {dp} --checkpointing full",
                    _rechosen(job, shard=shard, checkpointing="full",
                              parallel=dataclasses.replace(p, dp=dp)),
                )  # fmt: skip
            # FSDP2's default is fp32 parameters: pure bf16 is a choice to name
            yield (
                f"--shard fsdp --dp {dp} --checkpointing full --precision bf16 (pure bf16 FSDP2: no fp32 master weights)",
                _rechosen(job, shard="fsdp", checkpointing="full", precision="bf16",
                          parallel=dataclasses.replace(p, dp=dp)),
            )  # fmt: skip
        if job.optimizer == "adamw":
            yield "--optimizer adamw8bit", _variant(job, optimizer="adamw8bit")
        if not job.is_lora:
            yield "--job lora --rank 16", _variant(job, rank=16)
            yield "--job qlora --rank 16", _variant(job, rank=16, qlora=True)
        if job.host.workers > 2:
            yield (
                f"--workers {job.host.workers // 2}",
                _variant(job, host=dataclasses.replace(job.host, workers=job.host.workers // 2)),
            )
    elif isinstance(job, LoadJob):
        if job.strategy == "every_rank" and job.ranks > 1:
            yield "--load-strategy rank0", _variant(job, strategy="rank0")
        yield "--load-strategy meta", _variant(job, strategy="meta")
        if job.format == "bin":
            yield "--format safetensors", _variant(job, format="safetensors")


def _rechosen(job, **changes):
    """job.rechoose(**changes), or None when the combination is not a valid job."""
    from nodeledger.ledger.jobs import JobError

    try:
        return job.rechoose(**changes)
    except JobError:
        return None


def suggestions(spec, job, machine, v: Verdict, limit: int = 5) -> list[dict]:
    out = []
    for what, variant in _variants(job, machine):
        if variant is None:
            continue
        r = _try(spec, variant, machine, what)
        if r is not None:
            out.append(r)
        if len(out) >= limit:
            break
    return out
