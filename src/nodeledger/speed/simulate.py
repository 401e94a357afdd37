"""A deterministic discrete-event simulator of one serving replica: requests arrive, an engine
schedules them step by step as vLLM, SGLang or a static HF generate() batch does, and the
benchmark_serving metrics come out (TTFT, TPOT, ITL, end-to-end latency, throughput).

Model (Vidur, Agrawal et al., MLSys 2024: a discrete-event simulator that replays the engine's
scheduler step by step and prices each step with a cost model; here the cost is the caller's
``step_time``):
  1. Client (vLLM benchmark_serving, ``vllm/benchmarks/serve.py`` get_request): request i is due
     at ``arrivals_s[i]``; with ``max_concurrency`` it is sent only when fewer than that are in
     flight (an asyncio.Semaphore), else when one returns.  TTFT and latency count from the send.
  2. vLLM V1 (``vllm/v1/core/sched/scheduler.py`` Scheduler.schedule): a token budget of
     max_num_batched_tokens per step; the running requests first, in admission order (each
     decoding one takes 1 token, a partly prefilled one the rest of its prompt, up to the budget);
     a request that needs a KV block when none is free preempts the most recently admitted running
     request (``self.running.pop()``: recompute; its blocks are freed, it goes to the front of the
     waiting queue and later prefills prompt + generated tokens again).  Then, if nothing was
     preempted, the waiting requests FCFS while budget, max_num_seqs and free blocks allow; a
     prompt longer than the budget left is chunked (chunked prefill).  A request holds
     ceil(tokens / block_size) blocks; admission needs the blocks of its first chunk only.
     The step that computes a prompt's last token emits its first token (and a recomputed one,
     its next token).
  3. SGLang 0.4+ (``python/sglang/srt/managers/scheduler.py``, ``schedule_policy.py``
     PrefillAdder, ``schedule_batch.py`` retract_decode, ``python/sglang/global_config.py``):
     a prefill batch runs whenever the waiting queue admits one, else a decode step of the
     running batch (prefill and decode never mix: enable_mixed_chunk off by default).  A refusal
     for lack of KV or max_running_requests sets batch_is_full: no prefill is tried again until
     update_running_batch finds the running batch shrunk (a request finished or was retracted;
     the decode step after a completion, then the next iteration tries).  Admission
     (FCFS): rem_total = free KV tokens - sum over running requests of min(max_new - generated,
     4096) x new_token_ratio; a request needs prompt + min(max_new, 4096) < rem_total (it
     reserves its whole answer, the running ones a predicted share); the chunk budget
     (chunked_prefill_size) cuts at most one request (the chunked request, continued first in
     the next prefill batch; max_prefill_tokens is not modelled).  new_token_ratio starts at
     0.7 (SGLANG_INIT_NEW_TOKEN_RATIO) and falls by (0.7 - min) / 600 per decode step (SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS) to min
     (SGLang: 0.7 x 0.14 = 0.098, SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR; ``Scheduler`` here defaults
     to 0.1); it is reset when the engine idles.  When a decode step lacks KV, requests are
     retracted (fewest generated tokens first, then the longest prompt) until the free tokens
     cover 20 steps of the rest (global_config.retract_decode_steps), never the last one; they
     go to the back of the waiting queue and new_token_ratio becomes (generated + 20 x running)
     / sum max_new of the rest.  SGLang's page_size is 1 token: pass ``block_size=1``.
  4. Static (HF transformers generate()): when the engine is free, up to ``static_batch``
     waiting requests (those that fit the KV pool padded to the batch's longest prompt and
     answer) prefill together in one step (prompts padded to the longest), then decode together
     until the longest answer ends; a finished row still costs its slot until then.  Each row's
     tokens are timed as produced (a streaming server); max_num_seqs and max_num_batched_tokens
     are not used.
  5. Metrics as benchmark_serving computes them: TTFT = first token - send; TPOT = (latency -
     TTFT) / (output - 1), requests with one output token left out; ITL = every gap between two
     tokens of a request; duration = the last request's return; mean, median, p99 (numpy's
     linear-interpolation percentile).  A token is emitted at the end of the step that made it.

Requests the KV pool can never hold (prompt + answer over the pool; SGLang: prompt +
min(answer, 4096) not below it) are refused when sent: not completed, with a note; ``max_steps``
bounds a run (a note says what was left).

Speed (event skipping): while no arrival, completion, admission, preemption or KV shortage
changes the batch, consecutive decode steps differ only by each sequence's context + 1, so a run
of k steps is advanced at once (an arrival ends a run only where it could be admitted: an empty
queue, and for SGLang batch_is_full not set; behind a refused head it just queues).  The decoding sequences are kept as aggregates (a global decode
counter, the sum of their contexts, a count per block phase, a heap of finish steps), so a run
costs O(block_size + log n), not O(k x n).  The k step times come from ``step_time`` evaluated at
the run's ends and midpoints: where the midpoint lies on the chord the run's sum is the
trapezoid sum n (f_first + f_last) / 2, else the run is halved.  The assumption: the step cost
is affine in kv_tokens_read over the run, or convex/concave piecewise affine (a max of affine
terms, such as a roofline max(compute, memory)); then the sum is exact (a convex function that
meets its chord at the midpoint is affine there), with O(log k) calls per kink.  For a curved
cost the halving stops when the midpoint is within 1e-6 of the chord (sum within ~2e-6).  A
cost that is neither (a staircase, e.g. a table lookup in buckets) is mostly halved down to
single steps (up to one call per step); where a midpoint happens to meet the chord the piece's
sum is off by at most the cost's own jumps inside it.  Short runs (< 3 steps) are evaluated step
by step; tests/test_simulate.py checks the runs against the step-by-step run.  ITL percentiles come from a histogram of 1 %-wide log bins
that keeps each bin's count and sum (a percentile reads the mean of its bin: exact when the bin
holds one value, within 1 % otherwise); the ITL mean is exact.

``step_time(prefill_tokens, decode_seqs, kv_tokens_read)``: seconds of one engine step;
prefill_tokens = prompt tokens computed in the step (all chunks); decode_seqs = sequences that
decode one token; kv_tokens_read = keys the step's attention reads: each decoding sequence its
context + 1 (its new token's own key), each prefill chunk the keys of its last query (the context
before the chunk + the chunk).
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

StepCost = Callable[[int, int, int], float]

POLICIES = ("vllm", "sglang", "static")
DATASETS = Path(__file__).resolve().parent / "datasets.toml"

# SGLang constants (python/sglang/global_config.py and schedule_policy.py, sgl-project/sglang)
SGLANG_CLIP_MAX_NEW_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION default
SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS = 600  # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS default
SGLANG_RETRACT_DECODE_STEPS = 20  # global_config.retract_decode_steps

_SKIP = True  # event skipping (tests turn it off to compare with the step-by-step run)
_MIN_RUN = 3  # runs shorter than this are stepped one by one
_SERIES_POINTS = 200
_LOG_BIN = math.log(1.01)  # ITL histogram: 1 %-wide bins
_FLAT = 1e-6  # a run is affine when its midpoint lies within this fraction of the chord


@dataclass(frozen=True)
class Scheduler:
    """The engine's scheduling knobs (see the module docstring for each policy)."""

    policy: str  # "vllm" | "sglang" | "static"
    max_num_seqs: int
    max_num_batched_tokens: int  # per-step token budget (vLLM) / chunked_prefill_size (SGLang)
    kv_pool_tokens: int | None  # tokens the KV pool holds per replica (None = unbounded)
    block_size: int = 16  # tokens per KV block (SGLang: page_size 1)
    static_batch: int = 1  # policy "static": sequences per batch
    new_token_ratio: float = 0.7  # sglang admission reserve (init), decays per step to min
    min_new_token_ratio: float = 0.1
    # vLLM V1 with prefix caching (its default): a preempted request's full blocks stay in the
    # cache, so when it is scheduled again only the tokens past them are computed
    resume_cached: bool = False
    # the most tokens of one prompt a step prefills (None: the whole budget).  SGLang with DP
    # attention runs a prompt on one rank, whose own budget is chunked_prefill_size // dp_size
    # (server_args.py, "DP attention is enabled. The chunked prefill size is adjusted to ...")
    prompt_chunk: int | None = None

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "static_batch"):
            v = getattr(self, name)
            if not _is_int(v) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.prompt_chunk is not None and (
            not _is_int(self.prompt_chunk) or self.prompt_chunk < 1
        ):
            raise ValueError(
                f"prompt_chunk must be None or an integer >= 1, got {self.prompt_chunk!r}"
            )
        if self.kv_pool_tokens is not None and (
            not _is_int(self.kv_pool_tokens) or self.kv_pool_tokens < self.block_size
        ):
            raise ValueError(
                f"kv_pool_tokens must be None or an integer >= block_size ({self.block_size}), "
                f"got {self.kv_pool_tokens!r}"
            )
        if not 0.0 <= self.min_new_token_ratio <= self.new_token_ratio <= 1.0:
            raise ValueError(
                "need 0 <= min_new_token_ratio <= new_token_ratio <= 1, got "
                f"{self.min_new_token_ratio!r} and {self.new_token_ratio!r}"
            )
        if self.policy == "vllm" and self.max_num_batched_tokens < self.max_num_seqs:
            # vLLM's SchedulerConfig refuses it too: every running sequence must fit one step
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                f"max_num_seqs ({self.max_num_seqs}) for policy 'vllm'"
            )


@dataclass(frozen=True)
class Requests:
    """The benchmark's requests: lengths in tokens, client-side arrival times in seconds."""

    input_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    arrivals_s: tuple[float, ...]  # arrival time of each request (client side)
    max_concurrency: int | None = None  # client cap (benchmark_serving --max-concurrency)

    def __post_init__(self) -> None:
        n = len(self.input_lens)
        if len(self.output_lens) != n or len(self.arrivals_s) != n:
            raise ValueError(
                "input_lens, output_lens and arrivals_s must have the same length, got "
                f"{n}, {len(self.output_lens)} and {len(self.arrivals_s)}"
            )
        for name in ("input_lens", "output_lens"):
            bad = [x for x in getattr(self, name) if not _is_int(x) or x < 1]
            if bad:
                raise ValueError(f"{name} must be integers >= 1, got {bad[0]!r}")
        bad_t = [t for t in self.arrivals_s if not _is_num(t) or not 0.0 <= t < math.inf]
        if bad_t:
            raise ValueError(f"arrivals_s must be finite numbers >= 0, got {bad_t[0]!r}")
        mc = self.max_concurrency
        if mc is not None and (not _is_int(mc) or mc < 1):
            raise ValueError(f"max_concurrency must be None or an integer >= 1, got {mc!r}")


@dataclass
class SimResult:
    """benchmark_serving's summary of one simulated run (seconds; dicts of mean/median/p99)."""

    duration_s: float
    completed: int
    requests_per_s: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    ttft_s: dict
    tpot_s: dict
    itl_s: dict
    e2e_s: dict
    batch: dict  # {"mean": time-weighted running sequences, "max": ..., "series": [(t, n)]}
    preemptions: int
    steps: int
    notes: list[str] = field(default_factory=list)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ----------------------------------------------------------------------------- requests


@lru_cache(maxsize=1)
def datasets() -> dict:
    """The length distributions of ``datasets.toml`` (read once, on first use)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    with DATASETS.open("rb") as fh:
        return tomllib.load(fh)


def arrival_times(num_prompts: int, request_rate: float, rng: random.Random) -> list[float]:
    """vLLM benchmark_serving's send times (``vllm/benchmarks/serve.py`` get_request, burstiness
    1): every request at t = 0 for an infinite rate; else exponential gaps of mean 1 / rate,
    summed (the first request after one gap), then scaled so that the last one is sent at
    num_prompts / rate ("close the gap ... for stabilizing the throughput data")."""
    if request_rate == math.inf:
        return [0.0] * num_prompts
    t, out = 0.0, []
    for _ in range(num_prompts):
        t += rng.expovariate(request_rate)
        out.append(t)
    scale = (num_prompts / request_rate) / out[-1] if out and out[-1] > 0 else 1.0
    return [x * scale for x in out]


def _uniform_lens(n: int, length: int, ratio: float, rng: random.Random, lowest: int) -> list:
    """vLLM RandomDataset.get_sampling_params (``vllm/benchmarks/datasets/random.py``): integers
    uniform in [floor(L (1 - r)), ceil(L (1 + r))], r in [0, 1); the output's low end at least 1.
    (vLLM also takes the tokenizer's special tokens off the input length; not modelled.)"""
    lo = max(lowest, math.floor(length * (1 - ratio)))
    hi = max(lo, math.ceil(length * (1 + ratio)))
    return [rng.randint(lo, hi) for _ in range(n)]


def _sharegpt_lens(n: int, input_len, output_len, rng: random.Random) -> tuple[list, list]:
    """Lengths drawn from ``datasets.toml`` [sharegpt] (a log-normal per side, matched to the
    published means after vLLM's pruning; the file says what is published and what assumed),
    pruned as vLLM's is_valid_sequence prunes ShareGPT pairs; a given length overrides its side
    (vLLM's --sharegpt-output-len) and is not pruned."""
    d = datasets()["sharegpt"]
    f, ins, outs = d["filter"], d["input"], d["output"]
    lo, max_p, max_t = f["min_len"], f["max_prompt_len"], f["max_total_len"]
    xs: list[int] = []
    ys: list[int] = []
    while len(xs) < n:
        p = input_len if input_len is not None else int(rng.lognormvariate(ins["mu"], ins["sigma"]) + 0.5)  # fmt: skip
        o = output_len if output_len is not None else int(rng.lognormvariate(outs["mu"], outs["sigma"]) + 0.5)  # fmt: skip
        if input_len is None and not lo <= p <= max_p:
            continue
        if output_len is None and (o < lo or (input_len is None and p + o > max_t)):
            continue
        xs.append(p)
        ys.append(o)
    return xs, ys


def _rescaled(xs: list[int], mean: float, name: str) -> list[int]:
    """``xs`` scaled by mean / their mean, each rounded and at least 1 (the mean then within
    a rounding of ``mean``, a little above it where lengths below 1 are raised to 1)."""
    if not _is_num(mean) or not mean >= 1:
        raise ValueError(f"means: the {name} mean must be a number >= 1, got {mean!r}")
    f = mean / (sum(xs) / len(xs))
    return [max(1, round(x * f)) for x in xs]


def make_requests(
    num_prompts: int,
    request_rate: float,
    input_len: int | None,
    output_len: int | None,
    *,
    dataset: str = "random",
    range_ratio: float = 0.0,
    max_concurrency: int | None = None,
    seed: int = 0,
    means: tuple[float, float] | None = None,
) -> Requests:
    """Requests as ``vllm bench serve`` makes them: ``dataset`` "random" (lengths uniform around
    input_len / output_len, ``range_ratio`` as --random-range-ratio) or "sharegpt" (lengths from
    datasets.toml; input_len / output_len override a side when given); ``means``: each drawn
    side rescaled so that its mean is the given one, as a run's printed token totals / requests
    say it was (the shape kept, the scale the run's own: answers that stopped early); Poisson
    arrivals at
    ``request_rate`` per second (float('inf'): all at t = 0).  Deterministic for a seed
    (random.Random(seed): lengths first, then the gaps)."""
    if not _is_int(num_prompts) or num_prompts < 1:
        raise ValueError(f"num_prompts must be an integer >= 1, got {num_prompts!r}")
    if not _is_num(request_rate) or not request_rate > 0:
        raise ValueError(f"request_rate must be > 0 (float('inf') = all at once), got {request_rate!r}")  # fmt: skip
    if dataset not in ("random", "sharegpt"):
        raise ValueError(f"dataset must be 'random' or 'sharegpt', got {dataset!r}")
    for name, v in (("input_len", input_len), ("output_len", output_len)):
        if v is None and dataset == "random":
            raise ValueError(f"{name} is required for dataset 'random'")
        if v is not None and (not _is_int(v) or v < 1):
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if not _is_num(range_ratio) or not 0.0 <= range_ratio < 1.0:
        raise ValueError(f"range_ratio must be in [0, 1), got {range_ratio!r}")
    rng = random.Random(seed)
    if dataset == "random":
        ins = _uniform_lens(num_prompts, input_len, range_ratio, rng, 1)
        outs = _uniform_lens(num_prompts, output_len, range_ratio, rng, 1)
    else:
        ins, outs = _sharegpt_lens(num_prompts, input_len, output_len, rng)
    if means is not None:
        ins, outs = (_rescaled(xs, m, name) for xs, m, name in
                     ((ins, means[0], "input"), (outs, means[1], "output")))  # fmt: skip
    arr = arrival_times(num_prompts, float(request_rate), rng)
    return Requests(tuple(ins), tuple(outs), tuple(arr), max_concurrency)


# ----------------------------------------------------------------------------- statistics


def percentile(sorted_xs: list[float], q: float) -> float:
    """numpy.percentile's default (linear interpolation between the closest ranks)."""
    if not sorted_xs:
        return 0.0
    pos = (len(sorted_xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def _summary(xs: list[float]) -> dict:
    xs = sorted(xs)
    mean = math.fsum(xs) / len(xs) if xs else 0.0
    return {"mean": mean, "median": percentile(xs, 50), "p99": percentile(xs, 99)}


class _Hist:
    """Inter-token gaps as counts in 1 %-wide log bins, each bin with the sum of its values."""

    __slots__ = ("bins", "n", "total")

    def __init__(self) -> None:
        self.bins: dict[int, list] = {}
        self.n = 0
        self.total = 0.0

    @staticmethod
    def key(v: float) -> int:
        return math.floor(math.log(v) / _LOG_BIN) if v > 0 else -(10**9)

    def add(self, v: float, m: int = 1, key: int | None = None, vsum: float | None = None):
        """``m`` gaps of ``v`` seconds (or, with ``vsum``, m gaps summing to vsum in one bin)."""
        k = self.key(v) if key is None else key
        s = v * m if vsum is None else vsum
        b = self.bins.get(k)
        if b is None:
            self.bins[k] = [m, s]
        else:
            b[0] += m
            b[1] += s
        self.n += m
        self.total += s

    def add_affine(self, v0: float, slope: float, n: int, m: int) -> None:
        """m gaps each of v0, v0 + slope, ..., v0 + (n - 1) slope (one affine run of steps)."""
        v1 = v0 + slope * (n - 1)
        k0, k1 = self.key(v0), self.key(v1)
        if k0 == k1 or slope == 0.0:
            self.add(v0, m * n, k0, m * n * (v0 + v1) / 2)
            return
        j = 0  # walk the bins the run crosses
        while j < n:
            v = v0 + slope * j
            k = self.key(v)
            if slope > 0:  # the last step still below the bin's upper edge
                last = math.ceil((math.exp((k + 1) * _LOG_BIN) - v0) / slope) - 1
            else:  # the last step still at or above its lower edge
                last = math.floor((math.exp(k * _LOG_BIN) - v0) / slope)
            last = min(n - 1, max(j, last))
            cnt = last - j + 1
            self.add(v, m * cnt, k, m * cnt * (v + v0 + slope * last) / 2)
            j = last + 1

    def summary(self) -> dict:
        if not self.n:
            return {"mean": 0.0, "median": 0.0, "p99": 0.0}
        keys = sorted(self.bins)
        means = [self.bins[k][1] / self.bins[k][0] for k in keys]
        counts = [self.bins[k][0] for k in keys]

        def at(rank: int) -> float:  # the value of the rank-th smallest gap (0-based)
            c = 0
            for mean, cnt in zip(means, counts, strict=True):
                c += cnt
                if rank < c:
                    return mean
            return means[-1]

        def pct(q: float) -> float:
            pos = (self.n - 1) * q / 100.0
            lo = int(pos)
            a, b = at(lo), at(min(lo + 1, self.n - 1))
            return a + (b - a) * (pos - lo)

        return {"mean": self.total / self.n, "median": pct(50), "p99": pct(99)}


class _Run:
    """The times of k consecutive steps f(1), ..., f(k) as affine pieces (see the module
    docstring: halving at the midpoint until it lies on the chord)."""

    __slots__ = ("cum", "ends", "k", "pieces")

    def __init__(self, f: Callable[[int], float], k: int) -> None:
        cache: dict[int, float] = {}

        def val(j: int) -> float:
            v = cache.get(j)
            if v is None:
                v = cache[j] = f(j)
            return v

        pieces = []  # (first step, last step, f(first), slope)
        stack = [(1, k)]
        while stack:
            a, b = stack.pop()
            fa = val(a)
            if a == b:
                pieces.append((a, b, fa, 0.0))
                continue
            fb = val(b)
            slope = (fb - fa) / (b - a)
            if b - a > 1:
                m = (a + b) // 2
                fm = val(m)
                if abs(fm - fa - slope * (m - a)) > _FLAT * max(fa, fb, fm):
                    stack.append((m + 1, b))
                    stack.append((a, m))
                    continue
            pieces.append((a, b, fa, slope))
        self.pieces = pieces
        self.ends = [b for _, b, _, _ in pieces]
        self.k = k
        cum, s = [], 0.0
        for a, b, fa, sl in pieces:
            n = b - a + 1
            s += n * fa + sl * n * (n - 1) / 2
            cum.append(s)
        self.cum = cum

    def total(self, j: int) -> float:
        """Seconds of steps 1..j."""
        if j <= 0:
            return 0.0
        idx = bisect.bisect_left(self.ends, j)
        if idx == len(self.pieces):
            return self.cum[-1]
        a, _, fa, sl = self.pieces[idx]
        n = j - a + 1
        return (self.cum[idx - 1] if idx else 0.0) + n * fa + sl * n * (n - 1) / 2

    def reach(self, x: float) -> int:
        """The fewest steps whose time is >= x (k + 1 when all k are shorter)."""
        if x <= 0:
            return 1
        if self.cum[-1] < x:
            return self.k + 1
        before = 0.0
        for idx, (a, b, fa, sl) in enumerate(self.pieces):
            if self.cum[idx] >= x:
                lo, hi = 1, b - a + 1  # binary search on the piece's closed-form partial sums
                while lo < hi:
                    mid = (lo + hi) // 2
                    if before + mid * fa + sl * mid * (mid - 1) / 2 >= x:
                        hi = mid
                    else:
                        lo = mid + 1
                return a + lo - 1
            before = self.cum[idx]
        return self.k + 1  # pragma: no cover

    def gaps(self, hist: _Hist, lo: int, hi: int, m: int) -> None:
        """Add m inter-token gaps for each of the steps lo..hi."""
        for a, b, fa, sl in self.pieces:
            s, e = max(a, lo), min(b, hi)
            if s <= e:
                hist.add_affine(fa + sl * (s - a), sl, e - s + 1, m)


# ----------------------------------------------------------------------------- the engine


class _Sim:
    """One run: client, engine state and metrics (internal order = arrival order)."""

    def __init__(self, sched: Scheduler, reqs: Requests, step_time: StepCost, max_steps: int):
        n = len(reqs.input_lens)
        order = sorted(range(n), key=lambda i: (reqs.arrivals_s[i], i))
        self.s = sched
        self.cost_fn = step_time
        self.max_steps = max_steps
        self.N = n
        self.inp = [reqs.input_lens[i] for i in order]
        self.out = [reqs.output_lens[i] for i in order]
        self.arr = [float(reqs.arrivals_s[i]) for i in order]
        self.cap = reqs.max_concurrency or n + 1
        self.bs = sched.block_size
        self.bounded = sched.kv_pool_tokens is not None
        self.total_blocks = sched.kv_pool_tokens // self.bs if self.bounded else 0
        self.F = self.total_blocks  # free KV blocks
        self.notes: list[str] = []
        self.stopped = False
        # client
        self.nxt = 0
        self.in_flight = 0
        self.send_t: list[float | None] = [None] * n
        self.failed_t = 0.0
        # requests
        self.gen = [0] * n
        self.first_t: list[float | None] = [None] * n
        self.done_t: list[float | None] = [None] * n
        self.last_emit = [0.0] * n
        self.rejected = [False] * n
        self.cached = [0] * n  # tokens a preempted request finds in the prefix cache (vLLM V1)
        self.waiting: deque[int] = deque()
        # decoding sequences as aggregates (module docstring, "Speed")
        self.G = 0  # decode steps so far
        self.dec: dict[int, None] = {}  # decoding requests, admission order
        self.jg = [0] * n  # G when the request began decoding
        self.jc = [0] * n  # its context (tokens in KV) then
        self.jgen = [0] * n  # its generated tokens then
        self.join_t = [0.0] * n
        self.ver = [0] * n
        self.ctx_sum = 0  # sum of (jc - jg) over decoders: contexts = ctx_sum + nd x G
        self.rem_sum = 0  # sum of (O - jgen + jg): answers still to come = rem_sum - nd x G
        self.gen_sum = 0  # sum of (jgen - jg): generated = gen_sum + nd x G
        self.o_sum = 0
        self.ph = [0] * self.bs  # decoders that need a new block at the step from G = q mod bs
        self.heap: list[tuple[int, int, int]] = []  # (G at which it finishes, version, request)
        self.t_dec = 0.0  # end of the last step that advanced the decoders
        self.pending: dict[int, None] = {}  # sglang: decoders that joined since then
        # vllm / sglang prefill state
        self.pre: list[list[int]] = []  # vllm: partly prefilled running requests [i, computed]
        self.chunk: list[int] | None = None  # sglang: the chunked request [i, computed]
        self.r_base = sched.new_token_ratio
        self.r_steps = 0
        self.full = False  # sglang batch_is_full
        self.shrunk = False  # sglang: a running request finished since the last decode step
        self.decay = (sched.new_token_ratio - sched.min_new_token_ratio) / SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS  # fmt: skip
        self.clip = max(self.out, default=0) > SGLANG_CLIP_MAX_NEW_TOKENS
        # metrics
        self.steps = 0
        self.preemptions = 0
        self.itl = _Hist()
        self.area = 0.0
        self.max_run = 0
        self.series: list[tuple[float, int]] = []
        self._reject_too_long()

    # ------------------------------------------------------------------ helpers

    def _reject_too_long(self) -> None:
        """Requests the KV pool can never hold are sent and fail at once (an engine refuses a
        request longer than its KV capacity); they count as not completed."""
        if not self.bounded:
            return
        s, bad = self.s, 0
        pool = self.total_blocks * self.bs
        for k in range(self.N):
            p, o = self.inp[k], self.out[k]
            too = _cdiv(p + o - 1, self.bs) > self.total_blocks
            if s.policy == "sglang":  # PrefillAdder: prompt + min(max_new, 4096) < free tokens
                too = too or p + min(o, SGLANG_CLIP_MAX_NEW_TOKENS) >= pool
            if too:
                self.rejected[k] = True
                bad += 1
        if bad:
            self.notes.append(
                f"{bad} request(s) need more KV than the pool holds ({pool:,} tokens): never "
                "admitted, counted as not completed"
            )

    def cost(self, prefill: int, decode: int, kv: int) -> float:
        v = self.cost_fn(prefill, decode, kv)
        if not (isinstance(v, (int, float)) and 0.0 <= v < math.inf):
            raise ValueError(f"step_time must return finite seconds >= 0, got {v!r}")
        return float(v)

    def ratio(self) -> float:
        return max(self.r_base - self.decay * self.r_steps, self.s.min_new_token_ratio)

    def send_due(self, now: float, at_now: bool) -> None:
        """Send what is due by ``now`` while the client has a free slot (at its arrival time, or
        at ``now`` when it waited for the slot that just freed)."""
        arr, cap = self.arr, self.cap
        while self.nxt < self.N and self.in_flight < cap and arr[self.nxt] <= now:
            k = self.nxt
            self.nxt += 1
            t = now if at_now else arr[k]
            self.send_t[k] = t
            if self.rejected[k]:
                self.failed_t = max(self.failed_t, t)
                continue
            self.in_flight += 1
            self.waiting.append(k)

    def next_send(self) -> float | None:
        if self.nxt < self.N and self.in_flight < self.cap:
            return self.arr[self.nxt]
        return None

    def finish(self, k: int, t: float, blocks: int) -> None:
        """Request k returns at t: its slot frees; a request the client held back is sent."""
        self.done_t[k] = t
        self.F += blocks
        self.send_due(t, False)  # those due before now that had a slot (a skipped run)
        self.in_flight -= 1
        self.send_due(t, True)

    def emit_first(self, k: int, t: float) -> None:
        """A prompt (or a recomputed prompt + answer) finished: it emits a token."""
        self.gen[k] += 1
        if self.first_t[k] is None:
            self.first_t[k] = t
        else:
            self.itl.add(t - self.last_emit[k])

    def join(self, k: int, ctx: int, t: float) -> None:
        """Request k begins decoding with ``ctx`` tokens in KV."""
        g = self.G
        self.dec[k] = None
        self.jg[k], self.jc[k], self.jgen[k], self.join_t[k] = g, ctx, self.gen[k], t
        if self.bounded:
            self.ph[(g - ctx) % self.bs] += 1
        self.ctx_sum += ctx - g
        self.rem_sum += self.out[k] - self.gen[k] + g
        self.gen_sum += self.gen[k] - g
        self.o_sum += self.out[k]
        heapq.heappush(self.heap, (g + self.out[k] - self.gen[k], self.ver[k], k))

    def leave(self, k: int) -> int:
        """Request k stops decoding (finished, preempted or retracted); returns its context."""
        g, jg, jc = self.G, self.jg[k], self.jc[k]
        del self.dec[k]
        if self.bounded:
            self.ph[(jg - jc) % self.bs] -= 1
        self.ctx_sum -= jc - jg
        self.rem_sum -= self.out[k] - self.jgen[k] + jg
        self.gen_sum -= self.jgen[k] - jg
        self.o_sum -= self.out[k]
        self.ver[k] += 1
        self.gen[k] = self.jgen[k] + g - jg
        self.last_emit[k] = max(self.join_t[k], self.t_dec)
        self.pending.pop(k, None)
        return jc + g - jg

    def finish_decoders(self, t: float) -> None:
        heap = self.heap
        while heap and heap[0][0] <= self.G:
            _, v, k = heapq.heappop(heap)
            if v == self.ver[k] and k in self.dec:
                ctx = self.leave(k)
                self.finish(k, t, _cdiv(ctx, self.bs) if self.bounded else 0)
                self.shrunk = True

    def next_finish(self) -> int:
        """Decode steps until the first decoder finishes."""
        heap = self.heap
        while heap and (heap[0][1] != self.ver[heap[0][2]] or heap[0][2] not in self.dec):
            heapq.heappop(heap)
        return heap[0][0] - self.G

    def demand(self, k: int) -> int:
        """New blocks the decoders take over the next k decode steps."""
        nd = len(self.dec)
        full, rest = divmod(k, self.bs)
        d = full * nd
        g, ph, bs = self.G, self.ph, self.bs
        for t in range(rest):
            d += ph[(g + t) % bs]
        return d

    def steps_fitting(self) -> int:
        """The most decode steps the free blocks carry before one of them lacks a block."""
        nd = len(self.dec)
        if not self.bounded or nd == 0:
            return 1 << 60
        full, left = divmod(self.F, nd)
        j = full * self.bs
        g, ph, bs = self.G, self.ph, self.bs
        t = 0
        while left >= ph[(g + t) % bs]:
            left -= ph[(g + t) % bs]
            t += 1
        return j + t

    def record(self, t: float, dt: float, running: int) -> None:
        self.area += running * dt
        if running > self.max_run:
            self.max_run = running
        if not self.series or self.series[-1][1] != running:
            self.series.append((t, running))

    def decode_run(self, T: float, k: int, cut: bool) -> float:
        """Advance the decoders k steps at once (no event inside; ``cut``: an arrival would be
        admitted, so stop at the first step that ends after it); returns the end time."""
        nd = len(self.dec)
        kv0 = self.ctx_sum + nd * self.G + nd
        cost = self.cost
        run = _Run(lambda j: cost(0, nd, kv0 + nd * (j - 1)), k)
        ts = self.next_send() if cut else None
        if ts is not None:
            k = min(k, run.reach(ts - T))
        dt = run.total(k)
        run.gaps(self.itl, 1, k, nd)
        if self.bounded:
            self.F -= self.demand(k)
        self.G += k
        self.steps += k
        self.r_steps += k
        self.record(T, dt, nd)
        T += dt
        self.t_dec = T
        self.finish_decoders(T)
        return T

    def run_horizon(self) -> int:
        return min(self.next_finish(), self.max_steps - self.steps)

    # ------------------------------------------------------------------ vLLM

    def vllm_steady(self) -> bool:
        """No admission can happen in the coming decode steps (module docstring, 2.): nothing
        waits, or the head of the queue is refused (FCFS: the rest wait behind it) for a reason
        that holds until a request finishes: max_num_seqs, no token budget, too few free blocks
        (they only shrink while the batch decodes)."""
        if self.pre or not self.dec:
            return False
        if not self.waiting:
            return True
        s, nd = self.s, len(self.dec)
        budget = s.max_num_batched_tokens - nd
        if nd >= s.max_num_seqs or budget <= 0:
            return True
        if not self.bounded:
            return False
        k = self.waiting[0]
        first = _cdiv(min(self.inp[k] + self.gen[k], budget), self.bs)
        return first > self.F - self.ph[self.G % self.bs]  # free blocks only shrink meanwhile

    def vllm_iter(self, T: float) -> float:
        if _SKIP and self.vllm_steady():
            k = min(self.run_horizon(), self.steps_fitting())
            if k >= _MIN_RUN:
                return self.decode_run(T, k, not self.waiting)
        return self.vllm_step(T)

    def preempt_last(self) -> int:
        """vLLM ``self.running.pop()``: the most recently admitted running request goes back to
        the front of the waiting queue (recompute, or with V1's prefix caching only what its
        cached full blocks do not hold); returns it."""
        if self.pre:
            k, comp = self.pre.pop()
            self.F += _cdiv(comp, self.bs)  # last_emit[k] is still its last token's time
        else:
            k = next(reversed(self.dec))
            comp = self.leave(k)
            self.F += _cdiv(comp, self.bs)
        if self.s.resume_cached:
            self.cached[k] = comp // self.bs * self.bs
        self.waiting.appendleft(k)
        self.preemptions += 1
        return k

    def vllm_step(self, T: float) -> float:
        s, bs, bounded = self.s, self.bs, self.bounded
        inp, gen = self.inp, self.gen
        preempted = False
        if bounded:
            while self.ph[self.G % bs] > self.F:  # a decoder lacks a block
                self.preempt_last()
                preempted = True
            self.F -= self.ph[self.G % bs]
        nd = len(self.dec)
        budget = s.max_num_batched_tokens - nd
        kv = self.ctx_sum + nd * self.G + nd
        prefill = 0
        idx = 0
        while idx < len(self.pre) and budget > 0:  # partly prefilled running requests
            ent = self.pre[idx]
            k, comp = ent
            c = min(inp[k] + gen[k] - comp, budget)
            if bounded:
                nb = _cdiv(comp + c, bs) - _cdiv(comp, bs)
                gone = False
                while nb > self.F:
                    preempted = True
                    if self.preempt_last() == k:
                        gone = True
                        break
                if gone:
                    break
                self.F -= nb
            ent[1] = comp + c
            budget -= c
            prefill += c
            kv += comp + c
            idx += 1
        if not preempted:  # then the waiting queue, FCFS
            while self.waiting and budget > 0 and len(self.dec) + len(self.pre) < s.max_num_seqs:
                k = self.waiting[0]
                # a preempted request's cached full blocks (V1 prefix caching; at least its
                # last token is computed again)
                hit = min(self.cached[k], inp[k] + gen[k] - 1)
                c = min(inp[k] + gen[k] - hit, budget)
                if bounded:
                    nb = _cdiv(hit + c, bs)
                    if nb > self.F:
                        break
                    self.F -= nb
                self.waiting.popleft()
                self.cached[k] = 0
                self.pre.append([k, hit + c])
                budget -= c
                prefill += c
                kv += hit + c
        dt = self.cost(prefill, nd, kv)
        T1 = T + dt
        self.record(T, dt, nd + len(self.pre))
        self.steps += 1
        if nd:
            self.itl.add(dt, nd)
            self.G += 1
            self.t_dec = T1
        keep = []
        for ent in self.pre:
            k, comp = ent
            if comp < inp[k] + gen[k]:
                keep.append(ent)
                continue
            self.emit_first(k, T1)
            if gen[k] >= self.out[k]:
                self.finish(k, T1, _cdiv(comp, bs) if bounded else 0)
            else:
                self.join(k, comp, T1)
        self.pre = keep
        self.finish_decoders(T1)
        return T1

    # ------------------------------------------------------------------ SGLang

    def rest(self) -> int:
        """Sum over the running batch of min(max_new - generated, 4096) (PrefillAdder)."""
        if self.clip:
            g = self.G
            return sum(
                min(self.out[k] - self.jgen[k] - g + self.jg[k], SGLANG_CLIP_MAX_NEW_TOKENS)
                for k in self.dec
            )
        return self.rem_sum - len(self.dec) * self.G

    def reserved(self) -> float:
        """PrefillAdder: the running batch's predicted answers, rest() x new_token_ratio."""
        return self.rest() * self.ratio() if self.dec else 0.0

    def sglang_prefill(self, T: float) -> float | None:
        """One prefill batch if the waiting queue (or the chunked request) admits one."""
        s, bs, bounded = self.s, self.bs, self.bounded
        inp, out, gen = self.inp, self.out, self.gen
        clip = SGLANG_CLIP_MAX_NEW_TOKENS
        free = self.F
        rem_total = (free * bs if bounded else math.inf) - self.reserved()
        rem_chunk = s.max_num_batched_tokens
        one = s.prompt_chunk or rem_chunk  # one prompt's share of a step
        batch: list[tuple[int, int, int]] = []  # (request, computed before, chunk)
        chunk = self.chunk
        if chunk is not None:  # add_chunked_req: the chunked request continues first
            k, comp = chunk
            left = inp[k] + gen[k] - comp
            c = min(left, rem_chunk, one, math.floor(rem_total) if rem_total < math.inf else left)
            if bounded:  # what its blocks and the free ones hold
                c = min(c, (_cdiv(comp, bs) + free) * bs - comp)
            if c > 0:
                batch.append((k, comp, c))
                if bounded:
                    free -= _cdiv(comp + c, bs) - _cdiv(comp, bs)
                rem_total -= c + (min(out[k] - gen[k], clip) if c == left else 0)
                rem_chunk -= c
        # one prompt is chunked at a time: while the chunked one is unfinished, the step's
        # budget left takes only prompts that fit whole (with prompt_chunk below the budget,
        # SGLang's DP ranks would chunk one each: an upper bound on the prefill wait)
        chunk_open = chunk is not None and not (batch and batch[0][2] >= left)
        while self.waiting and rem_chunk > 0:
            if len(self.dec) + len(batch) >= s.max_num_seqs or rem_total <= 0:
                self.full = True  # batch_is_full: no new try until the running batch shrinks
                break
            k = self.waiting[0]
            tot = inp[k] + gen[k]
            mx = min(out[k] - gen[k], clip)
            c = min(tot, rem_chunk, one)
            if c < tot and chunk_open:
                break  # a second prompt would be chunked: it waits for the next step
            if tot + mx >= rem_total or (bounded and _cdiv(c, bs) > free):  # NO_TOKEN
                self.full = True
                break
            if bounded:
                free -= _cdiv(c, bs)
            self.waiting.popleft()
            batch.append((k, 0, c))
            rem_total -= c + (mx if c == tot else 0)
            rem_chunk -= c
            if c < tot:
                break  # the chunked request takes what is left of the chunk budget
        if not batch:
            return None
        prefill = sum(c for _, _, c in batch)
        kv = sum(b + c for _, b, c in batch)
        self.F = free
        dt = self.cost(prefill, 0, kv)
        T1 = T + dt
        self.steps += 1
        self.chunk = None
        holding = len(self.dec) + len(batch)
        self.record(T, dt, holding)
        for k, b, c in batch:
            comp = b + c
            if comp < inp[k] + gen[k]:
                self.chunk = [k, comp]
                continue
            self.emit_first(k, T1)
            if gen[k] >= out[k]:
                self.finish(k, T1, _cdiv(comp, bs) if bounded else 0)
            else:
                self.join(k, comp, T1)
                self.pending[k] = None
        return T1

    def sglang_retract(self) -> None:
        """schedule_batch.retract_decode (module docstring, 3.)."""
        g = self.G
        order = sorted(self.dec, key=lambda k: (self.jgen[k] + g - self.jg[k], -self.inp[k]), reverse=True)  # fmt: skip
        first = True
        while first or self.F * self.bs < len(order) * SGLANG_RETRACT_DECODE_STEPS:
            if len(order) == 1:
                break
            first = False
            k = order.pop()
            self.F += _cdiv(self.leave(k), self.bs)
            self.waiting.append(k)
            self.preemptions += 1
        self.full = False  # the batch shrank
        nd = len(self.dec)
        done = self.gen_sum + nd * g  # total_decoded_tokens / total_max_new_tokens
        self.r_base = min(1.0, (done + SGLANG_RETRACT_DECODE_STEPS * nd) / max(1, self.o_sum))
        self.r_steps = 0

    def sglang_decode(self, T: float) -> float:
        bs, bounded = self.bs, self.bounded
        if bounded and self.ph[self.G % bs] > self.F:
            self.sglang_retract()
            if self.ph[self.G % bs] > self.F:  # pragma: no cover (the pool holds one request)
                raise RuntimeError("KV pool cannot hold the last running request")
        else:
            self.r_steps += 1
        if bounded:
            self.F -= self.ph[self.G % bs]
        nd = len(self.dec)
        dt = self.cost(0, nd, self.ctx_sum + nd * self.G + nd)
        T1 = T + dt
        old = nd - len(self.pending)
        if old:
            self.itl.add(T1 - self.t_dec, old)
        for k in self.pending:
            self.itl.add(T1 - self.join_t[k])
        self.pending.clear()
        self.record(T, dt, nd + (1 if self.chunk else 0))
        self.steps += 1
        self.G += 1
        self.t_dec = T1
        self.finish_decoders(T1)
        return T1

    def sglang_iter(self, T: float) -> float | None:
        """get_next_batch_to_run: a prefill batch if the queue admits one (not tried while
        batch_is_full, which a NO_TOKEN or max_running_requests sets), else
        update_running_batch (a batch that shrank clears batch_is_full) and a decode step."""
        tried = False
        if (self.waiting and not self.full) or self.chunk is not None:
            tried = True
            T1 = self.sglang_prefill(T)
            if T1 is not None:
                return T1
        if self.shrunk or not self.dec:
            self.full = self.shrunk = False
        if not self.dec:  # idle: SGLang re-inits new_token_ratio, then tries again
            self.r_base, self.r_steps = self.s.new_token_ratio, 0
            return None if tried else T
        if (
            _SKIP
            and not self.pending
            and self.t_dec == T
            and self.chunk is None
            and (self.full or not self.waiting)
        ):  # while batch_is_full nothing is admitted; with an empty queue an arrival would be
            k = min(self.run_horizon(), self.steps_fitting())
            if k >= _MIN_RUN:
                return self.decode_run(T, k, not self.full)
        return self.sglang_decode(T)

    # ------------------------------------------------------------------ static

    def static_iter(self, T: float) -> float:
        s, bs, bounded = self.s, self.bs, self.bounded
        inp, out = self.inp, self.out
        batch: list[int] = []
        pm = om = 0
        while self.waiting and len(batch) < s.static_batch:
            k = self.waiting[0]
            p2, o2 = max(pm, inp[k]), max(om, out[k])
            if bounded and (len(batch) + 1) * _cdiv(p2 + o2 - 1, bs) > self.total_blocks:
                break
            batch.append(self.waiting.popleft())
            pm, om = p2, o2
        b = len(batch)
        dt0 = self.cost(b * pm, 0, b * pm)  # prompts padded to the longest
        T1 = T + dt0
        for k in batch:
            self.gen[k] = 1
            self.first_t[k] = T1
        ends = {k: T1 for k in batch}
        if om > 1:
            cost = self.cost
            run = _Run(lambda j: cost(0, b, b * (pm + j)), om - 1)
            outs = sorted(out[k] for k in batch)
            cur = 0
            for idx, o in enumerate(outs):  # rows still generating at each step
                if o - 1 > cur:
                    run.gaps(self.itl, cur + 1, o - 1, b - idx)
                    cur = o - 1
            for k in batch:
                ends[k] = T1 + run.total(out[k] - 1)
            T_end = T1 + run.total(om - 1)
        else:
            T_end = T1
        self.steps += om
        self.record(T, T_end - T, b)
        for k in sorted(batch, key=lambda k: (ends[k], k)):
            self.gen[k] = out[k]
            self.finish(k, ends[k], 0)
        return T_end

    # ------------------------------------------------------------------ loop

    def busy(self) -> bool:
        return bool(self.waiting or self.dec or self.pre or self.chunk is not None)

    def run(self) -> float:
        T = 0.0
        step = {"vllm": self.vllm_iter, "sglang": self.sglang_iter, "static": self.static_iter}[
            self.s.policy
        ]
        while True:
            self.send_due(T, False)
            if not self.busy():
                ts = self.next_send()
                if ts is None:
                    break
                T = max(T, ts)
                self.r_base, self.r_steps = self.s.new_token_ratio, 0  # SGLang: idle resets it
                continue
            if self.steps >= self.max_steps:
                left = sum(1 for k in range(self.N) if self.done_t[k] is None and not self.rejected[k])  # fmt: skip
                self.notes.append(
                    f"stopped at max_steps ({self.max_steps:,}): {left} request(s) unfinished"
                )
                self.stopped = True
                break
            T1 = step(T)
            if T1 is None:  # pragma: no cover (every admitted request fits an empty pool)
                self.notes.append("the engine could not schedule the waiting requests: stopped")
                break
            T = T1
        return T

    def result(self, T_stop: float) -> SimResult:
        done = [k for k in range(self.N) if self.done_t[k] is not None]
        ends = [self.done_t[k] for k in done] + [self.failed_t]
        duration = T_stop if self.stopped else max(ends)
        ttft, e2e, tpot = [], [], []
        out_tok = in_tok = 0
        for k in done:
            st = self.send_t[k]
            a, e = self.first_t[k] - st, self.done_t[k] - st
            ttft.append(a)
            e2e.append(e)
            if self.out[k] > 1:
                tpot.append((e - a) / (self.out[k] - 1))
            out_tok += self.out[k]
            in_tok += self.inp[k]
        per = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
        series = [*self.series, (duration, 0)]
        if len(series) > _SERIES_POINTS:
            last = len(series) - 1
            series = [series[round(i * last / (_SERIES_POINTS - 1))] for i in range(_SERIES_POINTS)]
        return SimResult(
            duration_s=duration,
            completed=len(done),
            requests_per_s=per(len(done)),
            output_tokens_per_s=per(out_tok),
            total_tokens_per_s=per(out_tok + in_tok),
            ttft_s=_summary(ttft),
            tpot_s=_summary(tpot),
            itl_s=self.itl.summary(),
            e2e_s=_summary(e2e),
            batch={"mean": per(self.area), "max": self.max_run, "series": series},
            preemptions=self.preemptions,
            steps=self.steps,
            notes=self.notes,
        )


def simulate(
    sched: Scheduler, reqs: Requests, step_time: StepCost, *, max_steps: int = 2_000_000
) -> SimResult:
    """Run ``reqs`` through one replica scheduled by ``sched``, each engine step priced by
    ``step_time(prefill_tokens, decode_seqs, kv_tokens_read)`` seconds (module docstring)."""
    if not isinstance(sched, Scheduler) or not isinstance(reqs, Requests):
        raise ValueError("simulate takes a Scheduler and a Requests")
    if not callable(step_time):
        raise ValueError("step_time must be callable: step_time(prefill_tokens, decode_seqs, kv_tokens_read) -> seconds")  # fmt: skip
    if not _is_int(max_steps) or max_steps < 1:
        raise ValueError(f"max_steps must be an integer >= 1, got {max_steps!r}")
    if not reqs.input_lens:
        raise ValueError("no requests to simulate")
    sim = _Sim(sched, reqs, step_time, max_steps)
    return sim.result(sim.run())
