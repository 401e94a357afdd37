"""Model state per card: weights, gradients, optimizer states, their sharding, LoRA adapters.

Each function returns bytes on one card.  Sources:
  - PyTorch optimizers keep states in the parameter's dtype (torch.optim.AdamW: exp_avg and
    exp_avg_sq ``torch.zeros_like(p)``; SGD momentum_buffer likewise).
  - Mixed precision as PyTorch AMP does it: fp32 parameters (the master copy), fp32 grads, fp32
    states; autocast caches one bf16 copy of each weight it casts for the forward
    (torch.autocast cache, freed when the autocast region exits).
  - bitsandbytes AdamW8bit: two uint8 states + one fp32 absmax per 256-value block each
    (bnb.optim.AdamW8bit, block-wise quantisation, Dettmers et al. 2022).
  - Adafactor (transformers.Adafactor defaults, beta1=None): factored second moment, one fp32
    row and one fp32 column vector per matrix; 1-D parameters keep a full fp32 vector.
  - ZeRO (Rajbhandari et al. 2020): stage 1 shards optimizer states, 2 also gradients, 3 also
    parameters across the dp ranks; FSDP FULL_SHARD = ZeRO-3, SHARD_GRAD_OP = ZeRO-2,
    HYBRID_SHARD = ZeRO-3 within a node (here: all dp ranks are in the box).
  - Expert parallelism (--ep, MoE full training; Megatron-Core --expert-model-parallel-size with
    expert tensor parallel 1, torchtitan / NeMo AutoModel ep): the ep ranks of the tp x dp
    group hold num_experts / ep whole routed experts each; the rest of the model is split by tp
    as before.  A sharded piece of the experts' state is shared by the expert-data-parallel
    group (tp x dp / ep ranks), the dense part's by dp.
"""

from __future__ import annotations

from math import ceil

from nodeledger.ledger import comm
from nodeledger.ledger import frameworks as fw
from nodeledger.ledger.jobs import JobError, TrainJob
from nodeledger.ledger.weights import Scheme, weight_bytes
from nodeledger.model.spec import ModelSpec, TensorGroup

ADAPTER_BYTES = {"fp32": 4, "bf16": 2}


# ZeRO-Offload's host side: fp32 master weights (4) + Adam m (4) + v (4) + the fp32 gradient
# partition the CPU optimizer steps on (4).  DeepSpeed's estimator uses 16 (18 with parameter
# offload, whose 2 B of bf16 parameters train.py adds as its own item).
OFFLOAD_BYTES_PER_PARAM = 16


def shard_factor(job: TrainJob, what: str) -> int:
    """How many dp ranks share ``what`` ("params", "grads", "optimizer", "master",
    "grad_partition"): dp from the stage the framework's layout shards it at
    (frameworks.toml), else 1."""
    lay = fw.layout(job)
    frm = {"params": lay.param_from, "grads": lay.grad_from, "optimizer": lay.state_from,
           "master": lay.master_from, "grad_partition": lay.grad_partition_from}[what]  # fmt: skip
    return job.parallel.dp if fw.STAGE[job.shard] >= frm else 1


def expert_params(spec: ModelSpec) -> int:
    """The routed experts' parameters (all MoE layers)."""
    return sum(t.numel for t in spec.tensors if t.part == "routed_experts")


def ep_card_params(spec: ModelSpec, job: TrainJob, what: str, dense: float | None = None,
                   experts: float | None = None) -> float:  # fmt: skip
    """Elements of ``what`` one card holds under expert parallelism (job.ep > 1): the dense
    part (default: every parameter but the routed experts) / tp / pp / (dp where the stage
    shards it) + the experts (default: all routed experts) / ep / pp / (tp x dp / ep where the
    stage shards it)."""
    p = job.parallel
    all_experts = expert_params(spec)
    ex = all_experts if experts is None else experts
    de = spec.params_total() - all_experts if dense is None else dense
    sharded = shard_factor(job, what) > 1
    edp = max(1, p.tp * p.dp // job.ep)
    return de / (p.tp * p.pp) / shard_factor(job, what) + ex / (job.ep * p.pp) / (
        edp if sharded else 1
    )


def dp_sync_bytes_per_step(spec: ModelSpec, job: TrainJob) -> float:
    """Data-parallel traffic of one optimizer step per rank (ledger/comm.py dp_bytes_per_step):
    the gradients in the layout's reduce dtype and the parameters gathered in bf16 (the frozen
    LoRA base too), / tp / pp; under --ep the dense part over the dp ranks and the routed
    experts (/ ep / pp) over their expert-data-parallel group (tp x dp / ep ranks)."""
    p = job.parallel
    elem = fw.layout(job).reduce_elem
    if job.ep > 1:
        ex = expert_params(spec)
        dense = spec.params_total() - ex
        edp = max(1, p.tp * p.dp // job.ep)
        return comm.dp_bytes_per_step(
            dense * elem / (p.tp * p.pp), dense * 2 / (p.tp * p.pp), p.dp, job.shard,
            job.grad_accum) + comm.dp_bytes_per_step(
            ex * elem / (job.ep * p.pp), ex * 2 / (job.ep * p.pp), edp, job.shard, job.grad_accum)  # fmt: skip
    grads = trainable_params(spec, job) * elem / (p.tp * p.pp)
    params = spec.params_total() * 2 / (p.tp * p.pp)
    return comm.dp_bytes_per_step(grads, params, p.dp, job.shard, job.grad_accum)


def _adapter_bytes(job: TrainJob) -> int:
    """PEFT adapters' element size: fp32 with autocast_adapter_dtype=True (PEFT's default since
    0.12), the base's bf16 with autocast_adapter_dtype=False (--adapter-dtype bf16)."""
    return ADAPTER_BYTES[job.adapter_dtype]


def trainable_params(spec: ModelSpec, job: TrainJob) -> int:
    """Full fine-tune: every parameter.  LoRA: r x (in + out) per targeted linear (A: r x in,
    B: out x r; peft LoraLayer)."""
    if not job.is_lora:
        return spec.params_total()
    return sum(job.rank * (t.shape[-1] + t.shape[-2]) * t.count for t in lora_targets(spec, job))


def peft_refused_modules(spec: ModelSpec) -> tuple[frozenset[str], str]:
    """(module names PEFT refuses as LoRA targets on this model, its source): the Mamba-based
    model types' incompatible modules (frameworks.toml [peft.mamba_incompatible]), else none."""
    rule = fw.data()["peft"].get("mamba_incompatible", {})
    if spec.model_type not in rule.get("model_types", ()):
        return frozenset(), ""
    return frozenset(rule.get("modules", ())), rule.get("source", "peft")


def check_mamba_targets(spec: ModelSpec, names: tuple[str, ...]) -> None:
    """PEFT refuses LoRA on some modules of Mamba-based models: the same refusal, as one
    JobError."""
    refused, source = peft_refused_modules(spec)
    bad = [n for n in names if n in refused]
    if bad:
        raise JobError(
            f"--lora-targets {','.join(bad)}: PEFT refuses LoRA on {', '.join(bad)} of "
            f"Mamba-based models ({spec.model_type}; {source}); leave "
            f"{'it' if len(bad) == 1 else 'them'} out"
        )


def lora_target_names(spec: ModelSpec, job: TrainJob) -> tuple[str, ...]:
    """``--lora-targets`` as given, else PEFT's default target modules for the model type
    (frameworks.toml [peft.lora_targets]); a type PEFT has no default for is a JobError, as
    PEFT itself raises."""
    if job.lora_targets is not None:
        check_mamba_targets(spec, job.lora_targets)
        return job.lora_targets
    table = fw.data()["peft"]["lora_targets"]
    names = table.get(spec.model_type)
    if names is None:
        refused, _ = peft_refused_modules(spec)
        have = sorted({t.name.split(".")[-2] for t in spec.tensors if t.kind == "linear"} - refused)
        raise JobError(
            f"PEFT has no default LoRA target modules for model_type {spec.model_type!r} (it "
            f"raises 'Please specify target_modules'): give --lora-targets, e.g. from "
            + ", ".join(have)
        )
    return tuple(names)


def lora_targets(spec: ModelSpec, job: TrainJob) -> list[TensorGroup]:
    """The linear tensor groups whose name ends in ``.<target>.weight`` (peft target_modules)."""
    targets = tuple(f".{name}.weight" for name in lora_target_names(spec, job))
    return [t for t in spec.tensors if t.kind == "linear" and t.name.endswith(targets)]


def param_bytes_per_card(spec: ModelSpec, job: TrainJob) -> int:
    """Weights resident on one card: params x the layout's parameter bytes (frameworks.toml)
    / tp / pp, / dp from the stage that shards them.  LoRA: frozen base at bf16 (QLoRA: NF4
    with double quant), sharded likewise, + adapters in their dtype (_adapter_bytes) / tp / pp."""
    split = job.parallel.tp * job.parallel.pp
    if job.is_lora:
        base = weight_bytes(spec, Scheme("nf4") if job.qlora else Scheme("bf16")).total_bytes
        adapters = trainable_params(spec, job) * _adapter_bytes(job)
        return ceil(base / split / shard_factor(job, "params")) + ceil(adapters / split)
    if job.ep > 1:
        return ceil(ep_card_params(spec, job, "params") * fw.layout(job).param)
    full = spec.params_total() * fw.layout(job).param
    return ceil(full / split / shard_factor(job, "params"))


def master_bytes_per_card(spec: ModelSpec, job: TrainJob) -> int:
    """The fp32 master copy a framework keeps beside bf16 parameters (DeepSpeed's bf16 mode,
    Megatron): trainable params x 4 / tp / pp, / dp from the stage that shards it; 0 where the
    parameters are themselves the master (PyTorch, FSDP)."""
    lay = fw.layout(job)
    if job.ep > 1:
        return ceil(ep_card_params(spec, job, "master") * lay.master)
    split = job.parallel.tp * job.parallel.pp * shard_factor(job, "master")
    return ceil(trainable_params(spec, job) * lay.master / split)


def grad_bytes_per_card(spec: ModelSpec, job: TrainJob) -> int:
    """Gradients in the layout's dtype (trainable parameters only; LoRA adapters in theirs)
    / tp / pp, / dp from the stage that shards them; 0 where the stage reduces them straight
    into a partition (DeepSpeed ZeRO-3)."""
    lay = fw.layout(job)
    if fw.STAGE[job.shard] >= lay.grad_absent_from:
        return 0
    split = job.parallel.tp * job.parallel.pp
    dtype = _adapter_bytes(job) if job.is_lora else lay.grad
    if job.ep > 1:
        return ceil(ep_card_params(spec, job, "grads") * dtype)
    return ceil(trainable_params(spec, job) * dtype / split / shard_factor(job, "grads"))


def grad_partition_bytes_per_card(spec: ModelSpec, job: TrainJob) -> int:
    """DeepSpeed's fp32 gradient partition the optimizer steps on: trainable params x 4 / tp /
    pp / dp (ZeRO >= 1); 0 for the other frameworks."""
    lay = fw.layout(job)
    if job.ep > 1:
        return ceil(ep_card_params(spec, job, "grad_partition") * lay.grad_partition)
    split = job.parallel.tp * job.parallel.pp * shard_factor(job, "grad_partition")
    return ceil(trainable_params(spec, job) * lay.grad_partition / split)


def grad_bucket_bytes_per_card(spec: ModelSpec, job: TrainJob) -> int:
    """DDP's reducer buckets: with gradient_as_bucket_view=False (the default) they hold a
    second copy of every gradient (dp > 1): the gradient bytes again; 0 otherwise."""
    if not fw.layout(job).grad_buckets or job.parallel.dp <= 1:
        return 0
    return grad_bytes_per_card(spec, job)


def optimizer_state_bytes_per_card(spec: ModelSpec, job: TrainJob) -> int:
    """Optimizer states for the trainable parameters / tp / pp, / dp from the stage that
    shards them, in the layout's state dtype (LoRA: the adapters').

    AdamW: exp_avg + exp_avg_sq, 2 x params x dtype; AdamW8bit: two uint8 states + one fp32
    absmax per 256-value block each, 2 x (params + 4 x ceil(params / 256)); SGD momentum:
    params x dtype; Adafactor: ``adafactor_state_bytes`` (sources in the module docstring)."""
    params = trainable_params(spec, job)
    dtype = _state_elem(job)
    if job.optimizer == "adamw":
        states = 2 * params * dtype
    elif job.optimizer == "adamw8bit":
        states = 2 * (params + 4 * ceil(params / 256))
    elif job.optimizer == "sgd":
        states = params * dtype
    else:  # adafactor
        states = adafactor_state_bytes(spec, job)
    split = job.parallel.tp * job.parallel.pp
    if job.ep > 1:  # the same states per parameter, on the card's share of the parameters
        share = ep_card_params(spec, job, "optimizer") / max(1, params)
        return ceil(states * share)
    return ceil(states / split / shard_factor(job, "optimizer"))


def _state_elem(job: TrainJob) -> int:
    """Element size of the optimizer states: the layout's (fp32 beside a master copy); LoRA
    adapters' own dtype unless the framework keeps an fp32 master."""
    lay = fw.layout(job)
    if job.is_lora and not lay.master:
        return _adapter_bytes(job)
    return lay.state_elem


def adafactor_state_bytes(spec: ModelSpec, job: TrainJob) -> int:
    """Adafactor (transformers.Adafactor, beta1=None): per matrix one fp32 row and one fp32
    column vector, 4 x (rows + cols); 1-D parameters a full fp32 vector, 4 x numel.  LoRA:
    A and B are both 2-D, 4 x r x (in + out) per target."""
    groups = lora_targets(spec, job) if job.is_lora else spec.tensors
    total = 0
    for group in groups:
        if job.is_lora:
            total += (
                4 * job.rank * (group.shape[-1] + group.shape[-2]) * group.count
            )  # A and B: both 2-D
        elif len(group.shape) >= 2:
            total += 4 * (group.shape[-2] + group.shape[-1]) * group.count
        else:
            total += 4 * group.numel
    return total


def optimizer_step_temp_bytes(spec: ModelSpec, job: TrainJob) -> int:
    """Transient memory of one optimizer step.

    foreach AdamW (torch/optim/adamw.py ``_multi_tensor_adamw``): ``exp_avg_sq_sqrt =
    torch._foreach_sqrt(exp_avg_sqs)`` allocates one state-sized list (the rest is in place).
    fused: no state-sized temporaries.  for-loop: one parameter-sized temporary at a time.
    AdamW8bit dequantises block by block (no full-size temporary).
    """
    if job.optimizer in ("adamw8bit", "adafactor"):
        return 0
    if job.optimizer == "sgd" and job.optimizer_impl != "forloop":
        return 0
    dtype = _state_elem(job)
    split = job.parallel.tp * job.parallel.pp * shard_factor(job, "optimizer")
    if job.optimizer_impl == "fused":
        return 0
    if job.optimizer_impl == "forloop":
        biggest = max((t.numel // t.count for t in spec.tensors), default=0)
        return biggest * dtype
    if job.ep > 1:
        return ceil(ep_card_params(spec, job, "optimizer") * dtype)
    return ceil(trainable_params(spec, job) * dtype / split)


def autocast_cache_bytes(spec: ModelSpec, job: TrainJob) -> int:
    """Mixed precision: bf16 copies of the weights autocast casts for matmuls (linear layers
    and the lm_head; embeddings are looked up in fp32).  A tied lm_head multiplies by the
    embedding table, so that table's bf16 copy is kept for backward too (GPT-2 mixed: the
    [50257, 768] bf16 copy in benchmarks/accuracy/gpu_h200/gpt2_cuda_oplog.tsv)."""
    if not fw.layout(job).autocast or job.is_lora:
        return 0
    linear = sum(t.numel for t in spec.tensors if t.kind in ("linear", "lm_head"))
    if spec.tied_embeddings:
        linear += spec.vocab_size * spec.hidden_size
    if job.ep > 1:
        ex = expert_params(spec)
        return ceil(2 * ep_card_params(spec, job, "params", dense=linear - ex, experts=ex))
    return ceil(linear * 2 / (job.parallel.tp * job.parallel.pp * shard_factor(job, "params")))


def accumulated_grad_bytes(spec: ModelSpec, job: TrainJob) -> int:
    """Gradients persist across micro-batches under gradient accumulation: the gradient bytes
    during forward and backward when grad_accum > 1, else 0 (they are created in backward)."""
    return grad_bytes_per_card(spec, job) if job.grad_accum > 1 else 0


ROOT_PARTS = ("embeddings", "lm_head")


def _root_params(spec: ModelSpec) -> int:
    return sum(t.numel for t in spec.tensors if t.part in ROOT_PARTS or t.name == "norm.weight")


def _layer_gathered_bytes(spec: ModelSpec, job: TrainJob) -> int:
    """One decoder layer's parameters unsharded in the compute dtype (FSDP's MixedPrecisionPolicy
    param_dtype; LoRA: the frozen base in bf16): ceil(layer params x gathered_elem / tp), the
    layer's parameters being the model's without the root unit (embeddings, final norm,
    lm_head)."""
    elem = 2 if job.is_lora else fw.layout(job).gathered_elem
    body = spec.params_total() - _root_params(spec)
    if job.ep > 1:  # the layer's dense part / tp and its own experts (/ ep) gathered
        ex = expert_params(spec)
        per = (body - ex) / job.parallel.tp + ex / job.ep
        return ceil(per * elem / max(1, spec.num_layers))
    return ceil(body * elem // max(1, spec.num_layers) / job.parallel.tp)


def gathered_layer_param_bytes(spec: ModelSpec, job: TrainJob) -> int:
    """All-gathered layer parameters during the forward; 0 when parameters are not sharded.
    FSDP2 / FSDP1: one layer -- the last all-gather's output buffer stays allocated until the
    next all-gather (measured at the loss of an 8-rank fake-process-group FSDP2 run:
    benchmarks/accuracy/sharded); DeepSpeed ZeRO-3: the current and the prefetched layer (its
    estimator's 4 B x the largest layer's parameters)."""
    if shard_factor(job, "params") <= 1:
        return 0
    layers = 1 if fw.layout(job).root_unsharded else 2
    return layers * _layer_gathered_bytes(spec, job)


def fsdp_backward_layer_bytes(spec: ModelSpec, job: TrainJob) -> int:
    """FSDP's working set while a layer runs its backward (FSDP2, measured as above): the
    layer's unsharded parameters, its all-gather buffer and the prefetched next layer's (3 x
    one layer in the compute dtype), and with a reduce dtype other than the compute dtype
    (MixedPrecisionPolicy reduce_dtype=fp32) the reduce-scatter input, one layer's gradients
    in the reduce dtype; 0 for other frameworks or unsharded parameters."""
    lay = fw.layout(job)
    if shard_factor(job, "params") <= 1 or not lay.root_unsharded:
        return 0
    layer = _layer_gathered_bytes(spec, job)
    rs = 0
    if not job.is_lora and lay.reduce_elem != lay.gathered_elem:
        rs = ceil(layer * lay.reduce_elem / lay.gathered_elem)
    return 3 * layer + rs


def fsdp_root_grad_bytes(spec: ModelSpec, job: TrainJob) -> int:
    """The root unit's unsharded lm_head gradient, in the compute dtype, held from the loss
    backward until the root reduce-scatters at the end of backward (FSDP2, measured); the
    tied table's for tied embeddings; 0 for LoRA (a frozen head) or other frameworks."""
    lay = fw.layout(job)
    if job.is_lora or shard_factor(job, "params") <= 1 or not lay.root_unsharded:
        return 0
    head = sum(t.numel for t in spec.tensors if t.part == "lm_head")
    if not head:
        head = sum(t.numel for t in spec.tensors if t.part == "embeddings")
    return ceil(head * lay.gathered_elem / job.parallel.tp)


def root_unit_bytes(spec: ModelSpec, job: TrainJob) -> int:
    """FSDP's root unit (embeddings, final norm, lm_head): the root is not resharded after
    forward (fully_shard: reshard_after_forward is False for the root; FSDP1 likewise), so its
    parameters stay all-gathered in the compute dtype from the lm_head's forward through the
    backward: root params x gathered_elem / tp; 0 when parameters are not sharded or the
    framework reshards (DeepSpeed gathers the embeddings like any layer)."""
    lay = fw.layout(job)
    if shard_factor(job, "params") <= 1 or not lay.root_unsharded:
        return 0
    elem = 2 if job.is_lora else lay.gathered_elem
    return ceil(_root_params(spec) * elem / job.parallel.tp)


def offloaded_optimizer_host_bytes(spec: ModelSpec, job: TrainJob) -> int:
    """ZeRO-Offload runs DeepSpeedCPUAdam on fp32 partitions in host RAM whatever the training
    precision: OFFLOAD_BYTES_PER_PARAM (16) x trainable parameters (DeepSpeed 'Memory
    Requirements' estimator, cpu_offload: 16 x params before its 1.5 buffer factor; Ren et al.
    2021, ZeRO-Offload 4.1)."""
    return OFFLOAD_BYTES_PER_PARAM * trainable_params(spec, job)


def offloaded_param_host_bytes(spec: ModelSpec, job: TrainJob) -> int:
    """ZeRO-3 parameter offload keeps the parameter shards on the CPU (pinned): the per-card
    parameter bytes x dp."""
    return param_bytes_per_card(spec, job) * job.parallel.dp
