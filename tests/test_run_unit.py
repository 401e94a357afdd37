"""placement/reserve.py in-process: liveness of holders, the decision rule, the launch line."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from nodeledger.errors import InputError
from nodeledger.placement import reserve as rs

GiB = 2**30


def rep(name, cards, host=3 * GiB, node=None, cpus=None):
    return {"replica": name, "workload": name.split("#")[0], "cards": cards, "host_bytes": host,
            "numa_node": node, "cpus": cpus, "env": {"CUDA_VISIBLE_DEVICES": ",".join(map(str, cards))}}  # fmt: skip


PLAN = {
    "machine": "m",
    "replicas": [rep("a#0", [0]), rep("a#1", [1]), rep("a#10", [5]), rep("t#0", [2, 3], 40 * GiB)],
    "not_placed": [{"replica": "big#0", "workload": "big", "cards": 8, "binding": "cards",
                    "reason": "needs 8 free card(s), 4 left"}],
}  # fmt: skip


def row(card, replica, pid=None, started=1000.0, host=3 * GiB):
    return rs.Reservation(card, "m", replica, pid or os.getpid(), None, started, host)


@pytest.fixture
def ram(monkeypatch):
    state = {"avail": 100 * GiB, "total": 125 * GiB}
    monkeypatch.setattr(rs, "host_memory", lambda: (state["avail"], state["total"], "fake"))
    return state


def test_alive_dead_zombie_and_reused_pid():
    assert rs.alive(os.getpid(), rs.pid_start_time(os.getpid()))
    assert not rs.alive(os.getpid(), rs.pid_start_time(os.getpid()) + 1)  # pid now someone else
    assert not rs.alive(0) and not rs.alive(-5)
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    for _ in range(500):
        if (rs._proc_stat(p.pid) or ("Z",))[0] == "Z":
            break
        time.sleep(0.01)
    assert not rs.alive(p.pid)  # exited, not reaped yet
    p.wait()
    assert not rs.alive(p.pid)


def test_workload_id_takes_the_first_free_replica_in_numeric_order(ram):
    d = rs.decide(PLAN, "a", [], 120, 1000)
    assert d.ok and d.replica["replica"] == "a#0"
    d = rs.decide(PLAN, "a", [row(0, "a#0"), row(1, "x#0")], 120, 1000)
    assert d.ok and d.replica["replica"] == "a#10"
    d = rs.decide(PLAN, "a", [row(0, "a#0"), row(1, "x#0"), row(5, "a#10")], 120, 1000)
    assert not d.ok and not d.final
    assert "a#1: card(s) 1 reserved by x#0" in d.reason and "a#10 already runs" in d.reason
    # the same replica name already running elsewhere (another plan) also blocks
    d = rs.decide(PLAN, "t#0", [row(7, "t#0")], 120, 1000)
    assert not d.ok and "t#0 already runs on card(s) 7" in d.reason


def test_settle_rule(ram):
    ram["avail"] = 50 * GiB
    live = [row(2, "t#0", started=990, host=40 * GiB), row(3, "t#0", started=990, host=40 * GiB)]
    d = rs.decide(PLAN, "a#0", live, 120, 1000)  # 50 - 40 (counted once, not per card) = 10
    assert d.ok
    ram["avail"] = 42 * GiB
    d = rs.decide(PLAN, "a#0", live, 120, 1000)
    assert (
        not d.ok and "MemAvailable 42.00 GiB - 40.00 GiB" in d.reason and "= 2.00 GiB" in d.reason
    )
    assert rs.decide(PLAN, "a#0", live, 5, 1000).ok  # settled: its bytes are in MemAvailable
    ram["total"] = 2 * GiB
    d = rs.decide(PLAN, "a#0", [], 120, 1000)
    assert not d.ok and d.final


def test_unknown_and_unplaced_targets(ram):
    with pytest.raises(InputError, match=r"does not place big#0 \(cards: needs 8"):
        rs.decide(PLAN, "big", [], 120, 1000)
    with pytest.raises(InputError, match="replicas: a#0, a#1, a#10, t#0, big#0"):
        rs.decide(PLAN, "zz", [], 120, 1000)


def test_command_line():
    r = rep("a#0", [0], node=1, cpus="12-17")
    assert rs.command_line(r, ["x", "-y"], which=lambda t: "/usr/bin/numactl") == (
        ["numactl", "--physcpubind=12-17", "--membind=1", "--", "x", "-y"], None)  # fmt: skip
    argv, note = rs.command_line(rep("a#0", [0], node=1), ["x"], which=lambda t: "/bin/numactl")
    assert argv == ["numactl", "--cpunodebind=1", "--membind=1", "--", "x"] and note is None
    argv, note = rs.command_line(r, ["x"], which=lambda t: None)
    assert argv == ["x"] and "numactl not on PATH" in note
    assert rs.command_line(rep("a#0", [0]), ["x"]) == (["x"], None)
    env = rs.replica_env(rep("a#1", [4, 5]), base={"PATH": "/bin"})
    assert env == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "4,5", "NODELEDGER_REPLICA": "a#1"}


def test_threads_racing_one_store_file_never_double_book(tmp_path, ram):
    """Many connections, one file: BEGIN IMMEDIATE serialises check-and-book."""
    path = tmp_path / "s.sqlite"
    won, lost = [], []

    def go():
        st = rs.Store(path)
        d = st.take(PLAN, "a", os.getpid(), 120)
        (won if d.ok else lost).append(d.replica["replica"] if d.ok else d.reason)
        st.close()

    ts = [threading.Thread(target=go) for _ in range(12)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert sorted(won) == ["a#0", "a#1", "a#10"] and len(lost) == 9
    live, dead = rs.Store(path).check()
    assert [r.card for r in live] == [0, 1, 5] and dead == []


def test_default_state_path(monkeypatch, tmp_path):
    monkeypatch.setenv("NODELEDGER_STATE", str(tmp_path / "x.sqlite"))
    assert rs.default_state_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("NODELEDGER_STATE")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert rs.default_state_path() == tmp_path / "nodeledger" / "reservations.sqlite"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert rs.default_state_path() == tmp_path / "h/.local/state/nodeledger/reservations.sqlite"
