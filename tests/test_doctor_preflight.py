"""doctor --job: pre-flight of one job, go / wait / no-go with reasons — on the reference machine
(no live state: the whole RAM counts as free) and on the fake box of test_doctor.py."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from nodeledger.doctor import preflight
from nodeledger.doctor.preflight import choose_cards
from nodeledger.ledger.jobs import build_job
from nodeledger.machine.profile import Accelerator
from nodeledger.model import load_model
from test_doctor import make_box, state_of

JOB_NONE = dict.fromkeys(
    ("tp", "pp", "dp", "replicas", "dtype", "kv_dtype", "context", "concurrency", "new_tokens",
     "engine", "gpu_memory_utilization", "max_num_batched_tokens", "micro_batch", "seq", "grad_accum",
     "precision", "optimizer", "optimizer_impl", "attention", "checkpointing", "shard", "offload",
     "workers", "prefetch", "rank", "lora_targets", "load_format", "load_strategy", "ranks"))  # fmt: skip


def job(kind: str, **opts):
    return build_job(kind, {**JOB_NONE, **opts})


def levels(res) -> dict[str, str]:
    return {r.topic: r.level for r in res.reasons}


@pytest.mark.parametrize("ranks, verdict, code", [(1, "go", 0), (2, "no-go", 3)])
def test_reference_machine_one_62gb_load_go_two_no_go(ranks, verdict, code):
    proc = run_cli("doctor", "qwen3-32b", "--job", "load", "--ranks", str(ranks),
                   "--machine", "k100-ai-8x64g", "--json")  # fmt: skip
    assert proc.returncode == code, proc.stderr
    d = json.loads(proc.stdout)
    assert (d["verdict"], d["exit_code"], d["machine"]) == (verdict, code, "k100-ai-8x64g")
    assert any("the whole RAM (profile ram_bytes) counts as free" in n for n in d["notes"])
    assert d["host"]["free_bytes"] == d["host"]["ram_bytes"] == 125 * 2**30
    host = next(r for r in d["reasons"] if r["topic"] == "host RAM")
    if ranks == 1:
        # 61.0 GiB state dict + 3 GiB process = 64.0 GiB of 125: tight (above half), still go
        assert (
            host["level"] == "warning"
            and "64.0 GiB at peak" in host["text"]
            and "51 %" in host["text"]
        )
        assert d["cards"]["chosen"] == [{"card": 0, "numa_node": None}] and d["cards"][
            "lifeboat"
        ] == [1]
    else:
        assert host["level"] == "no-go" and "128.0 GiB at peak" in host["text"]
        assert "never run two ~60 GB loads at once" in host["text"]
        # what the host holds instead: one load at a time, or one rank reading
        assert "stagger: at most 1 such load(s) at once (64.0 GiB held at peak)" in d["notes"]
        assert any(n.startswith("or --load-strategy rank0") for n in d["notes"])


def test_default_machine_without_accelerator_is_the_reference_machine():
    proc = run_cli("doctor", "--model", "qwen3-32b", "--job", "load", "--ranks", "2")
    if "live probe of this host" in proc.stdout:
        pytest.skip("this host has accelerators: the live machine is judged")
    assert proc.returncode == 3 and "NO-GO" in proc.stdout and "k100-ai-8x64g" in proc.stdout
    assert "Traceback" not in proc.stderr
    one = run_cli("doctor", "qwen3-32b", "--job", "load")
    assert one.returncode == 0 and "GO (exit 0)" in one.stdout
    assert "NUMA node of the cards unknown" in one.stdout


def test_fake_box_go_picks_a_card_and_its_numa_binding(tmp_path):
    st = state_of(make_box(tmp_path, card_procs=False))
    spec, _ = load_model("qwen3-32b")
    res = preflight(spec, job("load"), st)
    assert res.verdict == "go" and res.exit_code == 0
    assert (
        res.host["free_source"] == "/proc/meminfo MemAvailable"
        and res.host["free_bytes"] == 100 * 2**30
    )
    assert res.cards["chosen"] == [{"card": 0, "numa_node": 0}] and res.cards["lifeboat"] == [1]
    assert res.binding == ["CUDA_VISIBLE_DEVICES=0 numactl --cpunodebind=0 --membind=0 <command>"]
    two = preflight(spec, job("serve", tp=2, context=4096), st, lifeboat=0)
    assert two.verdict == "go" and len(two.binding) == 3 and "span NUMA nodes 0,1" in two.binding[0]
    assert "local rank 1 -> card 1: numactl --cpunodebind=1 --membind=1" in two.binding[2]


def test_fake_box_wait_when_a_big_load_holds_the_ram(tmp_path):
    st = state_of(make_box(tmp_path, card_procs=False, available_gib=40,
                           extra_procs={9000: ("trainer", 80, "0-31")}))  # fmt: skip
    spec, _ = load_model("qwen3-32b")
    res = preflight(spec, job("load"), st)
    assert res.verdict == "wait" and res.exit_code == 1
    host = next(r for r in res.reasons if r.topic == "host RAM")
    assert host.level == "wait" and "64.0 GiB at peak, 40.0 GiB is free now" in host.text
    assert "wait for them to finish" in host.text
    assert "pid 9000 trainer 80.0 GiB" in host.text
    assert res.host["big_processes"][0]["pid"] == 9000


def test_fake_box_wait_for_cards_and_for_the_lifeboat(tmp_path):
    spec, _ = load_model("qwen3-0.6b")
    busy = preflight(spec, job("serve"), state_of(make_box(tmp_path / "a")))
    assert busy.verdict == "wait" and levels(busy)["cards"] == "wait"
    assert (
        "needs 1 cards, 0 free now" in busy.reasons[-1].text and "pid 4242" in busy.reasons[-1].text
    )
    r = make_box(tmp_path / "b")
    (tmp_path / "b/apps.csv").write_text("00000000:18:00.0, 4242, /usr/bin/python3, 20000\n")
    (tmp_path / "b/query.csv").write_text(
        (tmp_path / "b/query.csv").read_text().replace(", 30720,", ", 0,")
    )
    one_free = preflight(spec, job("serve"), state_of(r))
    assert one_free.verdict == "wait" and "takes the lifeboat card" in one_free.reasons[-1].text
    assert preflight(spec, job("serve"), state_of(r), lifeboat=0).verdict == "go"


def test_fake_box_offload_dataloader_and_swap_warnings(tmp_path):
    st = state_of(make_box(tmp_path, card_procs=False, swap_used=True, available_gib=30))
    spec, _ = load_model("qwen3-0.6b")
    res = preflight(spec, job("train", dp=2, shard="zero3", offload="optimizer", workers=16,
                              prefetch=8, micro_batch=4), st, lifeboat=0)  # fmt: skip
    lv = levels(res)
    assert (
        lv["CPU offload"] == "warning" and lv["dataloader"] == "warning" and lv["swap"] == "warning"
    )
    assert res.verdict == "go"  # warnings ride along
    text = " ".join(r.text for r in res.reasons)
    assert (
        "on a 128.0 GiB host" in text
        and "fewer --workers" in text
        and "2.0 GiB of swap in use" in text
    )


def test_fake_box_cannot_is_no_go_even_with_free_ram(tmp_path):
    st = state_of(make_box(tmp_path, card_procs=False))
    spec, _ = load_model("qwen3-32b")
    res = preflight(spec, job("train", dp=2, shard="zero3", offload="optimizer"), st, lifeboat=0)
    assert res.verdict == "no-go" and levels(res)["host RAM"] == "no-go"
    assert levels(res)["CPU offload"] == "no-go"


def _card(i: int, numa: int | None) -> Accelerator:
    return Accelerator(index=i, vendor="nvidia", product="x", numa_node=numa)


def test_choose_cards_packs_numa_nodes():
    cards = [_card(i, i // 2) for i in range(8)]
    free = cards[1:]  # card 0 busy: NUMA 0 has one free card left
    assert [a.index for a in choose_cards(free, 2)] == [2, 3]  # a whole node, not 1 + 2
    assert [a.index for a in choose_cards(free, 1)] == [1]  # the node with the fewest free cards
    assert [a.index for a in choose_cards(free, 3)] == [2, 3, 4]
    assert [a.index for a in choose_cards([_card(0, None), _card(1, 0)], 2)] == [1, 0]


def test_preflight_terminal_output():
    proc = run_cli(
        "doctor", "qwen3-32b", "--job", "load", "--ranks", "2", "--machine", "k100-ai-8x64g"
    )
    assert proc.returncode == 3 and "NO-GO" in proc.stdout and "host RAM" in proc.stdout
    assert "note: free host RAM" in proc.stdout and proc.stderr == ""
