"""``bench --kernels`` (issue 29): the card's kernel table in the speed model's format, and the
round trip bench -> --save-profile -> fit / report using it.  A fake torch plays a card whose
kernels take a known time (FLOPs at 700 TFLOP/s, bytes at 4 TB/s, 20 us to launch), so every
figure written can be checked by hand; the K100 profile gets the H200's shipped table as a
stand-in for a real bench run (labelled so), since no K100 measurement is public."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from conftest import run_cli
from fake_cuda import Clock, Cuda
from nodeledger.bench import kernels as BK
from nodeledger.bench import save_profile as SP
from nodeledger.bench.cards import TorchCards
from nodeledger.machine import resolve_machine
from nodeledger.speed.kernels import table_from_rows

TFLOPS, GBPS, LAUNCH = 700e12, 4000e9, 20e-6


class _T:
    """A tensor of a shape; each op advances the clock by its modelled time."""

    def __init__(self, *shape, itemsize=2):
        self.shape, self.itemsize = tuple(shape), itemsize

    @property
    def nbytes(self):
        n = 1
        for d in self.shape:
            n *= d
        return n * self.itemsize

    def t(self):
        return _T(*reversed(self.shape))

    def __matmul__(self, other):
        m, k = self.shape
        n = other.shape[1]
        Clock.t += LAUNCH + max(2 * m * n * k / TFLOPS, (m * k + k * n + m * n) * 2 / GBPS)
        return _T(m, n)

    def copy_(self, src, non_blocking=False):
        Clock.t += LAUNCH + 2 * src.nbytes / GBPS
        return self

    def add_(self, v):
        Clock.t += LAUNCH
        return self

    def sum(self):
        return self

    def backward(self):
        Clock.t += 2.5 * self._fwd

    def to(self, dtype):
        return _T(*self.shape, itemsize=1)

    def __getitem__(self, sl):
        return _T(sl.stop, *self.shape[1:], itemsize=self.itemsize)


def _sdpa(q, k, v, is_causal=False, enable_gqa=False):
    b, h, s, d = q.shape
    kv = k.shape[2]
    flops = 2 * b * h * s * kv * d * (0.5 if is_causal else 1.0) * 2
    t = LAUNCH + max(flops / (0.7 * TFLOPS), 2 * k.nbytes / GBPS)
    Clock.t += t
    out = _T(b, h, s, d)
    out._fwd = t
    return out


class _Torch:
    __version__ = "fake"
    bfloat16, uint8, float32, float8_e4m3fn = "bf16", "u8", "f32", "f8"
    cuda = Cuda()

    class nn:
        class functional:
            scaled_dot_product_attention = staticmethod(_sdpa)

    class version:
        cuda, hip = "fake", None

    @staticmethod
    def empty(*shape, dtype=None, device=None, requires_grad=False, pin_memory=False):
        return _T(*shape, itemsize=1 if dtype == "u8" else 2)

    @staticmethod
    def ones(shape, device=None, dtype=None):
        return _T(1)

    @staticmethod
    def device(kind, i=0):
        return f"{kind}:{i}"

    @staticmethod
    def _scaled_mm(a, b, scale_a=None, scale_b=None, out_dtype=None):
        m, k = a.shape
        n = b.shape[1]
        Clock.t += LAUNCH + 2 * m * n * k / (2 * TFLOPS)
        return _T(m, n)


def _measure(sizes=BK.QUICK):
    be = TorchCards(_Torch(), "cuda")
    return BK.measure(be, 0, "Hygon K100_AI", sizes, date="2026-12-04",
                      clock=lambda: 0.0)  # fmt: skip


def test_kernel_rows_are_the_speed_model_format_and_read_back_by_hand():
    rows, notes = _measure()
    assert (
        rows[0]["part"] == "meta"
        and "measured by bench, 2026-12-04, Hygon K100_AI" in rows[0]["source"]
    )
    table = table_from_rows(rows, "test")  # the speed model reads them as it reads its own file
    g = [r for r in rows if r["part"] == "gemm_bf16" and (r["n"], r["k"]) == (4096, 4096)]
    assert [r["m"] for r in g] == list(BK.QUICK.gemm_m)
    big = g[-1]  # m 4096: compute-bound, 2 m n k / 700 TFLOP/s + the launch
    assert big["s"] == pytest.approx(LAUNCH + 2 * 4096**3 / TFLOPS)
    assert table.gemm_s(4096, 4096, 4096, graphs=False) == pytest.approx(big["s"])
    copy = [r for r in rows if r["part"] == "d2d_copy"][-1]
    assert copy["read_plus_write_gbps"] == pytest.approx(
        2 * 2**30 / (LAUNCH + 2 * 2**30 / GBPS) / 1e9
    )
    launch = next(r for r in rows if r["part"] == "launch")
    assert launch["calls"] == 200
    assert {r["part"] for r in rows} >= {"gemm_bf16", "gemm_fp8", "attn_prefill_causal",
                                         "attn_decode", "d2d_copy", "launch"}  # fmt: skip
    pl = BK.plateaus(rows)
    assert pl["bf16_tflops"] == pytest.approx(
        max(r["tflops"] for r in rows if r["part"] == "gemm_bf16")
    )
    assert not notes


def test_the_sweep_stops_at_its_budget_and_keeps_what_it_measured():
    be = TorchCards(_Torch(), "cuda")
    ticks = iter(range(0, 10_000, 7))
    rows, notes = BK.measure(be, 0, "X", BK.QUICK, date="2026-12-04", clock=lambda: next(ticks))
    assert notes and "budget" in notes[0] and len(rows) > 1


def _h200_rows_as_stand_in() -> list[dict]:
    text = resources.files("nodeledger.speed").joinpath("kernels", "h200.jsonl").read_text()
    rows = [json.loads(x) for x in text.splitlines()]
    rows[0] = {
        **rows[0],
        "card": "K100_AI",
        "source": "STAND-IN for a bench run on a K100_AI: the rows are the H200's shipped "
        "table (no K100 kernel measurement is public); the test checks the plumbing",
    }
    return rows


def test_a_k100_profile_with_measured_kernels_gets_serving_throughput(tmp_path):
    """The reference box (8 x K100_AI, no datasheet) printed 'output tokens/s unknown' for
    every serving workload; once bench has measured its kernels, report has throughput."""
    prof = resolve_machine("k100-ai-8x64g")
    rows = _h200_rows_as_stand_in()
    product = prof.accelerators[0].product
    rep = {"cards": {"status": "measured", "backend": "torch fake, CUDA fake", "cards": [],
                     "host_card": [], "peer": [], "collectives": [],
                     "kernels": {product: {"card": 0, "rows": rows, "notes": [], "seconds": 1.0,
                                           **BK.plateaus(rows)}}}}  # fmt: skip
    saved = SP.measured_profile(prof, rep, "2026-12-04")
    assert saved.kernels[product][0]["source"].startswith("STAND-IN")
    a = saved.accelerators[0]
    assert a.bf16_dense_tflops == pytest.approx(BK.plateaus(rows)["bf16_tflops"])
    assert "the measured plateau" in a.sources["bf16_dense_tflops"]
    f = tmp_path / "k100-benched.json"
    SP.write_profile(saved, f)
    before = json.loads(run_cli("report", "--machine", "k100-ai-8x64g", "--format", "json").stdout)
    after = json.loads(run_cli("report", "--machine", str(f), "--format", "json").stdout)

    def tps(d):
        return {w["id"]: w["output_tokens_per_s"] for w in d["serving"]["workloads"]}

    assert all(v is None for v in tps(before).values())
    got = {k: v for k, v in tps(after).items() if v}
    assert got, tps(after)
    fit = json.loads(run_cli("fit", "qwen3-8b", "--engine", "vllm", "--machine", str(f),
                             "--json").stdout)  # fmt: skip
    assert fit["speed"]["kernels"].startswith("kernel table measured on this box: STAND-IN")
    assert fit["speed"]["output_tokens_per_s"] > 0


def test_kernels_with_no_cards_is_bad_input():
    proc = run_cli("bench", "--kernels", "--no-cards")
    assert proc.returncode == 2 and "--kernels measures the cards" in proc.stderr


def test_machine_show_marks_measured_peaks(tmp_path):
    prof = resolve_machine("k100-ai-8x64g")
    rows = _h200_rows_as_stand_in()
    product = prof.accelerators[0].product
    rep = {"cards": {"status": "measured", "backend": "torch fake", "cards": [], "host_card": [],
                     "peer": [], "collectives": [],
                     "kernels": {product: {"card": 0, "rows": rows, "notes": [], "seconds": 1.0,
                                           **BK.plateaus(rows)}}}}  # fmt: skip
    f = tmp_path / "k.json"
    SP.write_profile(SP.measured_profile(prof, rep, "2026-12-04"), f)
    data = json.loads(run_cli("machine", "show", str(f), "--json").stdout)
    bf16 = data["card_figures"]["0"]["bf16_dense_tflops"]
    assert bf16["value"] > 0 and "measured by bench, 2026-12-04" in bf16["source"]
    assert Path(f).stat().st_size < 200_000
