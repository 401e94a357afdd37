"""The library's API (`import nodeledger`): the README's example runs as printed, and each call
gives what its command prints (`fit --json`, `report --format json`)."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

import nodeledger
from conftest import cli_json, run_cli
from nodeledger.errors import NodeledgerError
from nodeledger.machine.profile import MachineProfile

README = Path(__file__).resolve().parents[1] / "README.md"


def _example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Python API", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    return code


def test_the_readme_example_runs_as_printed():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(_example(), "README.md (Python API)", "exec"), {})
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines[0].startswith(("fits ", "tight ", "cannot "))


def test_fit_is_fit_json():
    args = ["llama-3.1-70b", "--job", "serve", "--machine", "dgx-h100", "--tp", "4",
            "--engine", "vllm", "--concurrency", "max"]  # fmt: skip
    cli = cli_json("fit", *args, "--no-fail")
    r = nodeledger.fit("llama-3.1-70b", job="serve", machine="dgx-h100", tp=4, engine="vllm",
                       concurrency="max")  # fmt: skip
    assert json.loads(json.dumps(r.to_json(), default=str)) == cli
    assert r.exit_tier == cli["verdict"]["tier"]


def test_capacity_report_is_report_json():
    p = run_cli("report", "--machine", "k100-ai-8x64g", "--format", "json", "--no-fail")
    ans = nodeledger.capacity_report(machine="k100-ai-8x64g")
    assert json.loads(json.dumps(ans.to_json(), default=str)) == json.loads(p.stdout)
    assert ans.tier in ("can", "tight", "cannot", "unknown")


def test_bad_input_raises_the_commands_error_and_prints_nothing(capsys):
    with pytest.raises(NodeledgerError, match="--tpp does not apply to --job serve"):
        nodeledger.fit("llama-3.1-8b", tpp=2)
    with pytest.raises(NodeledgerError, match="not found"):
        nodeledger.fit("no-such-model-anywhere")
    # the options that do not go together are refused as the command refuses them
    with pytest.raises(NodeledgerError, match="--request-rate applies to --job serve"):
        nodeledger.fit("llama-3.1-8b", job="train", request_rate=3.0)
    with pytest.raises(NodeledgerError, match="--lifeboat applies to --search"):
        nodeledger.fit("llama-3.1-8b", lifeboat=2)
    with pytest.raises(NodeledgerError, match="--from-engine-log applies to --job serve --engine"):
        nodeledger.fit("llama-3.1-8b", engine_log="x.log")
    assert capsys.readouterr() == ("", "")


def test_probe_gives_a_profile():
    assert isinstance(nodeledger.probe(), MachineProfile)


def test_import_is_cheap_and_typed():
    import subprocess
    import sys

    code = "import nodeledger, sys; print('nodeledger.api' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"  # fmt: skip
    assert (Path(nodeledger.__file__).parent / "py.typed").exists()
