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
    # CUDA/HIP context per process: driver + kernel images loaded lazily (CUDA_MODULE_LOADING=LAZY,
    # default since CUDA 11.7).  NVIDIA forums and PyTorch issues report 300-600 MiB on A100/H100
    # with CUDA 12; default 500 MiB.
    context_bytes: int = 500 * MiB
    # cuBLAS workspace: PyTorch sizes it by CUBLAS_WORKSPACE_CONFIG, default ":4096:8" on Hopper
    # (8 chunks of 4 MiB = 32 MiB per handle/stream), allocated through the caching allocator.
    cublas_workspace_bytes: int = 32 * MiB
    # Caching-allocator reserve: reserved - allocated after block splitting and rounding;
    # PyTorch docs (CUDA semantics, "memory management") explain the gap; default 5 % of the
    # torch peak.
    allocator_fraction: float = 0.05
    # NCCL per communicator: NCCL_BUFFSIZE 4 MiB x 2 (send/recv) x channels (up to 32 on NVLink
    # boxes) for the Simple protocol, plus LL/LL128 buffers; default 300 MiB per communicator
    # (NCCL docs, environment variables NCCL_BUFFSIZE / NCCL_MAX_NCHANNELS).
    nccl_per_communicator_bytes: int = 300 * MiB
    # vLLM CUDA graph capture pool (vLLM logs "Graph capturing finished ... took X GiB";
    # typically 0.3-1 GiB); default 1 GiB when graphs are captured.
    vllm_cuda_graph_bytes: int = 1 * GiB


DEFAULTS = RuntimeDefaults()


def allocator_reserve_bytes(torch_peak: int, d: RuntimeDefaults = DEFAULTS) -> int:
    return round(torch_peak * d.allocator_fraction)


def nccl_bytes(communicators: int, d: RuntimeDefaults = DEFAULTS) -> int:
    return communicators * d.nccl_per_communicator_bytes
