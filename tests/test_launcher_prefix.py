"""Tool output collected through a job launcher (`srun -l`, Cray's "nid005113 out: ", pdsh's
"node12: ") carries one prefix on every line; it is read as the tool's own output, with a note,
instead of being refused.  A tool's own per-line labels ("GPU 0: ...") are left alone."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES
from nodeledger.machine.parsers import parse_kind
from nodeledger.machine.parsers.common import strip_launcher_prefix

H200 = FIXTURES / "h200"
CASES = [
    ("nvidia-smi-topo", "nvidia_smi_topo__m_.txt"),
    ("numactl", "numactl__H_.txt"),
    ("lscpu", "lscpu_.txt"),
    ("nvidia-smi", "nvidia_smi_.txt"),
]


def _tool_text(name: str) -> str:
    lines = (H200 / name).read_text().splitlines()
    return "\n".join(ln for ln in lines if not ln.startswith(("$ ", "[exit "))) + "\n"


@pytest.mark.parametrize("prefix", ["0: ", "12: ", "nid005113 out: ", "gpu-node-3: "])
@pytest.mark.parametrize(("kind", "name"), CASES)
def test_a_launcher_prefix_on_every_line_is_read_through(kind, name, prefix):
    plain = _tool_text(name)
    prefixed = "".join(prefix + line + "\n" for line in plain.splitlines())
    want, got = parse_kind(kind, plain), parse_kind(kind, prefixed)
    notes = got.pop("notes", [])
    assert any(repr(prefix) in n for n in notes), notes
    if "notes" in want:
        assert notes[:-1] == want.pop("notes")
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)


def test_lines_that_differ_keep_their_labels():
    text = "GPU 0: NVIDIA H200\nGPU 1: NVIDIA H200\n"
    assert strip_launcher_prefix(text) == (text, None)
    mixed = "0: a\n1: b\n"  # two srun tasks interleaved: not one prefix, left alone
    assert strip_launcher_prefix(mixed) == (mixed, None)


def test_right_aligned_task_numbers_and_trimmed_empty_lines():
    assert strip_launcher_prefix(" 3: a\n 3:\n 3: b\n")[0] == "a\n\nb\n"
    assert strip_launcher_prefix("0: a\n0:\n0: b\n")[0] == "a\n\nb\n"
