"""NVML backend with a fake pynvml module (no GPU here): cards, NVLink counts, PCIe levels,
unsupported queries, failures and a hung driver; card health (persistence, ECC, retired pages,
remapped rows, used memory, processes) on a card with everything, a consumer card without ECC,
an Ampere+ card (remapped rows, no page retirement), a denied and a lost query."""

from __future__ import annotations

import sys
import time
import types

import pytest

from nodeledger.machine.probe import nvml


class _Pci:
    def __init__(self, bus):
        self.busId = bus


class NVMLError(Exception):  # as in nvidia-ml-py: one subclass per NVML_ERROR_*, with .value
    value = 999


class NVMLError_NotSupported(NVMLError):  # nvidia-ml-py names its error classes so
    value = 3


class NVMLError_NoPermission(NVMLError):
    value = 4


class NVMLError_GpuIsLost(NVMLError):
    value = 15


def _raises(exc):
    def fn(*args):
        raise exc()

    return fn


def _proc(pid, used):
    return types.SimpleNamespace(pid=pid, usedGpuMemory=used)


# card kinds: which health queries answer (NVML returns these on such cards)
HEALTH = {
    # an older data-centre card (V100-like): ECC, page retirement, and remapped rows answer too
    "all": {},
    # GeForce: no ECC, hence no counters, no page retirement, no row remapping
    "consumer": {"nvmlDeviceGetEccMode", "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRetiredPages",
                 "nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetRemappedRows"},
    # A100/H100/H200: row remapping replaces page retirement
    "ampere": {"nvmlDeviceGetRetiredPages", "nvmlDeviceGetRetiredPagesPendingStatus"},
}  # fmt: skip


def add_health(m, kind="all", calls=None, fail=None, procs=True):
    """Health queries on fake pynvml ``m``; ``fail``: function -> error class for every card."""
    calls = calls if calls is not None else []
    unsupported = HEALTH[kind]

    def answer(fn, value):
        def call(h, *args):
            calls.append((fn, h, args))
            if fail and fn in fail:
                raise fail[fn]()
            if fn in unsupported:
                raise NVMLError_NotSupported()
            return value(h, *args) if callable(value) else value

        setattr(m, fn, call)

    m.NVMLError = NVMLError
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(
        total=143771 * 2**20, used=(h + 1) * 1024 * 2**20, free=0
    )
    answer("nvmlDeviceGetPersistenceMode", lambda h: 0 if h == 1 else 1)
    answer("nvmlDeviceGetEccMode", [1, 1])
    answer("nvmlDeviceGetTotalEccErrors", lambda h, err, counter: {0: 5 + h, 1: 0}[err])
    answer("nvmlDeviceGetRetiredPages", lambda h, cause: [0x1000 * i for i in range(2 - cause)])
    answer("nvmlDeviceGetRetiredPagesPendingStatus", 0)
    answer("nvmlDeviceGetRemappedRows", lambda h: (1, 0, 1 if h == 0 else 0, 0))
    compute = [_proc(100, 2**30), _proc(101, None), _proc(102, 2**64 - 1)] if procs else []
    graphics = [_proc(101, 64 * 2**20)] if procs else []
    answer("nvmlDeviceGetComputeRunningProcesses", lambda h: compute if h == 0 else [])
    answer("nvmlDeviceGetGraphicsRunningProcesses", lambda h: graphics if h == 0 else [])
    return calls


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
    m.nvmlDeviceGetUUID = lambda h: f"GPU-0000000{h}-aaaa-bbbb-cccc-000000000000".encode()

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
    assert cards[2].uuid == "GPU-00000002-aaaa-bbbb-cccc-000000000000"
    assert (
        cards[2].sources["uuid"] == "NVML nvmlDeviceGetUUID" and "numa_node" not in cards[2].sources
    )
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


def _health_probe(monkeypatch, kind="all", fail=None, runner=None, n=4):
    m = fake_nvml(n=n)
    calls = add_health(m, kind, fail=fail)
    monkeypatch.setitem(sys.modules, "pynvml", m)
    notes: list[str] = []
    found = nvml.probe(notes, runner=runner)
    assert found is not None
    return found[0], notes, calls


def test_nvml_health_all_supported(monkeypatch):
    cards, notes, _ = _health_probe(monkeypatch, "all")
    c = cards[0]
    assert (c.persistence_mode, cards[1].persistence_mode) == ("enabled", "disabled")
    assert (c.ecc_mode, c.ecc_errors_corrected, c.ecc_errors_uncorrected) == ("enabled", 5, 0)
    assert cards[3].ecc_errors_corrected == 8
    assert (c.retired_pages, c.retired_pages_pending) == (3, "no")  # 2 single-bit + 1 double-bit
    assert (c.remapped_rows_pending, c.remapped_rows_failed) == ("yes", "no")
    assert cards[1].remapped_rows_pending == "no"
    assert [x.memory_used_bytes for x in cards] == [i * 2**30 for i in (1, 2, 3, 4)]
    assert (
        c.sources["ecc_errors_uncorrected"]
        == "NVML nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)"
    )
    assert (
        c.sources["ecc_errors_corrected"] == "NVML nvmlDeviceGetTotalEccErrors(CORRECTED, VOLATILE)"
    )
    for field in ("persistence_mode", "ecc_mode", "retired_pages", "retired_pages_pending",
                  "remapped_rows_pending", "remapped_rows_failed", "memory_used_bytes", "processes"):  # fmt: skip
        assert c.sources[field].startswith("NVML "), field
    assert [n for n in notes if n.startswith("NVML") and "driver" not in n] == []


def test_nvml_consumer_card_without_ecc(monkeypatch):
    cards, notes, calls = _health_probe(monkeypatch, "consumer")
    assert len(cards) == 4 and cards[0].memory_bytes == 143771 * 2**20  # the card is kept
    for c in cards:
        assert (c.ecc_mode, c.ecc_errors_corrected, c.ecc_errors_uncorrected) == (None, None, None)
        assert (c.retired_pages, c.retired_pages_pending) == (None, None)
        assert (c.remapped_rows_pending, c.remapped_rows_failed) == (None, None)
        assert not {"ecc_mode", "ecc_errors_corrected", "retired_pages"} & set(c.sources)
        assert c.persistence_mode is not None and c.memory_used_bytes is not None
    # no ECC: its counters and page retirement are not even asked
    assert not [
        fn
        for fn, _, _ in calls
        if fn in ("nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRetiredPages")
    ]
    assert "NVML: ECC not supported on card(s) 0, 1, 2, 3; ECC fields unknown" in notes
    assert not [n for n in notes if "RemappedRows" in n]  # expected NotSupported: no note


def test_nvml_ampere_remapped_rows_without_page_retirement(monkeypatch):
    cards, notes, _ = _health_probe(monkeypatch, "ampere")
    c = cards[0]
    assert (c.retired_pages, c.retired_pages_pending) == (None, None)
    assert (c.remapped_rows_pending, c.remapped_rows_failed) == ("yes", "no")
    assert (c.ecc_mode, c.ecc_errors_corrected, c.ecc_errors_uncorrected) == ("enabled", 5, 0)
    assert "retired_pages" not in c.sources
    assert c.sources["remapped_rows_pending"] == "NVML nvmlDeviceGetRemappedRows (isPending)"
    assert [n for n in notes if n.startswith("NVML") and "driver" not in n] == []


def test_nvml_processes_with_unavailable_memory_and_names(monkeypatch, tmp_path):
    from nodeledger.machine.probe import Runner

    proc = tmp_path / "proc"
    for pid, comm in ((100, "python3"), (101, "Xorg")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "comm").write_text(comm + "\n")
    r = Runner(root=tmp_path)
    cards, _, _ = _health_probe(monkeypatch, "all", runner=r)
    got = [(p.pid, p.name, p.used_bytes, p.kind) for p in cards[0].processes]
    assert got == [(100, "python3", 2**30, "C"), (101, "Xorg", 64 * 2**20, "C+G"),
                   (102, None, None, "C")]  # fmt: skip
    assert cards[1].processes == [] and "processes" in cards[1].sources  # known: none
    assert cards[0].sources["processes"] == (
        "NVML nvmlDeviceGetComputeRunningProcesses + nvmlDeviceGetGraphicsRunningProcesses; "
        "names from /proc/<pid>/comm"
    )
    assert r.files["/proc/100/comm"] == "python3\n"  # read through the Runner: bundles keep it
    assert r.files["/proc/102/comm"] is None


def test_nvml_process_memory_not_available_stays_unknown(monkeypatch):
    cards, _, _ = _health_probe(monkeypatch, "all")  # no runner: names unknown
    procs = {p.pid: p for p in cards[0].processes}
    assert procs[101].kind == "C+G" and procs[101].used_bytes == 64 * 2**20  # graphics said it
    assert procs[102].used_bytes is None  # NVML_VALUE_NOT_AVAILABLE
    assert all(p.name is None for p in procs.values())


def test_nvml_denied_and_lost_queries_leave_fields_unknown(monkeypatch):
    fail = {"nvmlDeviceGetRemappedRows": NVMLError_NoPermission,
            "nvmlDeviceGetComputeRunningProcesses": NVMLError_GpuIsLost}  # fmt: skip
    cards, notes, _ = _health_probe(monkeypatch, "all", fail=fail)
    c = cards[0]
    assert (c.remapped_rows_pending, c.remapped_rows_failed) == (None, None)
    assert c.ecc_errors_corrected == 5  # the other queries still answered
    assert [p.pid for p in c.processes] == [101]  # graphics listed it; compute could not say
    assert c.sources["processes"] == "NVML nvmlDeviceGetGraphicsRunningProcesses"
    assert (
        "NVML: nvmlDeviceGetRemappedRows failed on card(s) 0, 1, 2, 3 (NoPermission); "
        "that field is unknown" in notes
    )
    assert any(
        "nvmlDeviceGetComputeRunningProcesses failed" in n and "GpuIsLost" in n for n in notes
    )


def test_nvml_binding_without_health_functions(monkeypatch):
    """An old nvidia-ml-py without a function: that field unknown, said once, cards kept."""
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    notes: list[str] = []
    cards, _ = nvml.probe(notes)
    assert len(cards) == 4 and cards[0].persistence_mode == "enabled"
    assert cards[0].ecc_mode is None and cards[0].processes == []
    assert "processes" not in cards[0].sources  # unknown, not "none"
    assert (
        "NVML: nvmlDeviceGetRemappedRows missing in this nvidia-ml-py; that field is unknown"
        in notes
    )


def test_library_query_is_the_one_gateway_for_a_refused_call():
    """nvitop's nvmlQuery shape: a refusal (or a struct without the field) is the default, and
    the refusal is named per function; a working call is its value."""
    from nodeledger.machine.probe.nvml import LibraryQuery

    class NVMLError_NotSupported(Exception):
        value = 3

    class Lib:
        def nvmlDeviceGetUUID(self, h):
            return b"GPU-1"

        def nvmlDeviceGetEccMode(self, h):
            raise NVMLError_NotSupported("Not Supported")

        def nvmlDeviceGetPciInfo(self, h):
            return object()  # no busId

    q = LibraryQuery(Lib())
    assert q("nvmlDeviceGetUUID", 0, then=bytes.decode) == "GPU-1"
    assert q("nvmlDeviceGetEccMode", 0, default="unknown") == "unknown"
    assert q("nvmlDeviceGetPciInfo", 0, then=lambda p: p.busId) is None
    assert q("nvmlDeviceGetFanSpeed", 0) is None  # a binding this release lacks
    assert q(lambda h: [h], 7) == [7]
    assert q.errors == {"nvmlDeviceGetEccMode": "NotSupported",
                        "nvmlDeviceGetPciInfo": "AttributeError",
                        "nvmlDeviceGetFanSpeed": "AttributeError"}  # fmt: skip
