"""Disk bench on this machine's disk (tiny sizes): page cache bypassed or dropped and said so,
mount kind by longest prefix, unwritable folders unavailable (not failed)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from nodeledger.bench import disk as D
from nodeledger.machine.profile import Mount

TINY = D.DiskSizes(4 * D.MiB, 0.1, threads=4)


def _mounts_text() -> str | None:
    try:
        return Path("/proc/mounts").read_text()
    except OSError:
        return None


def test_bench_dir_measures_and_judges(tmp_path):
    sec = D.bench_dir("dataset", tmp_path, TINY, [], _mounts_text(), "--dataset")
    assert sec["status"] == "measured", sec["reason"]
    raw = sec["raw"]
    assert raw["sequential_mbps"] > 0 and raw["qd1_reads"] > 0 and raw["qdn_reads"] > 0
    assert raw["qd1_p50_ms"] <= raw["qd1_p99_ms"]
    assert raw["qdn_reads"] <= TINY.file_bytes // D.PAGE  # no page read twice
    assert sec["page_cache"].startswith(("bypassed: O_DIRECT", "dropped", "not bypassed"))
    figs = sec["figures"]
    assert [f["metric"] for f in figs] == ["sequential read", "random 4 KiB read latency (QD1, mean)",
                                           "random 4 KiB read (QD4)"]  # fmt: skip
    assert all(f["verdict"] in ("ok", "low", "bad", "unknown") for f in figs)
    assert [f["unit"] for f in figs] == ["MB/s", "ms", "MB/s"]
    assert not list(tmp_path.iterdir())  # the test file is gone


def test_fadvise_path_says_what_it_did(tmp_path, monkeypatch):
    monkeypatch.setattr(D, "open_direct", lambda _p: (None, "refused (test)"))
    sec = D.bench_dir("dataset", tmp_path, TINY, [], _mounts_text())
    pc = sec["raw"]["page_cache"]
    assert pc["mode"] in ("dropped", "dropped-unverified", "cached")
    assert "POSIX_FADV_DONTNEED" in pc["text"] and "refused (test)" in pc["text"]
    if pc["mode"] == "cached":  # the filesystem keeps the pages (tmpfs): not judged
        assert all(f["verdict"] == "unknown" for f in sec["figures"])


def test_resident_fraction_and_drop(tmp_path):
    f = tmp_path / "x"
    f.write_bytes(os.urandom(1 << 20))
    with f.open("rb") as fh:
        fh.read()
    assert D.resident_fraction(str(f), 1 << 20) == pytest.approx(1.0, abs=0.01)
    fd = os.open(f, os.O_RDONLY)
    try:
        D.drop_cache(fd)
    finally:
        os.close(fd)
    fs = (D.mount_entry(os.path.realpath(tmp_path), _mounts_text()) or {}).get("filesystem")
    after = D.resident_fraction(str(f), 1 << 20)
    if fs in ("ext4", "xfs", "btrfs"):
        assert after is not None and after <= 0.05
    else:
        assert after is None or 0.0 <= after <= 1.0


def test_memory_backed_filesystem_is_not_judged():
    raw = {"sequential_mbps": 5000.0, "qd1_reads": 10, "qd1_mean_ms": 0.001, "qd1_p50_ms": 0.001,
           "qd1_p99_ms": 0.002, "qd1_mbps": 4000.0, "qd_threads": 16, "qdn_reads": 10,
           "qdn_mbps": 4000.0, "page_cache": {"mode": "bypassed", "text": "bypassed: O_DIRECT"}}  # fmt: skip
    figs = D.disk_figures("x", "unknown", "tmpfs", raw)
    assert all(f["verdict"] == "unknown" and "memory-backed" in f["evidence"] for f in figs)
    figs = D.disk_figures("x", "network", "nfs4", dict(raw, qd1_mean_ms=30.0, sequential_mbps=80.0))
    assert [f["verdict"] for f in figs[:2]] == [
        "bad",
        "bad",
    ]  # the field notes: tens of ms per random read


def test_unwritable_folder_is_unavailable(tmp_path, monkeypatch):
    def refuse(**_kw):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(D.tempfile, "mkstemp", refuse)
    sec = D.bench_dir("model cache", tmp_path, TINY, [], _mounts_text())
    assert sec["status"] == "unavailable" and "Read-only file system" in sec["reason"]
    assert [f["verdict"] for f in sec["figures"]] == ["unavailable"]
    huge = D.DiskSizes(1 << 60, 0.1)
    sec = D.bench_dir("dataset", tmp_path, huge, [], _mounts_text())
    assert sec["status"] == "unavailable" and "free" in sec["reason"]


def test_mount_kind_longest_prefix():
    mounts = [Mount(path="/", kind="ssd", filesystem="ext4"),
              Mount(path="/data", kind="network", filesystem="nfs4"),
              Mount(path="/data/local", kind="nvme", filesystem="xfs")]  # fmt: skip
    assert D.mount_kind("/data/local/x", mounts)[:2] == ("nvme", "/data/local")
    assert D.mount_kind("/data/localx", mounts)[:2] == ("network", "/data")
    assert D.mount_kind("/home/u", mounts)[:2] == ("ssd", "/")
    assert D.mount_kind("/x", [])[0] == "unknown"
    # /proc/mounts puts it on a tmpfs the probe does not list: not the parent's kind
    kind, mnt, why = D.mount_kind("/dev/shm/x", mounts, "/dev/shm")
    assert (kind, mnt) == ("unknown", "/dev/shm") and "not a block or network mount" in why
    text = (
        "/dev/vda / ext4 rw 0 0\ntmpfs /dev/shm tmpfs rw 0 0\nsrv:/e /mnt/my\\040data nfs4 rw 0 0\n"
    )
    assert D.mount_entry("/dev/shm/a", text) == {
        "mount": "/dev/shm",
        "filesystem": "tmpfs",
        "device": "tmpfs",
    }
    assert D.mount_entry("/mnt/my data/x", text)["filesystem"] == "nfs4"
    assert D.mount_entry("/etc", text)["mount"] == "/"


def test_model_cache_dir_rules(tmp_path):
    assert D.model_cache_dir({"HF_HUB_CACHE": "/a"}) == (Path("/a"), "HF_HUB_CACHE")
    assert D.model_cache_dir({"HF_HOME": "/h"}) == (Path("/h/hub"), "HF_HOME/hub")
    assert D.model_cache_dir({"XDG_CACHE_HOME": "/x"})[0] == Path("/x/huggingface/hub")
    p, how = D.model_cache_dir({})
    assert p == Path("~/.cache/huggingface/hub").expanduser() and how.startswith("default")
    assert D.existing_dir(tmp_path / "not" / "yet") == tmp_path
    (tmp_path / "f").write_text("x")
    assert D.existing_dir(tmp_path / "f") == tmp_path
    assert D.same_filesystem(tmp_path, tmp_path / "not" / "yet") is True


def test_a_rotational_flag_contradicted_by_the_reads_is_judged_as_measured():
    """0.064 ms random reads cannot come from a spinning disk (>= 4.17 ms of rotation at 7200
    rpm): the kernel's rotational flag (a virtual disk's) is overruled and said so."""
    raw = {"sequential_mbps": 1000.0, "qd1_reads": 10, "qd1_mean_ms": 0.064, "qd1_p50_ms": 0.06,
           "qd1_p99_ms": 0.1, "qd1_mbps": 60.0, "qd_threads": 16, "qdn_reads": 10,
           "qdn_mbps": 250.0, "page_cache": {"mode": "bypassed", "text": "bypassed: O_DIRECT"}}  # fmt: skip
    figs = D.disk_figures("dataset /data (hdd, ext4)", "hdd", "ext4", raw)
    lat = figs[1]
    assert "measured as ssd" in lat["subject"] and "judged as ssd" in lat["evidence"]
    assert "0.5 ms" in lat["expected"]  # the SSD range, not the HDD's 8-15 ms
    slow = D.disk_figures("dataset /data (hdd, ext4)", "hdd", "ext4", dict(raw, qd1_mean_ms=9.0))
    assert "8-15 ms" in slow[1]["expected"] and "(hdd, ext4)" in slow[1]["subject"]
