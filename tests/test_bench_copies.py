"""Host <-> card copies measured as nvbandwidth does (issue 29): each copy timed alone with
events after warm-up, a size sweep up to 1 GiB, the plateau; pinned buffers checked to be pinned
and copied asynchronously.  A fake torch plays a PCIe Gen5 x16 card whose copies take a fixed
latency plus bytes at 55 GB/s pinned (9 GB/s pageable), as a real H200 did."""

from __future__ import annotations

import pytest

from fake_cuda import Clock, Cuda
from nodeledger.bench import cards as C
from nodeledger.bench import judge as J

PINNED_GBPS, PAGEABLE_GBPS, LATENCY = 55.0, 9.0, 10e-6


class _Tensor:
    def __init__(self, nbytes: int, pinned: bool = False, device: str = "cpu", log=None):
        self.nbytes, self.pinned, self.device, self.log = nbytes, pinned, device, log

    def __getitem__(self, sl):
        return _Tensor(sl.stop, self.pinned, self.device, self.log)

    def fill_(self, v):
        return self

    def is_pinned(self):
        return self.pinned

    def copy_(self, src, non_blocking=False):
        host = src if self.device != "cpu" else self
        rate = PINNED_GBPS if host.pinned else PAGEABLE_GBPS
        # a pinned copy made blocking pays a host synchronisation each time
        t = LATENCY + src.nbytes / (rate * 1e9) + (0.0 if non_blocking or not host.pinned else 5e-4)
        self.log.append((src.nbytes, non_blocking, t))
        return self


class _Mod(Cuda):
    def __init__(self, log):
        self.log = log


class _Torch:
    uint8 = "uint8"

    def __init__(self, pin_works: bool = True):
        self.log: list = []
        self.pin_works = pin_works
        self.cuda = _Mod(self.log)

    def empty(self, nbytes, dtype=None, pin_memory=False, device=None):
        dev = "cpu" if device in (None, "cpu") else "cuda"
        return _Tensor(nbytes, pin_memory and self.pin_works, dev, self.log)

    def device(self, kind, i=0):
        return f"{kind}:{i}"


def _backend(pin_works=True) -> tuple[C.TorchCards, _Torch]:
    t = _Torch(pin_works)
    be = C.TorchCards(t, "cuda")
    # the clock advances by each copy's own time (the fake card runs one copy at a time)
    real = _Tensor.copy_

    def timed(self, src, non_blocking=False):
        real(self, src, non_blocking)
        Clock.t += t.log[-1][2]
        return self

    _Tensor.copy_ = timed
    return be, t


@pytest.fixture(autouse=True)
def _restore():
    orig = _Tensor.copy_
    yield
    _Tensor.copy_ = orig


def test_pinned_copies_reach_the_plateau_asynchronously():
    be, t = _backend()
    r = C.host_copy(be, 0, (64 * C.MiB, 256 * C.MiB, C.GiB), 5, True, None)
    assert r["pinned_checked"] is True
    assert all(nb for nb, nonblock, _ in t.log if nonblock)  # every pinned copy non_blocking
    assert len(t.log) == 3 * 2 * (5 + 2)  # 3 sizes x 2 directions x (5 timed + 2 warm-up)
    sizes = [x["bytes"] for x in r["sweep"]]
    assert sizes == [64 * C.MiB, 256 * C.MiB, C.GiB]
    # the plateau: the 1 GiB figure, within 0.1 % of the link's 55 GB/s
    assert r["h2d_gbps"] == pytest.approx(PINNED_GBPS, rel=1e-3) == r["sweep"][-1]["h2d_gbps"]
    assert r["sweep"][0]["h2d_gbps"] < r["h2d_gbps"]  # latency weighs on the small copy
    # a healthy Gen5 x16 card is judged ok (it was 'bad' at 20 GB/s before)
    exp = J.host_card_expect(32.0, 16, True)
    assert r["h2d_gbps"] >= exp.ok


def test_pageable_copies_are_judged_as_pageable():
    be, _ = _backend()
    r = C.host_copy(be, 0, (64 * C.MiB, C.GiB), 3, False, None)
    assert r["pinned_checked"] is None
    assert r["h2d_gbps"] == pytest.approx(PAGEABLE_GBPS, rel=1e-2)
    exp = J.host_card_expect(32.0, 16, False)
    assert r["h2d_gbps"] >= exp.ok and "host's staging memcpy" in exp.source


def test_a_buffer_that_did_not_pin_is_said():
    be, _ = _backend(pin_works=False)
    r = C.host_copy(be, 0, (64 * C.MiB,), 3, True, None)
    assert r["pinned_checked"] is False
    assert r["h2d_gbps"] == pytest.approx(64 * C.MiB / (LATENCY + 64 * C.MiB / 9e9) / 1e9, rel=1e-3)
