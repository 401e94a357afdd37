"""`nodeledger slurm prolog / epilog` on a fake Slurm environment: a second ~60 GB load on a
host with 125 GiB is refused with the reason in the job's output, a job on the lifeboat card
is refused, the epilog releases the booking, and bad input is one line (exit 2)."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

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


# -- the hook scripts and sbatch files as Slurm runs them: no PATH ------------------------------

SHELLCHECK = shutil.which("shellcheck")


def _fake_tool(bindir: Path, name: str, record: Path) -> Path:
    """A stand-in for a Slurm tool: records its arguments and environment."""
    bindir.mkdir(exist_ok=True)
    f = bindir / name
    f.write_text(f'#!/bin/sh\necho "$@" > {record}\n{shutil.which("env")} > {record}.env\n')
    f.chmod(0o755)
    return f


def _env_i(script: Path, *assign: str, shell: str | None = "bash") -> subprocess.CompletedProcess:
    """Run ``script`` as Slurm runs a prolog / epilog: an empty environment (`env -i`) plus
    the variables given — no PATH."""
    argv = ["env", "-i", *assign, *([shutil.which(shell)] if shell else []), str(script)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def _hooks(tmp: Path, plan: Path, *extra: str) -> Path:
    out = tmp / "hooks"
    bindir = tmp / "slurm-bin"
    _fake_tool(bindir, "scancel", tmp / "cancelled")
    r = run_cli("slurm", "hooks", "--plan", str(plan), "--state", str(tmp / "st.sqlite"),
                "--machine", "k100-ai-8x64g", "-o", str(out), *extra,
                env={"PATH": f"{bindir}:{os.environ['PATH']}"})  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert f"TaskProlog={out / 'task-prolog'}" in r.stdout
    return out


def test_the_readme_recipe_of_old_fails_without_path(tmp_path):
    """Why the hooks name nodeledger by its absolute path: `exec nodeledger ...` under Slurm's
    empty environment is exit 127 (a failing Epilog drains the node)."""
    if shutil.which(
        "nodeledger", path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    ):
        pytest.skip("nodeledger is installed in a default PATH folder here")
    old = tmp_path / "epilog"
    old.write_text(f"#!/bin/sh\nexec nodeledger slurm epilog --state {tmp_path / 'st.sqlite'}\n")
    assert _env_i(old, "SLURM_JOB_ID=1").returncode == 127


@pytest.mark.parametrize("shell", ["bash", None])  # `env -i bash script`, and its own #!/bin/sh
def test_hooks_work_under_env_i(tmp_path, shell):
    plan = tmp_path / "plan.toml"
    plan.write_text(LOADS.format(b="qwen3-32b"))
    out = _hooks(tmp_path, plan)
    prolog, epilog = out / "task-prolog", out / "epilog"
    text = prolog.read_text()
    assert os.access(prolog, os.X_OK) and os.access(epilog, os.X_OK)
    assert f"exec {sys.executable} -m nodeledger slurm prolog" in text  # an absolute path
    assert str(tmp_path / "slurm-bin") in text  # scancel's folder on the prolog's PATH
    root = _env(tmp_path, "0", 118)["NODELEDGER_PROC_ROOT"]
    r = _env_i(prolog, "SLURM_JOB_ID=101", "SLURM_JOB_GPUS=0", "NODELEDGER_REPLICA=loadA",
               f"NODELEDGER_PROC_ROOT={root}", shell=shell)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("print nodeledger: job 101 admitted: loadA#0 on card(s) 0")
    # the second ~60 GB load is refused and scancelled: scancel found with no PATH given
    r = _env_i(prolog, "SLURM_JOB_ID=102", "SLURM_JOB_GPUS=1", "NODELEDGER_REPLICA=loadB",
               f"NODELEDGER_PROC_ROOT={root}", shell=shell)  # fmt: skip
    assert r.returncode == 0 and "job 102 refused" in r.stdout, r.stdout + r.stderr
    assert (tmp_path / "cancelled").read_text().strip() == "102"
    r = _env_i(epilog, "SLURM_JOB_ID=101", shell=shell)
    assert r.returncode == 0 and "released loadA#0" in r.stdout, r.stdout + r.stderr
    # whatever goes wrong, the Epilog exits 0 (a failing Epilog drains the node) and says why
    r = _env_i(epilog, shell=shell)
    assert r.returncode == 0 and "nodeledger epilog: exit 2" in r.stderr, r.stderr


def test_hooks_when_nodeledger_is_gone(tmp_path):
    """Hooks written where nodeledger lives elsewhere: the prolog admits unchecked and says so
    in the job's output, the epilog exits 0 — neither drains the node."""
    from nodeledger.fleet.slurm import hook_scripts

    files = hook_scripts(["/nonexistent/bin/nodeledger"], "/etc/nodeledger/plan.toml",
                         "/var/lib/nodeledger/state.sqlite")  # fmt: skip
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    r = _env_i(tmp_path / "task-prolog", "SLURM_JOB_ID=7")
    assert r.returncode == 0
    assert r.stdout == ("print nodeledger: /nonexistent/bin/nodeledger is not on this node: job 7 "
                        "admitted unchecked (write this file again with nodeledger slurm hooks)\n")  # fmt: skip
    r = _env_i(tmp_path / "epilog", "SLURM_JOB_ID=7")
    assert r.returncode == 0 and "the booking of job 7 is left" in r.stderr


def test_hooks_bad_input_is_one_line(tmp_path):
    for args, words in ((["--plan", "plan.toml"], "give an absolute path"),
                        (["--state", "st.sqlite"], "give an absolute path"),
                        (["--lifeboat", "-1"], "--lifeboat")):  # fmt: skip
        r = run_cli("slurm", "hooks", "-o", str(tmp_path / "h"), *args)
        assert r.returncode == 2 and words in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "h").exists()


@pytest.mark.parametrize(("machine", "vendor_env"), [("k100-ai-8x64g", "CUDA_DEVICE_ORDER=PCI_BUS_ID"),
                                                     ("8x-ascend-910b", "ASCEND_RT_VISIBLE_DEVICES=2,3")])  # fmt: skip
def test_sbatch_runs_as_a_batch_step(tmp_path, machine, vendor_env):
    """The sbatch body under Slurm's batch environment (SLURM_JOB_GPUS, the submitter's PATH
    with srun): srun asks for the CPUs the job asked (srun does not inherit them), and an
    Ascend job sees its cards in ASCEND_RT_VISIBLE_DEVICES."""
    plan = tmp_path / "plan.toml"
    plan.write_text('[[workloads]]\nid = "pair"\nmodel = "qwen3-8b"\njob = "serve"\ntp = 2\n'
                    'command = ["python", "serve.py", "--name", "a b"]\n')  # fmt: skip
    out = tmp_path / "out"
    r = run_cli("place", str(plan), "--machine", machine, "--emit", "slurm", "-o", str(out))
    assert r.returncode == 0, r.stderr
    script = out / "pair.sbatch"
    cpus = re.search(r"^#SBATCH --cpus-per-task=(\d+)$", script.read_text(), re.M)
    assert cpus and int(cpus.group(1)) >= 3  # 2 ranks + workers + 1, never Slurm's default 1
    bindir = tmp_path / "bin"
    _fake_tool(bindir, "srun", tmp_path / "srun")
    r = _env_i(script, f"PATH={bindir}", "SLURM_JOB_ID=9", "SLURM_JOB_GPUS=2,3",
               "CUDA_VISIBLE_DEVICES=2,3")  # fmt: skip
    assert r.returncode == 0, r.stderr
    argv = (tmp_path / "srun").read_text().split()
    assert argv == ["--cpu-bind=cores", f"--cpus-per-task={cpus.group(1)}", "python", "serve.py",
                    "--name", "a", "b"]  # fmt: skip
    assert vendor_env in (tmp_path / "srun.env").read_text().splitlines()


@pytest.mark.skipif(
    SHELLCHECK is None, reason="shellcheck not installed (.ci/run installs Debian's shellcheck)"
)
def test_generated_scripts_are_shellcheck_clean(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(
        LOADS.format(b="qwen3-8b").replace(
            'job = "load"', 'job = "load"\ncommand = ["python", "x.py", "$HOME", "a b"]', 1
        )
    )
    out = _hooks(tmp_path, plan, "--settle", "60")
    scripts = [out / "task-prolog", out / "epilog"]
    for machine in ("k100-ai-8x64g", "8x-ascend-910b"):
        o = tmp_path / machine
        r = run_cli("place", str(plan), "--machine", machine, "--emit", "slurm", "-o", str(o))
        assert r.returncode == 0, r.stderr
        scripts += sorted(o.glob("*.sbatch"))
    r = subprocess.run([SHELLCHECK, *map(str, scripts)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
