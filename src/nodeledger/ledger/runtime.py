"""Per-card runtime overheads outside PyTorch's allocated bytes.  Each is a documented default
with its source; each can be overridden.  ``torch_peak_bytes`` excludes them; ``total_bytes``
(what the driver shows) includes them.
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 2**20
GiB = 2**30


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
    # vLLM CUDA graph capture pool (vLLM logs "Graph capturing finished ... took X GiB";
    # typically 0.3-1 GiB); default 1 GiB when graphs are captured.
    vllm_cuda_graph_bytes: int = 1 * GiB


DEFAULTS = RuntimeDefaults()


def allocator_fraction(d: RuntimeDefaults = DEFAULTS, checkpointed: bool = False) -> float:
    return d.allocator_fraction_checkpointed if checkpointed else d.allocator_fraction


def allocator_reserve_bytes(
    torch_peak: int, d: RuntimeDefaults = DEFAULTS, checkpointed: bool = False
) -> int:
    return round(torch_peak * allocator_fraction(d, checkpointed))


def nccl_bytes(communicators: int, d: RuntimeDefaults = DEFAULTS) -> int:
    return communicators * d.nccl_per_communicator_bytes
