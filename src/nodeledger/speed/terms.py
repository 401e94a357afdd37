"""The time terms: one small pure function per term, seconds out, units in the names.

Bandwidths are GB/s (10^9 B/s) per direction, compute in TFLOPS (10^12 FLOP/s), sizes in bytes.
Efficiencies (the achieved fraction of a datasheet peak) are inputs, never constants here: the
caller passes the figure and its source from ``speed/hardware.toml`` or a measurement.

Derivations, numbered as the docstrings cite them:
  (1) Forward FLOPs of a decoder per token: 2 N (one multiply-add per active weight; Kaplan et
      al. 2020, "Scaling laws", 2.1), plus causal self-attention: QK^T and AV cost 2 x 2 x
      n_heads x head_dim FLOPs per (query, key) pair and layer; a prompt of T tokens has
      T(T+1)/2 causal pairs per layer, a decode step of a sequence with context c has c pairs.
  (2) Training: backward = 2 x forward (Kaplan 2.1): 6 N per token; full activation
      recomputation runs the forward again: 8 N (Korthikanti et al. 2022, "Reducing activation
      recomputation in large transformer models", 4).  MFU is model FLOPs / (time x peak):
      PaLM's definition (Chowdhery et al. 2022, appendix B), which counts the attention FLOPs
      of (1) at full (non-causal) T^2 as 12 L H Q T per token; we count causal pairs (half).
  (3) Decode is memory-bound: each step reads every weight the batch touches once, plus the KV
      cache of every live sequence; time = bytes / (HBM GB/s x efficiency) (the roofline of
      Williams et al. 2009 applied to LLM decode: Pope et al. 2022, "Efficiently scaling
      transformer inference", 3.1).  A step's time is the larger of its memory time and its
      compute time (roofline), plus what cannot overlap (tensor-parallel all-reduces).
  (4) Mixture of experts: with uniform routing a batch of B tokens, each choosing k of E experts
      per layer, touches E (1 - (1 - k/E)^B) distinct experts per layer in expectation (the
      occupancy of E bins after B draws of k without replacement, approximated with
      replacement); their weights are read once per step.  A grouped kernel tiling each
      expert's rows by T (a block-fp8 Triton fused MoE: 64) runs, per touched expert,
      E[ceil(X / T) | X >= 1] row tiles, X ~ Binomial(B, k/E) its rows (each tile re-reads the
      expert's weights): above ceil(mean / T) as soon as the rows spread past a tile edge.
  (5) Collectives (nccl-tests doc/PERFORMANCE.md): algbw = S / t; busbw = algbw x 2(n-1)/n
      (all-reduce) or x (n-1)/n (all-gather, reduce-scatter; S the whole output / input), which
      makes busbw comparable with the per-direction link rate.  Time with a per-step latency:
      ring: 2(n-1) steps of alpha (all-reduce; n-1 for the others) + S x factor / busbw;
      tree (NCCL's double binary tree): 2 log2(n) steps of alpha + the same bandwidth term.
  (6) Pipeline bubble (GPipe, Huang et al. 2019; 1F1B, Narayanan et al. 2021): with p stages and
      m micro-batches per step the idle fraction of the ideal time is (p - 1) / m.
  (7) Data-parallel sync overlaps the backward pass when the framework buckets gradients (DDP,
      ZeRO-1/2: Li et al. 2020, "PyTorch Distributed", 3.2.3) or prefetches the next layer's
      parameters (FSDP / ZeRO-3); only the part longer than the compute it hides behind is
      exposed.  Tensor-parallel all-reduces sit on the critical path (Megatron-LM: Shoeybi et
      al. 2019, 3): exposed in full.
  (8) A transfer of B bytes over a path of G GB/s takes B / (G x 10^9) seconds; a chain of
      stages (disk -> host -> card) runs as fast as its slowest stage when it streams.
"""

from __future__ import annotations

from math import ceil, exp, lgamma, log, log1p, log2, sqrt

# FLOPs / (peak x achieved fraction) and bytes / (GB/s x 10^9): the ledger's own terms
from nodeledger.ledger.comm import compute_seconds as compute_seconds
from nodeledger.ledger.comm import transfer_seconds as transfer_seconds
from nodeledger.machine.parsers.nccl_tests import BUS_FACTOR

TFLOPS = 1e12
GBPS = 1e9


def dense_flops_per_token(active_params: float) -> float:
    """(1): 2 N forward FLOPs per token for the weight matmuls."""
    return 2.0 * active_params


def causal_pairs(tokens: float, window: int | None = None) -> float:
    """(1): (query, key) pairs of a causal prompt of ``tokens``: T(T+1)/2; a sliding window of
    w keys caps each query's keys at w: w(w+1)/2 + (T - w) w."""
    if window and tokens > window:
        return window * (window + 1) / 2 + (tokens - window) * window
    return tokens * (tokens + 1) / 2


def keys_attended(context: float, window: int | None = None) -> float:
    """(1): keys one decode token attends to: the context, or the window when it is smaller."""
    return min(context, window) if window else context


def attention_flops_prompt(layers: int, heads: int, head_dim: int, tokens: int) -> float:
    """(1): causal attention of a prompt of ``tokens``: 4 x heads x head_dim x T(T+1)/2 per
    layer (QK^T and AV, 2 FLOPs per multiply-add)."""
    return 4.0 * layers * heads * head_dim * causal_pairs(tokens)


def attention_flops_decode(layers: int, heads: int, head_dim: int, context: float) -> float:
    """(1): one decode token attends to ``context`` keys: 4 x heads x head_dim x c per layer."""
    return 4.0 * layers * heads * head_dim * keys_attended(context)


def train_flops_per_token(active_params: float, attn_forward_per_token: float,
                          recompute: str = "none") -> float:  # fmt: skip
    """(2): 3 x forward (6 N + 3 x attention); full recomputation adds one more forward (4 x);
    selective recomputation (Korthikanti 2022, 5) recomputes the attention core only."""
    fwd = dense_flops_per_token(active_params) + attn_forward_per_token
    if recompute == "full":
        return 4.0 * fwd
    if recompute == "selective":
        return 3.0 * fwd + attn_forward_per_token
    return 3.0 * fwd


def memory_seconds(bytes_read: float, bandwidth_gbps: float, efficiency: float) -> float:
    """(3): bytes read from card memory / (datasheet GB/s x achieved fraction)."""
    return bytes_read / (bandwidth_gbps * GBPS * efficiency)


def roofline_seconds(compute_s: float, memory_s: float) -> float:
    """(3): a kernel takes the longer of its compute and its memory time."""
    return max(compute_s, memory_s)


def experts_touched(num_experts: int, top_k: int, tokens: float) -> float:
    """(4): expected distinct experts one MoE layer reads for a batch of ``tokens``."""
    if tokens <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)


_TILES: dict[tuple, float] = {}


def expected_row_tiles(num_experts: int, top_k: int, tokens: float, tile: int) -> float:
    """(4): E[ceil(X / tile) | X >= 1] for X ~ Binomial(tokens, top_k / num_experts), the rows one
    expert receives under uniform routing: the row tiles a grouped kernel runs per touched expert
    (memoised; the binomial summed over mean +- 12 standard deviations)."""
    n = max(0, round(tokens))
    p = min(1.0, top_k / max(1, num_experts))
    if n == 0 or p <= 0.0:
        return 0.0
    key = (n, p, tile)
    hit = _TILES.get(key)
    if hit is not None:
        return hit
    mean, sd = n * p, sqrt(max(n * p * (1 - p), 1e-12))
    lo, hi = max(1, int(mean - 12 * sd)), min(n, int(mean + 12 * sd) + 1)
    log_q = log1p(-p) if p < 1.0 else float("-inf")
    acc = mass = 0.0
    for x in range(lo, hi + 1):
        if p >= 1.0:
            pmf = 1.0 if x == n else 0.0
        else:
            pmf = exp(
                lgamma(n + 1) - lgamma(x + 1) - lgamma(n - x + 1) + x * log(p) + (n - x) * log_q
            )
        acc += pmf * ceil(x / tile)
        mass += pmf
    out = acc / mass if mass > 0 else float(ceil(mean / tile))
    if len(_TILES) > 50_000:
        _TILES.clear()
    _TILES[key] = out
    return out


def bus_factor(op: str, ranks: int) -> float:
    """(5): nccl-tests' busbw / algbw (the parser's table of its factors); 0 for one rank."""
    if op not in BUS_FACTOR:
        raise ValueError(f"no bus factor for {op!r}")
    return 0.0 if ranks <= 1 else BUS_FACTOR[op](ranks)


def latency_steps(op: str, ranks: int, algorithm: str) -> float:
    """(5): sequential hops of one collective: ring 2(n-1) (all-reduce) or n-1; tree 2 log2 n."""
    if ranks <= 1:
        return 0.0
    if algorithm == "tree":
        return 2.0 * log2(ranks)
    return 2.0 * (ranks - 1) if op == "all_reduce" else float(ranks - 1)


def collective_seconds(op: str, size_bytes: float, ranks: int, busbw_gbps: float,
                       alpha_s: float, algorithm: str = "ring") -> float:  # fmt: skip
    """(5): latency steps x alpha + size x bus factor / busbw."""
    if ranks <= 1:
        return 0.0
    return latency_steps(op, ranks, algorithm) * alpha_s + (
        size_bytes * bus_factor(op, ranks) / (busbw_gbps * GBPS)
    )


def algbw_gbps(size_bytes: float, seconds: float) -> float:
    """(5): nccl-tests algbw = S / t, GB/s."""
    return size_bytes / seconds / GBPS


def pipeline_bubble_fraction(stages: int, micro_batches: int, chunks: int = 1) -> float:
    """(6): (p - 1) / m of the ideal step time; the interleaved schedule with v model chunks
    per rank: (p - 1) / (m v) (Narayanan et al. 2021, 2.2.2)."""
    return 0.0 if stages <= 1 else (stages - 1) / (max(1, micro_batches) * max(1, chunks))


def exposed_seconds(comm_s: float, hidden_behind_s: float) -> float:
    """(7): the part of a communication longer than the compute it overlaps."""
    return max(0.0, comm_s - hidden_behind_s)


def streamed_seconds(bytes_: float, stages_gbps: list[float]) -> float:
    """(8): a streamed chain runs at its slowest stage."""
    return transfer_seconds(bytes_, min(stages_gbps))
