"""`nodeledger run`: starts race for cards without double-booking, dead holders free their cards,
host RAM (MemAvailable minus settling starts) gates big loads, bad input is one line."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import run_cli

GiB = 2**30
PLAN3 = """
[[workloads]]
id = "s"
model = "qwen3-0.6b"
job = "serve"
replicas = 3
context = 4096
concurrency = 8
"""
LOADS = """
[[workloads]]
id = "loadA"
model = "qwen3-32b"
job = "load"

[[workloads]]
id = "loadB"
model = "qwen3-32b"
job = "load"
"""
# the command: note which replica started (and on which cards), then hold them
HOLD = (
    "import os, sys, time; d = sys.argv[1]; "
    "open(os.path.join(d, os.environ['NODELEDGER_REPLICA']), 'w').write("
    "os.environ.get('HIP_VISIBLE_DEVICES') or os.environ.get('CUDA_VISIBLE_DEVICES') or ''); "
    "time.sleep(float(sys.argv[2]))"
)


def meminfo(root: Path, available_gib: float, total_gib: float = 1024) -> dict:
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "meminfo").write_text(
        f"MemTotal:       {int(total_gib * 2**20)} kB\n"
        f"MemFree:        {int(available_gib * 2**20)} kB\n"
        f"MemAvailable:   {int(available_gib * 2**20)} kB\n"
    )
    return {"NODELEDGER_PROC_ROOT": str(root)}


@pytest.fixture
def setup(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN3)
    marks = tmp_path / "started"
    marks.mkdir()
    env = meminfo(tmp_path / "fakeroot", available_gib=100)
    env["NODELEDGER_STATE"] = str(tmp_path / "state.sqlite")
    return plan, marks, env


def argv(plan, *extra, machine="k100-ai-8x64g"):
    return [sys.executable, "-m", "nodeledger", "run", "--plan", str(plan), "--machine", machine,
            *extra]  # fmt: skip


def popen(args, env, err=None):
    full = dict(os.environ)
    full.update(env)
    return subprocess.Popen(args, env=full, stdout=subprocess.DEVNULL,
                            stderr=err if err is not None else subprocess.PIPE, text=True)  # fmt: skip


def rows(state: Path) -> list[tuple]:
    db = sqlite3.connect(str(state))
    try:
        return db.execute("SELECT card, replica, pid FROM reservations ORDER BY card").fetchall()
    finally:
        db.close()


def until(pred, timeout: float, step: float = 0.05):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = pred()
        if got:
            return got
        time.sleep(step)
    return pred()


def test_twenty_racers_three_cards_then_kill9_frees_within_one_check(setup, tmp_path):
    plan, marks, env = setup
    state = Path(env["NODELEDGER_STATE"])
    procs = []
    try:
        for i in range(20):
            extra = ["--wait", "--timeout", "2"] if i % 4 == 0 else []
            procs.append(popen(argv(plan, *extra, "s", "--", sys.executable, "-c", HOLD,
                                    str(marks), "60"), env))  # fmt: skip
        # the refused (at once) and the waiters (after 2 s) exit 4; three hold their cards
        assert until(lambda: sum(p.poll() is not None for p in procs) >= 17, 40)
        done = [p for p in procs if p.poll() is not None]
        holders = [p for p in procs if p.poll() is None]
        errs = [p.stderr.read() for p in done]
        assert len(done) == 17 and len(holders) == 3, errs
        assert all(p.returncode == 4 for p in done), errs
        assert all("Traceback" not in e and "refused:" in e for e in errs)
        assert any("waited" in e for e in errs)  # the --wait --timeout ones gave up, saying so
        assert until(lambda: len(list(marks.iterdir())) == 3, 10)
        started = {f.name: f.read_text() for f in marks.iterdir()}
        assert started == {"s#0": "0", "s#1": "1", "s#2": "2"}
        booked = rows(state)
        assert [r[0] for r in booked] == [0, 1, 2]
        assert {r[2] for r in booked} == {p.pid for p in holders}  # exec kept the pid

        # a waiter; then kill -9 the holder of s#1 (not reaped: a zombie counts as dead)
        log = tmp_path / "waiter.err"
        with log.open("w") as fh:
            waiter = popen(argv(plan, "--wait", "--timeout", "20", "s", "--", sys.executable,
                                "-c", HOLD, str(marks), "60"), env, err=fh)  # fmt: skip
        procs.append(waiter)
        assert until(lambda: "waiting:" in log.read_text(), 15), log.read_text()
        victim = next(p for p in holders if p.pid == next(r[2] for r in booked if r[1] == "s#1"))
        (marks / "s#1").unlink()
        t0 = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL)
        # the waiter books card 1 at its next check: within one interval (1 s), plus slack for
        # a loaded CI box (the booking comes before its exec; the command's start-up is not timed)
        assert until(lambda: dict((r[1], r[2]) for r in rows(state)).get("s#1") == waiter.pid, 10)
        assert time.monotonic() - t0 < 3.0
        assert until(lambda: (marks / "s#1").exists(), 10), log.read_text()
        assert waiter.poll() is None and (marks / "s#1").read_text() == "1"
        assert {r[1]: r[2] for r in rows(state)}["s#1"] == waiter.pid
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            if p.stderr:
                p.stderr.close()


def test_host_ram_short_refuses_with_numbers(tmp_path):
    plan = tmp_path / "loads.toml"
    plan.write_text(LOADS)
    env = meminfo(tmp_path / "root", available_gib=40, total_gib=2048)
    env["NODELEDGER_STATE"] = str(tmp_path / "st.sqlite")
    r = run_cli("run", "--plan", str(plan), "--machine", "dgx-h100", "loadA", "--",
                sys.executable, "-c", "pass", env=env)  # fmt: skip
    assert r.returncode == 4, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "host RAM short for loadA#0" in r.stderr
    assert "needs 64.02 GiB" in r.stderr and "MemAvailable 40.00 GiB" in r.stderr
    assert rows(tmp_path / "st.sqlite") == []
    # more than the host has at all: refused at once, even with --wait
    env2 = meminfo(tmp_path / "root2", available_gib=40, total_gib=48)
    env2["NODELEDGER_STATE"] = env["NODELEDGER_STATE"]
    t0 = time.monotonic()
    r = run_cli("run", "--plan", str(plan), "--machine", "dgx-h100", "--wait", "loadA", "--",
                sys.executable, "-c", "pass", env=env2)  # fmt: skip
    assert r.returncode == 4 and "more than the 48.00 GiB this host has" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 10


def test_settle_window_makes_the_second_big_load_wait(tmp_path):
    plan = tmp_path / "loads.toml"
    plan.write_text(LOADS)
    marks = tmp_path / "m"
    marks.mkdir()
    env = meminfo(tmp_path / "root", available_gib=100, total_gib=2048)
    env["NODELEDGER_STATE"] = str(tmp_path / "st.sqlite")
    hold = [sys.executable, "-c", HOLD, str(marks), "30"]
    first = popen(argv(plan, "loadA", "--", *hold, machine="dgx-h100"), env)
    try:
        assert until(lambda: (marks / "loadA#0").exists(), 15), first.stderr
        # MemAvailable has not moved (the first load has "not allocated yet"): 100 - 64 < 64
        r = run_cli(*argv(plan, "--wait", "--timeout", "1.5", "loadB", "--", *hold,
                          machine="dgx-h100")[3:], env=env)  # fmt: skip
        assert r.returncode == 4, r.stderr
        assert "waiting: host RAM short for loadB#0" in r.stderr
        assert "64.02 GiB of reservations started in the last 120 s (settling: loadA#0" in r.stderr
        assert "= 35.98 GiB" in r.stderr and "waited" in r.stderr
        # past the settle window the first load's bytes are in MemAvailable itself: it starts
        r = run_cli(*argv(plan, "--settle", "0", "loadB", "--", sys.executable, "-c", "pass",
                          machine="dgx-h100")[3:], env=env)  # fmt: skip
        assert r.returncode == 0, r.stderr
    finally:
        first.kill()
        first.wait()
        first.stderr.close()


def test_numa_binding_through_numactl_or_a_note(tmp_path):
    from nodeledger.machine import resolve_machine, save_profile
    from nodeledger.machine.profile import NumaNode

    base = resolve_machine("k100-ai-8x64g")
    accs = [replace(a, **{"numa_node": a.index // 2}) for a in base.accelerators]
    nodes = [NumaNode(id=n, cpus=f"{n * 12}-{n * 12 + 11}") for n in range(8)]
    host = replace(base.host, **{"numa_nodes": nodes})
    prof = replace(base, **{"accelerators": accs, "host": host})
    machine = tmp_path / "numa.json"
    save_profile(prof, machine)
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN3 + 'command = ["' + sys.executable + '", "-c", "print(42)"]\n')
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "numactl"
    fake.write_text('#!/bin/sh\necho "numactl $*"\n')
    fake.chmod(0o755)
    env = {"NODELEDGER_STATE": str(tmp_path / "st.sqlite"), "PATH": f"{bindir}:/usr/bin:/bin"}
    env.update(meminfo(tmp_path / "root", 100))
    r = run_cli("run", "--plan", str(plan), "--machine", str(machine), "s#0", env=env)
    assert r.returncode == 0, r.stderr
    # the command from the plan file, under numactl with the replica's node and CPU slice
    assert (
        r.stdout.strip()
        == f"numactl --physcpubind=0-5 --membind=0 -- {sys.executable} -c print(42)"
    )
    env["PATH"] = str(tmp_path / "empty")
    r = run_cli("run", "--plan", str(plan), "--machine", str(machine), "s#1", env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "42"
    assert "numactl not on PATH: s#1 starts without its NUMA binding (--physcpubind=6-11 " \
           "--membind=0)" in r.stderr  # fmt: skip


def test_list_release_and_dead_rows(setup):
    plan, marks, env = setup
    state = Path(env["NODELEDGER_STATE"])
    r = run_cli("run", "--list", env=env)
    assert r.returncode == 0 and "no reservations" in r.stdout, r.stderr
    holder = popen(argv(plan, "s#2", "--", sys.executable, "-c", HOLD, str(marks), "30"), env)
    try:
        assert until(lambda: (marks / "s#2").exists(), 15)
        d = json.loads(run_cli("run", "--list", "--json", env=env).stdout)
        assert [(x["card"], x["replica"], x["pid"]) for x in d["reservations"]] == [
            (2, "s#2", holder.pid)
        ]
        # a row of a process that is gone is deleted at the next check
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        db = sqlite3.connect(str(state))
        db.execute("INSERT INTO reservations VALUES (5, 'm', 'x#0', ?, NULL, 0, 0)", (dead.pid,))
        db.commit()
        db.close()
        r = run_cli("run", "--list", env=env)
        assert "deleted: x#0 card 5" in r.stdout and "s#2" in r.stdout, r.stdout
        assert [x[0] for x in rows(state)] == [2]
        r = run_cli("run", "--release", "s#2", env=env)
        assert r.returncode == 0 and "released s#2: card(s) 2" in r.stdout
        assert "still runs" in r.stderr
        assert rows(state) == []
        r = run_cli("run", "--release", "s#2", env=env)
        assert r.returncode == 2 and "no reservation of that replica" in r.stderr
    finally:
        holder.kill()
        holder.wait()
        holder.stderr.close()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--json", "s#0", "--", "true"], "--json applies to --list"),
        (["s#9", "--", "true"], "no replica or workload of the plan"),
        (["nope", "--", "true"], "(replicas: s#0, s#1, s#2)"),
        (["s"], "no command for s"),
        (["--timeout", "3", "s", "--", "true"], "--timeout applies to --wait"),
        (["--wait", "--timeout", "0", "s", "--", "true"], "--timeout must be > 0"),
        (["--settle", "-1", "s", "--", "true"], "--settle must be >= 0"),
        (["--lifeboat", "8", "s", "--", "true"], "--lifeboat 8"),
        ([], "run needs a REPLICA"),
        (["s#0", "--", "/no/such/program"], "cannot start '/no/such/program'"),
    ],
)
def test_bad_input_is_one_line_exit_2(setup, args, needle):
    plan, _, env = setup
    r = run_cli("run", "--plan", str(plan), "--machine", "k100-ai-8x64g", *args, env=env)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2  # the error (and at most the start line)
    if Path(env["NODELEDGER_STATE"]).exists():
        assert rows(Path(env["NODELEDGER_STATE"])) == []  # nothing stays booked


def test_unplaced_replica_and_bad_plan(tmp_path):
    env = {"NODELEDGER_STATE": str(tmp_path / "st.sqlite")}
    plan = tmp_path / "p.toml"
    plan.write_text(LOADS)
    r = run_cli("run", "--plan", str(plan), "--machine", "k100-ai-8x64g", "loadB", "--", "true",
                env=env)  # fmt: skip
    assert r.returncode == 2 and "the plan does not place loadB#0 (host RAM" in r.stderr
    plan.write_text("[[workloads]\n")
    r = run_cli("run", "--plan", str(plan), "s", "--", "true", env=env)
    assert r.returncode == 2 and "not valid TOML" in r.stderr
    r = run_cli("run", "s", "--", "true", env=env)
    assert r.returncode == 2 and "run needs --plan" in r.stderr
    r = run_cli("run", "--list", "--plan", str(plan), env=env)
    assert r.returncode == 2 and "--list takes only --state and --json" in r.stderr


def test_corrupt_or_unwritable_state_file(setup, tmp_path):
    plan, _, env = setup
    bad = tmp_path / "garbage.sqlite"
    bad.write_bytes(b"this is not a database, just some bytes " * 50)
    other = tmp_path / "other.sqlite"
    db = sqlite3.connect(str(other))
    db.execute("CREATE TABLE reservations (x INTEGER)")
    db.commit()
    db.close()
    afile = tmp_path / "afile"
    afile.write_text("x")
    empty = tmp_path / "empty.sqlite"  # truncated: refused, never taken as "no reservations"
    empty.write_bytes(b"")
    cases = [
        (empty, "is empty, not a nodeledger state file; remove it to start afresh"),
        (bad, "corrupt"),
        (other, "not a nodeledger state file"),
        (afile / "state.sqlite", "cannot create its folder"),
        (tmp_path, "is a directory"),
    ]
    for path, needle in cases:
        for args in (["--list"], ["--plan", str(plan), "--machine", "k100-ai-8x64g", "s", "--",
                                  "true"]):  # fmt: skip
            r = run_cli("run", "--state", str(path), *args, env=env)
            assert r.returncode == 2, (path, r.stderr)
            line = r.stderr.strip()
            assert len(line.splitlines()) == 1 and "Traceback" not in line
            assert str(path) in line and needle in line, line
    assert empty.read_bytes() == b""
    if os.geteuid() != 0:  # root writes anyway
        ro = tmp_path / "ro.sqlite"
        assert run_cli("run", "--state", str(ro), "--list", env=env).returncode == 0
        ro.chmod(0o444)
        r = run_cli("run", "--state", str(ro), "--list", env=env)
        assert r.returncode == 2 and "cannot write" in r.stderr and str(ro) in r.stderr


def test_a_host_without_cards_books_nothing(tmp_path):
    """run books this host's cards: with no accelerator found and no --machine it refuses
    (exit 4) instead of booking the reference machine's and starting the command."""
    from nodeledger.machine import resolve_or_reference

    if not resolve_or_reference(None).reference:
        pytest.skip("this host has accelerators")
    plan = tmp_path / "plan.toml"
    plan.write_text('[[workloads]]\nid = "s"\nmodel = "qwen3-0.6b"\njob = "serve"\n')
    marker = tmp_path / "started"
    p = run_cli("run", "--plan", str(plan), "--state", str(tmp_path / "state.db"), "s", "--",
                sys.executable, "-c", f"open({str(marker)!r}, 'w')")  # fmt: skip
    assert p.returncode == 4 and "no accelerator found on this host" in p.stderr
    assert "--machine" in p.stderr and not marker.exists()
