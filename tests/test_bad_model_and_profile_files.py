"""Bad model configs, safetensors headers and indexes, machine profiles and save paths: each is one line on stderr and exit 2, and defaults the ledger used are reported, never silent."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES, cli_json, run_cli


def _one_line_exit_2(proc, expected=""):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert expected in lines[0], lines[0]


def test_deeply_nested_json_config(tmp_path):
    f = tmp_path / "config.json"
    f.write_text("[" * 100000 + "]" * 100000)
    _one_line_exit_2(run_cli("model", "show", str(f)), "nested too deeply")


def test_binary_config_and_profile(tmp_path):
    f = tmp_path / "config.json"
    f.write_bytes(bytes(range(256)) * 3)
    _one_line_exit_2(run_cli("model", "show", str(f)), "cannot read config")
    g = tmp_path / "box.toml"
    g.write_bytes(bytes(range(128, 256)) * 3)
    _one_line_exit_2(run_cli("machine", "show", str(g)), "not a text file")


def test_deeply_nested_profile(tmp_path):
    f = tmp_path / "box.json"
    f.write_text('{"x": ' + "[" * 100000 + "]" * 100000 + "}")
    _one_line_exit_2(run_cli("machine", "show", str(f)), "nested too deeply")


@pytest.mark.parametrize(
    "entry",
    [
        {"dtype": "BF16", "shape": ["x"], "data_offsets": [0, 2]},
        {"dtype": "BF16", "shape": 5, "data_offsets": [0, 2]},
        {"dtype": "BF16", "shape": [1], "data_offsets": ["a", "b"]},
        {"dtype": {"a": 1}, "shape": [1], "data_offsets": [0, 2]},
        {"dtype": "BF16", "shape": [1], "data_offsets": [10, 2]},
        "nonsense",
    ],
)
def test_malformed_safetensors_entries(tmp_path, entry):
    cfg = (FIXTURES / "configs" / "tiny-gemma" / "config.json").read_text()
    (tmp_path / "config.json").write_text(cfg)
    header = json.dumps({"w": entry}).encode()
    (tmp_path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    _one_line_exit_2(run_cli("model", "show", str(tmp_path)), "malformed header entry")


@pytest.mark.parametrize(
    "index", [{"metadata": {"total_size": -5}}, {"metadata": {"total_size": 1}, "weight_map": 5}]
)
def test_bad_index(tmp_path, index):
    cfg = (FIXTURES / "configs" / "tiny-gemma" / "config.json").read_text()
    (tmp_path / "config.json").write_text(cfg)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    _one_line_exit_2(run_cli("model", "show", str(tmp_path)), "total_size")


def test_layer_types_entries_checked(tmp_path):
    cfg = {
        "model_type": "gpt_oss", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 32, "num_local_experts": 4,
        "num_experts_per_tok": 2, "vocab_size": 100, "layer_types": ["full", "full_attention"],
    }  # fmt: skip
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    _one_line_exit_2(run_cli("model", "show", str(f)), "layer_types has entries ['full']")


PROFILE_HEAD = 'name = "x"\n'
CARD = '[[accelerators]]\nindex = {i}\nvendor = "nvidia"\nproduct = "A"\n'


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (CARD.format(i=0) + "memory_bytes = true\n", "accelerators.0.memory_bytes"),
        (CARD.format(i=0) + "memory_bandwidth_gbps = inf\n", "infinity"),
        (CARD.format(i=0) + CARD.format(i=1)
         + '[[interconnect.pairs]]\na = 0\nb = 1\nkind = "nvlink"\n'
         + '[[interconnect.pairs]]\na = 1\nb = 0\nkind = "sys"\n', "listed twice"),
        ("[host]\ncores = 8\nthreads = 4\n", "logical CPUs < 8 cores"),
        ("[[host.numa_nodes]]\nid = 0\n[[host.numa_nodes]]\nid = 0\n", "ids repeat"),
        (CARD.format(i=0) + CARD.format(i=0), "indices repeat"),
        (CARD.replace("{i}", "true"), "accelerators.0.index"),
    ],
)  # fmt: skip
def test_bad_profiles(tmp_path, body, expected):
    f = tmp_path / "box.toml"
    f.write_text(PROFILE_HEAD + body)
    _one_line_exit_2(run_cli("machine", "show", str(f)), expected)


def test_save_to_bad_paths(tmp_path):
    _one_line_exit_2(run_cli("machine", "show", "--save", ""), "--save needs a file name")
    _one_line_exit_2(
        run_cli("machine", "show", "--save", str(tmp_path / "no" / "such" / "dir.toml")),
        "cannot write machine profile",
    )


@pytest.mark.parametrize("ref", ["", "../", "a/b/c", "/"])
def test_odd_model_refs(ref):
    proc = run_cli("model", "show", ref)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_defaults_are_reported_not_silent(tmp_path):
    cfg = {"model_type": "gemma2", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 256}  # fmt: skip
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    data = cli_json("model", "show", str(f))
    assert data["kv"]["sliding_window"] == 4096
    assert data["architecture"]["attention_layers"] == {"sliding": 2, "full": 2}
    assert any("sliding_window=4096" in n for n in data["notes"])


def test_gpt_oss_active_conventions():
    data = cli_json("model", "show", "openai/gpt-oss-120b")
    # OpenAI's model card: 5.1B active parameters per token (input embeddings not counted)
    assert data["params"]["active_non_embedding"] == 5_132_849_472
    assert data["params"]["active"] - data["params"]["active_non_embedding"] == 201088 * 2880
