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
"""

from __future__ import annotations

from math import ceil

from nodeledger.ledger.jobs import TrainJob
from nodeledger.ledger.weights import Scheme, weight_bytes
from nodeledger.model.spec import ModelSpec, TensorGroup

PARAM_BYTES = {"bf16": 2, "mixed": 4}
# peft keeps LoRA adapter weights in fp32 over a bf16/fp16 base (get_peft_model's
# autocast_adapter_dtype=True, the default since peft 0.12): weights, grads and states fp32.
LORA_ADAPTER_BYTES = 4


# ZeRO-Offload's host side: fp32 master weights (4) + Adam m (4) + v (4) + the fp32 gradient
# partition the CPU optimizer steps on (4).  DeepSpeed's estimator uses 16 (18 with parameter
# offload, whose 2 B of bf16 parameters build.py adds as its own item).
OFFLOAD_BYTES_PER_PARAM = 16


def shard_factor(job: TrainJob, what: str) -> int:
    """How many dp ranks share ``what`` ("params", "grads", "optimizer")."""
    dp = job.parallel.dp
    level = {
        "none": 0, "zero1": 1, "zero2": 2, "fsdp_grad_op": 2, "zero3": 3, "fsdp": 3, "fsdp_hybrid": 3,
    }[job.shard]  # fmt: skip
    need = {"optimizer": 1, "grads": 2, "params": 3}[what]
    return dp if level >= need else 1


def trainable_params(spec: ModelSpec, job: TrainJob) -> int:
    """Full fine-tune: every parameter.  LoRA: r x (in + out) per targeted linear (A: r x in,
    B: out x r; peft LoraLayer)."""
    if not job.is_lora:
        return spec.params_total()
    return sum(job.rank * (t.shape[-1] + t.shape[-2]) * t.count for t in lora_targets(spec, job))


def lora_targets(spec: ModelSpec, job: TrainJob) -> list[TensorGroup]:
    """The linear tensor groups whose name ends in ``.<target>.weight`` (peft target_modules)."""
    targets = tuple(f".{name}.weight" for name in job.lora_targets)
    return [t for t in spec.tensors if t.kind == "linear" and t.name.endswith(targets)]


def param_bytes_per_card(spec: ModelSpec, job: TrainJob) -> int:
    """Weights resident on one card: params x dtype (PARAM_BYTES) / tp / pp, / dp under
    ZeRO-3/FSDP.  LoRA: frozen base at bf16 (QLoRA: NF4 with double quant), sharded likewise,
    + adapters in fp32 (LORA_ADAPTER_BYTES, peft's autocast_adapter_dtype) / tp / pp."""
    split = job.parallel.tp * job.parallel.pp
    if job.is_lora:
        base = weight_bytes(spec, Scheme("nf4") if job.qlora else Scheme("bf16")).total_bytes
        adapters = trainable_params(spec, job) * LORA_ADAPTER_BYTES
        return ceil(base / split / shard_factor(job, "params")) + ceil(adapters / split)
    full = spec.params_total() * PARAM_BYTES[job.precision]
    return ceil(full / split / shard_factor(job, "params"))


def grad_bytes_per_card(spec: ModelSpec, job: TrainJob) -> int:
    """Gradients in the parameter dtype (trainable parameters only; LoRA adapters fp32):
    trainable params x dtype / tp / pp, / dp under ZeRO-2/3."""
    split = job.parallel.tp * job.parallel.pp
    dtype = LORA_ADAPTER_BYTES if job.is_lora else PARAM_BYTES[job.precision]
    return ceil(trainable_params(spec, job) * dtype / split / shard_factor(job, "grads"))


def optimizer_state_bytes_per_card(spec: ModelSpec, job: TrainJob) -> int:
    """Optimizer states for the trainable parameters / tp / pp, / dp under ZeRO stage >= 1.

    AdamW: exp_avg + exp_avg_sq, 2 x params x dtype; AdamW8bit: two uint8 states + one fp32
    absmax per 256-value block each, 2 x (params + 4 x ceil(params / 256)); SGD momentum:
    params x dtype; Adafactor: ``adafactor_state_bytes`` (sources in the module docstring)."""
    params = trainable_params(spec, job)
    dtype = LORA_ADAPTER_BYTES if job.is_lora else PARAM_BYTES[job.precision]
    if job.optimizer == "adamw":
        states = 2 * params * dtype
    elif job.optimizer == "adamw8bit":
        states = 2 * (params + 4 * ceil(params / 256))
    elif job.optimizer == "sgd":
        states = params * dtype
    else:  # adafactor
        states = adafactor_state_bytes(spec, job)
    split = job.parallel.tp * job.parallel.pp
    return ceil(states / split / shard_factor(job, "optimizer"))


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
    dtype = LORA_ADAPTER_BYTES if job.is_lora else PARAM_BYTES[job.precision]
    split = job.parallel.tp * job.parallel.pp * shard_factor(job, "optimizer")
    if job.optimizer_impl == "fused":
        return 0
    if job.optimizer_impl == "forloop":
        biggest = max((t.numel // t.count for t in spec.tensors), default=0)
        return biggest * dtype
    return ceil(trainable_params(spec, job) * dtype / split)


def autocast_cache_bytes(spec: ModelSpec, job: TrainJob) -> int:
    """Mixed precision: bf16 copies of the weights autocast casts for matmuls (linear layers
    and the lm_head; embeddings are looked up in fp32)."""
    if job.precision != "mixed" or job.is_lora:
        return 0
    linear = sum(t.numel for t in spec.tensors if t.kind in ("linear", "lm_head"))
    return ceil(linear * 2 / (job.parallel.tp * job.parallel.pp * shard_factor(job, "params")))


def accumulated_grad_bytes(spec: ModelSpec, job: TrainJob) -> int:
    """Gradients persist across micro-batches under gradient accumulation: the gradient bytes
    during forward and backward when grad_accum > 1, else 0 (they are created in backward)."""
    return grad_bytes_per_card(spec, job) if job.grad_accum > 1 else 0


def gathered_layer_param_bytes(spec: ModelSpec, job: TrainJob) -> int:
    """ZeRO-3/FSDP all-gather one layer (and prefetch the next) unsharded:
    2 x ceil(params x dtype // layers / tp); 0 when parameters are not sharded."""
    if shard_factor(job, "params") <= 1:
        return 0
    per_layer = spec.params_total() * PARAM_BYTES[job.precision] // max(1, spec.num_layers)
    return 2 * ceil(per_layer / job.parallel.tp)


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
