"""The README's printed outputs are the tool's: each block after an ``<!-- output: [VAR=V ...]
nodeledger ARGS -->`` marker is what that command prints now (trailing spaces aside), so the
README cannot go stale (issue 32's drift test)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from conftest import run_cli

README = Path(__file__).resolve().parents[1] / "README.md"
MARKER = re.compile(r"<!-- output: (?P<cmd>[^>]*?) -->\n```\w*\n(?P<body>.*?)\n```", re.S)


def examples() -> list[tuple[str, str]]:
    return [(m["cmd"], m["body"]) for m in MARKER.finditer(README.read_text(encoding="utf-8"))]


def test_the_readme_has_printed_outputs_to_check():
    assert examples(), "no <!-- output: ... --> block in the README"


@pytest.mark.parametrize("cmd,body", examples(), ids=[c for c, _ in examples()])
def test_a_readme_output_is_what_the_command_prints(cmd, body):
    words = shlex.split(cmd)
    env = dict(w.split("=", 1) for w in words if re.fullmatch(r"[A-Z_]+=.*", w))
    args = [w for w in words if not re.fullmatch(r"[A-Z_]+=.*", w)]
    assert args[0] == "nodeledger"
    proc = run_cli(*args[1:], env=env)
    assert proc.returncode == 0, proc.stderr
    got = [ln.rstrip() for ln in proc.stdout.rstrip("\n").splitlines()]
    assert got == [ln.rstrip() for ln in body.splitlines()], "\n".join(got)
