"""A device, FIFO or folder named where a file is expected, or a file far larger than any real
one, is one line and exit 2 — never a hang or unbounded memory (the readers check the file
before they read it: nodeledger/files.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import run_cli


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "--machine", "k100-ai-8x64g", "--workloads", "{dev}"],
        ["parse", "lscpu", "{dev}"],
        ["bench", "--no-cards", "--compare-nccl", "{dev}"],
        ["machine", "show", "{fifo}"],
        ["parse", "numactl", "{fifo}"],
        ["report", "--machine", "k100-ai-8x64g", "--workloads", "{fifo}"],
        ["parse", "lscpu", "{dir}"],
    ],
)
def test_special_files_are_one_line_exit_2(tmp_path, argv):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    args = [a.format(dev="/dev/zero", fifo=fifo, dir=tmp_path) for a in argv]
    proc = run_cli(*args)  # conftest bounds each run at 60 s: a hang fails it
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_parse_stdin_larger_than_any_output_is_refused():
    proc = subprocess.run(
        [sys.executable, "-m", "nodeledger", "parse", "lscpu", "-"],
        input="x" * (65 * 2**20), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and "more than 64 MiB" in proc.stderr, proc.stderr
