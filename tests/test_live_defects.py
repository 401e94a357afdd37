"""Defects a user hit first on live boxes (issue 27, "Live machines"), each checked from the
user's side: the command, its exit code and the line it prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli


@pytest.fixture(scope="module")
def one_card(tmp_path_factory) -> str:
    """A one-card workstation: the H200 preset cut to its first card."""
    d = tmp_path_factory.mktemp("one")
    full = d / "h200.json"
    proc = run_cli("machine", "show", "hgx-h200", "--save", str(full))
    assert proc.returncode == 0, proc.stderr
    prof = json.loads(full.read_text())
    prof["accelerators"] = prof["accelerators"][:1]
    prof["name"] = "one-h200"
    if prof.get("interconnect"):
        prof["interconnect"]["pairs"] = []
    out = d / "one.json"
    out.write_text(json.dumps(prof))
    return str(out)


@pytest.fixture(scope="module")
def plan(tmp_path_factory) -> str:
    p = tmp_path_factory.mktemp("plan") / "plan.toml"
    p.write_text('[[workloads]]\nid = "chat"\nmodel = "qwen3-8b"\njob = "serve"\n')
    return str(p)


ONE_CARD = "this machine has 1 card: no lifeboat card can be kept free"


def test_one_card_report_is_judged_and_says_there_is_no_lifeboat_once(one_card):
    proc = run_cli("report", "--machine", one_card, "--no-fail")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count(ONE_CARD) == 1
    assert "(lifeboat: 0 of 1 cards kept free)" in " ".join(proc.stdout.split())
    data = json.loads(run_cli("report", "--machine", one_card, "--format", "json").stdout)
    assert data["serving"]["lifeboat"] == 0 and ONE_CARD in data["serving"]["lifeboat_note"]


def test_one_card_place_places_on_the_card(one_card, plan):
    proc = run_cli("place", plan, "--machine", one_card, "--json")
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert [r["cards"] for r in res["replicas"]] == [[0]] and res["lifeboat"] == []
    assert any(ONE_CARD in n for n in res["notes"])


def test_one_card_explicit_lifeboat_is_still_bad_input(one_card, plan):
    proc = run_cli("place", plan, "--machine", one_card, "--lifeboat", "1")
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("leave at least one of the machine's 1 card")


def test_one_card_doctor_preflight_goes_with_a_note(one_card):
    proc = run_cli("doctor", "qwen3-8b", "--job", "serve", "--machine", one_card, "--json")
    data = json.loads(proc.stdout)
    cards = next(r for r in data["reasons"] if r["topic"] == "cards")
    assert cards["level"] == "ok" and "one-card machine" in cards["text"]
    assert any(ONE_CARD in n for n in data["notes"])


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_engine_budget_is_not_judged_against_the_90_percent_line(engine):
    """vLLM takes 0.92 of the card by design: a 0.6B model at one sequence fits (was TIGHT,
    exit 1, on every vLLM job); the verdict line names the budget it judged inside."""
    proc = run_cli("fit", "qwen3-0.6b", "--job", "serve", "--engine", engine,
                   "--machine", "dgx-h100")  # fmt: skip
    assert proc.returncode == 0, proc.stdout
    assert "FITS" in proc.stdout and "by design" in proc.stdout
    assert "of its KV pool" in proc.stdout


def test_engine_pool_nearly_full_is_tight_and_over_it_cannot():
    def tier(conc: str) -> tuple[str, int]:
        proc = run_cli("fit", "qwen3-8b", "--job", "serve", "--engine", "vllm", "--machine",
                       "dgx-h100", "--concurrency", conc, "--json")  # fmt: skip
        return json.loads(proc.stdout)["verdict"]["tier"], proc.returncode

    most = json.loads(run_cli("fit", "qwen3-8b", "--job", "serve", "--engine", "vllm",
                              "--machine", "dgx-h100", "--json").stdout)  # fmt: skip
    fit_seqs = most["extras"]["max_concurrency"]
    assert tier("1") == ("fits", 0)
    assert tier(str(fit_seqs)) == ("tight", 1)
    assert tier(str(fit_seqs + 2)) == ("cannot", 3)
    assert tier("max") == ("fits", 0)  # the most that fit, by construction


def test_fit_prints_the_engine_figures_readably_not_a_python_dict():
    proc = run_cli("fit", "qwen3-0.6b", "--job", "serve", "--engine", "vllm", "--machine",
                   "hgx-h200")  # fmt: skip
    assert "{'" not in proc.stdout and "{'name': 'vllm'" not in proc.stdout
    assert "gpu memory utilization 0.92" in proc.stdout
    assert "budget 129.17 GiB" in proc.stdout


@pytest.mark.parametrize(("engine", "version"), [("vllm", "99.0"), ("sglang", "9.1")])
def test_a_release_newer_than_any_read_is_said_in_the_verdict_line(engine, version):
    proc = run_cli("fit", "qwen3-8b", "--job", "serve", "--engine", engine, "--engine-version",
                   version, "--machine", "dgx-h100", "--json")  # fmt: skip
    data = json.loads(proc.stdout)
    said = [f for f in data["verdict"]["flips"] if "newer than the newest release" in f]
    assert said and f" {version} is newer" in said[0] and "modelled as" in said[0]
    known = run_cli("fit", "qwen3-8b", "--job", "serve", "--engine", engine, "--machine",
                    "dgx-h100", "--json")  # fmt: skip
    assert not any("newer than" in f for f in json.loads(known.stdout)["verdict"]["flips"])


def test_fit_search_exits_by_the_best_layout_it_found():
    """The job as given cannot (32B full fine-tune on one card's worth of DDP), the search finds
    layouts that fit: exit 0, and the last line says why."""
    proc = run_cli("fit", "qwen3-32b", "--job", "train", "--machine", "dgx-h100", "--search")
    assert proc.returncode == 0
    assert "The exit code follows it (fits); the job as given is CANNOT" in " ".join(
        proc.stdout.split()
    )
    plain = run_cli("fit", "qwen3-32b", "--job", "train", "--machine", "dgx-h100")
    assert plain.returncode == 3


def test_an_option_of_another_job_is_named_as_the_user_typed_it():
    proc = run_cli("fit", "qwen3-8b", "--job", "qlora", "--format", "bin")
    assert proc.returncode == 2
    assert "--format does not apply to --job qlora" in proc.stderr
    assert "--load-format" not in proc.stderr


def test_speed_never_decodes_more_sequences_than_the_kv_pool_holds():
    """Issue 28's first mechanism: 500 clients on Qwen3-32B at 2,100 tokens, one H100: the
    ledger's pool holds a few sequences, and the speed section decodes that batch, not 500."""
    proc = run_cli("fit", "qwen3-32b", "--job", "serve", "--engine", "vllm", "--machine",
                   "dgx-h100", "--context", "2100", "--concurrency", "500", "--json")  # fmt: skip
    d = json.loads(proc.stdout)
    most = d["extras"]["largest"]["max_concurrency_at_context"]
    assert 0 < most < 500
    sp = d["speed"]
    assert sp["concurrency"] == most and sp["batch_capped"]["asked"] == 500
    assert sp["batch_capped"]["batch"] == most


def test_machine_show_fills_a_probed_card_from_the_datasheet_with_its_source(one_card, tmp_path):
    """A probed H200 showed bandwidth and peaks as unknown although the hardware data has them
    (issue 29): they are shown, marked as the datasheet's, with the datasheet named."""
    prof = json.loads(Path(one_card).read_text())
    keys = ("memory_bandwidth_gbps", "bf16_dense_tflops", "fp8_dense_tflops", "int8_dense_tops")
    for a in prof["accelerators"]:
        for k in keys:
            a[k] = None
            a["sources"].pop(k, None)
    f = tmp_path / "probed.json"
    f.write_text(json.dumps(prof))
    proc = run_cli("machine", "show", str(f))
    assert proc.returncode == 0, proc.stderr
    assert "4,800 GB/s (datasheet)" in proc.stdout and "989.5 TFLOPS (datasheet)" in proc.stdout
    assert (
        "datasheet: h200" in proc.stdout and "NVIDIA H200 Tensor Core GPU datasheet" in proc.stdout
    )
    data = json.loads(run_cli("machine", "show", str(f), "--json").stdout)
    bw = data["card_figures"]["0"]["memory_bandwidth_gbps"]
    assert bw["value"] == 4800 and bw["unit"] == "GB/s" and "datasheet" in bw["source"]
    # a card nothing knows stays unknown, with the reason
    k100 = json.loads(run_cli("machine", "show", "k100-ai-8x64g", "--json").stdout)
    assert k100["card_figures"]["0"]["bf16_dense_tflops"]["value"] is None


def test_one_card_search_says_there_is_no_lifeboat(one_card):
    proc = run_cli("fit", "qwen3-8b", "--job", "serve", "--machine", one_card, "--search")
    assert ONE_CARD in " ".join(proc.stdout.split())
