"""Training and LoRA / QLoRA ledgers: model state by framework layout, saved activations per
phase, the pipeline's in-flight micro-batches, the host side (dataloader, offload).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from nodeledger.ledger import activations as act
from nodeledger.ledger import frameworks, model_state
from nodeledger.ledger import runtime as rt
from nodeledger.ledger.core import (
    Item,
    Ledger,
    _finish,
    _host,
    _process_items,
    _ssm_note,
    card_capacity,
    check_parallel,
    dataloader_host_bytes,
    eager_only_note,
    ssm_path,
)
from nodeledger.ledger.dims import Dims, dims_of
from nodeledger.ledger.jobs import JobError, TrainJob
from nodeledger.ledger.weights import (
    config_scheme,
    converted,
    scheme_for,
    weight_bytes,
)
from nodeledger.machine.profile import MachineProfile
from nodeledger.model.spec import ModelSpec


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
