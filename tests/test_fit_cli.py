"""`nodeledger fit`: JSON contract, verdicts, suggestions, and bad options (one line, exit 2)."""

from __future__ import annotations

import pytest

from conftest import cli_json, run_cli, shared_models_or_skip


def _one_line_exit_2(proc, expected):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert expected in lines[0], lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ["--job", "serve", "--tp", "2", "--context", "8192", "--concurrency", "4"],
        ["--job", "serve", "--engine", "vllm", "--tp", "2", "--concurrency", "max"],
        ["--job", "train", "--dp", "8", "--shard", "zero3", "--checkpointing", "full"],
        ["--job", "lora", "--rank", "16", "--micro-batch", "2", "--seq", "1024"],
        ["--job", "qlora", "--rank", "8", "--seq", "1024"],
        ["--job", "load", "--ranks", "2"],
    ],
)
def test_fit_json_contract(args):
    d = cli_json("fit", "qwen3-32b", *args)
    card = d["cards"][0]
    assert isinstance(card["torch_peak_bytes"], int) and isinstance(card["total_bytes"], int)
    assert card["total_bytes"] >= card["torch_peak_bytes"] > 0
    assert card["items"] and all({"name", "bytes", "source"} <= set(i) for i in card["items"])
    assert isinstance(d["host"]["peak_bytes"], int) and d["host"]["items"]
    assert d["verdict"]["tier"] in ("fits", "tight", "cannot")
    assert d["verdict"]["binding"] in ("card memory", "host RAM")


def test_32b_full_finetune_alone_cannot_and_sharded_fits():
    alone = cli_json("fit", "qwen3-32b", "--job", "train", "--seq", "2048")
    assert alone["verdict"]["tier"] == "cannot"
    assert alone["verdict"]["binding"] == "card memory"
    assert any("--shard fsdp" in s["change"] and "--precision bf16" in s["change"]
               for s in alone["verdict"]["suggestions"])  # fmt: skip
    # DeepSpeed's ZeRO-3 (18 B per parameter / 8) cannot; pure-bf16 FSDP2 (8 B / 8) can
    z3 = cli_json("fit", "qwen3-32b", "--job", "train", "--dp", "8", "--shard", "zero3",
                  "--checkpointing", "full", "--seq", "2048")  # fmt: skip
    assert z3["verdict"]["tier"] == "cannot"
    assert z3["extras"]["framework"]["framework"] == "deepspeed"
    sharded = cli_json("fit", "qwen3-32b", "--job", "train", "--dp", "8", "--shard", "fsdp",
                       "--precision", "bf16", "--checkpointing", "full", "--seq", "2048")  # fmt: skip
    assert sharded["verdict"]["tier"] in ("fits", "tight")


def test_fit_names_the_framework_and_layout_on_its_first_line():
    p = run_cli("fit", "qwen3-32b", "--job", "train", "--dp", "8", "--shard", "zero3")
    first = p.stdout.replace("\n", " ")
    assert "assumes framework deepspeed (implied by --shard zero3)" in first
    assert "fp32 master weights" in first and "2.25 B of model state per parameter" in first


def test_search_finds_non_power_of_two_dp_and_lists_tight_layouts():
    d = cli_json("fit", "qwen3-32b", "--job", "train", "--search")
    best = d["search"]["best"]
    assert any("--dp 7 " in x["options"] and x["tier"] == "fits" for x in best)
    assert any(x["tier"] == "tight" for x in best)


def test_lora_takes_peft_defaults_and_fused_phi3_names():
    d = cli_json("fit", "qwen3-8b", "--job", "lora")  # rank 8 and q_proj, v_proj: PEFT's
    assert d["extras"]["lora"] == {"targets": ["q_proj", "v_proj"], "targets_source":
                                   "PEFT's default for the model type", "rank": 8,
                                   "adapter_dtype": "fp32"}  # fmt: skip
    phi = shared_models_or_skip() / "Phi-3-mini-4k-instruct"
    ok = cli_json("fit", str(phi), "--job", "lora", "--lora-targets", "qkv_proj,gate_up_proj")
    assert ok["extras"]["lora"]["targets"] == ["qkv_proj", "gate_up_proj"]
    p = run_cli("fit", str(phi), "--job", "lora")  # phi3 is not in PEFT's table: it raises
    assert p.returncode == 2 and "PEFT has no default LoRA target modules" in p.stderr


def test_suggestions_are_rechecked():
    d = cli_json("fit", "qwen3-32b", "--job", "serve", "--context", "32768", "--concurrency", "16")
    assert d["verdict"]["tier"] == "cannot"
    for s in d["verdict"]["suggestions"]:
        assert s["tier"] == "fits"


def test_8b_serving_fits_one_card_of_reference_machine():
    d = cli_json("fit", "qwen3-8b", "--job", "serve", "--context", "8192", "--concurrency", "4")
    assert d["verdict"]["tier"] == "fits"


def test_two_concurrent_62gb_loads_bind_host_ram():
    d = cli_json("fit", "qwen3-32b", "--job", "load", "--ranks", "2")
    assert d["verdict"]["binding"] == "host RAM"
    assert d["verdict"]["tier"] in ("tight", "cannot")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--job", "serve", "--tp", "3"], "--tp 3 does not divide the model's 64 attention heads"),
        (["--job", "serve", "--tp", "16"], "needs 16 cards"),
        (["--job", "train", "--micro-batch", "-2"], "--micro-batch must be > 0"),
        (["--job", "serve", "--rank", "8"], "--rank does not apply to --job serve"),
        (["--job", "serve", "--concurrency", "lots"], "--concurrency must be an integer or 'max'"),
        (["--job", "dance"], "--job 'dance' is not one of"),
        (["--job", "train", "--optimizer", "lion"], "--optimizer 'lion' is not one of"),
        (["--job", "train", "--shard", "zero3"], "--shard zero3 needs --dp > 1"),
        (
            ["--job", "serve", "--context", "100", "--new-tokens", "200"],
            "--new-tokens 200 must be smaller",
        ),
        (["--job", "train", "--dtype", "int4"], "--dtype does not apply to training"),
        (["--job", "serve", "--machine", "nope"], "neither a bundled preset"),
    ],
)
def test_bad_job_options(args, expected):
    _one_line_exit_2(run_cli("fit", "qwen3-32b", *args), expected)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--job", "lora", "--rank", "8", "--lora-targets", "foo"], "matches no linear module"),
        (["--job", "lora", "--rank", "8", "--lora-targets", "q_proj,,v_proj"], "empty module name"),
        (["--engine", "hf", "--max-num-batched-tokens", "100"], "does not apply to --engine hf"),
        (["--engine", "vllm", "--new-tokens", "10"], "does not apply to --engine vllm"),
        (["--lifeboat", "3"], "--lifeboat applies to --search"),
        (["--job", "train", "--prefetch", "4"], "--prefetch needs --workers > 0"),
        (["--job", "train", "--optimizer", "adafactor", "--optimizer-impl", "fused"], "applies to PyTorch's adamw/sgd"),
        (["--job", "train", "--pp", "2", "--dp", "4", "--shard", "zero3"], "pipeline parallelism"),
        (["--job", "load", "--ranks", "9"], "--ranks 9"),
    ],
)  # fmt: skip
def test_more_nonsense_refused(args, expected):
    _one_line_exit_2(run_cli("fit", "qwen3-8b", *args), expected)


def test_unknown_card_memory_gives_no_fits(tmp_path):
    prof = tmp_path / "box.toml"
    assert run_cli("machine", "show", "dgx-h100", "--save", str(prof)).returncode == 0
    text = "\n".join(
        'memory_bytes = "unknown"' if ln.startswith("memory_bytes") else ln
        for ln in prof.read_text().splitlines()
    )
    prof.write_text(text + "\n")
    d = cli_json("fit", "qwen3-32b", "--job", "train", "--machine", str(prof))
    assert d["verdict"]["tier"] == "unknown"
    assert d["extras"] == {} or "largest" not in d["extras"]


def test_search_layouts_really_fit():
    d = cli_json("fit", "qwen3-32b", "--search")
    assert d["search"]["best"]
    for x in d["search"]["best"]:
        again = cli_json("fit", "qwen3-32b", *x["options"].split())
        assert again["verdict"]["tier"] == "fits", x["options"]


@pytest.mark.parametrize(("ranks", "tier"), [(1, "tight"), (2, "cannot")])
def test_host_page_cache_is_evictable(ranks, tier):
    """MISSION.md: a 62 GB checkpoint takes half the host RAM in one copy (tight); two such
    loads at once do not fit 125 GiB.  The evictable page cache is shown, never counted."""
    d = cli_json("fit", "qwen3-32b", "--job", "load", "--ranks", str(ranks))
    host = next(r for r in d["verdict"]["resources"] if r["resource"] == "host RAM")
    assert host["tier"] == tier
    h = d["host"]
    cache = sum(i["bytes"] for i in h["items"] if i["reclaimable"])
    assert h["reclaimable_bytes"] == cache > 60 * 2**30
    assert h["peak_bytes"] == sum(i["bytes"] for i in h["items"] if not i["reclaimable"])


def test_vllm_pool_below_zero_is_zero_with_the_shortfall_named():
    """A 70B model on one 64 GiB card: the fixed parts exceed vLLM's budget.  The JSON never
    prints a negative pool; the shortfall says by how much the budget was missed."""
    d = cli_json("fit", "llama-3.1-70b", "--engine", "vllm")
    assert d["extras"]["kv_pool_bytes"] == 0
    assert "exceed the vLLM budget by" in d["extras"]["kv_shortfall"]
    assert d["verdict"]["tier"] == "cannot"


def test_verdict_line_names_the_default_that_would_flip_it():
    d = cli_json("fit", "qwen3-32b", "--job", "train", "--dp", "8", "--shard", "fsdp",
                 "--checkpointing", "full")  # fmt: skip
    assert d["verdict"]["tier"] == "cannot"  # FSDP2's default: fp32 parameters, 16 B / 8
    assert d["verdict"]["flips"] == ["with --precision bf16: FITS"]
    given = cli_json("fit", "qwen3-32b", "--job", "train", "--dp", "8", "--shard", "fsdp",
                     "--precision", "mixed", "--checkpointing", "full")  # fmt: skip
    assert given["verdict"]["flips"] == []  # a choice the user made is not second-guessed
    serve = cli_json("fit", "qwen3-8b")
    assert any("hf engine at 1 sequence" in f for f in serve["verdict"]["flips"])
