"""The transformers (``generate()``) serving card: prefill and decode phases."""

from __future__ import annotations

from math import ceil

from nodeledger.ledger import activations as act
from nodeledger.ledger import kv_cache as kv
from nodeledger.ledger import runtime as rt
from nodeledger.ledger.core import CardCall, CardLedger, Item, _finish, _ssm_note, ssm_path
from nodeledger.ledger.dims import Dims
from nodeledger.ledger.jobs import ServeJob
from nodeledger.ledger.weights import (
    Scheme,
)
from nodeledger.machine.profile import MachineProfile
from nodeledger.model.spec import ModelSpec


def _resolve_hf(job: ServeJob, machine: MachineProfile, spec: ModelSpec | None):
    return job, {}


def _hf_engine_card(c: CardCall) -> tuple[CardLedger, dict]:
    notes = []
    if c.job.concurrency is None:
        notes.append(
            "--engine hf with concurrency 'max': card memory unknown, shown for 1 sequence"
        )
    card = _hf_card(
        c.spec, c.job, c.dims, c.scheme, c.weights_bytes, c.kv_dtype_bytes, c.kv_split,
        c.capacity, c.communicators, c.cards, c.defaults, weights_how=c.weights_note,
    )  # fmt: skip
    return card, {"notes": notes}


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
