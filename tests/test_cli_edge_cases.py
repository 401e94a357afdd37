"""CLI edge cases across commands (watch replays, golive plans, rich markup in tool text, -o
files, pre-flight, parse --help, bench --cards): each is one clear line and exit 2 (or a note),
never an internal error, and nothing already collected is lost."""

from __future__ import annotations

import gzip
import json

from conftest import FIXTURES, run_cli

STREAMS = FIXTURES / "watch"


def test_replay_non_utf8_file_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bin.jsonl"
    bad.write_bytes(b"\xff\xfe\x80 not a stream\n")
    proc = run_cli("watch", "--replay", str(bad))
    assert proc.returncode == 2, proc.stderr
    assert "not a nodeledger watch stream" in proc.stderr and "internal error" not in proc.stderr


def test_replay_directory_is_named_as_one(tmp_path):
    proc = run_cli("watch", "--replay", str(tmp_path))
    assert proc.returncode == 2 and "is a directory" in proc.stderr


def test_replay_truncated_gzip_keeps_the_samples_read(tmp_path):
    raw = (STREAMS / "dead-owner.jsonl.gz").read_bytes()
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(raw[: len(raw) // 2])  # the watch was killed while writing
    with gzip.open(STREAMS / "dead-owner.jsonl.gz", "rt") as f:
        total = sum(1 for _ in f) - 1
    proc = run_cli("watch", "--replay", str(cut), "--json")
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert 0 < d["samples"] < total
    assert any("ends early" in n for n in d["notes"])


def test_golive_bad_plan_is_bad_input_even_without_cards(tmp_path):
    bad = tmp_path / "plan.toml"
    bad.write_text("x = [")
    # this host has no accelerator, so the plan step itself cannot run: the plan is still read
    proc = run_cli("golive", "--plan", str(bad), "--state", str(tmp_path / "s.sqlite"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not valid TOML" in proc.stderr and proc.stderr.count("\n") == 1


def test_brackets_in_notes_print_and_in_ids_are_refused(tmp_path):
    # the probe's NVML note names the extra: "pip install 'nodeledger[nvidia]'"
    proc = run_cli("machine", "show", "probe", env={"PATH": "/nonexistent"})
    assert proc.returncode == 0, proc.stderr
    if "nvidia-ml-py not installed" in proc.stdout:
        assert "nodeledger[nvidia]" in proc.stdout
    plan = tmp_path / "w.toml"
    plan.write_text(
        '[[workloads]]\nid = "x[bold]"\ntitle = "t"\nmodel = "qwen3-8b"\njob = "serve"\n'
    )
    # ids become file names and script lines, so brackets are refused there (one line, exit
    # 2, the id named as written), never eaten as markup
    for argv in (["report", "--machine", "dgx-h100", "--workloads", str(plan)],
                 ["place", str(plan), "--machine", "dgx-h100"]):  # fmt: skip
        proc = run_cli(*argv)
        assert proc.returncode == 2 and "'x[bold]'" in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_terminal_format_output_file(tmp_path):
    out = tmp_path / "cmp.txt"
    proc = run_cli("compare", "dgx-h100", "hgx-h200", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.is_file() and "Workloads" in out.read_text() and "Workloads" not in proc.stdout
    for cmd in (["report", "--machine", "dgx-h100"], ["compare", "dgx-h100", "hgx-h200"]):
        bad = run_cli(*cmd, "-o", str(tmp_path))  # a directory: one line, exit 2 (was exit 70)
        assert bad.returncode == 2, bad.stderr
        assert "cannot write" in bad.stderr and "internal error" not in bad.stderr


def test_preflight_with_more_cards_than_the_machine_is_no_go_not_bad_input():
    # preflight's own rule: "no-go ... it needs more cards than the machine has" (exit 3)
    proc = run_cli("doctor", "qwen3-32b", "--job", "serve", "--tp", "16", "--machine", "dgx-h100",
                   "--json")  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    d = json.loads(proc.stdout)
    assert d["verdict"] == "no-go" and d["reasons"][0]["topic"] == "cards"
    assert "needs 16 cards, the machine has 8" in d["reasons"][0]["text"]
    # the model's own limit stays bad input
    bad = run_cli("doctor", "qwen3-32b", "--job", "serve", "--tp", "3", "--machine", "dgx-h100")
    assert bad.returncode == 2 and "does not divide" in bad.stderr


def test_fit_names_the_config_dtype_instead_of_none():
    proc = run_cli("fit", "qwen3-8b", "--job", "serve", "--machine", "dgx-h100")
    assert proc.returncode == 0, proc.stderr
    assert "dtype=None" not in proc.stdout and "dtype=bf16" in proc.stdout
    d = json.loads(run_cli("fit", "qwen3-8b", "--job", "load", "--json").stdout)
    assert d["job_options"]["dtype"] == "bf16"
    assert "torch_dtype" in d["job_options"]["dtype_source"]


def test_parse_help_lists_every_kind():
    from nodeledger.machine.parsers import PARSERS

    proc = run_cli("parse", "--help", env={"COLUMNS": "400"})
    assert proc.returncode == 0
    missing = [k for k in PARSERS if k not in proc.stdout]
    assert not missing, missing


def test_context_beyond_max_position_embeddings_is_refused():
    proc = run_cli("fit", "qwen3-0.6b", "--context", "1000000000000000000000")
    assert proc.returncode == 2 and "max_position_embeddings" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_query_csv_without_card_rows_is_refused(tmp_path):
    f = tmp_path / "q.csv"
    f.write_text("garbage\n")
    proc = run_cli("parse", "nvidia-smi-query-csv", str(f))
    assert proc.returncode == 2 and "no card rows" in proc.stderr


def test_bench_cards_named_twice():
    proc = run_cli("bench", "--cards", "0,0", "--quick")
    assert proc.returncode == 2 and "named twice" in proc.stderr


def test_brackets_in_a_path_never_crash_the_terminal_output(tmp_path):
    """rich reads "[/x]" as a closing tag: a config under such a folder printed exit 70."""
    d = tmp_path / "[/x]"
    d.mkdir(parents=True)
    cfg = d / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                               "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100}))  # fmt: skip
    for args in (("model", "show", str(cfg)), ("fit", str(cfg))):
        proc = run_cli(*args)
        assert proc.returncode == 0, proc.stderr
        assert "[/x]" in proc.stdout and "[bold]" not in proc.stdout


def test_exporter_refuses_a_negative_tolerance_like_watch():
    for cmd in (("watch", "--backend", "fake:fsdp-sharded", "--samples", "1"),
                ("exporter", "--backend", "fake:fsdp-sharded", "--duration", "1")):  # fmt: skip
        proc = run_cli(*cmd, "--tolerance", "-0.5")
        assert (
            proc.returncode == 2 and "--tolerance and --tolerance-gib must be >= 0" in proc.stderr
        )


def test_a_huge_word_in_a_recorded_output_is_shortened_not_wrapped(tmp_path):
    """A 20,000-character word in a topo -m header became a NIC name that rich spent seconds
    wrapping; the terminal cell now shows 40 characters and the count."""
    src = next((FIXTURES / "h200").glob("*topo*"))
    lines = src.read_text().splitlines()
    head = next(i for i, line in enumerate(lines) if "GPU0" in line)
    lines[head] += "\tNIC" + "X" * 20000
    f = tmp_path / "topo.txt"
    f.write_text("\n".join(lines) + "\n")
    proc = run_cli("parse", "nvidia-smi-topo", str(f))
    assert proc.returncode == 0, proc.stderr
    assert "X" * 20000 not in proc.stdout and "characters)" in proc.stdout
