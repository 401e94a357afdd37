"""Training frameworks' model-state layouts (frameworks.toml): which bytes per parameter a
framework keeps on a card for a precision and a sharding stage.

    stage(shard)     none 0, zero1 1, zero2 / fsdp_grad_op 2, zero3 / fsdp / fsdp_hybrid 3
    on a card        bytes x params / (dp if stage >= the piece's sharded-from stage) / tp / pp
    DeepSpeed ZeRO-3 2/dp (bf16 params) + 4/dp (fp32 master) + 4/dp (fp32 grad partition) +
                     8/dp (Adam) = 18/dp, its estimator's figure; ZeRO-1/2: 2 + 2 + 16/dp
    Megatron         2 + 4 + 12 = 18, distributed optimizer 6 + 12/d (its docs' table)
    FSDP2 mixed      4/dp + 4/dp + 8/dp = 16/dp (fp32 params, MixedPrecisionPolicy bf16)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from nodeledger.ledger.jobs import TrainJob

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

STAGE = {"none": 0, "zero1": 1, "zero2": 2, "fsdp_grad_op": 2, "zero3": 3, "fsdp": 3,
         "fsdp_hybrid": 3}  # fmt: skip
NEVER = 9


@lru_cache(maxsize=1)
def data() -> dict:
    text = resources.files("nodeledger.ledger").joinpath("frameworks.toml").read_text("utf-8")
    return tomllib.loads(text)


@dataclass(frozen=True)
class Layout:
    framework: str  # the framework whose layout this is (hf-trainer resolves to one)
    precision: str
    text: str  # the layout in words
    source: str
    param: int = 2
    param_from: int = NEVER
    grad: int = 2
    grad_from: int = NEVER
    grad_absent_from: int = NEVER
    master: int = 0
    master_from: int = NEVER
    grad_partition: int = 0
    grad_partition_from: int = NEVER
    state_elem: int = 2
    state_from: int = NEVER
    grad_buckets: bool = False
    autocast: bool = False
    gathered_elem: int = 2
    root_unsharded: bool = False
    reduce_elem: int = 2
    loss_parallel: bool = False
    sp_saves_gathered: bool = True
    note: str = ""  # how the layout was chosen beyond the framework (hf-trainer's dispatch)

    def state_bytes_per_param(self, stage: int, dp: int) -> float:
        """Bytes of model state per parameter on one card (AdamW, tp = pp = 1)."""
        d = lambda frm: dp if stage >= frm else 1  # noqa: E731
        grad = 0 if stage >= self.grad_absent_from else self.grad / d(self.grad_from)
        return (
            self.param / d(self.param_from)
            + grad
            + self.master / d(self.master_from)
            + self.grad_partition / d(self.grad_partition_from)
            + 2 * self.state_elem / d(self.state_from)
            + (self.grad if self.grad_buckets and dp > 1 else 0)
        )


def layout(job: TrainJob) -> Layout:
    """The layout of ``job.framework`` at ``job.precision`` (hf-trainer: the framework
    accelerate hands the job to for its --shard)."""
    return _layout(job.framework, job.precision, job.shard)


@lru_cache(maxsize=256)
def _layout(framework: str, precision: str, shard: str) -> Layout:
    fw, prec, note = framework, precision, ""
    table = data()
    if fw == "hf-trainer":
        h = table["hf-trainer"]
        if shard.startswith("zero"):
            fw, note = h["zero"], "HF Trainer hands --shard zero* to DeepSpeed"
        elif shard.startswith("fsdp"):
            fw, prec = h["fsdp"], h["fsdp_precision"]
            note = "HF Trainer hands --shard fsdp* to FSDP1, accelerate upcasting the parameters to fp32"
        else:
            fw, note = h["none"], "HF Trainer runs DDP"
    entry = table[fw]
    lay = entry[prec]
    fields = {k: v for k, v in lay.items() if k != "layout"}
    return Layout(framework=fw, precision=prec, text=lay["layout"], source=entry["source"],
                  note=note, **fields)  # fmt: skip


def describe(job: TrainJob) -> str:
    """One line: the framework and layout a training ledger assumed, and why."""
    lay = layout(job)
    fw = job.framework if job.framework == lay.framework else f"{job.framework} -> {lay.framework}"
    bpp = lay.state_bytes_per_param(STAGE[job.shard], job.parallel.dp)
    how = f"framework {fw} ({job.framework_source}), precision {job.precision} ({job.precision_source})"
    return f"{how}: {lay.text}; {bpp:.3g} B of model state per parameter per card before tp/pp"
