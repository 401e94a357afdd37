"""Per-card runtime overheads outside PyTorch's allocated bytes.  Each is a documented default
with its source; each can be overridden.  ``torch_peak_bytes`` excludes them; ``total_bytes``
(what the driver shows) includes them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from nodeledger.machine.vendors import DEFAULT_VENDOR
from nodeledger.units import MiB


@dataclass(frozen=True)
class RuntimeDefaults:
    # Non-torch memory per process: CUDA context, kernel images, cuBLAS/cuDNN handles and
    # workspaces outside the caching allocator.  Measured on an H200 (driver 580.159, CUDA 13.0,
    # torch 2.11): nvidia-smi used - torch.cuda.max_memory_reserved = 1302-1384 MiB over 25 jobs
    # (benchmarks/accuracy/gpu_h200/measured_cuda.json); default 1382 MiB.  Other vendors'
    # runtimes (HIP, CANN) are not measured here and use the same default.
    context_bytes: int = 1382 * MiB
    # cuBLAS workspace: allocated through the caching allocator, so it is inside
    # max_memory_allocated.  Measured on the H200: CUDA allocated - fake-tensor peak = 32 MiB
    # for inference (one handle), 64-70 MiB for training (forward and backward handles)
    # (benchmarks/accuracy/gpu_h200, PyTorch's default CUBLAS_WORKSPACE_CONFIG on Hopper).
    cublas_workspace_bytes: int = 32 * MiB
    cublas_workspaces_training: int = 2
    # Caching-allocator reserve: max_memory_reserved / max_memory_allocated - 1, measured on
    # the same H200 runs: median 5.4 % (1.7-25 %); activation-checkpointed training 25 %.
    allocator_fraction: float = 0.054
    allocator_fraction_checkpointed: float = 0.25
    # NCCL per communicator: NCCL_BUFFSIZE 4 MiB x 2 (send/recv) x channels (up to 32 on NVLink
    # boxes) for the Simple protocol, plus LL/LL128 buffers; default 300 MiB per communicator
    # (NCCL docs, environment variables NCCL_BUFFSIZE / NCCL_MAX_NCHANNELS).
    nccl_per_communicator_bytes: int = 300 * MiB
    # The torch device type whose kernels' policies the saved tensors follow.  torch.autocast's
    # op lists are per device type: on "cuda" (CUDA and ROCm/HIP builds) ``pow`` and the rest of
    # autocast's fp32 list run in fp32, on "cpu" they do not (GPT-2's python gelu_new chain is
    # fp32 from pow on an H200, bf16 on the CPU).  Dropout too: CUDA's native_dropout keeps a
    # bool mask (1 B per element), the CPU's decomposition its noise tensor in the input's dtype
    # (benchmarks/accuracy/README.md "Autocast policy", "Dropout").  A card runs "cuda"; the
    # fake-tensor measurements on the CPU set "cpu" (benchmarks/accuracy/compare.py).
    device_type: str = "cuda"


DEFAULTS = RuntimeDefaults()


def allocator_fraction(d: RuntimeDefaults = DEFAULTS, checkpointed: bool = False) -> float:
    """Caching-allocator reserve as a fraction of the torch peak (max_memory_reserved /
    max_memory_allocated - 1, measured on H200): 5.4 % median, 25 % for checkpointed training."""
    return d.allocator_fraction_checkpointed if checkpointed else d.allocator_fraction


def allocator_reserve_bytes(
    torch_peak: int, d: RuntimeDefaults = DEFAULTS, checkpointed: bool = False
) -> int:
    """Reserved - allocated: round(torch peak x ``allocator_fraction``)."""
    return round(torch_peak * allocator_fraction(d, checkpointed))


def nccl_bytes(communicators: int, d: RuntimeDefaults = DEFAULTS) -> int:
    """NCCL buffers: communicators x 300 MiB by default (NCCL_BUFFSIZE 4 MiB x send/recv x
    channels + LL/LL128; NCCL docs, NCCL_BUFFSIZE / NCCL_MAX_NCHANNELS)."""
    return communicators * d.nccl_per_communicator_bytes


def cublas_workspace_bytes(d: RuntimeDefaults = DEFAULTS, training: bool = False) -> int:
    """cuBLAS workspaces inside the caching allocator: one handle for inference (32 MiB), forward
    + backward handles in training (2 x 32 MiB; measured 64-70 MiB on H200: CUDA allocated -
    fake-tensor peak)."""
    if training:
        return d.cublas_workspace_bytes * d.cublas_workspaces_training
    return d.cublas_workspace_bytes


def serving_communicators(cards_per_replica: int) -> int:
    """One communicator (tp/pp group) per replica that spans more than one card."""
    return 1 if cards_per_replica > 1 else 0


def training_communicators(tp: int, pp: int, dp: int) -> int:
    """One communicator per parallel dimension wider than one card (tp, dp, pp groups)."""
    return (1 if tp > 1 else 0) + (1 if dp > 1 else 0) + (1 if pp > 1 else 0)


@functools.lru_cache(maxsize=1)
def _runtimes() -> dict:
    """runtimes.toml, read once per process (a report asks for every card of every job)."""
    import sys
    from importlib import resources

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    return tomllib.loads(
        resources.files("nodeledger.ledger").joinpath("runtimes.toml").read_text("utf-8")
    )


def provenance(vendor: str) -> dict:
    """Where the runtime constants that apply to a ``vendor``'s cards were measured
    (runtimes.toml): {"vendor", "runtime", "measured", "caveat"}; ``caveat`` is the phrase a
    verdict line carries when they were not measured on that vendor's runtime."""
    table = _runtimes()
    v = (vendor or DEFAULT_VENDOR).lower()
    entry = table.get(v)
    if entry is None:
        return {"vendor": v, "runtime": "unknown", "measured": False,
                "caveat": f"runtime constants assumed from {table[DEFAULT_VENDOR]['source']} (vendor {v!r} not known)"}  # fmt: skip
    if entry["measured"]:
        return {"vendor": v, "runtime": entry["runtime"], "measured": True, "caveat": ""}
    base = table[entry["assumed_from"]]
    return {"vendor": v, "runtime": entry["runtime"], "measured": False,
            "caveat": (f"runtime constants (context, allocator reserve) assumed from {base['runtime']} on "
                       f"{base['source'].split(':')[0]}; not measured on {entry['runtime']}")}  # fmt: skip
