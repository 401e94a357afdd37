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


def cli_json(*args: str, env: dict | None = None):
    proc = run_cli(*args, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
