"""Traffic of a parallel job on the card links and the network, and the compute it hides behind.

One function per term; bytes are per rank (what one card sends over its own link), times in
seconds.  The verdict (verdict/links.py) compares ``traffic / link bandwidth`` with the compute
time of the same step.

Derivations:
  (1) Ring all-reduce of a buffer of B bytes over n ranks: every rank sends 2 (n-1)/n * B
      (a reduce-scatter then an all-gather, each (n-1)/n * B).  Patarasuk & Yuan, "Bandwidth
      optimal all-reduce algorithms for clusters of workstations" (JPDC 2009); NCCL's
      nccl-tests PERFORMANCE.md uses the same factor for "bus bandwidth".
  (2) Reduce-scatter or all-gather alone: (n-1)/n * B per rank (same sources).
  (3) Tensor parallel (Megatron-LM, Shoeybi et al. 2019, section 3): each transformer layer
      all-reduces its activations twice in the forward pass (after attention, after the MLP)
      and twice in the backward pass; the buffer is tokens x hidden x element bytes.
  (4) Data parallel: DDP and ZeRO-1 move 2 (n-1)/n of the gradient bytes per step; ZeRO-2
      reduce-scatters the gradients each micro-batch and gathers the parameters once; ZeRO-3 /
      FSDP move (n-1)/n of the parameter bytes twice (an all-gather in the forward, one in the
      backward) and of the gradient bytes once (a reduce-scatter) per micro-batch: ZeRO,
      Rajbhandari et al. 2020, 7.2-7.3; FSDP re-gathers every micro-batch.
  (5) Compute per token: 2 N FLOPs forward, 6 N forward + backward (Kaplan et al. 2020, "Scaling
      laws", 2.1), N the parameters active per token; full activation recomputation adds one
      forward: 8 N (Korthikanti et al. 2022, "Reducing activation recomputation", 4).
  (6) Achieved fraction of peak: MFU.  The default 0.40 is a documented assumption, below the
      46.2 % PaLM reports (Chowdhery et al. 2022, 4.1) and the 52 % Megatron-LM reports on
      A100 (Narayanan et al. 2021), since a small team's box is less tuned than those runs.
"""

from __future__ import annotations

MFU_DEFAULT = 0.40


def ring_allreduce_bytes_per_rank(buffer_bytes: float, ranks: int) -> float:
    """(1): 2 (n-1)/n * B."""
    return 0.0 if ranks <= 1 else 2 * (ranks - 1) / ranks * buffer_bytes


def gather_bytes_per_rank(buffer_bytes: float, ranks: int) -> float:
    """(2): (n-1)/n * B for one all-gather or reduce-scatter."""
    return 0.0 if ranks <= 1 else (ranks - 1) / ranks * buffer_bytes


def tp_bytes_per_token(hidden: int, layers: int, tp: int, elem_bytes: int, backward: bool) -> float:
    """(3): per token, 2 all-reduces per layer forward (+2 backward) of hidden x elem bytes."""
    allreduces = 4 if backward else 2
    return layers * allreduces * ring_allreduce_bytes_per_rank(hidden * elem_bytes, tp)


def dp_bytes_per_step(
    grad_bytes: float, param_bytes: float, dp: int, shard: str, grad_accum: int = 1
) -> float:
    """(4): data-parallel traffic of one optimizer step (``grad_accum`` micro-batches), per
    rank; ``param_bytes`` the parameters as gathered (frozen LoRA base included),
    ``grad_bytes`` the gradients as reduced (LoRA: the adapters').
      ZeRO-3 / FSDP   every micro-batch all-gathers the parameters in forward and again in
                      backward and reduce-scatters the gradients (FSDP re-gathers per
                      micro-batch; accumulation does not amortise it): ga x (2 AG(P) + RS(G))
      ZeRO-2 / FSDP   the gradients are reduce-scattered every micro-batch, the updated
        SHARD_GRAD_OP parameters all-gathered once: ga x RS(G) + AG(P)
      DDP, ZeRO-1     one all-reduce of the gradients per step (no_sync while accumulating,
                      as accelerate / HF Trainer do): AR(G)"""
    if shard in ("zero3", "fsdp", "fsdp_hybrid"):
        per_micro = 2 * gather_bytes_per_rank(param_bytes, dp) + gather_bytes_per_rank(
            grad_bytes, dp
        )
        return grad_accum * per_micro
    if shard in ("zero2", "fsdp_grad_op"):
        return grad_accum * gather_bytes_per_rank(grad_bytes, dp) + gather_bytes_per_rank(
            param_bytes, dp
        )
    return ring_allreduce_bytes_per_rank(grad_bytes, dp)


def flops_per_token(active_params: int, training: bool, recompute: bool = False) -> float:
    """(5): 2 N inference, 6 N training, 8 N training with full recomputation."""
    if not training:
        return 2.0 * active_params
    return (8.0 if recompute else 6.0) * active_params


def compute_seconds(flops: float, peak_tflops: float, mfu: float = MFU_DEFAULT) -> float:
    """(6): FLOPs / (peak x MFU)."""
    return flops / (peak_tflops * 1e12 * mfu)


def transfer_seconds(bytes_: float, bandwidth_gbps: float) -> float:
    """Bytes over a link of ``bandwidth_gbps`` GB/s (10^9 B/s) per direction."""
    return bytes_ / (bandwidth_gbps * 1e9)
