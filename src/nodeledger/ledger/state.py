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
    targets = tuple(f".{name}.weight" for name in job.lora_targets)
    return [t for t in spec.tensors if t.kind == "linear" and t.name.endswith(targets)]


def param_bytes_per_card(spec: ModelSpec, job: TrainJob) -> int:
    """Weights resident on one card: full model / tp / pp, / dp under ZeRO-3/FSDP.
    LoRA: frozen base at bf16 (QLoRA: NF4 with double quant) + fp32-free adapters in bf16."""
    split = job.parallel.tp * job.parallel.pp
    if job.is_lora:
        base = weight_bytes(spec, Scheme("nf4") if job.qlora else Scheme("bf16")).total_bytes
        adapters = trainable_params(spec, job) * LORA_ADAPTER_BYTES
        return ceil(base / split / shard_factor(job, "params")) + ceil(adapters / split)
    full = spec.params_total() * PARAM_BYTES[job.precision]
    return ceil(full / split / shard_factor(job, "params"))


def grad_bytes_per_card(spec: ModelSpec, job: TrainJob) -> int:
    """Gradients in the parameter dtype (trainable parameters only)."""
    split = job.parallel.tp * job.parallel.pp
    dtype = LORA_ADAPTER_BYTES if job.is_lora else PARAM_BYTES[job.precision]
    return ceil(trainable_params(spec, job) * dtype / split / shard_factor(job, "grads"))


def optimizer_state_bytes_per_card(spec: ModelSpec, job: TrainJob) -> int:
    """Optimizer states for the trainable parameters, sharded by ZeRO stage >= 1."""
    n = trainable_params(spec, job)
    dtype = LORA_ADAPTER_BYTES if job.is_lora else PARAM_BYTES[job.precision]
    if job.optimizer == "adamw":
        b = 2 * n * dtype
    elif job.optimizer == "adamw8bit":
        b = 2 * (n + 4 * ceil(n / 256))
    elif job.optimizer == "sgd":
        b = n * dtype
    else:  # adafactor
        b = adafactor_state_bytes(spec, job)
    split = job.parallel.tp * job.parallel.pp
    return ceil(b / split / shard_factor(job, "optimizer"))


def adafactor_state_bytes(spec: ModelSpec, job: TrainJob) -> int:
    groups = lora_targets(spec, job) if job.is_lora else spec.tensors
    total = 0
    for t in groups:
        if job.is_lora:
            total += 4 * job.rank * (t.shape[-1] + t.shape[-2]) * t.count  # A and B: both 2-D
        elif len(t.shape) >= 2:
            total += 4 * (t.shape[-2] + t.shape[-1]) * t.count
        else:
            total += 4 * t.numel
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
