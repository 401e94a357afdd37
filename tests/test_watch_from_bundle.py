"""`watch --from BUNDLE`: bundles of an 8 x MI300X, an 8 x Ascend 910B2 and an 8 x Hygon DCU
box, assembled from public recorded outputs (tests/fixtures/bundles/*.toml, compose.py), replay
through the same backends a live watch uses; their watch output is checked field by field
against the recordings.  And `bundle --watch-samples` → `watch --from` round trip."""

from __future__ import annotations

import csv
import io
import json
import stat
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import FIXTURES, SHARED, run_cli
from nodeledger.machine.probe.bundle import ReplayRunner, write_bundle
from nodeledger.machine.probe.runner import Runner
from nodeledger.units import GiB, MiB
from nodeledger.watch import backends as B
from nodeledger.watch.host import HostSampler
from nodeledger.watch.watcher import Watcher

BUNDLES = FIXTURES / "bundles"
sys.path.insert(0, str(BUNDLES))
from compose import compose  # noqa: E402


def _watch(bundle: Path, *args: str) -> tuple[dict, int]:
    proc = run_cli("watch", "--from", str(bundle), "--json", *args)
    assert proc.stdout, proc.stderr
    return json.loads(proc.stdout), proc.returncode


def test_mi300x_bundle_per_process_memory(tmp_path):
    """8 x MI300X (AMD's blog): `amd-smi monitor -putm` gives utilisation, `amd-smi process
    --csv` each process's VRAM in bytes; no VRAM per card, no static --json."""
    b = compose(BUNDLES / "8x-mi300x-rocmblogs.toml", tmp_path / "mi300x.tar.gz")
    s, code = _watch(b, "--backend", "amd-smi")
    assert code == 0 and s["samples"] == 1 and s["cards_seen"]
    rows = list(csv.DictReader(io.StringIO(
        (FIXTURES / "amd" / "rocmblogs-8x-mi300x-amd-smi-process-csv.txt").read_text())))  # fmt: skip
    assert [c["index"] for c in s["cards"]] == list(range(8))
    for c, row in zip(s["cards"], rows, strict=True):
        assert c["owners"] == [{"pid": int(row["pid"]), "name": row["name"],
                                "last_bytes": int(row["vram_mem"]),
                                "max_bytes": int(row["vram_mem"])}]  # fmt: skip
        assert c["processes_bytes"] == int(row["vram_mem"])  # the floor under the card's use
        assert c["last_bytes"] is None and c["total_bytes"] is None  # not in the recordings
    # GFX_UTIL column of `amd-smi monitor -putm`
    assert [c["util_mean_pct"] for c in s["cards"]] == [83, 13, 0, 1, 0, 0, 0, 0]
    assert any("cards listed by `amd-smi monitor`" in n for n in s["notes"])
    assert any("assembled from AMD's public outputs" in n for n in s["notes"])
    # no /proc in the bundle: liveness unknown, so no dead-owner finding
    assert not [f for f in s["verify"]["findings"] if "dead" in f["rule"]]
    assert not [f for f in s["idle"] if "dead" in json.dumps(f)]
    # auto picks the backend the bundle names
    s2, _ = _watch(b)
    assert s2["source"].startswith("amd-smi outputs recorded in")
    text = run_cli("watch", "--from", str(b)).stdout
    assert ">=7.3" in text and "207590 pt_main_thread 7.3" in text


def test_ascend_bundle_per_process_memory_and_plan(tmp_path):
    """8 x 910B2 serving (vllm-ascend#4661): npu-smi info's HBM usage per NPU and its process
    table (one VLLMWorker per NPU); a plan on the 8 x 910B preset verifies against them."""
    b = compose(BUNDLES / "8x-ascend-910b2-vllmascend4661.toml", tmp_path / "asc.tar.gz")
    s, code = _watch(b)
    assert code == 0 and len(s["cards"]) == 8
    text = (FIXTURES / "ascend" / "vllmascend4661-910b2-x8-npu-smi-info.txt").read_text()
    for c in s["cards"]:
        assert c["total_bytes"] == 65536 * MiB
        (o,) = c["owners"]
        assert o["name"].startswith("VLLMWorker") and str(o["pid"]) in text
        assert o["last_bytes"] is not None and f"{o['last_bytes'] // MiB}" in text
        assert f"{c['last_bytes'] // MiB}" in text  # the HBM-Usage figure, MB
    # one snapshot cannot show a sustained peak: verification waits for 3 samples
    assert _watch(b)[0]["verify"]["status"] in ("not asked",)
    # held for 3 samples (the snapshot repeated, and the watch says so), a plan far below
    # what each NPU holds fails verification (exit 3)
    s3, code3 = _watch(b, "--samples", "3", "--model", "llama-3.1-8b", "--machine",
                       "8x-ascend-910b", "--job", "serve", "--tp", "8")  # fmt: skip
    assert code3 == 3 and s3["verify"]["status"] == "failed"
    assert {f["rule"] for f in s3["verify"]["findings"]} & {"above plan", "card above plan"}
    assert any("repeat the last recording" in n for n in s3["notes"])


def test_dcu_bundle_percentages_only(tmp_path):
    """8 x Hygon DCU under vLLM load: only hy-smi's default table is public, so VRAM is a
    percentage (bytes unknown) and DCU% the utilisation; no process list."""
    if not (SHARED / "fixtures" / "real" / "dcu").is_dir():
        pytest.skip("../shared absent")
    b = compose(BUNDLES / "8x-dcu-wangjunjian.toml", tmp_path / "dcu.tar.gz")
    s, code = _watch(b, "--backend", "hy-smi")
    assert code == 0
    assert [c["last_pct"] for c in s["cards"]] == [87, 85, 85, 85, 85, 85, 85, 85]
    assert [c["util_mean_pct"] for c in s["cards"]] == [74, 29, 31, 28, 35, 17, 37, 46]
    assert all(c["last_bytes"] is None and c["owners"] == [] for c in s["cards"])
    assert any("default table" in n for n in s["notes"])


def _tool(bindir: Path, name: str, script: str) -> None:
    p = bindir / name
    p.write_text("#!/bin/sh\n" + script)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)


def test_recorded_samples_replay_in_order(tmp_path):
    """A Runner that keeps its records (`bundle --watch-samples`) over a changing tool: the
    replay gives each sample's own output, at the recorded times, then the last again."""
    amd = FIXTURES / "amd"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (tmp_path / "s").write_text((amd / "rdme-mi210-amd-smi-static-json.txt").read_text())
    mon = (amd / "amdsmi130-mi300x-amd-smi-monitor.txt").read_text()
    (tmp_path / "m1").write_text(mon)
    (tmp_path / "m2").write_text(mon.replace("3.0/191.7 GB", "9.0/191.7 GB"))
    (tmp_path / "p").write_text((amd / "rocmblogs-8x-mi300x-amd-smi-process-csv.txt").read_text())
    _tool(bindir, "amd-smi", f'case "$1" in static) cat {tmp_path}/s;; monitor) '
          f'if [ -e {tmp_path}/seen ]; then cat {tmp_path}/m2; else touch {tmp_path}/seen; '
          f'cat {tmp_path}/m1; fi;; process) cat {tmp_path}/p;; esac\n')  # fmt: skip
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "meminfo").write_text(
        "MemTotal: 131072000 kB\nMemAvailable: 100000000 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n"
    )
    r = Runner(root=root, path=str(bindir), timeout=2, keep_records=True)
    b = B.open_backend("amd-smi", runner=r)
    w = Watcher(b, HostSampler(r), 0.01)
    w.header()
    times: list[float] = []
    w.run(lambda s: times.append(s["t"]), samples=3, sleep=lambda _s: None)
    out = write_bundle(r, tmp_path / "rec.tar.gz",
                       {"watch": {"backend": "amd-smi", "interval_s": 0.01, "samples": 3,
                                  "t": times}})  # fmt: skip
    s, code = _watch(out)
    assert code == 0 and s["samples"] == 3
    (c,) = s["cards"]
    assert c["last_bytes"] == round(9.0 * GiB) and c["max_bytes"] == round(9.0 * GiB)
    assert s["duration_s"] == pytest.approx(times[-1] - times[0], abs=1e-3)
    assert s["host"]["mem_total_bytes"] == 131072000 * 1024
    # processes whose /proc files were not read are unknown, never dead
    assert c["owners"][0]["pid"] == 207590


def test_replay_runner_plays_each_recording_then_the_last():
    rr = ReplayRunner({"commands": [
        {"argv": ["x"], "stdout": "a"}, {"argv": ["x"], "stdout": "b"}]},
        {"a": "one", "b": "two"}, "t")  # fmt: skip
    assert [rr.run(["x"]).stdout for _ in range(3)] == ["one", "two", "two"]
    assert rr.rounds == 2


def test_bad_watch_manifest_is_one_line(tmp_path):
    bad = tmp_path / "b.tar.gz"
    manifest = {"format": "nodeledger-bundle-1", "commands": [], "watch": {"t": ["x"]}}
    with tarfile.open(bad, "w:gz") as tar:
        data = json.dumps(manifest).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    proc = run_cli("watch", "--from", str(bad))
    assert proc.returncode == 2 and "watch.t is malformed" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = run_cli("watch", "--from", str(bad), "--replay", str(bad))
    assert proc.returncode == 2 and "not both" in proc.stderr


def test_bundle_watch_samples_on_this_host(tmp_path):
    """`bundle --watch-samples 2` on a host without cards records the host's samples; the
    replay reads them back (host only, exit 0)."""
    out = tmp_path / "h.tar.gz"
    proc = run_cli("bundle", "-o", str(out), "--watch-samples", "2", "--watch-interval", "0.05")
    assert proc.returncode == 0 and "2 watch samples" in proc.stdout, proc.stderr
    s, code = _watch(out)
    assert s["samples"] == 2 and s["host"]["mem_total_bytes"]
    assert code in (0, 4)  # 0 on a host without cards; a card tool on the host: its cards
    proc = run_cli("bundle", "-o", str(out), "--watch-samples", "1", "--backend", "nvml")
    assert proc.returncode == 2 and "not replayable" in proc.stderr


def test_amd_smi_metric_json_shapes():
    """`amd-smi metric --json` as amd-smi 26.x nests it ({"gpu_data": [...]}) with the
    mem_usage section its code writes (MB = bytes // 2**20); built here, not recorded."""
    from nodeledger.machine.parsers import parse_kind

    text = json.dumps({"gpu_data": [
        {"gpu": 0, "usage": {"gfx_activity": {"value": 97, "unit": "%"}},
         "mem_usage": {"total_vram": {"value": 196592, "unit": "MB"},
                       "used_vram": {"value": 3100, "unit": "MB"}}},
        {"gpu": 1, "usage": "N/A", "mem_usage": "N/A"}]})  # fmt: skip
    cards = parse_kind("amd-smi-metric", text)["cards"]
    assert cards[0]["vram_total_bytes"] == 196592 * MiB and cards[0]["gfx_activity_pct"] == 97
    assert cards[1]["vram_used_bytes"] is None and cards[1]["gfx_activity_pct"] is None
    with pytest.raises(Exception, match="card index"):
        parse_kind("amd-smi-metric", json.dumps([{"gpu": "x"}]))


def test_manifest_sample_count_is_not_trusted(tmp_path):
    b = compose(BUNDLES / "8x-ascend-910b2-vllmascend4661.toml", tmp_path / "a.tgz")
    with tarfile.open(b) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    m = json.loads(members["manifest.json"])
    m["watch"]["samples"] = 10**12
    members["manifest.json"] = json.dumps(m).encode()
    hostile = tmp_path / "h.tgz"
    with tarfile.open(hostile, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    s, code = _watch(hostile)
    assert code == 0 and s["samples"] == 1


def test_host_figures_replay_per_sample(tmp_path):
    """Each watch sample's /proc/meminfo is kept in the bundle and replays as that sample's:
    MemAvailable falling from 100 to 2 GiB across three samples is seen as it fell."""
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    r = Runner(root=root, timeout=2, keep_records=True)
    host = HostSampler(r)
    host.describe()
    for avail in (100, 50, 2):
        (root / "proc" / "meminfo").write_text(
            f"MemTotal: {125 * 2**20} kB\nMemAvailable: {avail * 2**20} kB\n"
            "SwapTotal: 0 kB\nSwapFree: 0 kB\n"
        )
        host.sample([])
    out = write_bundle(r, tmp_path / "h.tar.gz", {"watch": {"samples": 3, "t": [0.0, 1.0, 2.0]}})
    from nodeledger.machine.probe.bundle import load_bundle

    rr = load_bundle(out)
    got = [HostSampler(rr).sample([])[0]["mem_available"] // GiB for _ in range(4)]
    assert got == [100, 50, 2, 2]  # then the last reading again
