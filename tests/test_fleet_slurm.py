"""`nodeledger slurm prolog / epilog` on a fake Slurm environment: a second ~60 GB load on a
host with 125 GiB is refused with the reason in the job's output, a job on the lifeboat card
is refused, the epilog releases the booking, and bad input is one line (exit 2)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from conftest import run_cli

GiB = 2**30
LOADS = """
[[workloads]]
id = "loadA"
model = "qwen3-32b"
job = "load"

[[workloads]]
id = "loadB"
model = "{b}"
job = "load"
"""


def _env(tmp: Path, job: str, avail_gib: float, **kv) -> dict:
    root = tmp / "root"
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "meminfo").write_text(
        f"MemTotal: {125 * 2**20} kB\nMemFree: {int(avail_gib * 2**20)} kB\n"
        f"MemAvailable: {int(avail_gib * 2**20)} kB\n"
    )
    return {"NODELEDGER_PROC_ROOT": str(root), "SLURM_JOB_ID": job, **kv}


def _prolog(tmp: Path, plan: Path, env: dict, *extra: str):
    return run_cli("slurm", "prolog", "--plan", str(plan), "--machine", "k100-ai-8x64g",
                   "--state", str(tmp / "st.sqlite"), *extra, env=env)  # fmt: skip


def test_second_60gb_load_is_refused_on_a_125gib_host(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(LOADS.format(b="qwen3-32b"))  # two loads of 64.02 GiB host peak each
    r = _prolog(tmp_path, plan, _env(tmp_path, "101", 118, SLURM_JOB_GPUS="0",
                                     NODELEDGER_REPLICA="loadA"), "--no-cancel")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("print nodeledger: job 101 admitted: loadA#0 on card(s) 0")
    r = _prolog(tmp_path, plan, _env(tmp_path, "102", 118, SLURM_JOB_GPUS="1",
                                     NODELEDGER_REPLICA="loadB"), "--no-cancel")  # fmt: skip
    assert r.returncode == 4
    assert r.stdout.startswith("print nodeledger: job 102 refused: ")  # the job's output
    assert "host RAM" in r.stdout and "of the host's 125.0 GiB once loadA#0" in r.stdout
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    # a later task of the admitted job passes without booking again
    r = _prolog(tmp_path, plan, _env(tmp_path, "101", 118, SLURM_JOB_GPUS="0",
                                     NODELEDGER_REPLICA="loadA"), "--no-cancel")  # fmt: skip
    assert r.returncode == 0 and r.stdout == ""
    # the epilog releases it; then loadB may start
    r = run_cli("slurm", "epilog", "--state", str(tmp_path / "st.sqlite"),
                env={"SLURM_JOB_ID": "101"})  # fmt: skip
    assert r.returncode == 0 and "released loadA#0" in r.stdout


def test_settling_load_makes_a_second_one_wait(tmp_path):
    """Both fit the plan, but MemAvailable minus the first load (still settling) is short."""
    plan = tmp_path / "plan.toml"
    plan.write_text(LOADS.format(b="qwen3-8b"))
    r = _prolog(tmp_path, plan, _env(tmp_path, "201", 70, NODELEDGER_REPLICA="loadA"),
                "--no-cancel")  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = _prolog(tmp_path, plan, _env(tmp_path, "202", 70, NODELEDGER_REPLICA="loadB"),
                "--no-cancel")  # fmt: skip
    assert r.returncode == 4 and "host RAM short for loadB#0" in r.stdout, r.stdout
    assert "settling" in r.stdout


def test_lifeboat_rule(tmp_path):
    """A job of the plan given the planner's lifeboat card is refused; a job outside the plan
    is refused only when it would leave no card free."""
    plan = tmp_path / "plan.toml"
    plan.write_text(LOADS.format(b="qwen3-8b"))
    big = tmp_path / "big.toml"
    big.write_text('[[workloads]]\nid = "tp8"\nmodel = "llama-3.1-8b"\njob = "serve"\ntp = 8\n')
    r = _prolog(tmp_path, big, _env(tmp_path, "301", 118, NODELEDGER_REPLICA="tp8"),
                "--no-cancel")  # fmt: skip
    assert r.returncode == 4 and "lifeboat" in r.stdout, r.stdout
    r = _prolog(tmp_path, big, _env(tmp_path, "304", 118, SLURM_JOB_GPUS="0,1,2,3,4,5,6,7",
                                    NODELEDGER_REPLICA="tp8"), "--no-cancel")  # fmt: skip
    assert r.returncode == 4 and "leave 0 card(s) free of 8" in r.stdout, r.stdout
    r = _prolog(tmp_path, plan, _env(tmp_path, "302", 118, SLURM_JOB_GPUS="0,1,2,3,4,5,6,7"),
                "--no-cancel")  # fmt: skip
    assert r.returncode == 4 and "leave 0 card(s) free of 8" in r.stdout, r.stdout
    r = _prolog(tmp_path, plan, _env(tmp_path, "303", 118, SLURM_JOB_GPUS="1,2,3,4,5,6,7"),
                "--no-cancel")  # fmt: skip
    assert r.returncode == 0 and "not the plan's" in r.stdout


def test_a_load_alone_is_admitted_whichever_it_is(tmp_path):
    """The plan is made of what runs and what asks: loadB alone on an empty host starts, even
    though the catalogue's two loads together would not fit."""
    plan = tmp_path / "plan.toml"
    plan.write_text(LOADS.format(b="qwen3-32b"))
    r = _prolog(tmp_path, plan, _env(tmp_path, "501", 118, NODELEDGER_REPLICA="loadB"),
                "--no-cancel")  # fmt: skip
    assert r.returncode == 0 and "admitted: loadB#0" in r.stdout, r.stdout + r.stderr
    r = _prolog(tmp_path, plan, _env(tmp_path, "502", 118, NODELEDGER_REPLICA="loadA"),
                "--no-cancel")  # fmt: skip
    assert r.returncode == 4 and "once loadB#0 (64.0 GiB host peak) runs" in r.stdout, r.stdout


def test_refused_job_is_cancelled_with_scancel(tmp_path):
    """Without --no-cancel the prolog exits 0 (the node is never drained) and runs scancel."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    sc = bindir / "scancel"
    sc.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/cancelled\n')
    sc.chmod(sc.stat().st_mode | stat.S_IEXEC)
    plan = tmp_path / "plan.toml"
    plan.write_text(LOADS.format(b="qwen3-8b"))
    env = _env(tmp_path, "401", 118, SLURM_JOB_GPUS="0,1,2,3,4,5,6,7")
    env["PATH"] = f"{bindir}:{os.environ['PATH']}"
    r = _prolog(tmp_path, plan, env)
    assert r.returncode == 0 and "refused" in r.stdout
    assert (tmp_path / "cancelled").read_text().strip() == "401"


def test_bad_slurm_input_is_one_line(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(LOADS.format(b="qwen3-8b"))
    for env, words in (({"SLURM_JOB_ID": "../etc"}, "not a job number"),
                       ({"SLURM_JOB_ID": "5", "SLURM_JOB_GPUS": "0;rm"}, "not a list of card")):  # fmt: skip
        r = _prolog(tmp_path, plan, {**_env(tmp_path, "1", 100), **env}, "--no-cancel")
        assert r.returncode == 2 and words in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("st.sqlite.slurm/*"))  # nothing written for bad input


def test_sbatch_names_the_replica_for_the_prolog(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(LOADS.format(b="qwen3-8b"))
    out = tmp_path / "out"
    r = run_cli("place", str(plan), "--machine", "k100-ai-8x64g", "--emit", "slurm",
                "--output", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    text = "".join(p.read_text() for p in out.rglob("*.sbatch"))
    assert "#SBATCH --export=ALL,NODELEDGER_REPLICA=loadA" in text
