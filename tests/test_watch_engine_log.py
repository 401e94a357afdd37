"""watch --engine-log: a running server's start-up KV pool against the plan's."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, run_cli
from nodeledger.files import read_log_ends
from nodeledger.watch.engine_log import kv_pool_finding, kv_pool_summary

LOG = ROOT / "benchmarks" / "engines" / "logs" / "vllm-0.11.2-llama3-8b-h200-tp1.txt"
JOB = ("--backend", "fake:dead-owner", "--samples", "2", "--job", "serve", "--engine", "vllm",
       "--model", "llama-3.1-8b", "--context", "1024", "--machine", "hgx-h200")  # fmt: skip


def _check(engine_tokens, plan_tokens):
    return {"engine": "vllm", "version": "0.11.2", "look_first": None, "launch_differences": [],
            "rows": [{"term": "kv_tokens", "engine": engine_tokens, "ledger": plan_tokens},
                     {"term": "kv_cache_gib", "engine": None, "ledger": 10.0}]}  # fmt: skip


def test_a_pool_within_tolerance_is_no_finding_and_one_beyond_is():
    assert kv_pool_finding(_check(95_000, 100_000), [0], 0.1) is None
    f = kv_pool_finding(_check(80_000, 100_000), [0, 1], 0.1)
    assert f["rule"] == "engine pool vs plan" and f["cards"] == [0, 1]
    assert "20% smaller" in f["message"] and "80,000 tokens" in f["message"]
    assert "larger" in kv_pool_finding(_check(130_000, 100_000), [0], 0.1)["message"]
    # nothing printed yet: no finding, and the summary says why
    none = _check(None, 100_000)
    assert kv_pool_finding(none, [0], 0.1) is None
    assert "no KV-cache line yet" in kv_pool_summary(none, "x.log", False)["notes"][0]


def test_watch_checks_the_servers_pool_against_the_plan():
    p = run_cli("watch", *JOB, "--engine-log", str(LOG), "--json")
    assert p.returncode == 0, p.stderr
    el = json.loads(p.stdout)["engine_log"]
    assert el["pool_tokens"]["engine"] == 868_080
    assert el["pool_tokens"]["plan"] == pytest.approx(868_080, rel=0.02)
    assert el["version"] == "0.11.2"
    # the same server against a plan made for 60 % of the card: the pool is far larger -> exit 3
    p = run_cli("watch", *JOB, "--gpu-memory-utilization", "0.6", "--engine-log", str(LOG))
    assert p.returncode == 3
    assert "engine pool vs plan" in p.stderr and "larger than the plan" in p.stdout


def test_a_replay_checks_the_log_on_the_recordings_machine(tmp_path):
    # recorded with --machine hgx-h200, replayed without --machine: the watch's plan is made
    # on the recording's profile, and so is the plan the engine log is set beside
    rec = tmp_path / "rec.jsonl"
    p = run_cli("watch", *JOB, "--record", str(rec), "--json")
    assert p.returncode == 0, p.stderr
    job = [a for a in JOB[4:] if a not in ("--machine", "hgx-h200")]
    p = run_cli("watch", "--replay", str(rec), *job, "--engine-log", str(LOG), "--json")
    assert p.returncode == 0, p.stderr
    el = json.loads(p.stdout)["engine_log"]
    assert el["pool_tokens"]["plan"] == pytest.approx(868_080, rel=0.02)


def test_engine_log_bad_input_is_one_line_before_watching(tmp_path):
    for extra, needle in (
        (("--engine-log", str(tmp_path / "missing.log")), "no such file"),
        (("--engine-log", str(tmp_path)), "is a folder"),
    ):
        p = run_cli("watch", *JOB, *extra)
        assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr
    p = run_cli("watch", "--backend", "fake:dead-owner", "--samples", "2", "--job", "serve",
                "--model", "llama-3.1-8b", "--engine-log", str(LOG))  # fmt: skip
    assert p.returncode == 2 and "--engine vllm|sglang" in p.stderr


def test_a_log_without_startup_lines_keeps_the_watch(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("INFO starting\n")
    p = run_cli("watch", *JOB, "--engine-log", str(log), "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["samples"] == 2  # what the watch collected is kept
    assert "could not be used" in d["engine_log"]["notes"][0]


def test_a_large_log_is_read_at_both_ends_only(tmp_path):
    log = tmp_path / "big.log"
    with log.open("w") as fh:
        fh.write("INFO start\n")
        fh.write("INFO request ok\n" * 100_000)  # ~1.6 MB of request lines
        fh.write("INFO 01-01 gpu_worker.py:1] Available KV cache memory: 12.5 GiB\n")
    text, cut = read_log_ends(str(log), "log", end_bytes=64 * 1024)
    assert cut and len(text) <= 2 * 64 * 1024 + 1
    assert text.startswith("INFO start") and text.rstrip().endswith("12.5 GiB")
    small, cut = read_log_ends(str(log), "log", end_bytes=4 * 1024 * 1024)
    assert not cut and small.count("\n") == 100_002
