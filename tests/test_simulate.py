"""The serving simulator (speed/simulate.py): scheduling invariants, hand-computed small cases,
event skipping against the step-by-step run, request generation and input checks."""

from __future__ import annotations

import dataclasses
import math
import statistics
import time

import pytest

from nodeledger.speed import simulate as S
from nodeledger.speed.simulate import Requests, Scheduler, make_requests, simulate


def affine(p: int, d: int, kv: int) -> float:
    """A step cost affine in each argument (the simulator's closed-form sums are exact)."""
    return 0.004 + 2e-5 * p + 3e-5 * d + 1e-8 * kv


def roofline(p: int, d: int, kv: int) -> float:
    """max(compute, memory): convex piecewise affine in kv_tokens_read."""
    return max(0.003 + 4e-5 * p + 1e-6 * d, 0.002 + 2e-8 * kv) + 1e-4


def same(a: S.SimResult, b: S.SimResult, rel: float = 1e-9) -> None:
    assert a.completed == b.completed
    assert a.steps == b.steps
    assert a.preemptions == b.preemptions
    assert a.batch["max"] == b.batch["max"]
    assert a.duration_s == pytest.approx(b.duration_s, rel=rel)
    assert a.batch["mean"] == pytest.approx(b.batch["mean"], rel=rel)
    for name in ("ttft_s", "tpot_s", "e2e_s", "itl_s"):
        for key in ("mean", "median", "p99"):
            got, want = getattr(a, name)[key], getattr(b, name)[key]
            assert got == pytest.approx(want, rel=rel, abs=1e-12), (name, key)


def test_pool_of_eight_sequences_never_runs_nine():
    """Prompts of 1000 and answers of 9 tokens: 1008 tokens = 63 blocks of 16 each; a pool of
    8 x 1008 tokens holds 8 whole sequences and no ninth prompt."""
    reqs = make_requests(40, math.inf, 1000, 9)
    pool = 8 * 1008
    for sched in (
        Scheduler("vllm", 64, 8192, pool),
        Scheduler("sglang", 64, 8192, pool, block_size=1),
        Scheduler("static", 64, 8192, pool, static_batch=16),
    ):
        res = simulate(sched, reqs, affine)
        assert res.completed == 40, sched.policy
        assert 1 < res.batch["max"] <= 8, sched.policy
        assert max(n for _, n in res.batch["series"]) <= 8
    # vLLM and the static batch fill the pool (SGLang reserves each newcomer's whole answer and
    # needs prompt + answer < free tokens, strictly: 7 at a time)
    assert simulate(Scheduler("vllm", 64, 8192, pool), reqs, affine).batch["max"] == 8


def test_littles_law_on_a_steady_poisson_run():
    """Mean sequences in the engine = throughput x mean time in it (a request waits at most one
    step before it is admitted: a fraction of a percent of its latency here)."""
    reqs = make_requests(2000, 4.0, 200, 100, range_ratio=0.5, seed=1)
    for sched in (Scheduler("vllm", 64, 4096, None), Scheduler("sglang", 64, 4096, None, 1)):
        res = simulate(sched, reqs, affine)
        assert res.completed == 2000
        little = res.requests_per_s * res.e2e_s["mean"]
        assert res.batch["mean"] == pytest.approx(little, rel=0.02), sched.policy


@pytest.mark.parametrize("policy", ["vllm", "sglang", "static"])
def test_throughput_by_hand_constant_step(policy):
    """3 requests at once, room for all, a constant 10 ms step: one prefill step, then 4 decode
    steps; 3 x 5 tokens in 5 steps."""
    reqs = Requests((10, 10, 10), (5, 5, 5), (0.0, 0.0, 0.0))
    sched = Scheduler(policy, 4, 64, None, block_size=1, static_batch=3)
    res = simulate(sched, reqs, lambda p, d, kv: 0.01)
    assert res.steps == 5
    assert res.duration_s == pytest.approx(0.05)
    assert res.output_tokens_per_s == pytest.approx(3 * 5 / (5 * 0.01))
    assert res.requests_per_s == pytest.approx(3 / 0.05)
    assert res.total_tokens_per_s == pytest.approx(3 * 15 / 0.05)
    for d in (res.ttft_s, res.tpot_s, res.itl_s):
        assert d == pytest.approx({"mean": 0.01, "median": 0.01, "p99": 0.01})
    assert res.e2e_s["mean"] == pytest.approx(0.05)


def test_throughput_by_hand_unequal_answers():
    """Answers of 2, 3 and 5 tokens, cost 10 ms + 1 ms per decoding sequence + 0.1 ms per
    prompt token: steps 13 (prefill 30) + 13 (3 decode) + 12 + 11 + 11 ms = 60 ms."""
    reqs = Requests((10, 10, 10), (2, 3, 5), (0.0, 0.0, 0.0))
    res = simulate(
        Scheduler("vllm", 4, 64, None), reqs, lambda p, d, kv: 0.01 + 0.001 * d + 1e-4 * p
    )
    assert res.steps == 5
    assert res.duration_s == pytest.approx(0.060)
    assert res.output_tokens_per_s == pytest.approx(10 / 0.060)
    assert res.e2e_s["mean"] == pytest.approx((0.026 + 0.038 + 0.060) / 3)
    assert res.ttft_s["p99"] == pytest.approx(0.013)


def test_kv_tokens_read_by_hand():
    """One request, prompt 8, answer 3: the prefill reads 8 keys, the decodes 9 and 10."""
    seen = []

    def cost(p, d, kv):
        seen.append((p, d, kv))
        return 0.01

    S._SKIP, was = False, S._SKIP
    try:
        simulate(Scheduler("vllm", 1, 16, None), Requests((8,), (3,), (0.0,)), cost)
    finally:
        S._SKIP = was
    assert seen == [(8, 0, 8), (0, 1, 9), (0, 1, 10)]


def test_max_concurrency_one_gives_ttft_of_one_prefill():
    reqs = make_requests(6, math.inf, 300, 20, max_concurrency=1)

    def cost(p, d, kv):
        return 0.002 + 1e-5 * p + 1e-4 * d

    for sched in (Scheduler("vllm", 8, 512, None), Scheduler("sglang", 8, 512, None, 1)):
        res = simulate(sched, reqs, cost)
        assert res.ttft_s == pytest.approx({k: cost(300, 0, 300) for k in ("mean", "median", "p99")})  # fmt: skip
        one = cost(300, 0, 300) + 19 * cost(0, 1, 0)
        assert res.duration_s == pytest.approx(6 * one)  # one request after the other
        assert res.batch["max"] == 1


def test_means_rescale_the_drawn_lengths_and_keep_their_spread():
    """A run's printed totals (215.2 / 122.8 tokens per request) rescale the ShareGPT-like
    draws: the means land on them (within rounding), the spread stays (no fixed length), the
    same seed draws the same shape."""
    base = make_requests(2000, math.inf, None, None, dataset="sharegpt", seed=3)
    scaled = make_requests(2000, math.inf, None, None, dataset="sharegpt", seed=3,
                           means=(215.2, 122.8))  # fmt: skip
    assert statistics.fmean(scaled.input_lens) == pytest.approx(215.2, rel=0.01)
    assert statistics.fmean(scaled.output_lens) == pytest.approx(122.8, rel=0.01)
    assert statistics.pstdev(scaled.output_lens) > 0.5 * statistics.fmean(scaled.output_lens)
    order = sorted(range(2000), key=lambda i: base.output_lens[i])
    assert [scaled.output_lens[i] for i in order] == sorted(scaled.output_lens)
    with pytest.raises(ValueError, match="means"):
        make_requests(10, 1.0, None, None, dataset="sharegpt", means=(0.0, 10.0))


def test_prompt_chunk_prefills_one_prompt_a_share_of_the_step_by_hand():
    """SGLang DP attention: a 3,000-token prompt on a rank whose budget is 8,192 // 8 = 1,024
    takes ceil(3000 / 1024) = 3 prefill steps (1,024 + 1,024 + 952) before its first token, and
    every request still completes; without the cap it takes one."""
    reqs = make_requests(3, math.inf, 3000, 4, max_concurrency=1)

    def cost(p, d, kv):
        return 0.001 + 1e-5 * p + 1e-4 * d

    whole = simulate(Scheduler("sglang", 8, 8192, None, 1), reqs, cost)
    assert whole.ttft_s["median"] == pytest.approx(cost(3000, 0, 3000))
    part = simulate(Scheduler("sglang", 8, 8192, None, 1, prompt_chunk=1024), reqs, cost)
    assert part.completed == 3
    assert part.ttft_s["median"] == pytest.approx(
        cost(1024, 0, 0) + cost(1024, 0, 0) + cost(952, 0, 0)
    )
    assert part.steps == whole.steps + 3 * 2


def test_prompt_chunk_keeps_every_request_under_load():
    """With the per-prompt cap below the budget, prompts arriving together are chunked one at
    a time and none is dropped (each completes once)."""
    reqs = make_requests(40, math.inf, 3200, 50, max_concurrency=16, seed=1)
    sched = Scheduler("sglang", 4096, 8192, 400_000, 1, prompt_chunk=1024)
    res = simulate(sched, reqs, affine)
    assert res.completed == 40
    assert res.batch["max"] <= 16


def test_preemption_when_the_pool_is_short_and_all_complete():
    """vLLM admits a request for its first chunk's blocks only: 16 sequences growing to 36
    blocks each in a pool of 4 x 36 blocks must preempt, and every request still finishes."""
    reqs = make_requests(16, math.inf, 64, 512)
    pool = 4 * 36 * 16
    res = simulate(Scheduler("vllm", 16, 2048, pool), reqs, affine)
    assert res.preemptions > 0
    assert res.completed == 16
    assert res.notes == []
    sg = simulate(Scheduler("sglang", 16, 2048, pool, block_size=1), reqs, affine)
    assert sg.completed == 16


def test_sglang_prefill_pauses_decode_vllm_mixes_by_hand():
    """A (prompt 10, answer 5) at 0, B (10, 3) at 25 ms, 10 ms steps.  SGLang prefills B alone
    at 30-40 ms (A waits: a 20 ms gap, A ends at 60 ms); vLLM runs B's prefill beside A's
    decode (A ends at 50 ms, every gap 10 ms)."""
    reqs = Requests((10, 10), (5, 3), (0.0, 0.025))

    def step(p, d, kv):
        return 0.01

    sg = simulate(Scheduler("sglang", 4, 64, None, block_size=1), reqs, step)
    assert sg.steps == 6
    assert sg.duration_s == pytest.approx(0.06)
    assert sg.ttft_s["mean"] == pytest.approx((0.01 + 0.015) / 2)
    assert sg.e2e_s["mean"] == pytest.approx((0.06 + 0.035) / 2)
    assert sg.itl_s["mean"] == pytest.approx((0.05 + 0.02) / 6)
    assert sg.itl_s["p99"] == pytest.approx(0.0195)  # numpy: 0.95 of the way to the 6th gap
    vl = simulate(Scheduler("vllm", 4, 64, None), reqs, step)
    assert vl.steps == 6
    assert vl.e2e_s["mean"] == pytest.approx((0.05 + 0.035) / 2)
    assert vl.itl_s == pytest.approx({"mean": 0.01, "median": 0.01, "p99": 0.01})


def test_vllm_preempts_the_last_admitted_and_recomputes_by_hand():
    """Two requests (prompt 16, answer 40) in 5 blocks of 16, a constant 10 ms step.  Both hold 2
    blocks after the first decode; at context 32 both need a third, one is free: the second
    (admitted last) is preempted.  It waits until the first ends (3 blocks for its 16 + 17
    tokens), recomputes them in one step (emitting its 18th token after a 240 ms gap) and
    decodes 22 more: 40 + 1 + 22 steps."""
    reqs = Requests((16, 16), (40, 40), (0.0, 0.0))
    res = simulate(Scheduler("vllm", 2, 64, 5 * 16), reqs, lambda p, d, kv: 0.01)
    assert res.preemptions == 1
    assert res.steps == 63
    assert res.duration_s == pytest.approx(0.63)
    assert res.e2e_s["mean"] == pytest.approx((0.40 + 0.63) / 2)
    assert res.itl_s["mean"] == pytest.approx((39 * 0.01 + 16 * 0.01 + 0.24 + 22 * 0.01) / 78)
    assert res.batch["max"] == 2


def test_static_batch_ttft_is_the_prefill_of_the_whole_batch():
    b, p = 4, 100
    reqs = make_requests(b, math.inf, p, 30)
    res = simulate(Scheduler("static", 8, 512, None, static_batch=b), reqs, affine)
    want = affine(b * p, 0, b * p)
    assert res.ttft_s == pytest.approx({"mean": want, "median": want, "p99": want})
    # padded to the longest prompt, decoding until the longest answer ends
    reqs = Requests((100, 50), (3, 6), (0.0, 0.0))
    res = simulate(Scheduler("static", 8, 512, None, static_batch=2), reqs, affine)
    assert res.ttft_s["mean"] == pytest.approx(affine(200, 0, 200))
    assert res.steps == 6
    end = affine(200, 0, 200) + sum(affine(0, 2, 2 * (100 + j)) for j in range(1, 6))
    assert res.duration_s == pytest.approx(end)


def test_deterministic_for_a_seed():
    a = make_requests(300, 10.0, 400, 120, range_ratio=0.5, seed=7)
    b = make_requests(300, 10.0, 400, 120, range_ratio=0.5, seed=7)
    assert a == b
    assert make_requests(300, 10.0, 400, 120, range_ratio=0.5, seed=8) != a
    sched = Scheduler("vllm", 32, 1024, 20_000)
    r1, r2 = simulate(sched, a, roofline), simulate(sched, b, roofline)
    assert dataclasses.asdict(r1) == dataclasses.asdict(r2)


@pytest.mark.parametrize(
    "sched",
    [
        Scheduler("vllm", 48, 2048, 40_000),
        Scheduler("vllm", 256, 8192, None),
        Scheduler("sglang", 48, 2048, 40_000, block_size=1),
        Scheduler("sglang", 48, 1024, 30_000, block_size=4),
        Scheduler("static", 48, 2048, 200_000, static_batch=12),
    ],
    ids=lambda s: f"{s.policy}-{s.kv_pool_tokens}-{s.block_size}",
)
@pytest.mark.parametrize("cost", [affine, roofline], ids=["affine", "roofline"])
@pytest.mark.parametrize(
    ("rate", "cap"), [(25.0, None), (math.inf, 20), (40.0, 12)], ids=["poisson", "cap", "both"]
)
def test_event_skipping_matches_the_step_by_step_run(monkeypatch, sched, cost, rate, cap):
    reqs = make_requests(300, rate, 600, 150, range_ratio=0.6, max_concurrency=cap, seed=5)
    fast = simulate(sched, reqs, cost)
    monkeypatch.setattr(S, "_SKIP", False)
    slow = simulate(sched, reqs, cost)
    same(fast, slow, rel=1e-7)


def test_event_skipping_calls_step_time_rarely():
    calls = [0]

    def cost(p, d, kv):
        calls[0] += 1
        return roofline(p, d, kv)

    res = simulate(Scheduler("vllm", 256, 8192, None), make_requests(1000, math.inf, 1000, 256), cost)  # fmt: skip
    assert res.completed == 1000
    assert calls[0] < res.steps / 3


def test_speed_guard_1000_requests():
    """The target is <= 50 ms (benchmarks/bench_simulate.py); this only catches a relapse to a
    per-step x per-sequence loop on a busy machine."""
    reqs = make_requests(1000, math.inf, 1000, 256)
    sched = Scheduler("vllm", 256, 8192, None)
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        simulate(sched, reqs, affine)
        best = min(best, time.perf_counter() - t0)
    assert best < 0.5


def test_requests_longer_than_the_pool_are_not_completed():
    reqs = Requests((100, 5000, 100), (10, 10, 10), (0.0, 0.0, 1.0))
    for sched in (
        Scheduler("vllm", 8, 512, 2048),
        Scheduler("sglang", 8, 512, 2048, block_size=1),
        Scheduler("static", 8, 512, 2048, static_batch=2),
    ):
        res = simulate(sched, reqs, affine)
        assert res.completed == 2, sched.policy
        assert any("never admitted" in n for n in res.notes)


def test_max_steps_stops_with_a_note():
    res = simulate(Scheduler("vllm", 8, 512, None), make_requests(4, math.inf, 10, 1000), affine, max_steps=50)  # fmt: skip
    assert res.completed == 0
    assert res.steps <= 50
    assert any("max_steps" in n for n in res.notes)


def test_batch_series_is_short():
    res = simulate(Scheduler("vllm", 64, 2048, None), make_requests(3000, 40.0, 100, 50, range_ratio=0.5), affine)  # fmt: skip
    assert len(res.batch["series"]) <= 200
    assert res.batch["max"] >= max(n for _, n in res.batch["series"])


def test_arrivals_as_vllm_benchmark_serving():
    reqs = make_requests(500, 5.0, 10, 10, seed=3)
    arr = reqs.arrivals_s
    assert list(arr) == sorted(arr)
    assert arr[-1] == pytest.approx(500 / 5.0)  # normalised to num_prompts / rate
    gaps = [b - a for a, b in zip((0.0, *arr), arr, strict=False)]
    assert statistics.pstdev(gaps) == pytest.approx(statistics.fmean(gaps), rel=0.15)  # exponential
    assert make_requests(5, math.inf, 10, 10).arrivals_s == (0.0,) * 5


def test_random_dataset_range():
    reqs = make_requests(2000, math.inf, 100, 40, range_ratio=0.5, seed=2)
    assert min(reqs.input_lens) >= 50 and max(reqs.input_lens) <= 150
    assert min(reqs.output_lens) >= 20 and max(reqs.output_lens) <= 60
    assert statistics.fmean(reqs.input_lens) == pytest.approx(100, rel=0.05)
    fixed = make_requests(10, math.inf, 100, 40)
    assert set(fixed.input_lens) == {100} and set(fixed.output_lens) == {40}


def test_sharegpt_lengths_match_the_published_means():
    d = S.datasets()["sharegpt"]
    assert "source" in d["published"] and "assumption" in d["shape_why"].lower()
    reqs = make_requests(20000, math.inf, None, None, dataset="sharegpt", seed=0)
    f = d["filter"]
    assert min(reqs.input_lens) >= f["min_len"] and max(reqs.input_lens) <= f["max_prompt_len"]
    assert min(reqs.output_lens) >= f["min_len"]
    assert max(p + o for p, o in zip(reqs.input_lens, reqs.output_lens, strict=True)) <= f["max_total_len"]  # fmt: skip
    assert statistics.fmean(reqs.input_lens) == pytest.approx(d["published"]["mean_input_tokens"], rel=0.03)  # fmt: skip
    assert statistics.fmean(reqs.output_lens) == pytest.approx(d["published"]["mean_output_tokens"], rel=0.03)  # fmt: skip
    over = make_requests(50, math.inf, None, 128, dataset="sharegpt")
    assert set(over.output_lens) == {128}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Requests((-5,), (10,), (0.0,)), "input_lens must be integers >= 1"),
        (lambda: Requests((5,), (0,), (0.0,)), "output_lens must be integers >= 1"),
        (lambda: Requests((5, 6), (1,), (0.0,)), "must have the same length"),
        (lambda: Requests((5,), (1,), (-1.0,)), "arrivals_s must be finite"),
        (lambda: Requests((5,), (1,), (0.0,), max_concurrency=0), "max_concurrency"),
        (lambda: Scheduler("vllm", 0, 512, None), "max_num_seqs must be an integer >= 1"),
        (lambda: Scheduler("tgi", 8, 512, None), "policy must be one of"),
        (lambda: Scheduler("vllm", 8, 512, 4, block_size=16), "kv_pool_tokens"),
        (lambda: Scheduler("vllm", 64, 32, None), "max_num_batched_tokens (32) must be >="),
        (lambda: Scheduler("sglang", 8, 512, None, new_token_ratio=0.05), "min_new_token_ratio"),
        (lambda: Scheduler("sglang", 8, 512, None, prompt_chunk=0), "prompt_chunk"),
        (lambda: make_requests(10, -1.0, 10, 10), "request_rate must be > 0"),
        (lambda: make_requests(10, 1.0, -10, 10), "input_len must be an integer >= 1"),
        (lambda: make_requests(10, 1.0, None, 10), "input_len is required"),
        (lambda: make_requests(10, 1.0, 10, 10, range_ratio=1.0), "range_ratio"),
        (lambda: make_requests(10, 1.0, 10, 10, dataset="sonnet"), "dataset must be"),
        (lambda: make_requests(0, 1.0, 10, 10), "num_prompts"),
    ],
)
def test_bad_inputs_raise_one_clear_value_error(make, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make()


def test_bad_step_time_raises():
    reqs = Requests((5,), (3,), (0.0,))
    with pytest.raises(ValueError, match="step_time must return finite seconds"):
        simulate(Scheduler("vllm", 8, 512, None), reqs, lambda p, d, kv: -1.0)
    with pytest.raises(ValueError, match="max_steps"):
        simulate(Scheduler("vllm", 8, 512, None), reqs, affine, max_steps=0)


def test_v1_prefix_caching_resumes_a_preempted_request_from_its_cached_blocks():
    """vLLM V1 keeps a preempted request's full blocks in its prefix cache: scheduled again, it
    computes only what they do not hold (at most a block and its last token). Prompts of 4,000
    tokens and answers of 200 into a pool of 8.5 such sequences preempt often: with recompute
    the prefill work grows with every preemption, with the cache it stays within the prompts
    plus 16 tokens per preemption; the pool is never exceeded either way."""
    reqs = make_requests(40, math.inf, 4000, 200)
    pool = 35_792
    done = {}
    for resume in (False, True):
        work = [0]

        def cost(p, d, kv, work=work):
            work[0] += p
            return affine(p, d, kv)

        sched = Scheduler("vllm", 256, 2048, pool, resume_cached=resume)
        res = simulate(sched, reqs, cost)
        assert res.completed == 40 and res.preemptions > 0
        assert res.batch["max"] * 4000 <= pool + 4000
        done[resume] = (work[0], res.preemptions, res.duration_s)
    prompts = 40 * 4000
    work, preemptions, _ = done[True]
    assert prompts <= work <= prompts + preemptions * 17
    assert done[False][0] > work and done[False][2] > done[True][2]
