"""A newcomer's first ten minutes (issue 32): a fresh copy of the repository's tracked files, the
README's main set-up command run verbatim there (a new venv, ``pip install .``, the report),
then every README recipe run with that venv's ``nodeledger``: each prints what the README shows,
and the default report fits one screen (40 lines at 120 columns, 60 at 80).

It installs the package and its declared dependencies from the package index (about a minute),
so it runs where CI runs (``CI`` set) or when asked (``NODELEDGER_NEWCOMER=1``); the dev loop
skips it.  A dependency the code imports but the package does not declare fails it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from test_readme_outputs import MARKER, ROOT, WALL, render

pytestmark = pytest.mark.skipif(
    not (os.environ.get("CI") or os.environ.get("NODELEDGER_NEWCOMER")),
    reason="installs the package in a fresh venv (about a minute): runs under CI, or with "
    "NODELEDGER_NEWCOMER=1",
)


def _quick_start() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", quick)[0]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, timeout=60)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    dest = tmp_path_factory.mktemp("newcomer") / "nodeledger"
    for name in filter(None, listed.stdout.decode().split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(COLUMNS="120", NO_COLOR="1")
    proc = subprocess.run(["bash", "-c", _quick_start()], cwd=dest, env=env, capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    return dest, proc


def _run(dest: Path, cmd: str) -> tuple[int, list[str]]:
    """A README command with the fresh venv's entry point, from the fresh copy's root."""
    return render(cmd, [str(dest / ".venv" / "bin" / "nodeledger")], dest,
                  ("VIRTUAL_ENV", "PYTHONPATH"))  # fmt: skip


def test_the_main_set_up_command_runs_verbatim_on_a_fresh_copy(fresh):
    dest, proc = fresh
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.rstrip("\n").splitlines()
    assert 0 < len(lines) <= 40, "\n".join(lines)
    assert (dest / ".venv" / "bin" / "nodeledger").is_file()


def test_each_readme_recipe_prints_what_the_readme_shows_from_the_fresh_install(fresh):
    dest, proc = fresh
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = (dest / "README.md").read_text(encoding="utf-8")
    recipes = [(m["cmd"], m["body"]) for m in MARKER.finditer(text)]
    assert len(recipes) >= 6
    for cmd, body in recipes:
        code, got = _run(dest, cmd)
        assert code == 0, (cmd, code)
        want = [WALL.sub("X s of wall time", ln.rstrip()) for ln in body.splitlines()]
        assert [WALL.sub("X s of wall time", ln) for ln in got] == want, (cmd, "\n".join(got))


def test_the_default_report_fits_one_screen_at_80_columns_too(fresh):
    dest, proc = fresh
    assert proc.returncode == 0, proc.stderr[-2000:]
    code, lines = _run(dest, "COLUMNS=80 nodeledger report --no-fail")
    assert code == 0 and 0 < len(lines) <= 60, "\n".join(lines)
