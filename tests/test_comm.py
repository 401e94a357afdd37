"""ledger/comm.py terms against hand-computed values (derivations in the module docstring)."""

from __future__ import annotations

import pytest

from nodeledger.ledger import comm
from nodeledger.ledger.jobs import build_job
from nodeledger.machine import resolve_machine
from nodeledger.model import load_model
from nodeledger.verdict.links import link_check


def test_ring_and_gather_factors():
    assert comm.ring_allreduce_bytes_per_rank(800, 8) == 2 * 7 / 8 * 800 == 1400
    assert comm.ring_allreduce_bytes_per_rank(800, 1) == 0
    assert comm.gather_bytes_per_rank(800, 4) == 600


def test_tp_bytes_per_token_qwen3_32b_tp2():
    # 64 layers x 2 all-reduces x 2(2-1)/2 x 5120 hidden x 2 B = 1,310,720 B forward
    assert comm.tp_bytes_per_token(5120, 64, 2, 2, backward=False) == 1_310_720
    assert comm.tp_bytes_per_token(5120, 64, 2, 2, backward=True) == 2 * 1_310_720


def test_dp_bytes_per_step():
    g = p = 16e9
    assert comm.dp_bytes_per_step(g, p, 8, "none") == pytest.approx(2 * 7 / 8 * g)
    # ZeRO-2: a reduce-scatter of the gradients per micro-batch, one all-gather of the params
    assert comm.dp_bytes_per_step(g, p, 8, "zero2") == pytest.approx(7 / 8 * g + 7 / 8 * p)
    # ZeRO-3 / FSDP: all-gather in forward and backward + reduce-scatter, every micro-batch
    assert comm.dp_bytes_per_step(g, p, 8, "zero3") == pytest.approx(7 / 8 * (2 * p + g))
    assert comm.dp_bytes_per_step(g, p, 8, "fsdp", grad_accum=8) == pytest.approx(
        8 * 7 / 8 * (2 * p + g)
    )
    # DDP / ZeRO-1 all-reduce once per step whatever the accumulation (no_sync)
    assert comm.dp_bytes_per_step(g, p, 8, "none", grad_accum=8) == pytest.approx(2 * 7 / 8 * g)


def test_flops_and_seconds():
    assert comm.flops_per_token(10, training=False) == 20
    assert comm.flops_per_token(10, training=True) == 60
    assert comm.flops_per_token(10, training=True, recompute=True) == 80
    assert comm.compute_seconds(4e14, 1000, 0.4) == pytest.approx(1.0)
    assert comm.transfer_seconds(50e9, 50) == pytest.approx(1.0)


def test_link_check_ratio_is_traffic_over_compute():
    spec = load_model("qwen3-32b")[0]
    m = resolve_machine("dgx-h100")
    job = build_job("serve", {"tp": 2})
    lk = link_check(spec, job, m)
    # prefill compute at the card peak x [efficiency.mfu_prefill] 0.6; traffic at NV18's
    # 450 GB/s x [efficiency.busbw_nvswitch] 0.8 (two cards: no NVLS)
    from nodeledger.speed.work import body_params

    # FLOPs as the speed model counts them: 2 x body parameters (no embedding lookup) / tp
    comp = comm.compute_seconds(2 * body_params(spec) / 2, 989.5, 0.6)
    traffic = 1_310_720 / (450e9 * 0.8)
    assert lk["ratio"] == round(traffic / comp, 3)
    assert lk["busbw_gbps"] == pytest.approx(360.0)
    assert lk["tier"] == "fits" and lk["resource"] == "card links"
    assert link_check(spec, build_job("serve", {}), m) is None  # TP1: nothing between cards
