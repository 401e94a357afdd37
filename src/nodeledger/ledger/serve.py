"""Serving ledgers: ``resolve_job`` (an engine's defaults for the release and card, once) and
``serve_ledger``, through the registry of engines (``SERVE_ENGINES``: hf, vllm, sglang; one
module each: serve_hf.py, serve_vllm.py, serve_sglang.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from dataclasses import fields as dataclass_fields
from math import ceil

from nodeledger.ledger import kv_cache as kv
from nodeledger.ledger import runtime as rt
from nodeledger.ledger.core import (
    CardCall,
    Item,
    Ledger,
    _host,
    _process_items,
    _serve_scheme,
    card_capacity,
    check_parallel,
    eager_only_note,
    weights_share_bytes,
)
from nodeledger.ledger.dims import dims_of
from nodeledger.ledger.jobs import JobError, ResolvedServeJob, ServeJob
from nodeledger.ledger.serve_hf import _hf_engine_card, _resolve_hf
from nodeledger.ledger.serve_sglang import _resolve_sglang, _sglang_card
from nodeledger.ledger.serve_vllm import _resolve_vllm, _vllm_card, vllm_weights_as_loaded
from nodeledger.ledger.weights import (
    tensor_bytes,
    weight_bytes,
)
from nodeledger.machine.profile import MachineProfile
from nodeledger.model.spec import ModelSpec
from nodeledger.units import gib_num


def resolve_job(job: ServeJob, machine: MachineProfile, spec: ModelSpec | None = None):
    """(job, settings): the serve job with the engine's defaults for this release and card
    filled in (ledger/engines.py ``resolve_serve_job``), as a ``ResolvedServeJob`` that carries
    its settings; a job already resolved for these options and this machine is returned as it
    is (resolved once).  One resolved for other options or another machine is resolved afresh
    from the job as given, with the options changed since applied."""
    cards = (
        machine.name,
        tuple((a.vendor, a.product, a.memory_bytes) for a in machine.accelerators),
    )
    names = [f.name for f in dataclass_fields(ServeJob)]
    if isinstance(job, ResolvedServeJob):
        if job.resolved_as == (job.options(), cards):
            return job, job.settings
        before = dict(zip(names, job.resolved_as[0], strict=True)) if job.resolved_as else {}
        changed = {n: getattr(job, n) for n in names if getattr(job, n) != before.get(n)}
        job = replace(job.given, **changed) if job.given is not None else job
    given = ServeJob(**{n: getattr(job, n) for n in names})
    done, settings = SERVE_ENGINES[job.engine].resolve(given, machine, spec)
    out = ResolvedServeJob(**{n: getattr(done, n) for n in names}, settings=settings, given=given)
    return replace(out, resolved_as=(out.options(), cards)), settings


def serve_ledger(
    spec: ModelSpec,
    job: ServeJob,
    machine: MachineProfile,
    defaults: rt.RuntimeDefaults = rt.DEFAULTS,
) -> Ledger:
    """Serving: weights / (tp x pp) per card plus the engine's KV cache and transients
    (``_hf_card`` for transformers generate(), ``_vllm_card`` for vLLM); host RAM holds the
    processes and the checkpoint's page cache."""
    tp, pp = job.parallel.tp, job.parallel.pp
    cards_per_replica = tp * pp
    check_parallel(spec, tp, pp, cards_per_replica * job.replicas, machine)
    job, engine_settings = resolve_job(job, machine, spec)
    if spec.max_position_embeddings and job.context > spec.max_position_embeddings:
        raise JobError(
            f"--context {job.context:,} exceeds the model's max_position_embeddings "
            f"{spec.max_position_embeddings:,} (config.json); vLLM refuses such a max_model_len "
            "too — extend the config's rope_scaling first if the model supports it"
        )
    dims = dims_of(spec)
    scheme = _serve_scheme(spec, job.dtype)
    wb = weight_bytes(spec, scheme)
    checkpoint_bytes = wb.total_bytes
    engine = SERVE_ENGINES[job.engine]
    weights_bytes, weights_note = engine.weights(spec, job, machine, scheme, wb, dims)
    kv_dtype_bytes = kv.KV_DTYPE_BYTES[job.kv_dtype]
    kv_split = kv.kv_split_across_tp(spec, tp) * pp
    if job.dp_attention:
        # SGLang --enable-dp-attention: every TP rank holds the attention weights whole (its own
        # requests' attention runs on it alone) and the KV of its own requests, all heads
        attn = sum(tensor_bytes(t, scheme) for t in spec.tensors if t.part == "attention")
        weights_bytes += ceil(attn * (1 - 1 / tp) / pp)
        weights_note = (weights_note + "; " if weights_note else "") + (
            f"attention weights whole on each rank (DP attention): + {gib_num(attn * (1 - 1 / tp) / pp, 2)} GiB"
        )
        kv_split = pp
    capacity = card_capacity(machine, cards_per_replica * job.replicas)
    communicators = rt.serving_communicators(cards_per_replica)
    notes: list[str] = [engine_settings["assumed"]] if engine_settings.get("assumed") else []
    extras: dict = {}
    cards = list(range(cards_per_replica * job.replicas))
    card, extras = engine.card(CardCall(spec, job, dims, scheme, weights_bytes, kv_split,
                                        kv_dtype_bytes, capacity, communicators, cards, defaults,
                                        machine, weights_note))  # fmt: skip
    notes.extend(extras.pop("notes", []))
    if "engine" in extras:
        extras["engine"]["settings"] = engine_settings
    host_items = _process_items(cards_per_replica * job.replicas)
    host_items.append(
        Item(
            "page cache of the checkpoint while loading",
            checkpoint_bytes,
            "safetensors are mmap'd: the file passes through the page cache once per host (shared by ranks)",
            reclaimable=True,
        )
    )
    if engine.runs_transformers and (note := eager_only_note(spec, job.attention)):
        notes.append(note)
    return Ledger("serve", [card], _host(host_items, machine), notes, extras)


def _share_weights(spec, job, machine, scheme, wb, dims) -> tuple[int, str]:
    """Weights / (tp x pp) per card, the largest pipeline stage's (weights_share_bytes)."""
    weights_bytes, note = weights_share_bytes(spec, wb, job.parallel.tp, job.parallel.pp)
    return weights_bytes, note if job.parallel.pp > 1 else ""


# -- the engines, registered by name -------------------------------------------------------


@dataclass(frozen=True)
class ServeEngineLedger:
    """One serving engine's memory side, registered by name: how its defaults are resolved for
    the release and card, how its weights land on a card, the card ledger it builds, and whether
    it runs transformers' own modules (whose attention path the eager-only note names), whether
    it preallocates its KV pool at start-up (the pool, not the card, then bounds concurrency)."""

    name: str
    resolve: Callable
    weights: Callable
    card: Callable
    runs_transformers: bool = False
    preallocates_pool: bool = False
    pool_criterion: str = ""  # what bounds the sequences the pool holds, beyond their KV


SERVE_ENGINES: dict[str, ServeEngineLedger] = {
    "hf": ServeEngineLedger(
        "hf", _resolve_hf, _share_weights, _hf_engine_card, runs_transformers=True
    ),
    "vllm": ServeEngineLedger(
        "vllm",
        _resolve_vllm,
        vllm_weights_as_loaded,
        _vllm_card,
        preallocates_pool=True,
        pool_criterion=" (whole blocks per KV group; max_num_seqs caps concurrency)",
    ),
    "sglang": ServeEngineLedger(
        "sglang",
        _resolve_sglang,
        _share_weights,
        _sglang_card,
        preallocates_pool=True,
    ),
}
