"""The vLLM serving card: its budget, the weights as loaded, the profile run's peak, the KV pool
per group (hybrid state blocks included), CUDA graphs and what stays outside the allocator.
"""

from __future__ import annotations

from dataclasses import replace
from math import ceil

from nodeledger.ledger import activations as act
from nodeledger.ledger import engines as eng
from nodeledger.ledger import kv_cache as kv
from nodeledger.ledger import runtime as rt
from nodeledger.ledger.core import (
    CardCall,
    CardLedger,
    Item,
    _first_card,
    _nccl_item,
    _runtime_total,
    card_capacity,
    rope_cache_bytes,
    weights_share_bytes,
)
from nodeledger.ledger.dims import Dims
from nodeledger.ledger.jobs import ServeJob
from nodeledger.ledger.weights import (
    Scheme,
    converted,
)
from nodeledger.machine.profile import MachineProfile
from nodeledger.machine.vendors import spec as vendor_spec
from nodeledger.model.spec import ModelSpec
from nodeledger.units import GiB, MiB, gib_num


def vllm_weights_as_loaded(
    spec: ModelSpec, job: ServeJob, machine: MachineProfile, scheme: Scheme, wb, d: Dims
) -> tuple[int, str]:
    """(bytes, how) of the weights one card holds after vLLM's ``load_model``: the checkpoint
    share, with MXFP4 MoE experts in the layout of the backend the card gets
    (engines.mxfp4_expert_bytes: padding, repacked scales), plus the rotary cache."""
    tp, pp = job.parallel.tp, job.parallel.pp
    routed = wb.by_part_bytes.get("routed_experts", 0)
    if scheme.name == "mxfp4" and d.moe_layers and routed:
        version = eng.vllm_version(job.engine_version)
        backend, why = eng.mxfp4_backend(version, _first_card(machine)[0])
        experts = eng.mxfp4_expert_bytes(backend, version, d.experts, d.hidden, d.moe_intermediate,
                                         tp, ceil(d.moe_layers / pp))  # fmt: skip
        rest, how = weights_share_bytes(spec, wb, tp, pp, routed)
        share = rest + experts
        how = f"non-expert {how} + MXFP4 experts in the {backend} layout ({why})"
    else:
        share, how = weights_share_bytes(spec, wb, tp, pp)
    delta, dense_how = _quant_linear_delta(spec, job, machine, scheme)
    if delta:
        share += delta
        how += dense_how
    return share + rope_cache_bytes(spec), how + " + rotary cos/sin cache"


def _quant_linear_delta(
    spec: ModelSpec, job: ServeJob, machine: MachineProfile, scheme: Scheme
) -> tuple[int, str]:
    """(bytes, how): the dense quantised linears' difference between vLLM's loaded layout and
    the checkpoint share, summed over one card's layers (engines.vllm_linear_delta_bytes;
    MoE experts other than MXFP4 are taken as the checkpoint: not read)."""
    if scheme.name not in ("fp8", "int4"):
        return 0, ""
    product, vendor, _ = _first_card(machine)
    sm = eng.card_sm(product)
    version = eng.vllm_version(job.engine_version)
    tp, pp = job.parallel.tp, job.parallel.pp
    total = 0
    for t in spec.tensors:
        if t.module == "expert" or not converted(t, scheme):
            continue
        per = eng.vllm_linear_delta_bytes(scheme, t.name, t.shape[-2], t.shape[-1], tp, sm,
                                          vendor, version)  # fmt: skip
        total += per * t.count
    total = ceil(total / pp)
    if not total:
        return 0, ""
    if scheme.name == "fp8":
        why = (
            "ROCm row padding"
            if vendor_spec(vendor).vllm_rocm_figures
            else f"sm{sm}: Marlin scales in the model dtype"
        )
    else:
        why = "Marlin drops GPTQ zero points and g_idx"
    return total, f" {'+' if total > 0 else '-'} {why} ({abs(total) / MiB:,.0f} MiB)"


def _resolve_vllm(job: ServeJob, machine: MachineProfile, spec: ModelSpec | None):
    capacity = card_capacity(machine, job.parallel.tp * job.parallel.pp * job.replicas)
    total, _ = _runtime_total(machine, capacity)
    rocm = bool(machine.accelerators) and vendor_spec(machine.accelerators[0].vendor).rocm_runtime
    mla = spec is not None and any(a.kind == "mla" for a in spec.attention)
    job, settings = eng.resolve_serve_job(job, _first_card(machine)[0], total, rocm, mla)
    if spec is not None:
        # a hybrid (Mamba-2 / Gated DeltaNet beside attention): vLLM raises the attention block
        # until one page holds one sequence's state of one such layer (per TP rank; the pages
        # of a pipeline stage are the same size, pp does not enter)
        tp = job.parallel.tp
        asked = job.block_size_asked or job.block_size
        mode = eng.vllm_state_blocks(spec, job.engine_version, job.prefix_caching).mode
        hyb = eng.vllm_hybrid_pages(spec, job.engine_version, asked,
                                    kv.KV_DTYPE_BYTES[job.kv_dtype],
                                    kv.kv_split_across_tp(spec, tp), tp, mode)  # fmt: skip
        block = hyb.block_size if hyb is not None else asked
        if block != job.block_size or job.block_size_asked is not None:
            job = replace(job, block_size=block, block_size_asked=asked)
        if block > asked:
            settings = {**settings, "block_size": (
                f"{block} tokens (raised from {asked} so an attention page holds one "
                f"sequence's state of one Mamba-style layer, {hyb.state_page_bytes:,} B per "
                f"rank: {hyb.source})")}  # fmt: skip
    return job, settings


def vllm_budget_bytes(
    total: int | None, gpu_memory_utilization: float, rounding: str = "floor"
) -> int | None:
    """vLLM's memory budget per card: total (as torch reports it) x gpu_memory_utilization
    (``requested_memory``; ceil from 0.27, ``v1/worker/utils.py:request_memory``); None when
    the card memory is unknown."""
    if total is None:
        return None
    b = total * gpu_memory_utilization
    return ceil(b) if rounding == "ceil" else int(b)


def vllm_kv_pool_bytes(budget: int | None, torch_fixed: int, non_torch: int) -> int | None:
    """What vLLM hands the KV cache ("Available KV cache memory"): budget - weights - profile
    peak (``torch_fixed``) - the non-torch memory the release charges; None when the budget is
    unknown."""
    return None if budget is None else budget - torch_fixed - non_torch


def _hybrid_state_extras(
    extras: dict,
    states,
    blocks: int,
    attn_groups: int,
    state_groups: int,
    job: ServeJob,
    seqs: int,
    page: float,
) -> None:
    """A hybrid's state blocks in the vLLM card's extras.  The simulator schedules attention
    blocks: the state pages of the sequences that run at once are set aside (here for requests
    of max_model_len; speed/job.py sets them aside again for the job's own request lengths)."""
    extras["engine"].update(kv_attn_groups=attn_groups,
                            kv_state_blocks_per_sequence=states.resident,
                            mamba_cache_mode=states.mode, mamba_cache_mode_source=states.source)  # fmt: skip
    extras["sim_pool_tokens"] = eng.hybrid_sim_pool_tokens(
        blocks, attn_groups, state_groups, job.block_size, job.context, seqs, states.resident
    )
    extras["kv_state_bytes_per_sequence"] = ceil(state_groups * states.resident * page)


def _vllm_card(c: CardCall) -> tuple[CardLedger, dict]:
    """vLLM, as the release in ``job.engine_version`` sizes its KV pool (ledger/engines.py,
    engines.toml): budget = total x util (the total torch reports); the profile run's peak
    (one forward of max_num_batched_tokens, or the sampler over its dummy requests, whichever
    is wider); the non-torch memory that release charges; the graph estimate where it is
    subtracted; the rest in whole blocks.  Memory outside the budget (the context before the
    baseline, NCCL in it from 0.11, graphs captured after sizing) is listed apart: the card
    holds budget + those."""
    (spec, job, dims, _, weights_bytes, kv_split, kv_dtype_bytes, capacity, communicators, cards,
     defaults, machine, weights_note) = c.parts()  # fmt: skip
    notes: list[str] = []
    fam = eng.vllm_family(job.engine_version)
    rtd = eng.data()["vllm"]["runtime"]
    product, vendor, _ = _first_card(machine)
    total, total_src = _runtime_total(machine, capacity)
    util = job.gpu_memory_utilization
    budget = vllm_budget_bytes(total, util, fam.budget_round)
    if budget is None:
        notes.append("card memory unknown: vLLM's KV pool cannot be sized")
    mnbt, seqs = job.max_num_batched_tokens, job.max_num_seqs
    profile_peak, forward_bytes, sampler_bytes, peak_what = _vllm_profile_peak(
        spec, job, dims, fam, product)  # fmt: skip
    charged, nt_src, nccl = _vllm_charged(fam, rtd, communicators, defaults)
    graph_bytes, graph_src, n_graphs = _vllm_graphs(fam, rtd, job, dims, vendor)
    graph_charged = graph_bytes if fam.graphs == "estimated" else 0
    torch_fixed = weights_bytes + profile_peak
    available = vllm_kv_pool_bytes(budget, torch_fixed, charged + graph_charged)
    page = kv.paged_page_bytes_per_layer(spec, job.block_size, kv_dtype_bytes, kv_split)
    hybrid = fam.concurrency != "tokens"
    groups, per_block_layers, state_groups, attn_groups = _vllm_kv_groups(spec, job, hybrid, notes)
    states = eng.vllm_state_blocks(spec, job.engine_version, job.prefix_caching)
    # bytes per token of the attention groups (the state groups hold a page per sequence)
    per_token = page * per_block_layers * attn_groups / job.block_size
    extras: dict = {
        "engine": {
            "name": "vllm", "version": job.engine_version, "family": fam.id, "mirrors": fam.mirrors,
            "card_total_bytes": total, "card_total_source": total_src, "budget_bytes": budget,
            "gpu_memory_utilization": util, "max_num_seqs": seqs, "max_num_batched_tokens": mnbt,
            "weights_bytes": weights_bytes, "profile_peak_bytes": profile_peak,
            "forward_peak_bytes": forward_bytes, "sampler_peak_bytes": sampler_bytes,
            "non_torch_charged_bytes": charged, "cuda_graph_bytes": graph_bytes,
            "cuda_graphs_in_budget": fam.graphs == "estimated", "cuda_graphs": n_graphs,
            "kv_available_bytes": available, "kv_groups": len(groups),
            "kv_state_groups": state_groups, "block_size": job.block_size,
        },
        "kv_pool_unclamped_bytes": available,
        "kv_bytes_per_token_per_card": round(per_token),
    }  # fmt: skip
    kv_pool = None
    if available is not None and page > 0:
        blocks = eng.num_blocks(available, page, per_block_layers)
        kv_pool = ceil(blocks * page * per_block_layers)
        tokens, conc = eng.printed_pool(fam, blocks, groups, job.block_size, job.context, mnbt,
                                        states.budget(job.context, job.block_size))  # fmt: skip
        extras.update(kv_pool_bytes=kv_pool, kv_blocks=blocks, kv_pool_tokens=tokens,
                      max_concurrency_printed=conc, max_concurrency=min(seqs, int(conc)),
                      max_context_at_concurrency=tokens // (job.concurrency or 1))  # fmt: skip
        if state_groups:
            _hybrid_state_extras(extras, states, blocks, attn_groups, state_groups, job, seqs,
                                 page * per_block_layers)  # fmt: skip
    elif available is not None:
        extras["kv_pool_bytes"] = max(available, 0)
    items = [
        Item("weights", weights_bytes, f"as vLLM holds them after load_model: {weights_note}"),
        Item(f"profile-run peak ({peak_what.split(':')[0]})", profile_peak,
             f"vLLM profiles its widest step before sizing the pool: {peak_what}; "
             f"the other was {gib_num(min(forward_bytes, sampler_bytes), 2)} GiB"),
        Item("non-torch memory charged to the budget", charged,
             nt_src + (f"; + NCCL {gib_num(nccl, 2)} GiB (initialised after the baseline)" if nccl and fam.charges_nccl else ""),
             torch=False),
    ]  # fmt: skip
    if graph_charged:
        items.append(
            Item("CUDA graph estimate (subtracted)", graph_charged, graph_src, torch=False)
        )
    per_seq = kv.paged_kv_bytes_per_sequence(per_token, job.context, job.block_size)
    # the state blocks a running sequence holds per Mamba-style group (1, or 2-3 when prefix
    # caching keeps aligned states: engines.vllm_state_blocks)
    per_seq += state_groups * states.resident * page * per_block_layers
    kv_needed = ceil(per_seq * (job.concurrency or 0))
    if available is not None:
        items.append(Item(
            f"KV cache pool ({job.kv_dtype}, block {job.block_size})",
            max(kv_pool or 0, 0),
            f"budget {util:g} x {gib_num(0 if total is None else total, 2)} GiB ({total_src}) - the terms above, in whole blocks",
        ))  # fmt: skip
        conc_ok = extras.get("max_concurrency_printed")
        if (
            available <= 0
            or (job.concurrency and conc_ok is not None and job.concurrency > conc_ok)
            or (conc_ok is not None and conc_ok < 1)
        ):
            extras["kv_shortfall"] = (
                f"vLLM's KV pool holds {gib_num(max(available, 0), 2)} GiB per card "
                f"(at most {max(conc_ok or 0, 0):.2f} requests of {job.context:,} tokens); "
                f"{job.concurrency or 1} sequence(s) x {job.context:,} tokens need {gib_num(kv_needed, 2)} GiB"
                + (f"; weights, profile peak and non-torch memory exceed the vLLM budget by {gib_num(-available, 2)} GiB"
                   if available < 0 else "")
            )  # fmt: skip
    else:
        items.append(Item("KV cache needed", kv_needed, "concurrency x context x KV per token"))
    torch_total = sum(i.bytes for i in items if i.torch)
    outside = _vllm_outside(fam, rtd, nccl, communicators, defaults, graph_bytes, graph_src,
                            graph_charged)  # fmt: skip
    # what the card holds: the budget's terms (the pool fills it to the last whole block) and
    # what lies outside it
    card_bytes = sum(i.bytes for i in items) + sum(i.bytes for i in outside)
    if (
        budget is not None
        and total is not None
        and card_bytes > total
        and available is not None
        and available > 0
    ):
        notes.append(
            f"vLLM's budget {gib_num(budget, 2)} GiB plus what lies outside it "
            f"({gib_num(sum(i.bytes for i in outside), 2)} GiB: context, graphs) exceeds the card's "
            f"{gib_num(total, 2)} GiB: start-up fails (free memory below the requested budget) or graph capture runs out"
        )
    extras["notes"] = notes
    card = CardLedger(cards, items + outside, torch_total, card_bytes, total if total is not None else capacity,
                      "steady", {"steady": torch_total})  # fmt: skip
    return card, extras


def _vllm_kv_groups(spec: ModelSpec, job: ServeJob, hybrid: bool, notes: list[str]):
    """vLLM's KV cache groups (its hybrid manager: attention groups and the Mamba-2 / Gated
    DeltaNet state groups where this release is modelled for them; one full group otherwise);
    (groups, layers per block, state groups, attention groups)."""
    # the block is already raised for a hybrid (_resolve_vllm): only whether it is modelled
    with_state = eng.vllm_hybrid_modelled(spec, job.engine_version)
    state = eng.state_layers(spec)
    if state and not with_state:
        if not any(a.kind != "linear" for a in spec.attention):
            why = "a model without attention layers: vLLM's pool for it is not modelled"
        else:
            why = (f"not in this ledger for vLLM {eng.vllm_version(job.engine_version)} "
                   f"(modelled for V1 from {eng.data()['vllm']['hybrid']['first']}, the hybrid "
                   "KV manager read)")  # fmt: skip
        notes.append(f"{len(state)} Mamba-2 / Gated DeltaNet layers: their "
                     f"per-sequence state is {why}")  # fmt: skip
    groups = (
        eng.kv_groups(spec, with_state=with_state)
        if hybrid
        else [eng.KvGroup("full", sum(1 for a in spec.attention if a.kind != "linear"), None)]
    )
    per_block_layers = groups[0].layers
    state_groups = sum(1 for g in groups if g.kind == "state")
    attn_groups = len(groups) - state_groups or 1
    return groups, per_block_layers, state_groups, attn_groups


def _vllm_profile_peak(spec: ModelSpec, job: ServeJob, dims: Dims, fam, product: str):
    """vLLM's profile run before it sizes the pool: one forward of max_num_batched_tokens, or the
    sampler over its dummy requests, whichever is wider; (peak, forward, sampler, what)."""
    tp = job.parallel.tp
    mnbt, seqs = job.max_num_batched_tokens, job.max_num_seqs
    forward_bytes = ceil(act.inference_layer_transient_bytes(dims, mnbt, transformers=False) / tp)
    rows = eng.sampler_rows(fam, seqs, mnbt)
    hybrid_or_moe = bool(dims.moe_layers) or any(a.kind != "full" for a in spec.attention)
    beta, triton, sampler_src = eng.sampler_model(
        eng.vllm_version(job.engine_version), hybrid_or_moe
    )
    sms, _ = eng.card_sms(product)
    live = 2 * (rows if fam.id == "v1-whole-card" else mnbt) * dims.hidden
    sampler_bytes = (
        eng.sampler_peak_bytes(rows, dims.vocab, beta, sms if triton else 0, live)
        if eng.samples_on_rank(fam, 0) else 0
    )  # fmt: skip
    profile_peak = max(forward_bytes, sampler_bytes)
    peak_what = (
        f"sampler over {rows:,} dummy requests: {rows:,} x vocab {dims.vocab:,} x {beta:g} B"
        + (f" + {min(sms, rows)}-row fp32 buffer" if triton else "")
        + f" ({sampler_src})"
        if sampler_bytes >= forward_bytes
        else f"one forward of {mnbt:,} tokens / tp {tp} (activations.inference_layer_transient_bytes)"
    )
    return profile_peak, forward_bytes, sampler_bytes, peak_what


def _vllm_charged(fam, rtd: dict, communicators: int, defaults: rt.RuntimeDefaults):
    """The non-torch memory vLLM's budget pays for (its release's accounting): (bytes, source,
    the NCCL buffers)."""
    if fam.charges_context:
        nt = int(rtd["whole_card_non_torch_gib"] * GiB)
        nt_src = f"everything outside torch on the card, context included: {rtd['whole_card_non_torch_source']}"
    else:
        nt = int(rtd["non_torch_increase_gib"] * GiB)
        nt_src = f"non-torch growth since vLLM's baseline: {rtd['non_torch_increase_source']}"
    nccl = rt.nccl_bytes(communicators, defaults) if communicators else 0
    return nt + (nccl if fam.charges_nccl else 0), nt_src, nccl


def _vllm_graphs(fam, rtd: dict, job: ServeJob, dims: Dims, vendor):
    """The CUDA graphs vLLM captures: (bytes, source, how many)."""
    seqs, mnbt = job.max_num_seqs, job.max_num_batched_tokens
    sizes = eng.graph_capture_sizes(fam.graph_sizes, seqs, mnbt) if job.cuda_graphs else []
    n_graphs = len(sizes) * fam.graph_modes
    graph_bytes = eng.cuda_graph_bytes(n_graphs, dims.layers, vendor)
    graph_src = (
        f"{n_graphs} graphs ({len(sizes)} batch sizes up to {max(sizes) if sizes else 0} x {fam.graph_modes} mode(s)) "
        f"x {dims.layers} layers x {rtd['graph_kib_per_graph_layer']} KiB ({rtd['graph_source']})"
    )
    return graph_bytes, graph_src, n_graphs


def _vllm_outside(fam, rtd: dict, nccl: int, communicators: int, defaults: rt.RuntimeDefaults,
                  graph_bytes: int, graph_src: str, graph_charged: int) -> list[Item]:  # fmt: skip
    """What the card holds outside vLLM's budget: the context before its baseline, NCCL in the
    baseline, graphs captured after the pool (each where the release leaves it out)."""
    outside: list[Item] = []
    if not fam.charges_context:
        outside.append(Item("CUDA context before vLLM's baseline", int(rtd["context_gib"] * GiB),
                            f"outside the budget: {rtd['context_source']}", torch=False))  # fmt: skip
    if nccl and not fam.charges_nccl:
        outside.append(
            _nccl_item(
                communicators, defaults, "NCCL buffers (in the baseline, outside the budget)"
            )
        )
    if graph_bytes and not graph_charged:
        outside.append(
            Item(
                "CUDA graphs (captured after the pool, outside the budget)",
                graph_bytes,
                graph_src,
                torch=False,
            )
        )
    return outside
