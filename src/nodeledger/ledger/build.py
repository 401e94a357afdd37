"""Assemble the ledger of one job on one machine: every byte per card and in host RAM.

Each line item names its formula and source.  ``torch_peak_bytes`` is what
``torch.cuda.max_memory_allocated`` would show on the busiest card; ``total_bytes`` adds the
runtime overheads outside the allocator (what nvidia-smi / rocm-smi would show).

The ledgers are compositions: every byte figure comes from a named term function, here or in
the term modules (weights, kv_cache, activations, state, runtime), each with its formula and
source in its docstring; this module only picks the terms a job needs, names the line items
and sums the phases.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from math import ceil

from nodeledger.ledger import activations as act
from nodeledger.ledger import engines as eng
from nodeledger.ledger import frameworks, model_state
from nodeledger.ledger import kv_cache as kv
from nodeledger.ledger import runtime as rt
from nodeledger.ledger.dims import Dims, dims_of
from nodeledger.ledger.jobs import JobError, LoadJob, ResolvedServeJob, ServeJob, TrainJob
from nodeledger.ledger.weights import (
    Scheme,
    config_scheme,
    converted,
    scheme_for,
    tensor_bytes,
    weight_bytes,
)
from nodeledger.machine.profile import MachineProfile
from nodeledger.machine.vendors import DEFAULT_VENDOR
from nodeledger.machine.vendors import spec as vendor_spec
from nodeledger.model.kernel_path import KernelPath, kernel_path
from nodeledger.model.spec import ModelSpec
from nodeledger.units import GiB, MiB


@dataclass
class Item:
    name: str
    bytes: int
    source: str
    torch: bool = True  # counted by PyTorch's allocator (in torch_peak_bytes)
    # host page cache: the kernel can evict it under pressure, so it is not part of the hard
    # peak; the verdict counts it only toward "tight" (see verdict/fit.py)
    reclaimable: bool = False


@dataclass
class CardLedger:
    cards: list[int]  # indices of the cards this ledger describes (identical ranks)
    items: list[Item]
    torch_peak_bytes: int
    total_bytes: int
    capacity_bytes: int | None
    peak_phase: str = ""
    phases: dict[str, int] = field(default_factory=dict)


@dataclass
class HostLedger:
    items: list[Item]
    peak_bytes: int  # memory the job's processes hold (anonymous / pinned): not reclaimable
    capacity_bytes: int | None
    reclaimable_bytes: int = 0  # page cache the job fills (evictable, but competes for RAM)


@dataclass
class Ledger:
    job_kind: str
    cards: list[CardLedger]
    host: HostLedger
    notes: list[str] = field(default_factory=list)
    extras: dict = field(default_factory=dict)  # job-specific figures (e.g. vLLM KV capacity)


# -- validation against model and machine --------------------------------------------------


def check_parallel(
    spec: ModelSpec, tp: int, pp: int, cards_needed: int, machine: MachineProfile
) -> None:
    """Raise JobError when tp does not divide the heads (or the KV heads and tp do not divide
    one another), pp exceeds the layers, or the machine has fewer cards than the job needs."""
    heads = spec.num_attention_heads
    if heads % tp:
        raise JobError(f"--tp {tp} does not divide the model's {heads} attention heads")
    kv_heads = next((a.kv_heads for a in spec.attention if a.kind in ("full", "sliding")), None)
    if kv_heads and kv_heads % tp and tp % kv_heads:
        raise JobError(f"--tp {tp} and the model's {kv_heads} KV heads do not divide one another")
    if pp > spec.num_layers:
        raise JobError(f"--pp {pp} exceeds the model's {spec.num_layers} layers")
    have = len(machine.accelerators)
    if cards_needed > have:
        raise JobError(f"the job needs {cards_needed} cards; machine {machine.name} has {have}")


def card_capacity(machine: MachineProfile, n: int) -> int | None:
    """Memory of the smallest of the first ``n`` cards; None when any is unknown."""
    memories = [a.memory_bytes for a in machine.accelerators[:n]]
    if not memories or any(m is None for m in memories):
        return None
    return min(memories)  # type: ignore[type-var]


def _context_item(defaults: rt.RuntimeDefaults) -> Item:
    return Item(
        "CUDA/HIP context and libraries",
        defaults.context_bytes,
        f"driver context, kernel images, cuBLAS/cuDNN handles: {defaults.context_bytes / 2**20:.0f} MiB "
        "(measured on H200, CUDA 13: nvidia-smi used - torch reserved)",
        torch=False,
    )


def _nccl_item(communicators: int, defaults: rt.RuntimeDefaults, name: str | None = None) -> Item:
    return Item(
        name or f"NCCL/RCCL/HCCL buffers ({communicators} communicator(s))",
        rt.nccl_bytes(communicators, defaults),
        "NCCL_BUFFSIZE 4 MiB x send/recv x channels + LL/LL128; default 300 MiB per communicator",
        torch=False,
    )


def _runtime_items(
    torch_peak: int,
    communicators: int,
    defaults: rt.RuntimeDefaults,
    checkpointed: bool = False,
) -> list[Item]:
    fraction = rt.allocator_fraction(defaults, checkpointed)
    items = [
        _context_item(defaults),
        Item(
            "allocator reserve",
            rt.allocator_reserve_bytes(torch_peak, defaults, checkpointed),
            f"caching allocator reserved - allocated: {fraction:.1%} of the torch peak (measured on H200: "
            "median 5.4 %, checkpointed training 25 %)",
            torch=False,
        ),
    ]
    if communicators:
        items.append(_nccl_item(communicators, defaults))
    return items


def _finish(
    cards: list[int],
    items: list[Item],
    phases: dict[str, int],
    capacity: int | None,
    communicators: int,
    defaults: rt.RuntimeDefaults,
    checkpointed: bool = False,
) -> CardLedger:
    """The card ledger of a job whose torch peak is its largest phase, plus runtime items."""
    peak_phase = max(phases, key=phases.get)
    torch_peak = phases[peak_phase]
    runtime = _runtime_items(torch_peak, communicators, defaults, checkpointed)
    return CardLedger(
        cards=cards,
        items=items + runtime,
        torch_peak_bytes=torch_peak,
        total_bytes=torch_peak + sum(i.bytes for i in runtime),
        capacity_bytes=capacity,
        peak_phase=peak_phase,
        phases=phases,
    )


# -- host side ------------------------------------------------------------------------------

PROCESS_RSS_BYTES = 3 * GiB  # python + torch + CUDA/HIP runtime libraries resident per rank


def process_rss_bytes(ranks: int) -> int:
    """Resident memory of the job's processes: ranks x PROCESS_RSS_BYTES (python + torch + CUDA
    runtime libraries per rank; default 3 GiB, the typical RSS after `import torch;
    torch.cuda.init()`)."""
    return ranks * PROCESS_RSS_BYTES


def dataloader_host_bytes(job: TrainJob) -> int:
    """DataLoader workers: each worker is its own process holding its private RSS and
    prefetch_factor batches: ranks x workers x (worker RSS + prefetch x micro_batch x sample
    bytes); a sample defaults to input_ids, attention_mask and labels, int64: seq x 8 x 3."""
    host = job.host
    sample_bytes = host.sample_bytes or job.seq * 8 * 3  # input_ids, attention_mask, labels (int64)
    batch_bytes = sample_bytes * job.micro_batch
    per_worker = host.worker_rss_bytes + host.prefetch * batch_bytes
    return job.parallel.cards * host.workers * per_worker


def _process_items(ranks: int) -> list[Item]:
    return [
        Item(
            f"{ranks} job process(es) resident memory",
            process_rss_bytes(ranks),
            "python + torch + CUDA runtime libraries resident per rank; default 3 GiB (typical RSS after `import torch; torch.cuda.init()`)",
        )
    ]


def _host(items: list[Item], machine: MachineProfile) -> HostLedger:
    hard = sum(i.bytes for i in items if not i.reclaimable)
    cache = sum(i.bytes for i in items if i.reclaimable)
    return HostLedger(items, hard, machine.host.ram_bytes, cache)


# -- serve ----------------------------------------------------------------------------------


def weights_bytes_per_card(total_bytes: int, cards: int) -> int:
    """Weights of one replica spread over its tp x pp cards: ceil(weight bytes / cards)."""
    return ceil(total_bytes / cards)


def pipeline_stage_layers(layers: int, pp: int) -> list[int]:
    """Decoder layers per pipeline stage as vLLM assigns them (``distributed/utils.py
    get_pp_indices``): layers // pp each, the remainder one apiece to the stages before the
    last, from the second-to-last backwards."""
    parts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    return parts


def weights_share_bytes(
    spec: ModelSpec, wb, tp: int, pp: int, excluded: int = 0
) -> tuple[int, str]:
    """(bytes, how) of the weights on the heaviest card of a tp x pp replica, leaving out
    ``excluded`` layer bytes (counted by the caller).  pp 1: ceil(bytes / tp).  pp > 1: each
    stage holds its layers (pipeline_stage_layers, at the mean bytes per layer), the first
    stage the embeddings and the last the lm_head -- with tied embeddings the last stage holds
    its own embedding table too (vLLM's LlamaModel builds embed_tokens on the last rank when
    tie_word_embeddings) -- divided by tp."""
    total = wb.total_bytes - excluded
    if pp == 1:
        return weights_bytes_per_card(total, tp), "checkpoint bytes / tp"
    emb = wb.by_part_bytes.get("embeddings", 0)
    head = wb.by_part_bytes.get("lm_head", 0)
    last_head = head or (emb if spec.tied_embeddings else 0)
    per_layer = (total - emb - head) / max(1, spec.num_layers)
    parts = pipeline_stage_layers(spec.num_layers, pp)
    stages = [n * per_layer + (emb if i == 0 else 0) + (last_head if i == pp - 1 else 0)
              for i, n in enumerate(parts)]  # fmt: skip
    k = max(range(pp), key=lambda i: stages[i])
    return ceil(stages[k] / tp), (
        f"pipeline stage {k} of {pp} ({parts[k]} layers"
        + (" + embeddings" if k == 0 else "")
        + (" + lm_head" if k == pp - 1 else "")
        + ") / tp"
    )


def _serve_scheme(spec: ModelSpec, dtype: str | None) -> Scheme:
    """The weight scheme a serve/load job names, else the one the config declares."""
    return scheme_for(dtype, spec) if dtype else config_scheme(spec)


def _first_card(machine: MachineProfile) -> tuple[str, str, int | None]:
    """(product, vendor, driver-reserved bytes) of the machine's first card, which the engine
    rules read (all cards of a replica are taken as the first one)."""
    acc = machine.accelerators[0] if machine.accelerators else None
    return (
        (acc.product, acc.vendor, acc.memory_reserved_bytes) if acc else ("", DEFAULT_VENDOR, None)
    )


def _runtime_total(machine: MachineProfile, capacity: int | None) -> tuple[int | None, str]:
    """engines.runtime_total_bytes of the first card at ``capacity`` bytes."""
    product, _, reserved = _first_card(machine)
    return eng.runtime_total_bytes(capacity, product, reserved)


def rope_cache_bytes(spec: ModelSpec, dtype_bytes: int = 2) -> int:
    """vLLM's rotary cos/sin cache, one per model, on every card: max_position_embeddings x
    rotary dim (cos and sin halves) x model dtype (``RotaryEmbedding._compute_cos_sin_cache``);
    it is part of what "Model loading took" reports."""
    layer = next((a for a in spec.attention if a.kind in ("full", "sliding")), None)
    if layer is None or not spec.max_position_embeddings:
        return 0
    return spec.max_position_embeddings * layer.k_head_dim * dtype_bytes


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


def _resolve_hf(job: ServeJob, machine: MachineProfile, spec: ModelSpec | None):
    return job, {}


def _resolve_sglang(job: ServeJob, machine: MachineProfile, spec: ModelSpec | None):
    capacity = card_capacity(machine, job.parallel.tp * job.parallel.pp * job.replicas)
    mla = spec is not None and any(a.kind == "mla" for a in spec.attention)
    return eng.resolve_sglang(job, capacity, mla)


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
            f"attention weights whole on each rank (DP attention): + {attn * (1 - 1 / tp) / pp / GiB:.2f} GiB"
        )
        kv_split = pp
    capacity = card_capacity(machine, cards_per_replica * job.replicas)
    communicators = rt.serving_communicators(cards_per_replica)
    notes: list[str] = [engine_settings["assumed"]] if engine_settings.get("assumed") else []
    extras: dict = {}
    cards = list(range(cards_per_replica * job.replicas))
    card, extras = engine.card(
        spec, job, dims, scheme, weights_bytes, kv_split, kv_dtype_bytes, capacity,
        communicators, cards, defaults, machine, weights_note,
    )  # fmt: skip
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


def _hf_engine_card(spec, job, dims, scheme, weights_bytes, kv_split, kv_dtype_bytes, capacity,
                    communicators, cards, defaults, machine, weights_how):  # fmt: skip
    notes = []
    if job.concurrency is None:
        notes.append(
            "--engine hf with concurrency 'max': card memory unknown, shown for 1 sequence"
        )
    card = _hf_card(
        spec, job, dims, scheme, weights_bytes, kv_dtype_bytes, kv_split, capacity,
        communicators, cards, defaults, weights_how=weights_how,
    )  # fmt: skip
    return card, {"notes": notes}


def _engine_card(card_fn: Callable) -> Callable:
    """An engine's own card ledger (``_vllm_card``, ``_sglang_card``: they size their pool from
    the loaded weights, not from the weight scheme) behind the registry's one call signature."""

    def card(spec, job, dims, scheme, *rest):
        return card_fn(spec, job, dims, *rest)

    return card


def eager_only_note(spec: ModelSpec, requested: str) -> str | None:
    """The line that says transformers runs this family eagerly whatever was asked, and why."""
    if spec.sdpa_supported or requested == "eager":
        return None
    return (f"attention: eager, not --attention {requested}: transformers has no SDPA path for "
            f"{spec.family} ({spec.sdpa_source}); the full score matrix is counted")  # fmt: skip


def _hf_card(
    spec: ModelSpec,
    job: ServeJob,
    dims: Dims,
    scheme: Scheme,
    weights_bytes: int,
    kv_dtype_bytes: int,
    kv_split: int,
    capacity: int | None,
    communicators: int,
    cards: list[int],
    defaults: rt.RuntimeDefaults,
    weights_how: str = "",
) -> CardLedger:
    # long: generate()'s ledger: the prefill and decode phases, each term from its formula module, then the items
    """transformers generate(): phases prefill (whole-prompt KV + prefill activations) and
    decode (full KV + torch.cat growth + one token's layer transient)."""
    tp = job.parallel.tp
    sequences = job.concurrency or 1
    prompt = job.context - job.new_tokens
    backend = act.attention_backend(dims, job.attention)
    cached = kv.hf_cache_view(spec)  # the heads transformers' cache really holds
    prompt_kv_bytes = kv.kv_cache_bytes_per_card(
        cached, prompt, kv_dtype_bytes, sequences, kv_split, cap_window=False
    )
    kv_cache_bytes = kv.kv_cache_bytes_per_card(
        cached, job.context, kv_dtype_bytes, sequences, kv_split
    )
    path = ssm_path(dims, job.ssm_kernels)
    prefill_bytes = ceil(act.inference_prefill_transient_bytes(
        dims, sequences, prompt, backend, job.experts, path.kernels if path else "torch") / tp)  # fmt: skip
    windows = [a.window for a in spec.attention if a.kind == "sliding" and a.window]
    if backend == "sdpa" and windows and prompt > min(windows):
        # the bool mask lives through the whole forward (the MLP moment too); its additive
        # copy only inside SDPA (activations.sliding_window_sdpa_prefill_bytes)
        mask = sequences * prompt * prompt
        prefill_bytes = max(prefill_bytes + mask, ceil(
            act.sliding_window_sdpa_prefill_bytes(dims, sequences, prompt) / tp))  # fmt: skip
    logits_bytes = act.inference_logits_bytes(dims, sequences)
    growth_bytes = kv.cache_growth_bytes_per_card(
        cached, job.context, kv_dtype_bytes, sequences, tp
    )
    decode_bytes = ceil(
        act.inference_layer_transient_bytes(dims, sequences, experts=job.experts) / tp
    )
    items = [
        Item(
            f"weights ({scheme.label()})",
            weights_bytes,
            f"model show weight bytes, {weights_how or f'/ {tp} cards'} ({scheme.source or scheme.name})",
        ),
        Item(
            f"KV cache, {sequences} x {job.context} tokens ({job.kv_dtype})",
            kv_cache_bytes,
            "kv_bytes_per_sequence(context) x concurrency / tp (DynamicCache)",
        ),
        Item(
            f"prefill activations (widest moment, {backend} attention"
            + (f", {job.experts} experts" if dims.moe_layers else "")
            + ")",
            prefill_bytes,
            "activations.inference_layer_transient_bytes / inference_attention_transient_bytes (B x prompt tokens)"
            + (
                "; batched_mm: every routed pair gathers its expert's weights (activations.batched_mm_experts_bytes)"
                if dims.moe_layers and job.experts == "batched_mm"
                else ""
            )
            + (
                "; eager experts: one expert at a time, balanced routing assumed "
                "(activations.eager_experts_bytes)"
                if dims.moe_layers and job.experts == "eager"
                else ""
            )
            + _ssm_note(path),
        ),
        Item(
            "logits of the last position (bf16 + fp32)",
            logits_bytes,
            "generate() keeps logits of 1 position per sequence: B x V x 6",
        ),
        Item(
            "cache growth by torch.cat (one layer)",
            growth_bytes,
            "old and new K/V of one layer coexist during a decode step",
        ),
    ]
    if prompt_kv_bytes > kv_cache_bytes:
        items.append(
            Item(
                "prompt KV before the sliding window trims it",
                prompt_kv_bytes - kv_cache_bytes,
                "transformers' DynamicSlidingWindowLayer keeps the whole prompt until the first decode step",
            )
        )
    workspace_bytes = rt.cublas_workspace_bytes(defaults)
    items.append(
        Item(
            "cuBLAS workspace",
            workspace_bytes,
            "caching-allocator block for cuBLAS; measured 32 MiB on H200 (CUDA allocated - fake peak)",
        )
    )
    phases = {
        "prefill": weights_bytes + prompt_kv_bytes + prefill_bytes + logits_bytes + workspace_bytes,
        "decode": weights_bytes
        + kv_cache_bytes
        + growth_bytes
        + logits_bytes
        + decode_bytes
        + workspace_bytes,
    }
    return _finish(cards, items, phases, capacity, communicators, defaults)


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


def _vllm_card(
    spec: ModelSpec,
    job: ServeJob,
    dims: Dims,
    weights_bytes: int,
    kv_split: int,
    kv_dtype_bytes: int,
    capacity: int | None,
    communicators: int,
    cards: list[int],
    defaults: rt.RuntimeDefaults,
    machine: MachineProfile,
    weights_note: str = "",
) -> tuple[CardLedger, dict]:
    """vLLM, as the release in ``job.engine_version`` sizes its KV pool (ledger/engines.py,
    engines.toml): budget = total x util (the total torch reports); the profile run's peak
    (one forward of max_num_batched_tokens, or the sampler over its dummy requests, whichever
    is wider); the non-torch memory that release charges; the graph estimate where it is
    subtracted; the rest in whole blocks.  Memory outside the budget (the context before the
    baseline, NCCL in it from 0.11, graphs captured after sizing) is listed apart: the card
    holds budget + those."""
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
             f"the other was {min(forward_bytes, sampler_bytes) / GiB:.2f} GiB"),
        Item("non-torch memory charged to the budget", charged,
             nt_src + (f"; + NCCL {nccl / GiB:.2f} GiB (initialised after the baseline)" if nccl and fam.charges_nccl else ""),
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
            f"budget {util:g} x {0 if total is None else total / GiB:.2f} GiB ({total_src}) - the terms above, in whole blocks",
        ))  # fmt: skip
        conc_ok = extras.get("max_concurrency_printed")
        if (
            available <= 0
            or (job.concurrency and conc_ok is not None and job.concurrency > conc_ok)
            or (conc_ok is not None and conc_ok < 1)
        ):
            extras["kv_shortfall"] = (
                f"vLLM's KV pool holds {max(available, 0) / GiB:.2f} GiB per card "
                f"(at most {max(conc_ok or 0, 0):.2f} requests of {job.context:,} tokens); "
                f"{job.concurrency or 1} sequence(s) x {job.context:,} tokens need {kv_needed / GiB:.2f} GiB"
                + (f"; weights, profile peak and non-torch memory exceed the vLLM budget by {-available / GiB:.2f} GiB"
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
            f"vLLM's budget {budget / GiB:.2f} GiB plus what lies outside it "
            f"({sum(i.bytes for i in outside) / GiB:.2f} GiB: context, graphs) exceeds the card's "
            f"{total / GiB:.2f} GiB: start-up fails (free memory below the requested budget) or graph capture runs out"
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


def _sglang_card(
    spec: ModelSpec,
    job: ServeJob,
    dims: Dims,
    weights_bytes: int,
    kv_split: int,
    kv_dtype_bytes: int,
    capacity: int | None,
    communicators: int,
    cards: list[int],
    defaults: rt.RuntimeDefaults,
    machine: MachineProfile,
    weights_how: str = "",
) -> tuple[CardLedger, dict]:
    # long: SGLang's ledger: its pool sizing (profile_max_num_token), then the items and what lies outside torch
    """SGLang (``ModelRunner.profile_max_num_token``): the free memory before the weights
    (card total as torch reports it - CUDA context - NCCL) x mem_fraction_static holds the
    weights and the KV pool; activations, the sampler and CUDA graphs must fit in the rest,
    which SGLang does not profile.  Tokens: rest // cell size (one token's K and V over all
    layers on this card)."""
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
                f"SGLang's KV pool holds {max(pool, 0) / GiB:.2f} GiB per card ({tokens or 0:,} tokens); "
                f"{on_rank} sequence(s) x {job.context:,} tokens on a card need {on_rank * per_seq / GiB:.2f} GiB"
            )
        if reserve is not None and forward + graphs > reserve:
            notes.append(
                f"SGLang leaves {reserve / GiB:.2f} GiB outside its static pool (1 - mem_fraction_static {mfs:g}); "
                f"a {chunk:,}-token prefill ({forward / GiB:.2f} GiB) and CUDA graphs ({graphs / GiB:.2f} GiB) "
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


# -- train / lora ---------------------------------------------------------------------------


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
        _engine_card(_vllm_card),
        preallocates_pool=True,
        pool_criterion=" (whole blocks per KV group; max_num_seqs caps concurrency)",
    ),
    "sglang": ServeEngineLedger(
        "sglang",
        _resolve_sglang,
        _share_weights,
        _engine_card(_sglang_card),
        preallocates_pool=True,
    ),
}


def check_lora_targets(spec: ModelSpec, job: TrainJob) -> None:
    """Raise JobError when a LoRA job's targets match no linear module of the model."""
    if job.is_lora and not model_state.lora_targets(spec, job):
        names = sorted({t.name.split(".")[-2] for t in spec.tensors if t.kind == "linear"})
        given = "--lora-targets" if job.lora_targets is not None else "PEFT's default targets"
        raise JobError(
            f"{given} {','.join(model_state.lora_target_names(spec, job))} "
            f"{'matches' if job.lora_targets is not None else 'match'} no linear module; the model has: "
            + ", ".join(names)
        )


def _checkpoints_fp32_inputs(job: TrainJob) -> bool:
    """Mixed precision, full fine-tune, full checkpointing: autocast keeps the residual stream
    in fp32, so the checkpointed layer inputs are 4h, not 2h."""
    return frameworks.layout(job).autocast and not job.is_lora and job.checkpointing == "full"


def pipeline_inflight(pp: int, grad_accum: int, chunks: int = 1) -> float:
    """Micro-batches whose activations the first pipeline stage holds at once, in units of one
    micro-batch through its own layers.  1F1B (PipeDream-Flush; Megatron-LM, DeepSpeed,
    torchtitan's default): the first stage runs pp forwards before its first backward, so it
    holds pp micro-batches (all of them when grad_accum < pp).  Interleaved 1F1B with ``chunks``
    model chunks per rank: Megatron's warm-up of 2 (pp - 1) + (chunks - 1) pp chunk forwards,
    + 1, each of 1/chunks of the stage's layers: pp + (pp - 1) / chunks (Korthikanti et al.
    2022, "Reducing Activation Recomputation in Large Transformer Models", 4.2.3: L (1 + (p -
    1) / (p m)) layers in all).  No pipeline: 1."""
    if pp <= 1:
        return 1.0
    held = float(pp) if chunks <= 1 else pp + (pp - 1) / chunks
    return min(held, float(grad_accum))


def ssm_path(dims: Dims, asked: str) -> KernelPath | None:
    """The path transformers takes for the model's Gated DeltaNet or Mamba-2 layers (None for a
    model without them): model/kernel_path.py."""
    kind = "gdn" if dims.linear_layers else "mamba2" if dims.mamba_layers else None
    return kernel_path(kind, asked) if kind else None


def _ssm_note(path: KernelPath | None) -> str:
    if path is None:
        return ""
    how = ("fused kernels: derived from their source, not measured" if path.kernels == "fused"
           else "transformers' pure-torch path")  # fmt: skip
    return f"; Gated DeltaNet / Mamba-2 layers on {how} ({path.source})"


def saved_activation_bytes_per_card(
    dims: Dims, job: TrainJob, targets: tuple[str, ...] | None = None,
    defaults: rt.RuntimeDefaults = rt.DEFAULTS,
) -> tuple[int, int]:  # fmt: skip
    """(activations held at the end of forward, one recomputed layer) on one card:
    activations.saved_activations_bytes (LoRA: saved_lora_activations_bytes, ``targets`` the
    adapted modules) for the layers of one pipeline stage; tensor parallelism divides by tp
    what it splits, and the part it keeps whole on every rank (activations.tp_replicated_bytes)
    only with --sequence-parallel; held x 2 when the checkpointed inputs are fp32
    (``_checkpoints_fp32_inputs``)."""
    parallel = job.parallel
    layers = round(dims.layers / parallel.pp)
    # a family transformers runs only eagerly (model/attention_path.py) saves the eager
    # attention's activations whatever --attention asks, in full training and with LoRA alike
    attention = act.training_attention(dims, job.attention)
    if job.is_lora:
        held, recompute = act.saved_lora_activations_bytes(
            dims, job.micro_batch, job.seq, attention, job.checkpointing,
            targets, job.rank, parallel.pp,
        )  # fmt: skip
    else:
        path = ssm_path(dims, job.ssm_kernels)
        held, recompute = act.saved_activations_bytes(
            dims, job.micro_batch, job.seq, attention, job.checkpointing, 1 / parallel.pp,
            autocast=frameworks.layout(job).autocast, device_type=defaults.device_type,
            kernels=path.kernels if path else "torch",
        )  # fmt: skip
    if parallel.tp > 1:
        rep_held, rep_layer = act.tp_replicated_bytes(
            dims, job.micro_batch, job.seq, job.checkpointing, layers,
            targets if job.is_lora else None,
        )  # fmt: skip
        rep_held, rep_layer = min(rep_held, held), min(rep_layer, recompute)
        keep = parallel.tp if job.sequence_parallel else 1
        held = ceil((held - rep_held) / parallel.tp + rep_held / keep)
        recompute = ceil((recompute - rep_layer) / parallel.tp + rep_layer / keep)
        if job.sequence_parallel and frameworks.layout(job).sp_saves_gathered:
            # DTensor SP: the all-gathered inputs of the column-parallel q/k/v and gate/up
            # linears are saved whole (2h each per token); Megatron re-gathers them in backward
            held += act.sp_gathered_inputs_bytes(
                dims, job.micro_batch, job.seq, job.checkpointing, layers
            )
    if _checkpoints_fp32_inputs(job):
        held *= 2
    # the first stage holds the activations of the micro-batches in flight (1F1B's warm-up)
    held = ceil(held * pipeline_inflight(parallel.pp, job.grad_accum, job.virtual_pipeline))
    return held, recompute


def autocast_cache_bytes_per_card(spec: ModelSpec, dims: Dims, job: TrainJob) -> int:
    """model_state.autocast_cache_bytes; with fp32 checkpointed inputs (``_checkpoints_fp32_inputs``)
    checkpointed layers run their forward without saving, so autocast's bf16 weight copies stay
    alive only for the lm_head, outside the checkpoints: ceil(lm_head copy / tp)."""
    if _checkpoints_fp32_inputs(job):
        return ceil(act.lm_head_autocast_copy_bytes(dims) / job.parallel.tp)
    return model_state.autocast_cache_bytes(spec, job)


def fp8_weight_copy_bytes(spec: ModelSpec, job: TrainJob) -> tuple[int, bool]:
    """(bytes, persistent) of the fp8 copies of the linear weights an --fp8 job multiplies
    with: an e4m3 copy and its transpose (Hopper's fp8 GEMM takes both operands K-major, so
    the backward's weight operand is a transposed copy), 2 B per linear parameter.  Megatron /
    Transformer Engine caches them for the whole step (TE Linear's fp8 weight workspace, kept
    across micro-batches): every linear on the card (/ tp / pp; routed experts / ep / pp under
    --ep); torchao float8 casts per call: one layer's linears, alive through its forward and
    backward (TensorGroup.numel already counts every layer: a layer's is numel / count)."""
    if not job.fp8:
        return 0, False
    scheme = scheme_for("fp8", spec)
    conv = [t for t in spec.tensors if converted(t, scheme)]
    p = job.parallel
    experts = sum(t.numel for t in conv if t.part == "routed_experts")
    dense = sum(t.numel for t in conv) - experts
    if job.framework == "megatron":
        if job.ep > 1:
            return ceil(2 * (dense / (p.tp * p.pp) + experts / (job.ep * p.pp))), True
        return ceil(2 * (dense + experts) / (p.tp * p.pp)), True
    layer_experts = sum(t.numel // t.count for t in conv if t.part == "routed_experts")
    layer_dense = sum(t.numel // t.count for t in conv) - layer_experts
    split = job.ep if job.ep > 1 else p.tp
    return ceil(2 * (layer_dense / p.tp + layer_experts / split)), False


def embedding_grad_bytes_per_card(dims: Dims, job: TrainJob) -> int:
    """Full fine-tune computing on bf16 parameters (every layout but torch.autocast's): the fp32
    dense embedding gradient built at the end of backward,
    ceil(activations.embedding_grad_transient_bytes / tp); 0 otherwise."""
    if not frameworks.layout(job).autocast and not job.is_lora:  # bf16 compute parameters
        return ceil(act.embedding_grad_transient_bytes(dims) / job.parallel.tp)
    return 0


def train_phases(
    *,
    resident_bytes: int,
    accumulated_grads_bytes: int,
    grads_bytes: int,
    autocast_bytes: int,
    held_bytes: int,
    loss_peak_bytes: int,
    backward_extra_bytes: int,
    optimizer_temp_bytes: int,
    embedding_grad_bytes: int,
    workspace_bytes: int,
    gathered_bytes: int = 0,
    root_bytes: int = 0,
    root_grad_bytes: int = 0,
    backward_layer_bytes: int = 0,
) -> dict[str, int]:
    """Torch-allocated bytes at each moment of a training step.  ``resident_bytes``: parameters
    + optimizer states (+ master weights, DDP buckets), present throughout; ZeRO-3 / FSDP's
    gathered layers (``gathered_bytes``) and root unit (``root_bytes``) exist in forward and
    backward only, FSDP's per-layer backward working set and the root's unsharded lm_head
    gradient (``backward_layer_bytes``, ``root_grad_bytes``) at the end of backward."""
    forward_backward_bytes = (
        resident_bytes + accumulated_grads_bytes + autocast_bytes + held_bytes + gathered_bytes
        + root_bytes
    )  # fmt: skip
    return {
        "forward (loss)": forward_backward_bytes + loss_peak_bytes + workspace_bytes,
        # the loss backward (saved log_softmax + its incoming and outgoing fp32 grads) and, with
        # checkpointing, the recompute of the last layer once the loss tensors are freed
        "backward": forward_backward_bytes + backward_extra_bytes + workspace_bytes,
        "optimizer step": resident_bytes + grads_bytes + optimizer_temp_bytes + workspace_bytes,
        # end of backward: every other gradient exists while the embedding's dense gradient is
        # built in fp32 and cast (embedding_dense_backward; measured on the tied Gemma-2 table),
        # or while FSDP runs the first layers' backward, whichever is larger
        "backward (embedding grad)": resident_bytes
        + grads_bytes
        + root_bytes
        + root_grad_bytes
        + max(embedding_grad_bytes, backward_layer_bytes)
        + workspace_bytes,
    }


def _check_train_job(spec: ModelSpec, job: TrainJob, machine: MachineProfile):
    """The layout's own refusals (experts, LoRA targets, op-level SAC, virtual pipeline), in
    this order; the model's dimensions, read between them."""
    parallel = job.parallel
    if job.ep > 1 and (spec.moe is None or spec.moe.num_experts % job.ep):
        raise JobError(f"--ep {job.ep}: " + ("the model has no routed experts" if spec.moe is None
                       else f"{spec.moe.num_experts} experts do not split over {job.ep} ranks"))  # fmt: skip
    check_parallel(spec, parallel.tp, parallel.pp, parallel.cards, machine)
    check_lora_targets(spec, job)
    dims = dims_of(spec)
    if job.checkpointing == "selective_op":
        why = act.op_sac_supported(dims)
        if why is None and job.is_lora:
            why = "modelled for full training only (a frozen base saves other tensors)"
        if why is not None:
            raise JobError(f"--checkpointing selective_op: {why}; use selective or full")
    if job.virtual_pipeline > 1 and spec.num_layers % (parallel.pp * job.virtual_pipeline):
        raise JobError(f"--virtual-pipeline {job.virtual_pipeline}: {spec.num_layers} layers do "
                       f"not split into {parallel.pp} x {job.virtual_pipeline} equal model chunks "
                       "(Megatron requires it)")  # fmt: skip
    return dims


@dataclass(frozen=True)
class _TrainTerms:
    """One card's training terms in bytes, each from its function (model_state.py,
    activations.py, this module); 0 where the layout has no such term."""

    weights: int
    master: int
    partition: int
    bucket: int
    root: int
    grads: int
    accumulated_grads: int
    optimizer: int
    optimizer_temp: int
    gathered: int
    fp8: int
    fp8_persistent: bool
    held: int
    recompute: int
    autocast: int
    loss_saved: int
    loss_peak: int
    workspace: int
    root_grad: int
    backward_layer: int
    ssm_note: str = ""  # the Gated DeltaNet / Mamba-2 path the saved set was taken on
    eager_experts: int = 0  # --experts eager: the per-expert weight-gradient accumulation


def _train_terms(spec: ModelSpec, job: TrainJob, dims, targets, layout,
                 defaults: rt.RuntimeDefaults) -> _TrainTerms:  # fmt: skip
    tokens = job.micro_batch * job.seq
    optimizer_offloaded = job.offload in ("optimizer", "params")
    params_offloaded = job.offload == "params"
    fp8_bytes, fp8_persistent = fp8_weight_copy_bytes(spec, job)
    held_bytes, recompute_bytes = saved_activation_bytes_per_card(dims, job, targets, defaults)
    # the loss on vocabulary shards (Megatron's vocab-parallel cross-entropy) or on logits
    # gathered whole to every TP rank (transformers' tp_plan, DTensor without loss_parallel)
    loss_split = job.parallel.tp if layout.loss_parallel else 1
    return _TrainTerms(
        weights=0 if params_offloaded else model_state.param_bytes_per_card(spec, job),
        master=0 if optimizer_offloaded else model_state.master_bytes_per_card(spec, job),
        partition=(
            0 if optimizer_offloaded else model_state.grad_partition_bytes_per_card(spec, job)
        ),
        bucket=model_state.grad_bucket_bytes_per_card(spec, job),
        root=model_state.root_unit_bytes(spec, job),
        grads=model_state.grad_bytes_per_card(spec, job),
        accumulated_grads=model_state.accumulated_grad_bytes(spec, job),
        optimizer=(
            0 if optimizer_offloaded else model_state.optimizer_state_bytes_per_card(spec, job)
        ),
        optimizer_temp=(
            0 if optimizer_offloaded else model_state.optimizer_step_temp_bytes(spec, job)
        ),
        gathered=model_state.gathered_layer_param_bytes(spec, job),
        fp8=fp8_bytes,
        fp8_persistent=fp8_persistent,
        held=held_bytes,
        recompute=recompute_bytes,
        autocast=autocast_cache_bytes_per_card(spec, dims, job),
        loss_saved=ceil(act.loss_saved_bytes(dims, tokens) / loss_split),
        loss_peak=ceil(act.loss_transient_bytes(dims, tokens) / loss_split),
        workspace=rt.cublas_workspace_bytes(defaults, training=True),
        root_grad=model_state.fsdp_root_grad_bytes(spec, job),
        backward_layer=model_state.fsdp_backward_layer_bytes(spec, job),
        ssm_note=_ssm_note(ssm_path(dims, job.ssm_kernels)),
        eager_experts=(
            act.eager_experts_backward_bytes(
                dims, layout.grad, job.ep if job.ep > 1 else job.parallel.tp
            )
            if job.experts == "eager" and not job.is_lora
            else 0
        ),
    )


def _train_items(t: _TrainTerms, job: TrainJob, layout) -> list[Item]:
    """The card's line items, each with the function it comes from (the terms that are 0 for
    this layout are left out, the always-present ones kept at 0)."""
    fw_src = f"{layout.framework} layout: {layout.text} (ledger/frameworks.toml)"
    items = [
        Item(
            "parameters" + (" (frozen base + adapters)" if job.is_lora else ""),
            t.weights,
            f"model_state.param_bytes_per_card: params x {layout.param} B / tp / pp (/ dp from the stage that shards them); {fw_src}",
        ),
        Item(
            "gradients",
            t.grads,
            f"model_state.grad_bytes_per_card: trainable params x {layout.grad} B (/ dp from the stage that shards them)",
        ),
        Item(
            f"optimizer states ({job.optimizer})",
            t.optimizer,
            f"model_state.optimizer_state_bytes_per_card: states in {model_state._state_elem(job)} B elements",
        ),
        Item(
            f"optimizer step temporaries ({job.optimizer_impl})",
            t.optimizer_temp,
            "model_state.optimizer_step_temp_bytes: foreach AdamW's sqrt list",
        ),
        Item(
            f"saved activations ({job.checkpointing} checkpointing)",
            t.held,
            "activations.saved_activations_bytes (derivations 1-6)" + t.ssm_note,
        ),
        Item(
            "loss: logits + fp32 copy + log_softmax",
            t.loss_peak,
            "activations.loss_transient_bytes: 10 x vocab per token",
        ),
    ]
    fp8_how = "build.fp8_weight_copy_bytes: 2 B per linear parameter; " + (
        "Transformer Engine caches them for the step (every linear / tp / pp)"
        if t.fp8_persistent
        else "torchao float8 casts per call (one layer's linears / tp, through its forward and backward)"
    )
    for name, value, how in (
        ("fp32 master weights", t.master,
         "model_state.master_bytes_per_card: 4 B per trainable parameter (/ dp from ZeRO-1)"),
        ("fp32 gradient partition", t.partition,
         "model_state.grad_partition_bytes_per_card: DeepSpeed's fp32 gradients the optimizer steps on"),
        ("DDP gradient buckets", t.bucket,
         "model_state.grad_bucket_bytes_per_card: gradient_as_bucket_view=False keeps a second copy"),
        ("FSDP root unit gathered (embeddings, lm_head)", t.root,
         "model_state.root_unit_bytes: the root is not resharded after forward"),
        ("one layer recomputed in backward", t.recompute,
         "checkpointing recomputes one layer's activations at a time"),
        ("autocast bf16 weight copies", t.autocast,
         "torch.autocast caches one bf16 copy per cast weight"),
        ("all-gathered layer parameters", t.gathered,
         "model_state.gathered_layer_param_bytes: FSDP keeps the last layer's all-gather buffer, DeepSpeed ZeRO-3 gathers the current and the prefetched layer"),
        ("fp8 weight copies (e4m3 + transpose)", t.fp8, fp8_how),
        ("eager experts: one expert's full-size weight gradient + the sum (backward)",
         t.eager_experts, "activations.eager_experts_backward_bytes: 2 x experts x h x rows x grad bytes"),
    ):  # fmt: skip
        if value:
            items.append(Item(name, value, how))
    items.append(
        Item(
            "cuBLAS workspaces (forward + backward)",
            t.workspace,
            "measured 64-70 MiB on H200 in training (CUDA allocated - fake peak)",
        )
    )
    if t.root_grad or t.backward_layer:
        items.append(
            Item(
                "FSDP backward working set (layer gathers, reduce-scatter, lm_head grad)",
                t.root_grad + t.backward_layer,
                "model_state.fsdp_backward_layer_bytes (3 layers gathered + the reduce-scatter "
                "input in the reduce dtype) + fsdp_root_grad_bytes (the unsharded lm_head gradient)",
            )
        )
    return items


def _train_extras(lg: Ledger, job: TrainJob, layout, targets) -> None:
    """The framework layout and the adapters the ledger assumed, for the output."""
    lg.extras["framework"] = {
        "framework": job.framework,
        "layout_of": layout.framework,
        "framework_source": job.framework_source,
        "precision": job.precision,
        "precision_source": job.precision_source,
        "layout": layout.text,
        "layout_precision": layout.precision,
        "note": layout.note,
        "sequence_parallel": job.sequence_parallel if job.parallel.tp > 1 else None,
        "state_bytes_per_param": frameworks.layout(job).state_bytes_per_param(
            frameworks.STAGE[job.shard], job.parallel.dp
        ),
        "assumed": frameworks.describe(job),
        "source": layout.source,
    }
    if job.is_lora:
        lg.extras["lora"] = {
            "targets": list(targets or ()),
            "targets_source": "given"
            if job.lora_targets is not None
            else "PEFT's default for the model type",
            "rank": job.rank,
            "adapter_dtype": job.adapter_dtype,
        }


def train_ledger(
    spec: ModelSpec,
    job: TrainJob,
    machine: MachineProfile,
    defaults: rt.RuntimeDefaults = rt.DEFAULTS,
) -> Ledger:
    """Training (full, LoRA, QLoRA): model state (model_state.py), saved activations and the loss
    (activations.py) per card, the peak over the phases of ``train_phases``; host RAM holds the
    processes, offloaded state, dataloader workers and the checkpoint's page cache."""
    dims = _check_train_job(spec, job, machine)
    parallel = job.parallel
    layout = frameworks.layout(job)
    targets = model_state.lora_target_names(spec, job) if job.is_lora else None
    t = _train_terms(spec, job, dims, targets, layout, defaults)
    phases = train_phases(
        resident_bytes=t.weights + t.optimizer + t.master + t.bucket
        + (t.fp8 if t.fp8_persistent else 0),
        gathered_bytes=t.gathered + (0 if t.fp8_persistent else t.fp8),
        root_bytes=t.root,
        root_grad_bytes=t.root_grad,
        backward_layer_bytes=t.backward_layer,
        accumulated_grads_bytes=t.accumulated_grads,
        grads_bytes=t.grads + t.partition,
        autocast_bytes=t.autocast,
        held_bytes=t.held,
        loss_peak_bytes=t.loss_peak,
        backward_extra_bytes=act.loss_backward_bytes(
            t.loss_saved, t.recompute, dims, job.micro_batch * job.seq
        ) + t.eager_experts,
        optimizer_temp_bytes=t.optimizer_temp,
        embedding_grad_bytes=embedding_grad_bytes_per_card(dims, job),
        workspace_bytes=t.workspace,
    )  # fmt: skip
    card = _finish(
        list(range(parallel.cards)),
        _train_items(t, job, layout),
        phases,
        card_capacity(machine, parallel.cards),
        rt.training_communicators(parallel.tp, parallel.pp, parallel.dp),
        defaults,
        checkpointed=job.checkpointing != "none",
    )
    lg = Ledger(_train_kind(job), [card], _host(_train_host_items(spec, job), machine))
    if note := eager_only_note(spec, job.attention):
        lg.notes.append(note)
    _train_extras(lg, job, layout, targets)
    return lg


def _train_kind(job: TrainJob) -> str:
    return "qlora" if job.qlora else ("lora" if job.is_lora else "train")


def _train_host_items(spec: ModelSpec, job: TrainJob) -> list[Item]:
    ranks = job.parallel.cards
    items = _process_items(ranks)
    if job.offload in ("optimizer", "params"):
        items.append(
            Item(
                "offloaded optimizer step (fp32 master + Adam m, v + fp32 gradients)",
                model_state.offloaded_optimizer_host_bytes(spec, job),
                "ZeRO-Offload runs DeepSpeedCPUAdam on fp32 partitions in host RAM whatever the "
                "training precision: 16 B per trainable parameter (DeepSpeed 'Memory Requirements' "
                "estimator, cpu_offload: 16 x params before its 1.5 buffer factor; Ren et al. "
                "2021, ZeRO-Offload 4.1)",
            )
        )
    if job.offload == "params":
        items.append(
            Item(
                "offloaded parameters (pinned)",
                model_state.offloaded_param_host_bytes(spec, job),
                "ZeRO-3 offload keeps the parameter shards on the CPU",
            )
        )
    if job.host.workers:
        items.append(
            Item(
                f"dataloader: {job.host.workers} workers x {ranks} ranks",
                dataloader_host_bytes(job),
                "each worker is its own process: private RSS + prefetch_factor x batch bytes",
            )
        )
    items.append(
        Item(
            "page cache of the checkpoint while loading",
            weight_bytes(spec, config_scheme(spec)).total_bytes,
            "safetensors mmap: the file passes through the page cache once",
            reclaimable=True,
        )
    )
    return items


# -- load -----------------------------------------------------------------------------------


def load_cpu_copies(job: LoadJob) -> int:
    """Full state dicts the loading ranks materialise in host RAM.  safetensors: every rank
    builds its tensors before .to(device) (rank0: one; meta: none, tensors go straight to the
    card); .bin: torch.load unpickles the whole state dict per loading rank (rank0 and meta:
    one)."""
    if job.format == "safetensors":
        if job.strategy == "meta":
            return 0
        return 1 if job.strategy == "rank0" else job.ranks
    return 1 if job.strategy in ("rank0", "meta") else job.ranks


def load_ledger(spec: ModelSpec, job: LoadJob, machine: MachineProfile) -> Ledger:
    """Loading a checkpoint: the page cache of the file and the ``load_cpu_copies`` state dicts
    in host RAM; the weights arriving on one card."""
    if job.ranks > max(1, len(machine.accelerators)):
        raise JobError(
            f"--ranks {job.ranks}: machine {machine.name} has {len(machine.accelerators)} cards"
        )
    checkpoint_bytes = weight_bytes(spec, _serve_scheme(spec, job.dtype)).total_bytes
    copies = load_cpu_copies(job)
    items = _process_items(job.ranks)
    if job.format == "safetensors":
        items.append(
            Item(
                "page cache (mmap of the checkpoint, shared by ranks)",
                checkpoint_bytes,
                "safetensors load: file pages pass through the page cache once per host",
                reclaimable=True,
            )
        )
        if copies:
            items.append(
                Item(
                    f"materialised CPU state dicts ({copies} rank(s))",
                    copies * checkpoint_bytes,
                    "each loading rank builds its tensors in host RAM before .to(device)",
                )
            )
    else:
        items.append(
            Item(
                "page cache of the .bin files",
                checkpoint_bytes,
                "torch.load reads the file through the page cache",
                reclaimable=True,
            )
        )
        items.append(
            Item(
                f"unpickled state dicts ({copies} rank(s))",
                copies * checkpoint_bytes,
                "torch.load materialises the full state dict in host RAM per rank",
            )
        )
        if not job.low_cpu_mem_usage:
            items.append(
                Item(
                    "randomly initialised model before load",
                    copies * checkpoint_bytes,
                    "low_cpu_mem_usage=False builds the model on CPU, then copies weights in",
                )
            )
    card = CardLedger(
        [0],
        [Item("weights arriving on the card", checkpoint_bytes, "weight bytes")],
        checkpoint_bytes,
        checkpoint_bytes,
        card_capacity(machine, 1),
        "load",
        {"load": checkpoint_bytes},
    )
    return Ledger("load", [card], _host(items, machine))
