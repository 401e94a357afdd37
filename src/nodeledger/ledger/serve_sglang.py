"""The SGLang serving card: mem_fraction_static's pool, its graphs and what stays outside."""

from __future__ import annotations

from math import ceil

from nodeledger.ledger import activations as act
from nodeledger.ledger import engines as eng
from nodeledger.ledger import kv_cache as kv
from nodeledger.ledger import runtime as rt
from nodeledger.ledger.core import (
    CardCall,
    CardLedger,
    Item,
    _nccl_item,
    _runtime_total,
    card_capacity,
)
from nodeledger.ledger.jobs import ServeJob
from nodeledger.machine.profile import MachineProfile
from nodeledger.model.spec import ModelSpec
from nodeledger.units import GiB, gib_num


def _resolve_sglang(job: ServeJob, machine: MachineProfile, spec: ModelSpec | None):
    capacity = card_capacity(machine, job.parallel.tp * job.parallel.pp * job.replicas)
    mla = spec is not None and any(a.kind == "mla" for a in spec.attention)
    return eng.resolve_sglang(job, capacity, mla)


def _sglang_card(c: CardCall) -> tuple[CardLedger, dict]:
    # long: SGLang's ledger: its pool sizing (profile_max_num_token), then the items and what lies outside torch
    """SGLang (``ModelRunner.profile_max_num_token``): the free memory before the weights
    (card total as torch reports it - CUDA context - NCCL) x mem_fraction_static holds the
    weights and the KV pool; activations, the sampler and CUDA graphs must fit in the rest,
    which SGLang does not profile.  Tokens: rest // cell size (one token's K and V over all
    layers on this card)."""
    (spec, job, dims, _, weights_bytes, kv_split, kv_dtype_bytes, capacity, communicators, cards,
     defaults, machine, weights_how) = c.parts()  # fmt: skip
    tp = job.parallel.tp
    notes: list[str] = []
    if state := eng.state_layers(spec):
        notes.append(
            f"{len(state)} Mamba-2 / Gated DeltaNet layers: SGLang keeps their per-sequence state "
            "in a separate pool (its mamba cache) that this ledger does not size: the KV pool "
            "and the concurrency below leave it out"
        )
    sg = eng.data()["sglang"]
    total, total_src = _runtime_total(machine, capacity)
    context = int(sg["context_gib"] * GiB)
    nccl = rt.nccl_bytes(communicators, defaults) if communicators else 0
    mfs = job.mem_fraction_static
    free_before = None if total is None else total - context - nccl
    pool = None if free_before is None else eng.sglang_kv_bytes(free_before, weights_bytes, mfs)
    cell = kv.paged_page_bytes_per_layer(spec, 1, kv_dtype_bytes, kv_split) * sum(
        1 for a in spec.attention if a.kind != "linear"
    )
    tokens = None if pool is None or cell <= 0 else max(0, int(pool // cell))
    chunk = job.max_num_batched_tokens
    forward = ceil(act.inference_layer_transient_bytes(dims, chunk, transformers=False) / tp)
    _chunk_tier, max_bs = eng.sglang_tier(capacity, tp) if capacity else (chunk, 256)
    graphs = (
        eng.cuda_graph_bytes(len(eng.sglang_decode_graph_sizes(max_bs)), dims.layers)
        if job.cuda_graphs
        else 0
    )
    reserve = None if free_before is None else free_before - int(free_before * mfs)
    extras: dict = {"engine": {
        "name": "sglang", "version": job.engine_version, "family": "sglang", "mirrors": sg["source"],
        "card_total_bytes": total, "card_total_source": total_src, "free_before_weights_bytes": free_before,
        "mem_fraction_static": mfs, "chunked_prefill_size": chunk, "weights_bytes": weights_bytes,
        "kv_available_bytes": pool, "reserve_bytes": reserve, "forward_peak_bytes": forward,
        "cuda_graph_bytes": graphs, "cuda_graph_max_bs": max_bs,
    }, "kv_pool_unclamped_bytes": pool, "kv_bytes_per_token_per_card": round(cell)}  # fmt: skip
    per_seq = cell * job.context
    # DP attention: each of the tp ranks holds the KV of its own requests, so the replica holds
    # tp pools (SGLang dp_size = tp_size; the scheduler spreads requests over the ranks)
    ranks = tp if job.dp_attention else 1
    if pool is not None:
        seqs = int((tokens or 0) // job.context) * ranks
        extras.update(kv_pool_bytes=max(pool, 0), kv_pool_tokens=(tokens or 0) * ranks,
                      max_concurrency_printed=(tokens or 0) * ranks / job.context,
                      max_concurrency=seqs,
                      max_context_at_concurrency=(tokens or 0) // -(-(job.concurrency or 1) // ranks))  # fmt: skip
        if ranks > 1:
            notes.append(f"DP attention: {ranks} ranks each hold the KV of their own requests "
                         f"({tokens or 0:,} tokens per rank, {(tokens or 0) * ranks:,} per replica)")  # fmt: skip
        on_rank = -(-(job.concurrency or 1) // ranks)  # the busiest rank's sequences
        if pool <= 0 or (job.concurrency and on_rank * per_seq > pool):
            extras["kv_shortfall"] = (
                f"SGLang's KV pool holds {gib_num(max(pool, 0), 2)} GiB per card ({tokens or 0:,} tokens); "
                f"{on_rank} sequence(s) x {job.context:,} tokens on a card need {gib_num(on_rank * per_seq, 2)} GiB"
            )
        if reserve is not None and forward + graphs > reserve:
            notes.append(
                f"SGLang leaves {gib_num(reserve, 2)} GiB outside its static pool (1 - mem_fraction_static {mfs:g}); "
                f"a {chunk:,}-token prefill ({gib_num(forward, 2)} GiB) and CUDA graphs ({gib_num(graphs, 2)} GiB) "
                "need more: lower --mem-fraction-static or --max-num-batched-tokens (chunked_prefill_size)"
            )
    else:
        notes.append("card memory unknown: SGLang's KV pool cannot be sized")
    items = [
        Item("weights", weights_bytes, f"model show weight bytes, {weights_how or '/ tp'}"),
        Item(f"KV cache pool ({job.kv_dtype}, mem_fraction_static {mfs:g})", max(pool or 0, 0),
             f"free before the weights x mem_fraction_static - weights ({total_src} - context - NCCL)"),
        Item(f"prefill activations ({chunk:,}-token chunk)", forward,
             "activations.inference_layer_transient_bytes(chunked_prefill_size) / tp; outside the static pool"),
    ]  # fmt: skip
    outside = [Item("CUDA context", context, sg["context_source"], torch=False)]
    if nccl:
        outside.append(_nccl_item(communicators, defaults))
    if graphs:
        outside.append(Item(f"CUDA graphs (decode, batch sizes up to {max_bs})", graphs,
                            "graphs x layers x the per-graph-layer figure of engines.toml (vLLM logs)", torch=False))  # fmt: skip
    torch_total = sum(i.bytes for i in items)
    card = CardLedger(cards, items + outside, torch_total, torch_total + sum(i.bytes for i in outside),
                      total if total is not None else capacity, "steady", {"steady": torch_total})  # fmt: skip
    extras["notes"] = notes
    return card, extras
