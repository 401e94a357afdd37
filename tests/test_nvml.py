"""NVML backend with a fake pynvml module (no GPU here): cards, NVLink counts, PCIe levels,
unsupported queries, failures and a hung driver."""

from __future__ import annotations

import sys
import time
import types

import pytest

from nodeledger.machine.probe import nvml


class _Pci:
    def __init__(self, bus):
        self.busId = bus


def fake_nvml(n=4, nvlinks=None, hang=False, fail=False):
    """4 GPUs: 0-1 and 2-3 bonded by 4 NVLinks each; 0-2 across sockets (SYS)."""
    nvlinks = nvlinks if nvlinks is not None else {0: [1] * 4, 1: [0] * 4, 2: [3] * 4, 3: [2] * 4}
    m = types.ModuleType("pynvml")
    bus = [f"00000000:{i + 1:02X}:00.0" for i in range(n)]

    def init():
        if fail:
            raise RuntimeError("NVML_ERROR_DRIVER_NOT_LOADED")
        if hang:
            time.sleep(30)

    m.nvmlInit = init
    m.nvmlShutdown = lambda: None
    m.nvmlSystemGetDriverVersion = lambda: b"580.159.04"
    m.nvmlDeviceGetCount = lambda: n
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H200"
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=143771 * 2**20)
    m.nvmlDeviceGetPciInfo = lambda h: _Pci(bus[h])
    m.nvmlDeviceGetPersistenceMode = lambda h: 1
    m.nvmlDeviceGetMigMode = lambda h: (0, 0)

    def numa(h):
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    m.nvmlDeviceGetNumaNodeId = numa

    def state(h, link):
        if link >= len(nvlinks.get(h, [])):
            raise RuntimeError("NVML_ERROR_INVALID_ARGUMENT")
        return 1

    m.nvmlDeviceGetNvLinkState = state
    m.nvmlDeviceGetNvLinkRemotePciInfo = lambda h, link: _Pci(bus[nvlinks[h][link]])
    m.nvmlDeviceGetTopologyCommonAncestor = lambda a, b: 10 if a // 2 == b // 2 else 50
    return m


def test_nvml_cards_and_links(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    notes: list[str] = []
    cards, inter = nvml.probe(notes)
    assert [c.memory_bytes for c in cards] == [143771 * 2**20] * 4
    assert (
        cards[0].partition == "MIG disabled" and cards[0].numa_node is None
    )  # unsupported -> unknown
    assert inter.link(0, 1).label == "NV4" and inter.link(0, 1).lanes == 4
    assert inter.link(0, 2).kind.value == "sys" and inter.link(0, 2).label == "SYS"
    assert any("driver 580.159.04" in n for n in notes)


def test_nvml_failure_and_hang_fall_back(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(fail=True))
    notes: list[str] = []
    assert nvml.probe(notes) is None and "DRIVER_NOT_LOADED" in notes[-1]
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(hang=True))
    t0 = time.perf_counter()
    assert nvml.probe(notes, timeout=0.3) is None
    assert time.perf_counter() - t0 < 2 and "no answer within 0.3 s" in notes[-1]


def test_nvml_absent_is_a_note(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    notes: list[str] = []
    assert nvml.probe(notes) is None and "nvidia-ml-py not installed" in notes[0]


@pytest.mark.parametrize("live", [True, False])
def test_probe_uses_nvml_only_when_live(monkeypatch, tmp_path, live):
    from nodeledger.machine.probe import Runner, probe_machine

    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    p = probe_machine(Runner(timeout=1, live=live, path=str(tmp_path)))
    assert len(p.accelerators) == (4 if live else 0)
