from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SHARED = Path(os.environ.get("NODELEDGER_SHARED", ROOT.parent / "shared"))
SHARED_MODELS = SHARED / "fixtures" / "models"


def shared_models_or_skip() -> Path:
    if not SHARED_MODELS.is_dir():
        pytest.skip(
            f"../shared/fixtures/models not present at {SHARED_MODELS}: real-config checks skipped"
        )
    return SHARED_MODELS


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the CLI in a fresh process, as a user would."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.setdefault("COLUMNS", "200")
    return subprocess.run(
        [sys.executable, "-m", "nodeledger", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=60,
    )


# fit / report / doctor --job exit with their verdict (0 fits, 1 tight or unknown, 3 cannot)
VERDICT_EXIT = {"fits": 0, "can": 0, "go": 0, "tight": 1, "wait": 1, "unknown": 1, "cannot": 3,
                "no-go": 3}  # fmt: skip


def cli_json(*args: str, env: dict | None = None):
    """The command's JSON; a judging command's exit code must be its verdict's."""
    proc = run_cli(*args, "--json", env=env)
    if args and args[0] in ("fit", "doctor") and proc.returncode in (1, 3):
        data = json.loads(proc.stdout)
        tier = data["verdict"]["tier"] if args[0] == "fit" else data.get("verdict")
        assert VERDICT_EXIT[tier] == proc.returncode, (tier, proc.returncode, proc.stderr)
        return data
    if args and args[0] == "report" and proc.returncode in (1, 3):
        return json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


_PEAK = """
import json, os, subprocess, sys, time
argv, env = json.loads(sys.argv[1]), json.loads(sys.argv[2])
t = time.monotonic()
p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
out = p.stdout.read()
_, status, usage = os.wait4(p.pid, 0)
sys.stdout.write(json.dumps({"rc": os.waitstatus_to_exitcode(status), "wall": time.monotonic() - t,
                             "peak_kib": usage.ru_maxrss, "stdout": out.decode(errors="replace")}))
"""


def run_measured(argv: list[str], env: dict | None = None, timeout: float = 120) -> dict:
    """Run ``argv`` as a child of a fresh, small Python and return its exit code, wall seconds,
    peak RSS in MiB (the kernel's own accounting of that child: measured from a small parent,
    so a fork of this large test process does not count) and stdout."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK, json.dumps(argv), json.dumps(full_env)],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    data = json.loads(proc.stdout)
    data["peak_mib"] = data.pop("peak_kib") / 1024
    return data
