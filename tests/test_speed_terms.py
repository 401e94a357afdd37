"""speed/terms.py against hand-derived values (derivations in the module docstring)."""

from __future__ import annotations

import pytest

from nodeledger.speed import terms as T


def test_decode_8b_bf16_batch1_on_3_35_tbps_reads_16gb_per_token():
    # 8e9 params x 2 B = 16 GB read per token; at 3.35 TB/s even a perfect read takes 4.78 ms
    assert T.memory_seconds(16e9, 3350, 1.0) == pytest.approx(16e9 / 3.35e12)
    assert T.memory_seconds(16e9, 3350, 1.0) >= 4.77e-3
    assert T.memory_seconds(16e9, 3350, 0.8) == pytest.approx(16e9 / (3.35e12 * 0.8))


def test_flops_terms():
    assert T.dense_flops_per_token(8e9) == 16e9
    # 1 layer, 1 head, head_dim 1: 4 x T(T+1)/2 FLOPs; decode: 4 x context
    assert T.attention_flops_prompt(1, 1, 1, 3) == 4 * 6
    assert T.attention_flops_decode(2, 4, 128, 1000) == 4 * 2 * 4 * 128 * 1000
    # training: 3 x forward; full recomputation 4 x; selective adds one attention
    assert T.train_flops_per_token(10, 0) == 60
    assert T.train_flops_per_token(10, 0, "full") == 80
    assert T.train_flops_per_token(10, 4, "selective") == 3 * 24 + 4
    assert T.compute_seconds(4e14, 1000, 0.4) == pytest.approx(1.0)
    assert T.roofline_seconds(2.0, 3.0) == 3.0


def test_experts_touched():
    # one token touches exactly top_k experts; many tokens touch them all
    assert T.experts_touched(128, 8, 1) == pytest.approx(8)
    assert T.experts_touched(128, 8, 10_000) == pytest.approx(128)
    assert T.experts_touched(128, 8, 0) == 0
    # 2 tokens: 128 x (1 - (120/128)^2) = 15.5
    assert T.experts_touched(128, 8, 2) == pytest.approx(128 * (1 - (120 / 128) ** 2))


def test_collective_terms_match_nccl_tests_definitions():
    assert T.bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert T.bus_factor("all_gather", 8) == pytest.approx(0.875)
    assert T.bus_factor("all_reduce", 1) == 0
    # no latency: busbw of the result equals the busbw given
    s = T.collective_seconds("all_reduce", 1e9, 8, 100.0, 0.0)
    assert s == pytest.approx(1e9 * 1.75 / 100e9)
    assert T.algbw_gbps(1e9, s) * T.bus_factor("all_reduce", 8) == pytest.approx(100.0)
    # latency steps: ring 2(n-1) for all-reduce, n-1 for all-gather; tree 2 log2 n
    assert T.latency_steps("all_reduce", 8, "ring") == 14
    assert T.latency_steps("all_gather", 8, "ring") == 7
    assert T.latency_steps("all_reduce", 8, "tree") == pytest.approx(6)
    assert T.collective_seconds("all_reduce", 8, 8, 100.0, 1e-5, "ring") == pytest.approx(
        14e-5 + 8 * 1.75 / 100e9
    )
    with pytest.raises(ValueError):
        T.bus_factor("alltoallv", 8)


def test_bubble_overlap_transfer():
    assert T.pipeline_bubble_fraction(4, 12) == pytest.approx(0.25)
    assert T.pipeline_bubble_fraction(1, 1) == 0
    assert T.exposed_seconds(3.0, 2.0) == 1.0 and T.exposed_seconds(1.0, 2.0) == 0.0
    # 62 GB at 3 GB/s streamed behind a 25 GB/s host link: the disk binds, 20.7 s
    assert T.streamed_seconds(62e9, [3.0, 25.0]) == pytest.approx(62 / 3)
    assert T.transfer_seconds(62e9, 1.25) == pytest.approx(49.6)


def test_expected_row_tiles_of_a_grouped_moe_kernel():
    """(4): E[ceil(X / 64) | X >= 1], X ~ Binomial(tokens, k / E), checked against a direct sum
    with exact binomial coefficients: DeepSeek-V3 (256 experts, top-8) at 2,048 tokens has a
    mean of 64 rows per expert, so about half the experts spill into a second tile."""
    from math import comb

    from nodeledger.speed.terms import expected_row_tiles

    def direct(n, p, tile):
        from fractions import Fraction

        q = Fraction(p)  # exact: the coefficients of n = 3072 overflow a float
        pmf = [comb(n, x) * q**x * (1 - q) ** (n - x) for x in range(n + 1)]
        nz = 1 - pmf[0]
        return float(sum(pmf[x] * -(-x // tile) for x in range(1, n + 1)) / nz)

    for tokens in (1, 4, 128, 1536, 2048):
        assert expected_row_tiles(256, 8, tokens, 64) == pytest.approx(
            direct(tokens, 8 / 256, 64), rel=1e-6
        )
    assert expected_row_tiles(256, 8, 128, 64) == pytest.approx(1.0)
    assert 1.4 < expected_row_tiles(256, 8, 2048, 64) < 1.55
    assert expected_row_tiles(256, 8, 0, 64) == 0.0
