"""Loading a checkpoint: the host copies by format and strategy, the card's share."""

from __future__ import annotations

from nodeledger.ledger.core import (
    CardLedger,
    Item,
    Ledger,
    _host,
    _process_items,
    _serve_scheme,
    card_capacity,
)
from nodeledger.ledger.jobs import JobError, LoadJob
from nodeledger.ledger.weights import (
    weight_bytes,
)
from nodeledger.machine.profile import MachineProfile
from nodeledger.model.spec import ModelSpec

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
