"""The README's printed outputs are the tool's: each block after an
``<!-- output: [VAR=V ...] nodeledger ARGS [| head -N | tail -N] -->`` marker is what that
command prints now, run from the repository root (trailing spaces aside; a wall-clock figure
masked), so the README cannot go stale (issue 32's drift test).  After a change of an output,
``python tests/test_readme_outputs.py --write`` rewrites the blocks from the commands."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = (ROOT / "README.md", ROOT / "docs" / "reference.md")
MARKER = re.compile(r"(<!-- output: (?P<cmd>[^>]*?) -->\n```\w*\n)(?P<body>.*?)(\n```)", re.S)
WALL = re.compile(r"[\d.]+ s of wall time")  # the one figure that differs run to run


def examples() -> list[tuple[str, str, str]]:
    return [(p.name, m["cmd"], m["body"]) for p in PAGES if p.is_file()
            for m in MARKER.finditer(p.read_text(encoding="utf-8"))]  # fmt: skip


def render(cmd: str, entry: list[str] | None = None, cwd: Path = ROOT,
           drop_env: tuple[str, ...] = ()) -> tuple[int, list[str]]:  # fmt: skip
    """(exit code, the lines the command prints), ``| head -N`` / ``| tail -N`` applied.
    ``entry``: what runs for ``nodeledger`` (this interpreter's ``-m nodeledger`` unless given),
    from ``cwd``, with the ``drop_env`` variables left out of the environment."""
    words, _, pipe = cmd.partition(" | ")
    words = shlex.split(words)
    env = {k: v for k, v in os.environ.items() if k not in drop_env}
    env.update(w.split("=", 1) for w in words if re.fullmatch(r"[A-Z_]+=.*", w))
    args = [w for w in words if not re.fullmatch(r"[A-Z_]+=.*", w)]
    assert args[0] == "nodeledger", cmd
    argv = [*(entry or [sys.executable, "-m", "nodeledger"]), *args[1:]]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=120)
    lines = [ln.rstrip() for ln in proc.stdout.rstrip("\n").splitlines()]
    if pipe:
        tool, n = pipe.split()
        lines = lines[: int(n.lstrip("-"))] if tool == "head" else lines[-int(n.lstrip("-")) :]
    return proc.returncode, lines


def test_the_readme_has_printed_outputs_to_check():
    assert len(examples()) >= 6, "the README's report and its five recipes carry output markers"
    # every marker is one the check reads (a marker the pattern misses would be skipped)
    for page in PAGES:
        text = page.read_text(encoding="utf-8") if page.is_file() else ""
        assert text.count("<!-- output:") == len(MARKER.findall(text)), page.name


@pytest.mark.parametrize("page,cmd,body", examples(), ids=[c[:60] for _, c, _ in examples()])
def test_a_printed_output_is_what_the_command_prints(page, cmd, body):
    code, got = render(cmd)
    assert code == 0, (page, cmd, code)
    want = [WALL.sub("X s of wall time", ln.rstrip()) for ln in body.splitlines()]
    assert [WALL.sub("X s of wall time", ln) for ln in got] == want, "\n".join(got)


def write() -> None:
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        text = MARKER.sub(lambda m: m[1] + "\n".join(render(m["cmd"])[1]) + m[4], text)
        page.write_text(text, encoding="utf-8")


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    write()


def test_the_quick_start_is_what_a_newcomer_and_ci_run():
    """The README's two set-up commands: the test command is the one .ci/run runs, and the main
    job (the report) answers on one screen from the installed entry point's module."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    run_main, run_tests = re.findall(r"```sh\n(.+?)\n```", quick)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert run_tests in ci, run_tests
    assert run_main.endswith(".venv/bin/nodeledger report --no-fail"), run_main
    code, lines = render("COLUMNS=120 nodeledger report --no-fail")
    assert code == 0 and 0 < len(lines) <= 40, lines
