"""watch: the sampling backends (nvidia-smi / NVML / rocm-smi / npu-smi) and the host sampler,
on fake tools, a fake pynvml and a fake /proc tree."""

from __future__ import annotations

import os
import stat
import sys
import time
import types
from pathlib import Path

import pytest

from conftest import FIXTURES
from nodeledger.machine.parsers.amd_smi import parse_rocm_json, parse_rocm_pids
from nodeledger.machine.parsers.npu_smi import parse_npu
from nodeledger.machine.probe.runner import Runner
from nodeledger.watch import backends as B
from nodeledger.watch.host import HostSampler
from nodeledger.watch.watcher import Watcher

MiB, GiB = 2**20, 2**30


def _tool(bindir: Path, name: str, script: str) -> None:
    p = bindir / name
    p.write_text("#!/bin/sh\n" + script)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    w = {
        "proc/meminfo": "MemTotal:       131072000 kB\nMemFree: 1 kB\nMemAvailable:   100000000 kB\n"
        "SwapTotal:       8388608 kB\nSwapFree:        4194304 kB\n",
        "proc/vmstat": "nr_free_pages 5\npswpin 120\npswpout 340\npswpin_extra 9\n",
        "proc/stat": "cpu  100 0 50 800 30 0 20 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n",
        "sys/devices/system/node/node0/cpulist": "0-3\n",
        "sys/devices/system/node/node0/meminfo": "Node 0 MemTotal: 65536000 kB\nNode 0 MemFree: 1024 kB\n",
        "sys/devices/system/node/node1/cpulist": "4-7\n",
        "sys/devices/system/node/node1/meminfo": "Node 1 MemTotal: 65536000 kB\nNode 1 MemFree: 2048 kB\n",
        "sys/devices/system/cpu/online": "0-7\n",
        "sys/bus/pci/devices/0000:18:00.0/numa_node": "1\n",
        "sys/bus/pci/devices/0000:19:00.0/numa_node": "-1\n",
        "proc/4242/status": "Name:\tpython\nState:\tS (sleeping)\nCpus_allowed_list:\t4-7\n"
        "Mems_allowed_list:\t1\n",
        "proc/4242/stat": "4242 (py thon) S 1 2 3 4 5 6 7 8 9 10 250 150 0 0 20 0 1\n",
        "proc/4242/task/4242/children": "4300 4301 ",
        "proc/4300/status": "Name:\tpt_data_worker\nState:\tR (running)\nCpus_allowed_list:\t0-3\nMems_allowed_list:\t0\n",
        "proc/4300/stat": "4300 (pt_data_worker) R 1 2 3 4 5 6 7 8 9 10 100 0 0 0\n",
        "proc/4301/status": "Name:\tpt_data_worker\nState:\tZ (zombie)\n",
        "proc/5000/status": "Name:\tgone\nState:\tZ (zombie)\n",
    }  # fmt: skip
    for rel, text in w.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_host_sampler_on_a_fake_tree(tmp_path):
    r = Runner(root=_root(tmp_path))
    h = HostSampler(r)
    d = h.describe()
    assert d["numa_nodes"] == {"0": "0-3", "1": "4-7"} and d["cpus"] == "0-7"
    host, procs = h.sample([4242, 5000, 6000])
    assert host["mem_total"] == 131072000 * 1024 and host["mem_available"] == 100000000 * 1024
    assert (host["swap_total"], host["swap_free"]) == (8388608 * 1024, 4194304 * 1024)
    assert (host["pswpin"], host["pswpout"]) == (120, 340)
    assert host["cpu"] == {"total": 1000, "idle": 800, "iowait": 30}
    assert host["numa"] == {
        "0": [65536000 * 1024, 1024 * 1024],
        "1": [65536000 * 1024, 2048 * 1024],
    }
    p = procs["4242"]
    assert (p["alive"], p["name"], p["cpus"], p["mems"]) == (True, "python", "4-7", "1")
    assert p["cpu_s"] == pytest.approx(400 / os.sysconf("SC_CLK_TCK"))  # utime + stime
    kids = {k["pid"]: k for k in p["children"]}
    assert kids[4300]["alive"] and kids[4300]["cpus"] == "0-3"
    assert kids[4301]["alive"] is False  # a zombie is not alive
    assert procs["5000"] == {"alive": False, "name": "gone", "state": "Z", "cpus": None,
                             "mems": None, "children": []}  # fmt: skip
    assert procs["6000"] == {"alive": False}
    # the Runner's records are cleared after each sample: a long watch stays flat
    assert not r.files and not r.log


QUERY = "0, 1024, 143771, 37\n1, [N/A], 143771, [N/A]\n"
DESCRIBE = ("0, NVIDIA H200, GPU-aaaa, 00000000:18:00.0, 143771\n"
            "1, NVIDIA H200, GPU-bbbb, 00000000:19:00.0, 143771\n")  # fmt: skip
APPS = "00000000:18:00.0, 4242, python, 1000\n00000000:19:00.0, 4243, /usr/bin/my, app, 20\n"


def _nvidia_runner(tmp_path, apps_script=None) -> Runner:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("d", DESCRIBE), ("q", QUERY), ("a", APPS)):
        (tmp_path / name).write_text(text)
    apps = apps_script or f"cat {tmp_path}/a"
    _tool(bindir, "nvidia-smi", f'case "$1" in --query-gpu=index,name*) cat {tmp_path}/d;; '
          f'--query-gpu=*) cat {tmp_path}/q;; --query-compute-apps=*) {apps};; esac\n')  # fmt: skip
    return Runner(root=_root(tmp_path), path=str(bindir), timeout=2)


def test_nvidia_smi_backend(tmp_path):
    b = B.open_backend("nvidia-smi", runner=_nvidia_runner(tmp_path))
    assert b.name == "nvidia-smi"
    assert [(c["index"], c["uuid"], c["total_bytes"], c["numa_node"]) for c in b.cards] == [
        (0, "GPU-aaaa", 143771 * MiB, 1), (0 + 1, "GPU-bbbb", 143771 * MiB, None)]  # fmt: skip
    s = b.sample()
    assert s[0]["used_bytes"] == 1024 * MiB and s[0]["util_pct"] == 37.0
    assert s[1]["used_bytes"] is None and s[1]["util_pct"] is None  # "[N/A]"
    assert s[0]["processes"] == [{"pid": 4242, "name": "python", "used_bytes": 1000 * MiB}]
    assert s[1]["processes"] == [{"pid": 4243, "name": "/usr/bin/my, app", "used_bytes": 20 * MiB}]


def test_nvidia_smi_without_process_listing_is_unknown_not_empty(tmp_path):
    b = B.open_backend("nvidia-smi", runner=_nvidia_runner(tmp_path, "exit 9"))
    assert all(c["processes"] is None for c in b.sample())


def test_no_backend_is_exit_4(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(B.WatchError) as e:
        B.open_backend("auto", runner=Runner(root=tmp_path, path=str(empty)))
    assert e.value.exit_code == 4
    assert "nvidia-smi: nvidia-smi --query-gpu" in str(e.value) and "npu-smi" in str(e.value)


def test_a_failing_tool_mid_watch_is_a_note(tmp_path):
    r = _nvidia_runner(tmp_path)
    b = B.open_backend("nvidia-smi", runner=r)
    r.path = str(tmp_path / "nowhere")
    s = Watcher(b, HostSampler(Runner(root=_root(tmp_path)))).sample()
    assert s["cards"] == [] and "absent" in s["notes"][0]


class _Mem:
    def __init__(self, used, total):
        self.used, self.total = used, total


def _fake_nvml(hang: float = 0.0):
    nv = types.ModuleType("pynvml")
    nv.nvmlInit = lambda: None
    nv.nvmlShutdown = lambda: None
    nv.nvmlDeviceGetCount = lambda: 2
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetName = lambda h: b"NVIDIA H200"
    nv.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"
    nv.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=f"00000000:{0x18 + h:02X}:00.0")

    def numa(h):
        raise RuntimeError("NotSupported")

    nv.nvmlDeviceGetNumaNodeId = numa

    def mem(h):
        time.sleep(hang)
        return _Mem((h + 1) * GiB, 141 * GiB)

    nv.nvmlDeviceGetMemoryInfo = mem
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=50 * h)
    nv.nvmlDeviceGetComputeRunningProcesses = lambda h: [
        types.SimpleNamespace(pid=100 + h, usedGpuMemory=GiB)
    ]

    def graphics(h):
        raise RuntimeError("NotSupported")

    nv.nvmlDeviceGetGraphicsRunningProcesses = graphics
    return nv


def test_nvml_backend(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml())
    b = B.open_backend("nvml", runner=Runner(root=_root(tmp_path), live=True))
    assert b.name == "nvml"
    # NUMA from sysfs where NVML does not say
    assert [(c["uuid"], c["pci_bus_id"], c["numa_node"]) for c in b.cards] == [
        ("GPU-0", "00000000:18:00.0", 1), ("GPU-1", "00000000:19:00.0", None)]  # fmt: skip
    s = b.sample()
    assert [(c["used_bytes"], c["util_pct"]) for c in s] == [(GiB, 0.0), (2 * GiB, 50.0)]
    assert s[1]["processes"] == [{"pid": 101, "name": None, "used_bytes": GiB}]
    b.close()


def test_hung_nvml_misses_its_deadline_and_becomes_a_note(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml())
    b = B.NvmlBackend(timeout=0.2, runner=Runner(root=_root(tmp_path), live=True))
    b.cards = b.describe()
    b.nv.nvmlDeviceGetMemoryInfo = lambda h: (time.sleep(1.0), _Mem(0, 1))[1]
    w = Watcher(b, HostSampler(Runner(root=_root(tmp_path))))
    t0 = time.perf_counter()
    s1, s2 = w.sample(), w.sample()
    assert time.perf_counter() - t0 < 0.9  # the second sample does not queue behind the hung call
    assert "no answer within 0.2 s" in s1["notes"][0]
    assert "has not returned" in s2["notes"][0] and w.errors == 2


ROCM_JSON = """{"card0": {"GPU use (%)": "87", "GPU Memory Allocated (VRAM%)": "40",
 "VRAM Total Memory (B)": "68702699520", "VRAM Total Used Memory (B)": "27481079808",
 "PCI Bus": "0000:18:00.0", "Card Series": "K100_AI"},
 "card1": {"DCU use (%)": "0", "VRAM Total Memory (B)": "68702699520",
 "VRAM Total Used Memory (B)": "10485760", "PCI Bus": "0000:19:00.0"}}"""
ROCM_PIDS = """========================= ROCm System Management Interface =========================
================================= KFD Processes ==================================
KFD process information:
PID\tPROCESS NAME\tGPU(s)\tVRAM USED\tSDMA USED\tCU OCCUPANCY
4242\tpython3\t1\t27000000000\t0\t0
4243\ttorchrun worker\t2\t5000\t0\tunknown
==================================================================================
============================== GPUs Indexed by PID ===============================
PID 4242 is using 1 DRM device(s):
0
PID 4243 is using 2 DRM device(s):
0 1
==================================================================================
"""


def test_rocm_and_hy_smi_parsers():
    cards = parse_rocm_json(ROCM_JSON)
    assert [(c["index"], c["used_bytes"], c["util_pct"]) for c in cards] == [
        (0, 27481079808, 87.0), (1, 10485760, 0.0)]  # fmt: skip
    pids = parse_rocm_pids(ROCM_PIDS)
    assert pids[0] == [{"pid": 4242, "name": "python3", "used_bytes": 27000000000},
                       {"pid": 4243, "name": "torchrun worker", "used_bytes": None}]  # fmt: skip
    assert pids[1] == [{"pid": 4243, "name": "torchrun worker", "used_bytes": None}]


def test_hy_smi_backend(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (tmp_path / "j").write_text(ROCM_JSON)
    (tmp_path / "p").write_text(ROCM_PIDS)
    _tool(
        bindir,
        "hy-smi",
        f'case "$1" in --showpids) cat {tmp_path}/p;; *) cat {tmp_path}/j;; esac\n',
    )
    b = B.open_backend("hy-smi", runner=Runner(root=_root(tmp_path), path=str(bindir)))
    assert [c["numa_node"] for c in b.cards] == [1, None]  # sysfs numa_node; -1 is unknown
    s = b.sample()
    assert s[0]["processes"][0]["pid"] == 4242 and s[1]["util_pct"] == 0.0


def test_npu_smi_recorded_output():
    text = (FIXTURES / "ascend" / "msswift-910b3-x8-npu-smi-info.txt").read_text()
    cards, procs = parse_npu(text)
    assert len(cards) == 8 and procs == []
    assert cards[0]["used_bytes"] == 3318 * MiB and cards[0]["total_bytes"] == 65536 * MiB
    assert all(c["util_pct"] == 0.0 for c in cards)  # AICore(%)


def test_amd_smi_backend_on_recorded_outputs(tmp_path):
    """The wiring of `watch --backend amd-smi` on recorded public outputs (each from its own
    machine, so only card 0 is common): static --json for the card, monitor -u -v for VRAM
    and utilisation, process --csv for each process's VRAM in bytes."""
    amd = FIXTURES / "amd"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, f in (("s", "rdme-mi210-amd-smi-static-json.txt"),
                    ("m", "amdsmi130-mi300x-amd-smi-monitor.txt"),
                    ("p", "rocmblogs-8x-mi300x-amd-smi-process-csv.txt")):  # fmt: skip
        (tmp_path / name).write_text((amd / f).read_text())
    _tool(bindir, "amd-smi", f'case "$1" in static) cat {tmp_path}/s;; monitor) cat {tmp_path}/m;; '
          f'process) cat {tmp_path}/p;; esac\n')  # fmt: skip
    b = B.open_backend("amd-smi", runner=Runner(root=_root(tmp_path), path=str(bindir), timeout=2))
    assert b.name == "amd-smi" and [c["index"] for c in b.cards] == [0]
    assert b.cards[0]["total_bytes"] == 65520 * MiB and b.cards[0]["numa_node"] == 1
    (s,) = b.sample()
    assert s["used_bytes"] == round(3.0 * 2**30) and s["util_pct"] == 97
    assert s["processes"] == [{"pid": 207590, "name": "pt_main_thread", "used_bytes": 7889485824}]
    # auto finds amd-smi before the deprecated rocm-smi
    auto = B.open_backend("auto", runner=Runner(root=_root(tmp_path), path=str(bindir), timeout=2))
    assert auto.name == "amd-smi"


def _fake_amdsmi(old_process_api: bool = False, hang: float = 0.0):
    """A stand-in for AMD's amdsmi module, shaped as amdsmi_interface.py returns: vram in MB
    (MiB), the process list as dicts (or, ROCm 6.0, handles read with process_info)."""
    m = types.ModuleType("amdsmi")
    procs = {0: [{"pid": 4242, "name": "python", "memory_usage": {"vram_mem": 3 * 2**30}}], 1: []}
    m.amdsmi_init = lambda: None
    m.amdsmi_shut_down = lambda: None
    m.amdsmi_get_processor_handles = lambda: [0, 1]
    m.amdsmi_get_gpu_asic_info = lambda h: {"market_name": "AMD Instinct MI300X"}
    m.amdsmi_get_gpu_device_bdf = lambda h: f"0000:{0x0C + h:02x}:00.0"
    m.amdsmi_get_gpu_device_uuid = lambda h: f"uuid-{h}"
    m.amdsmi_topo_get_numa_node_number = lambda h: h

    def vram(h):
        if hang:
            time.sleep(hang)
        return {"vram_total": 196592, "vram_used": 3100 + h}

    m.amdsmi_get_gpu_vram_usage = vram
    m.amdsmi_get_gpu_activity = lambda h: {
        "gfx_activity": 90 - h,
        "umc_activity": 1,
        "mm_activity": 0,
    }
    if old_process_api:
        m.amdsmi_get_gpu_process_list = lambda h: [("handle", k) for k in range(len(procs[h]))]
        m.amdsmi_get_gpu_process_info = lambda h, p: procs[h][p[1]]
    else:
        m.amdsmi_get_gpu_process_list = lambda h: procs[h]
    return m


@pytest.mark.parametrize("old_api", [False, True])
def test_amdsmi_library_backend(tmp_path, monkeypatch, old_api):
    monkeypatch.setitem(sys.modules, "amdsmi", _fake_amdsmi(old_api))
    b = B.open_backend("amdsmi", runner=Runner(root=_root(tmp_path), live=True))
    try:
        assert b.name == "amdsmi"
        assert [(c["index"], c["name"], c["total_bytes"], c["numa_node"]) for c in b.cards] == [
            (0, "AMD Instinct MI300X", 196592 * MiB, 0), (1, "AMD Instinct MI300X", 196592 * MiB, 1)]  # fmt: skip
        s = b.sample()
        assert s[0]["used_bytes"] == 3100 * MiB and s[0]["util_pct"] == 90.0
        assert s[0]["processes"] == [{"pid": 4242, "name": "python", "used_bytes": 3 * 2**30}]
        assert s[1]["processes"] == []
    finally:
        b.close()


def test_a_hung_amdsmi_call_fails_the_sample_not_the_watch(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "amdsmi", _fake_amdsmi(hang=1.0))
    b = B.AmdsmiBackend(timeout=0.2, runner=Runner(root=_root(tmp_path), live=True))
    try:
        with pytest.raises(B.WatchError, match=r"amdsmi: no answer within 0\.2 s"):
            b.sample()
    finally:
        b.close()
