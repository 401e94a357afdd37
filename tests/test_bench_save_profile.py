"""`bench --save-profile`: what bench measured goes into the machine profile as ordinary fields
with the source "measured by bench, DATE"; unknown stays unknown; the file is written atomically
and loads back for every `--machine FILE` command; a bad path is one line, exit 2, before
anything is measured.  Reports are faked (no torch, no cards needed), as in test_bench_cards."""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from conftest import run_cli
from nodeledger.bench import cards as C
from nodeledger.bench import disk as D
from nodeledger.bench import save_profile as S
from nodeledger.bench.suite import run_bench
from nodeledger.errors import InputError, ProfileError
from nodeledger.machine import resolve_machine
from nodeledger.machine.io import load_profile
from nodeledger.machine.probe.runner import Runner
from nodeledger.machine.profile import CollectiveFigure, MachineProfile, Mount, to_json, validate

DATE = "2026-03-04"
TAG = f"measured by bench, {DATE}"
HAS_TORCH = importlib.util.find_spec("torch") is not None
TINY_DISK = D.DiskSizes(2 * D.MiB, 0.05, threads=2)
MiB = 2**20


def _box() -> MachineProfile:
    """hgx-h200 with a host: two NUMA nodes, bus ids, a data mount, two NICs."""
    d = to_json(resolve_machine("hgx-h200"))
    for a in d["accelerators"]:
        a["numa_node"] = 0 if a["index"] < 4 else 1
        a["pci_bus_id"] = f"0000:{0x18 + a['index']:02x}:00.0"
    d["host"]["numa_nodes"] = [{"id": 0, "cpus": "0-7"}, {"id": 1, "cpus": "8-15"}]
    d["storage"]["mounts"] = [
        {"path": "/data", "kind": "nvme", "filesystem": "ext4", "source": "probe"},
        {"path": "/", "kind": "ssd", "filesystem": "ext4", "source": "probe"},
    ]
    d["network"]["nics"] = [
        {"name": "eth0", "kind": "ethernet", "source": "/sys/class/net/eth0/{type,speed}"},
        {"name": "mlx5_0", "kind": "infiniband", "speed_gbit": 400.0, "source": "ib"},
    ]
    return validate(MachineProfile, d)


def _disk_section(label, mount, mode="bypassed", seq=3200.5, lat=0.0821, status="measured"):
    kind = "nvme"
    subject = f"{label} {mount}/x ({kind}, ext4)"
    figs = [
        {"part": "disk", "subject": subject, "metric": "sequential read", "value": seq,
         "unit": "MB/s", "verdict": "ok" if mode != "cached" else "unknown"},
        {"part": "disk", "subject": subject, "metric": "random 4 KiB read latency (QD1, mean)",
         "value": lat, "unit": "ms", "verdict": "ok" if mode != "cached" else "unknown"},
        {"part": "disk", "subject": subject, "metric": "random 4 KiB read (QD16)", "value": 900.0,
         "unit": "MB/s", "verdict": "ok"},
    ]  # fmt: skip
    if status != "measured":
        figs = [{"part": "disk", "subject": subject, "metric": "read bench", "value": None,
                 "unit": "", "verdict": "unavailable"}]  # fmt: skip
    return {
        "label": label, "path": f"{mount}/x", "how": "--dataset", "tested_in": f"{mount}/x",
        "mount": mount, "filesystem": "ext4", "kind": kind, "kind_source": "machine probe storage",
        "file_bytes": 128 * MiB, "status": status, "reason": "",
        "raw": None if status != "measured" else {
            "sequential_mbps": seq, "qd1_reads": 12000, "qd1_mean_ms": lat, "qd1_p50_ms": 0.08,
            "qd1_p99_ms": 0.2, "page_cache": {"mode": mode, "text": mode}},
        "figures": figs,
    }  # fmt: skip


def _report() -> dict:
    """A `bench --json` report of 2 cards (torch 0, 1 = profile 0, 1), as run_bench returns it."""
    cards = [
        {"card": 0, "name": "NVIDIA H200", "bus_id": "0000:18:00.0", "numa_node": 0,
         "profile_card": 0, "matched_by": "PCI bus id"},
        {"card": 1, "name": "NVIDIA H200", "bus_id": "0000:19:00.0", "numa_node": 0,
         "profile_card": 1, "matched_by": "PCI bus id"},
    ]  # fmt: skip
    host_card = [
        {"card": 0, "numa_node": 0, "remote_node": 1, "binding_note": "",
         "pinned_local": {"h2d_gbps": 52.31, "d2h_gbps": 50.9}, "pageable_local": {"h2d_gbps": 20.4, "d2h_gbps": 19.0},
         "pinned_remote": {"h2d_gbps": 40.12, "d2h_gbps": 41.0}, "pageable_remote": {"h2d_gbps": 14.0, "d2h_gbps": 13.0}},
        # card 1: pinned host->card not measured (None), pageable unknown (NaN is never a value)
        {"card": 1, "numa_node": 0, "remote_node": None,
         "binding_note": "one NUMA node only: no remote binding to compare",
         "pinned_local": {"h2d_gbps": None, "d2h_gbps": 51.0}, "pageable_local": {"h2d_gbps": float("nan"), "d2h_gbps": 1.0}},
    ]  # fmt: skip
    peer = [
        {"src": 0, "dst": 1, "gbps": 390.5, "link": "nvlink", "link_gbps": 450.0, "peer_access": True},
        {"src": 1, "dst": 0, "gbps": 385.25, "link": "nvlink", "link_gbps": 450.0, "peer_access": True},
    ]  # fmt: skip
    coll = [
        {"op": op, "n": 2, "size_bytes": size, "seconds": 0.001, "algbw_gbps": alg,
         "busbw_gbps": alg * (1.0 if op == "all_reduce" else 0.5), "iters": 20,
         "in_place": op == "all_reduce", "backend": "nccl"}
        for op, size, alg in (("all_reduce", 64 * MiB, 200.0), ("all_reduce", 1024 * MiB, 360.0),
                              ("all_reduce", 256 * MiB, 330.0), ("all_gather", 256 * MiB, 300.0))
    ]  # fmt: skip
    figures = [
        {"part": "host_card", "subject": "card 0", "metric": "host->card pinned", "value": 52.31,
         "unit": "GB/s", "verdict": "ok"},
        {"part": "collective", "subject": "cards 0,1", "metric": "all-reduce busbw @ 1,024 MiB",
         "value": 360.0, "unit": "GB/s", "verdict": "ok"},
    ]  # fmt: skip
    disk = [
        _disk_section("dataset", "/data"),
        _disk_section("model cache", "/", mode="cached"),  # read from memory: not the disk's
    ]
    figures += [f for s in disk for f in s["figures"]]
    return {
        "machine": "probed-box", "quick": False,
        "sizes": {"disk": "1,024 MiB test file", "cards": "copies 256 MiB x 20 (+1 warm-up); collectives 64 MiB x 20"},
        "disk": disk,
        "cards": {"status": "measured", "reason": "", "backend": "torch 2.5.1, CUDA 12.4",
                  "cards": cards, "host_card": host_card, "peer": peer, "collectives": coll,
                  "memory": []},
        "figures": figures, "nccl_tests": None, "notes": [],
        "nic_speeds": [
            {"nic": "eth0", "path": "/sys/class/net/eth0/speed", "raw": "100000", "speed_gbit": 100.0, "reason": ""},
            {"nic": "mlx5_0", "path": "/sys/class/net/mlx5_0/speed", "raw": None, "speed_gbit": None,
             "reason": "No such file or directory"},
        ],
    }  # fmt: skip


def test_measured_figures_go_into_the_fields_with_source_and_date():
    base = _box()
    p = S.measured_profile(base, _report(), DATE)
    a0 = p.accelerators[0]
    # host<->card: the best NUMA side (local here), the other kept in the source text
    assert a0.host_to_card_gbps == 52.31 and a0.card_to_host_gbps == 50.9
    assert a0.host_to_card_pageable_gbps == 20.4
    src = a0.sources["host_to_card_gbps"]
    assert src.startswith(TAG + ": pinned host->card copy, copies 256 MiB x 20")
    assert "NUMA-local (CPUs of node 0)" in src and "NUMA-remote (node 1): 40.1 GB/s" in src
    assert a0.sources["memory_bytes"] == base.accelerators[0].sources["memory_bytes"]  # kept
    # peer: the lower direction, the pair's link kind / lanes / label from the profile
    lk = p.interconnect.link(0, 1)
    assert (lk.kind.value, lk.lanes, lk.label, lk.bandwidth_gbps) == ("nvlink", 18, "NV18", 385.25)
    assert lk.source.startswith(
        TAG + ": peer copy 0->1 390.5 GB/s, 1->0 385.2 GB/s (the lower kept)"
    )
    assert "NVIDIA H200 datasheet" in lk.source  # where the link's kind came from
    assert p.interconnect.link(2, 3).bandwidth_gbps == 450.0  # not measured: the default
    # collectives: the largest size per (op, card set)
    coll = {c.op: c for c in p.interconnect.collectives}
    assert set(coll) == {"all_reduce", "all_gather"}
    ar = coll["all_reduce"]
    assert (ar.cards, ar.size_bytes, ar.algbw_gbps, ar.busbw_gbps) == (
        [0, 1],
        1024 * MiB,
        360.0,
        360.0,
    )
    assert ar.source.startswith(TAG + ": all_reduce over cards 0,1 (nccl, 2 ranks), 1,024 MiB x 20")
    assert coll["all_gather"].busbw_gbps == 150.0
    # mounts: MB/s -> GB/s, QD1 latency in ms
    data = p.storage.mounts[0]
    assert (
        data.sequential_read_gbps == pytest.approx(3.2005) and data.random_read_latency_ms == 0.0821
    )
    assert data.sources["sequential_read_gbps"].startswith(TAG + ": dataset /data/x: one stream")
    assert "page cache bypassed (O_DIRECT)" in data.sources["random_read_latency_ms"]
    # NICs: the sysfs link rate
    eth = p.network.nics[0]
    assert eth.speed_gbit == 100.0 and eth.sources["speed_gbit"].startswith(
        TAG + ": /sys/class/net/eth0/speed"
    )
    assert eth.source == "/sys/class/net/eth0/{type,speed}"
    assert S.count_measured(p, DATE) == 3 + 1 + 1 + 2 + 2 + 1
    assert p.notes[-1].startswith(f"10 figure(s) {TAG}")
    assert base.accelerators[0].host_to_card_gbps is None  # the input is not changed


def test_unavailable_or_unknown_figures_stay_unknown():
    p = S.measured_profile(_box(), _report(), DATE)
    a1 = p.accelerators[1]
    assert a1.host_to_card_gbps is None and "host_to_card_gbps" not in a1.sources  # None
    assert a1.host_to_card_pageable_gbps is None  # NaN
    assert a1.card_to_host_gbps == 51.0 and "CPUs not bound" not in a1.sources["card_to_host_gbps"]
    assert all(a.host_to_card_gbps is None for a in p.accelerators[2:])  # not measured
    root = p.storage.mounts[1]  # read from the page cache: RAM figures, not the disk's
    assert root.sequential_read_gbps is None and root.random_read_latency_ms is None
    assert root.sources == {}
    ib = p.network.nics[1]
    assert ib.speed_gbit == 400.0 and ib.sources == {}  # unreadable: the probe's figure stays
    # a whole report with nothing measured changes no figure
    rep = _report()
    rep["cards"] = {"status": "unavailable", "reason": "needs torch", "backend": None}
    rep["disk"] = [_disk_section("dataset", "/data", status="unavailable")]
    rep["nic_speeds"] = [dict(rep["nic_speeds"][0], speed_gbit=None, raw="-1")]
    q = S.measured_profile(_box(), rep, DATE)
    assert S.count_measured(q, DATE) == 0
    assert replace(q, notes=[]) == replace(_box(), notes=[])


def test_remote_faster_cards_outside_the_profile_and_cpu_backend():
    rep = _report()
    rep["cards"]["host_card"][0]["pinned_remote"]["h2d_gbps"] = 60.0
    rep["cards"]["cards"][1]["bus_id"] = "0000:99:00.0"  # torch's card 1 is not profile card 1
    p = S.measured_profile(_box(), rep, DATE)
    a0 = p.accelerators[0]
    assert a0.host_to_card_gbps == 60.0
    assert "NUMA-remote (CPUs of node 1)" in a0.sources["host_to_card_gbps"]
    assert "is the card's NUMA node right?" in a0.sources["host_to_card_gbps"]
    assert p.accelerators[1].card_to_host_gbps is None  # not attributed
    assert p.interconnect.pairs == [] and p.interconnect.collectives == []
    assert any("bench card 1 (bus 0000:99:00.0) is not profile card 1" in n for n in p.notes)
    rep = _report()
    rep["cards"]["backend"] = "torch 2.5.1, cpu"  # the test stand-in: no card figures claimed
    p = S.measured_profile(_box(), rep, DATE)
    assert p.accelerators[0].host_to_card_gbps is None and p.interconnect.collectives == []
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        S.measured_profile(_box(), rep, "4 March")


def test_a_second_run_replaces_the_first_and_keeps_other_sets():
    p = S.measured_profile(_box(), _report(), DATE)
    d = to_json(p)
    d["interconnect"]["collectives"].append(
        {"op": "all_reduce", "cards": [0, 1, 2, 3], "size_bytes": MiB, "busbw_gbps": 300.0}
    )
    p = validate(MachineProfile, d)
    rep = _report()
    rep["cards"]["peer"][0]["gbps"] = 100.0
    q = S.measured_profile(p, rep, "2026-03-05")
    assert len(q.interconnect.pairs) == 1 and q.interconnect.link(0, 1).bandwidth_gbps == 100.0
    assert q.interconnect.link(0, 1).lanes == 18
    sets = sorted((c.op, tuple(c.cards)) for c in q.interconnect.collectives)
    assert sets == [("all_gather", (0, 1)), ("all_reduce", (0, 1)), ("all_reduce", (0, 1, 2, 3))]


def test_collective_cards_are_checked_like_pairs():
    d = to_json(_box())
    d["interconnect"]["collectives"] = [{"op": "all_reduce", "cards": [0, 9], "size_bytes": MiB}]
    with pytest.raises(ValidationError, match=r"card\(s\) \[9\] not among accelerators"):
        validate(MachineProfile, d)
    d["interconnect"]["collectives"] = [{"op": "all_reduce", "cards": [1, 1], "size_bytes": MiB}]
    with pytest.raises(ValidationError, match="cards repeat"):
        validate(MachineProfile, d)
    with pytest.raises(ValidationError):
        validate(CollectiveFigure, {"op": "all_to_all", "cards": [0], "size_bytes": 1})
    with pytest.raises(ValidationError):
        validate(Mount, {"path": "/", "sequential_read_gbps": 0})
    mount = validate(Mount, {"path": "/", "random_read_latency_ms": "unknown"})
    assert mount.random_read_latency_ms is None


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_saved_profile_loads_back_and_fit_uses_it(tmp_path, suffix):
    p = S.measured_profile(_box(), _report(), DATE)
    out = tmp_path / f"saved{suffix}"
    S.write_profile(p, out)
    back = resolve_machine(str(out))
    assert back == load_profile(out) == p  # unknown ("unknown" in TOML) round-trips
    assert back.interconnect.collectives[0].source.startswith(TAG)
    proc = run_cli("fit", "qwen3-8b", "--machine", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["machine"]


def test_bad_path_is_one_line_exit_2_before_measuring(tmp_path):
    (tmp_path / "file").write_text("x")
    ds = tmp_path / "ds"
    ds.mkdir()
    for bad, msg in ((tmp_path, "is a folder"), (tmp_path / "no" / "p.toml", "does not exist"),
                     (tmp_path / "file" / "p.toml", "is not a folder"), ("", "needs a file name")):  # fmt: skip
        proc = run_cli(
            "bench", "--quick", "--no-cards", "--dataset", str(ds), "--save-profile", str(bad)
        )
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.splitlines()) == 1 and msg in proc.stderr, proc.stderr
        assert proc.stdout == "" and list(ds.iterdir()) == []  # nothing measured
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo")
        with pytest.raises(InputError, match="not a regular file"):
            S.check_target(tmp_path / "fifo")


def test_unwritable_folder_is_refused(tmp_path, monkeypatch):
    def refuse(*_a, **_k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(S.atomic, "AtomicText", refuse)
    with pytest.raises(InputError, match=r"cannot write in .*Permission denied"):
        S.check_target(tmp_path / "p.toml")
    monkeypatch.undo()
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        try:
            with pytest.raises(InputError, match="cannot write in"):
                S.check_target(ro / "p.toml")
        finally:
            ro.chmod(0o755)
    assert S.check_target(tmp_path / "ok.toml") == tmp_path / "ok.toml"
    assert not (tmp_path / "ok.toml").exists()  # the trial file is gone
    assert [x.name for x in tmp_path.iterdir() if x.name != "ro"] == []


def test_write_is_atomic_no_partial_file(tmp_path, monkeypatch):
    p = S.measured_profile(_box(), _report(), DATE)
    new, old = tmp_path / "new.toml", tmp_path / "old.toml"
    old.write_text("old contents\n")

    def boom(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    for target in (new, old):
        with pytest.raises(ProfileError, match="cannot write machine profile: No space left"):
            S.write_profile(p, target)
    assert not new.exists() and old.read_text() == "old contents\n"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["old.toml"]  # no temporary file left


def test_read_nic_speeds_through_the_runner(tmp_path):
    for name, text in (("eth0", "100000\n"), ("eth1", "-1\n")):
        d = tmp_path / "sys/class/net" / name
        d.mkdir(parents=True)
        (d / "speed").write_text(text)
    prof = validate(MachineProfile, {"name": "x", "network": {"nics": [
        {"name": "eth0"}, {"name": "eth1"}, {"name": "mlx5_0"}, {"name": "../../etc"}]}})  # fmt: skip
    rows = {r["nic"]: r for r in S.read_nic_speeds(prof, Runner(root=tmp_path))}
    assert rows["eth0"]["speed_gbit"] == 100.0 and rows["eth0"]["raw"] == "100000"
    assert rows["eth1"]["speed_gbit"] is None and "link down" in rows["eth1"]["reason"]
    assert rows["mlx5_0"]["speed_gbit"] is None and rows["mlx5_0"]["reason"]
    assert rows["../../etc"]["path"] is None and rows["../../etc"]["reason"]
    many = validate(
        MachineProfile, {"name": "y", "network": {"nics": [{"name": f"e{i}"} for i in range(100)]}}
    )
    assert len(S.read_nic_speeds(many, Runner(root=tmp_path))) == S.NIC_LIMIT


def _mount_of(path: Path) -> str:
    with open("/proc/mounts") as fh:
        return D.mount_entry(os.path.realpath(path), fh.read())["mount"]


def test_real_disk_bench_fills_the_mount(tmp_path):
    """run_bench on this host (disk only) with a profile listing the test folder's mount."""
    mnt = _mount_of(tmp_path)
    prof = validate(
        MachineProfile, {"name": "here", "storage": {"mounts": [{"path": mnt, "kind": "nvme"}]}}
    )
    rep = run_bench(quick=True, dataset=tmp_path, cache=tmp_path, disk_sizes=TINY_DISK,
                    profile=prof, skip_cards=True)  # fmt: skip
    p = S.measured_profile(prof, json.loads(json.dumps(rep)), DATE)  # as a saved --json
    m = p.storage.mounts[0]
    sec = rep["disk"][0]
    if sec["filesystem"] in D.MEMORY_FS or sec["raw"]["page_cache"]["mode"] == "cached":
        assert m.sequential_read_gbps is None and m.sources == {}
    else:
        assert m.sequential_read_gbps == pytest.approx(
            sec["raw"]["sequential_mbps"] / 1000, rel=1e-3
        )
        assert m.sources["sequential_read_gbps"].startswith(TAG + ": dataset ")
    assert p.accelerators == [] and S.count_measured(p, DATE) in (0, 2)


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed (the bench extra)")
def test_cpu_torch_run_claims_no_card_figures(tmp_path):
    prof = _box()
    rep = run_bench(quick=True, dataset=tmp_path, cache=tmp_path, disk_sizes=TINY_DISK,
                    card_sizes=C.CardSizes(1 * C.MiB, 2, (1 * C.MiB,), 2, 1, 60.0),
                    profile=prof, backend_kind="cpu")  # fmt: skip
    p = S.measured_profile(prof, rep, DATE)
    assert all(a.host_to_card_gbps is None for a in p.accelerators)
    assert any("CPU tensors" in n for n in p.notes)


def test_bench_cli_saves_the_profile(tmp_path):
    ds = tmp_path / "ds"
    ds.mkdir()
    out = tmp_path / "here.toml"
    proc = run_cli("bench", "--quick", "--no-cards", "--dataset", str(ds), "--cache", str(ds),
                   "--save-profile", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("machine profile ") and f"written to {out}" in last
    p = load_profile(out)
    assert "measured figure(s)" in last and f"{S.count_measured(p, _today())} measured" in last
    assert resolve_machine(str(out)) == p
    js = tmp_path / "here.json"
    proc = run_cli("bench", "--quick", "--no-cards", "--dataset", str(ds), "--cache", str(ds),
                   "--save-profile", str(js), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)  # stdout stays one JSON document; the line goes to stderr
    assert "nic_speeds" in rep and f"written to {js}" in proc.stderr
    assert load_profile(js).name == p.name
    assert list(ds.iterdir()) == []


def _today() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).date().isoformat()


def test_help_names_the_option():
    proc = run_cli("bench", "--help")
    assert proc.returncode == 0 and "--save-profile" in proc.stdout
    assert "measured by bench" in proc.stdout
