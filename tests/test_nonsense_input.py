"""Nonsense input is one line and exit 2, never a price: absurd sizes, typos in catalogue
keys (with the file, the line and the closest key), --save suffixes, ports, --online without
a Hub."""

from __future__ import annotations

import pytest

from conftest import run_cli


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["fit", "qwen3-8b", "--concurrency", "1000000000000"], "check --concurrency / --context"),
        (["fit", "qwen3-8b", "--job", "train", "--micro-batch", "10000000000000"],
         "check --micro-batch / --seq"),
        (["fit", "qwen3-8b", "--job", "lora", "--rank", "100000000"], "check --rank"),
    ],
)  # fmt: skip
def test_absurd_sizes_are_refused_not_priced(args, needle):
    p = run_cli(*args)
    assert p.returncode == 2 and needle in p.stderr and "100 k100-ai-8x64g machines" in p.stderr
    assert "Traceback" not in p.stderr


def test_large_but_real_concurrency_is_still_priced():
    p = run_cli("fit", "qwen3-8b", "--concurrency", "5000")
    assert p.returncode == 3 and "CANNOT" in p.stdout


def test_catalogue_typo_names_file_line_and_the_closest_key(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(
        '# ours\n[[workloads]]\nid = "a"\nmodel = "qwen3-8b"\njob = "serve"\nreplcas = 2\n'
    )
    p = run_cli("report", "--workloads", str(plan))
    assert p.returncode == 2
    assert f"{plan}:6: workload 'a': unknown key 'replcas'; did you mean replicas?" in p.stderr


def test_save_refuses_a_suffix_it_cannot_read_back(tmp_path):
    p = run_cli("machine", "show", "dgx-h100", "--save", str(tmp_path / "x.yaml"))
    assert p.returncode == 2 and "written as .toml or .json, not .yaml" in p.stderr
    assert not (tmp_path / "x.yaml").exists()


def test_listen_port_out_of_range():
    p = run_cli("exporter", "--listen", "127.0.0.1:70000")
    assert p.returncode == 2 and "port 70000 is outside 1-65535" in p.stderr


def test_online_without_a_hub_is_told_before_any_download():
    """The reachability check answers before huggingface_hub's retries (its message, not the
    download's, is the one line)."""
    env = {"HF_ENDPOINT": "http://127.0.0.1:9"}
    p = run_cli("fit", "some-org/no-such-model", "--online", env=env)
    assert p.returncode == 2 and "the Hub is not reachable (127.0.0.1:9" in p.stderr
