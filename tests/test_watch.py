"""watch: replays of the recorded streams (tests/fixtures/watch/) are diagnosed correctly;
verify and idle rules at their thresholds; the CLI's exit codes."""

from __future__ import annotations

import gzip
import json

import pytest

from conftest import FIXTURES
from nodeledger.cli import main
from nodeledger.watch import analyze as A
from nodeledger.watch.analyze import Analyzer
from nodeledger.watch.fake import SCENARIOS, record_scenario
from nodeledger.watch.record import read_stream

GiB = 2**30
STREAMS = FIXTURES / "watch"
FSDP = ["--model", "qwen3-32b", "--job", "train", "--dp", "8", "--shard", "fsdp",
        "--precision", "bf16", "--checkpointing", "full"]  # fmt: skip


def replay(name: str, *args: str, capsys) -> tuple[int, dict]:
    code = main(["watch", "--replay", str(STREAMS / f"{name}.jsonl.gz"), "--json", *args])
    out = capsys.readouterr().out
    return code, json.loads(out)


# -- the four must-show streams (and the extra-contexts one) ----------------------------------


def test_sharded_fsdp_passes(capsys):
    code, s = replay("fsdp-sharded", capsys=capsys)
    assert code == 0 and s["exit_code"] == 0
    assert s["verify"] == {"status": "passed", "findings": []}
    assert s["idle"] == []
    pred = s["cards"][0]["predicted_bytes"]
    assert 51 * GiB < pred < 52.5 * GiB  # the ledger's 51.8 GiB busiest card
    for c in s["cards"]:  # every card near its sharded share
        assert 0.9 * pred < c["peak_bytes"] <= pred


def test_same_job_with_sharding_silently_off_fails(capsys):
    code, s = replay("fsdp-unsharded", capsys=capsys)
    assert code == 3 and s["verify"]["status"] == "failed"
    first = s["verify"]["findings"][0]
    assert first["rule"] == "sharding not happening" and first["cards"] == [0]
    n = first["numbers"]
    assert n["peak_bytes"] >= A.SHARD_FULL * min(n["unsharded_bytes"], n["card_bytes"])
    assert n["others_max_bytes"] <= A.SHARD_OTHERS * n["sharded_bytes"]
    assert "62.5 GiB" in first["message"] and "1.3 GiB" in first["message"]
    above = [f for f in s["verify"]["findings"] if f["rule"] == "above plan"]
    assert [f["cards"] for f in above] == [[0]]
    # the seven waiting cards are idle, and the reason is the failed verification
    idle = {f["card"]: f for f in s["idle"]}
    assert sorted(idle) == [1, 2, 3, 4, 5, 6, 7]
    assert all(f["likely_cause"].startswith("its job fails verification") for f in idle.values())


def test_same_verdict_from_the_job_given_on_the_command_line(capsys):
    code, s = replay("fsdp-unsharded", *FSDP, "--machine", "k100-ai-8x64g", capsys=capsys)
    assert code == 3 and s["verify"]["findings"][0]["rule"] == "sharding not happening"
    code, s = replay("fsdp-sharded", *FSDP, capsys=capsys)
    assert code == 0 and s["verify"]["status"] == "passed"


def test_idle_card_with_a_dead_owner(capsys):
    code, s = replay("dead-owner", capsys=capsys)
    assert code == 0 and s["verify"]["status"] == "not asked"
    assert [(f["card"], f["kind"]) for f in s["idle"]] == [(5, "owner dead")]
    f = s["idle"][0]
    assert "2105 (python)" in f["message"] and "20.3 GiB" in f["message"]
    assert "OOM killer" in f["likely_cause"]  # host RAM ran out just before it died
    # card 7's short jobs (a new pid every 15 s) are not dead owners
    assert len(next(c for c in s["cards"] if c["index"] == 7)["owners"]) >= 5
    code, _ = replay("dead-owner", "--fail-on-idle", capsys=capsys)
    assert code == 5


def test_remote_numa_dataloader(capsys):
    code, s = replay("remote-numa", capsys=capsys)
    assert code == 0
    assert [(f["card"], f["kind"]) for f in s["idle"]] == [(3, "held, low activity")]
    cause = s["idle"][0]["likely_cause"]
    assert cause.startswith("remote NUMA: pid 3003")
    assert "CPUs 12-23 (NUMA node 1)" in cause and "card 3 sits on node 3" in cause
    assert "children (DataLoader workers) run remote" in cause
    assert "--cpunodebind=3 --membind=3" in cause


def test_extra_contexts_on_card_0(capsys):
    code, s = replay("extra-contexts", capsys=capsys)
    assert code == 3
    [f] = s["verify"]["findings"]
    assert f["rule"] == "extra contexts" and f["cards"] == [0]
    assert f["numbers"]["pids"] == [5001, 5002, 5003, 5004, 5005, 5006, 5007]
    assert f["numbers"]["total_bytes"] == 7 * GiB // 2


def test_fixtures_are_what_the_scenarios_record(tmp_path):
    """The checked-in streams are reproducible from watch/fake.py (stale fixtures fail here).
    The header's plan is the ledger's figure at recording time and may drift with the ledger:
    it is left out of the comparison (the tests above also recompute it from --job)."""
    for name in SCENARIOS:
        out = tmp_path / f"{name}.jsonl.gz"
        record_scenario(name, out)
        (h1, s1), (h2, s2) = read_stream(out), read_stream(STREAMS / f"{name}.jsonl.gz")
        assert h1.pop("plan") is None or h2.pop("plan") is not None
        h2.pop("plan", None)
        assert h1 == h2 and list(s1) == list(s2), name


def test_terminal_summary_and_fail_fast(capsys):
    code = main(["watch", "--replay", str(STREAMS / "fsdp-unsharded.jsonl.gz"), "--fail-fast"])
    out, err = capsys.readouterr()
    assert code == 3
    assert "verify: failed" in out and "FAIL sharding not happening" in out
    assert "verification failed: sharding not happening on card(s) 0" in err
    n = int(out.split(" samples")[0].split()[-1])
    assert n < 60  # stopped at the first confirmed failure, not at the end of the stream


# -- record / replay round trip, live fake watch ----------------------------------------------


def test_record_then_replay(tmp_path, capsys):
    rec = tmp_path / "s.jsonl"
    code = main(["watch", "--backend", "fake:fsdp-unsharded", *FSDP, "--record", str(rec),
                 "--samples", "50", "--json"])  # fmt: skip
    live = json.loads(capsys.readouterr().out)
    assert code == 3
    header, samples = read_stream(rec)
    assert header["plan"]["groups"][0]["shard"] == "fsdp" and len(list(samples)) == 50
    code, again = replay_path(rec, capsys)
    assert code == 3 and again["verify"] == live["verify"]


def replay_path(path, capsys):
    code = main(["watch", "--replay", str(path), "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_cut_stream_replays_and_bad_lines_are_named(tmp_path, capsys):
    with gzip.open(STREAMS / "remote-numa.jsonl.gz", "rt") as f:
        lines = f.read().splitlines()
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:50])  # killed mid-write
    code, s = replay_path(cut, capsys)
    assert code == 0 and s["samples"] == len(lines) - 2 and "cut short" in s["notes"][0]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([lines[0], lines[1], "{oops", lines[2]]) + "\n")
    assert main(["watch", "--replay", str(bad)]) == 2
    assert "line 3: not valid JSON" in capsys.readouterr().err
    nohead = tmp_path / "nohead.jsonl"
    nohead.write_text(lines[1] + "\n")
    assert main(["watch", "--replay", str(nohead)]) == 2
    assert "not a nodeledger watch stream" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["--shard", "fsdp"], "--shard describe a job: give --job"),
        (["--job", "train", "--dp", "8"], "--job needs --model"),
        (["--plan", "x.toml", "--job", "train", "--model", "qwen3-8b"], "not both"),
        (["--job", "train", "--model", "qwen3-8b", "--dp", "8", "--cards", "0-3"], "the job uses 8"),
        (["--job", "train", "--model", "qwen3-8b", "--dp", "2", "--cards", "0,0"], "twice"),
        (["--job", "serve", "--model", "qwen3-8b", "--shard", "fsdp"], "does not apply to --job serve"),
        (["--interval", "0"], "--interval must be > 0"),
        (["--backend", "tpu-smi"], "--backend 'tpu-smi' is not one of"),
        (["--backend", "fake:nope"], "fake scenario 'nope'"),
        (["--replay", "missing.jsonl"], "file not found"),
        (["--replay", "x.jsonl", "--record", "y.jsonl"], "--record applies to a live watch"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_exit_2(args, msg, capsys):
    assert main(["watch", "--backend", "fake:fsdp-sharded", *args]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1


def test_plan_toml_and_place_json(tmp_path, capsys):
    plan = tmp_path / "plan.toml"
    plan.write_text('[[workloads]]\nid = "ft"\nmodel = "qwen3-32b"\njob = "train"\ndp = 8\n'
                    'shard = "fsdp"\ncheckpointing = "full"\n')  # fmt: skip
    # 8 ranks and a lifeboat do not fit on 8 cards: the planner leaves it unplaced -> no groups
    code = main(["watch", "--replay", str(STREAMS / "fsdp-unsharded.jsonl.gz"), "--plan",
                 str(plan), "--machine", "k100-ai-8x64g", "--json"])  # fmt: skip
    s = json.loads(capsys.readouterr().out)
    assert code == 0 and s["verify"]["status"] == "pending" and "0 replicas placed" in s["plan"]
    place = tmp_path / "place.json"
    place.write_text(json.dumps({"replicas": [{"replica": "ft#0", "workload": "ft",
                                               "cards": list(range(8)), "card_bytes": 40 * GiB}]}))  # fmt: skip
    code = main(
        [
            "watch",
            "--replay",
            str(STREAMS / "fsdp-sharded.jsonl.gz"),
            "--plan",
            str(place),
            "--json",
        ]
    )
    s = json.loads(capsys.readouterr().out)
    assert code == 3 and {f["rule"] for f in s["verify"]["findings"]} == {"above plan"}


# -- rules at their thresholds (synthetic samples) --------------------------------------------


def header(n=2, nodes=None, total=64 * GiB):
    cards = [{"index": i, "total_bytes": total, "numa_node": i % 2} for i in range(n)]
    return {"machine": {"cards": cards, "numa_nodes": nodes or {"0": "0-3", "1": "4-7"}}}


def sample(t, cards, pids=None, host=None):
    return {"t": t, "cards": [dict({"index": i}, **c) for i, c in enumerate(cards)],
            "pids": pids or {}, "host": host or {}}  # fmt: skip


def group(pred, un=None, shard=None, cards=(0, 1)):
    return {"groups": [{"name": "job", "shard": shard, "cards": list(cards),
                        "predicted": {str(c): pred for c in cards}, "unsharded_bytes": un}]}  # fmt: skip


def feed(an, seq):
    for s in seq:
        an.feed(s)
    return an


def test_above_plan_limit_is_10_percent_plus_1_gib():
    pred = 20 * GiB
    limit = int(pred * 1.1 + GiB)
    for used, fails in ((limit, False), (limit + 1, True)):
        an = feed(Analyzer(header(), group(pred)),
                  [sample(t, [{"used_bytes": used}, {"used_bytes": pred}]) for t in range(3)])  # fmt: skip
        assert (an.verify()["status"] == "failed") is fails
    # a single odd reading is not a peak (3 samples in a row)
    seq = [
        sample(t, [{"used_bytes": u}, {"used_bytes": pred}])
        for t, u in enumerate([pred, 2 * pred, pred, pred])
    ]
    assert feed(Analyzer(header(), group(pred)), seq).verify()["status"] == "passed"


def test_pending_until_the_job_allocates_and_tolerance_options():
    an = feed(
        Analyzer(header(), group(20 * GiB)),
        [sample(t, [{"used_bytes": GiB}] * 2) for t in range(5)],
    )
    assert an.verify()["status"] == "pending"
    an = feed(Analyzer(header(), group(20 * GiB), tolerance=0.0, tolerance_bytes=0),
              [sample(t, [{"used_bytes": 20 * GiB + 1}] * 2) for t in range(3)])  # fmt: skip
    assert [f["rule"] for f in an.verify()["findings"]] == ["above plan", "above plan"]


def test_every_rank_a_full_copy_is_also_not_sharding():
    an = feed(Analyzer(header(), group(10 * GiB, un=20 * GiB, shard="zero3")),
              [sample(t, [{"used_bytes": 19 * GiB}] * 2) for t in range(3)])  # fmt: skip
    [f] = [f for f in an.verify()["findings"] if f["rule"] == "sharding not happening"]
    assert f["cards"] == [0, 1] and "plain data parallel" in f["message"]
    # unsharded figure too close to the sharded one: no claim (it would be guesswork)
    an = feed(Analyzer(header(), group(10 * GiB, un=12 * GiB, shard="zero1")),
              [sample(t, [{"used_bytes": 11 * GiB}] * 2) for t in range(3)])  # fmt: skip
    assert not [f for f in an.verify()["findings"] if f["rule"] == "sharding not happening"]


def test_context_sized_band():
    for each, flagged in ((int(0.29 * GiB), False), (int(0.3 * GiB), True), (int(1.5 * GiB), True),
                          (int(1.6 * GiB), False)):  # fmt: skip
        cards = [{"used_bytes": 9 * GiB, "processes": [{"pid": 1, "used_bytes": 8 * GiB},
                                                       {"pid": 2, "used_bytes": each}]},
                 {"used_bytes": 8 * GiB, "processes": [{"pid": 2, "used_bytes": 8 * GiB}]}]  # fmt: skip
        an = feed(Analyzer(header()), [sample(t, cards) for t in range(3)])
        assert bool(an.verify()["findings"]) is flagged, each


def _idle_run(cards_fn, pids_fn=None, host_fn=None, n=62, **kw):
    an = Analyzer(header(3), **kw)
    for t in range(n):
        an.feed(
            sample(t, cards_fn(t), pids_fn(t) if pids_fn else None, host_fn(t) if host_fn else None)
        )
    return {(f["card"], f["kind"]): f for f in an.idle()}


def busy(pid, util=90.0):
    return {
        "used_bytes": 10 * GiB,
        "util_pct": util,
        "processes": [{"pid": pid, "used_bytes": 10 * GiB}],
    }


ALIVE = {str(p): {"alive": True, "name": "python", "cpus": "0-7", "mems": "0-1"} for p in (1, 2, 3)}


def test_idle_kinds():
    # low activity: below 10 % on average over the window
    found = _idle_run(lambda t: [busy(1), busy(2), busy(3, util=9.0)], lambda t: ALIVE)
    assert list(found) == [(2, "held, low activity")]
    found = _idle_run(lambda t: [busy(1), busy(2), busy(3, util=11.0)], lambda t: ALIVE)
    assert list(found) == [(2, "lagging")]  # 11 % vs a 90 % median: fed, but starved
    found = _idle_run(lambda t: [busy(1), busy(2), busy(3, util=50.0)], lambda t: ALIVE)
    assert found == {}
    # a window not yet covered says nothing
    assert _idle_run(lambda t: [busy(1), busy(2), busy(3, util=0.0)], lambda t: ALIVE, n=30) == {}
    # no owner
    found = _idle_run(lambda t: [busy(1), busy(2), {"used_bytes": 5 * GiB, "util_pct": 0.0, "processes": []}],
                      lambda t: ALIVE, n=3)  # fmt: skip
    assert list(found) == [(2, "no owner")]
    # every listed pid invisible: another PID namespace, not three dead owners
    found = _idle_run(lambda t: [busy(1), busy(2), busy(3)], lambda t: {}, n=3)
    assert {k[1] for k in found} == {"owner not visible"}


def test_host_causes():
    def host(t):
        return {"mem_total": 100 * GiB, "mem_available": 50 * GiB, "pswpin": 300 * t,
                "pswpout": 0, "swap_total": 8 * GiB, "swap_free": 4 * GiB,
                "cpu": {"total": 1000 * t, "idle": 850 * t, "iowait": 120 * t}}  # fmt: skip

    found = _idle_run(lambda t: [busy(1), busy(2), busy(3, util=1.0)], lambda t: ALIVE, host)
    ev = found[(2, "held, low activity")]["evidence"]
    assert ev[0].startswith("host swapping: 300 pages/s") and "4.0 GiB of swap" in ev[0]
    assert ev[1].startswith("IO wait: 12%")
    hints = found[(2, "held, low activity")]["hints"]
    assert hints and "not bound to a NUMA node" in hints[0]  # 0-7 covers both nodes

    def starved(t):  # the owner and 3 workers saturate the 4 CPUs of node 0
        return {"3": {"alive": True, "name": "python", "cpus": "0-3", "mems": "0", "cpu_s": 1.0 * t,
                      "children": [{"pid": 30 + k, "cpus": "0-3", "cpu_s": 0.95 * t} for k in range(3)]},
                **{k: v for k, v in ALIVE.items() if k != "3"}}  # fmt: skip

    found = _idle_run(lambda t: [busy(1), busy(2), busy(3, util=1.0)], starved)
    cause = found[(2, "held, low activity")]["likely_cause"]
    assert cause.startswith("CPU starvation: pid 3 and its 3 children used 3.9 of the 4 CPUs")


def test_analysis_cost_stays_flat():
    """The window is bounded: 10 minutes of samples keep 61 in memory."""
    an = Analyzer(header(3))
    for t in range(600):
        an.feed(sample(t, [busy(1), busy(2), busy(3)], ALIVE))
    assert len(an.hist) == 61


def test_live_view_renders_each_card():
    from rich.console import Console

    from nodeledger.cli.watch import _bar, _live_view
    from nodeledger.watch.fake import FakeBackend, scenario
    from nodeledger.watch.watcher import Watcher

    b = FakeBackend(scenario("fsdp-unsharded"))
    w = Watcher(b, b.host)
    exp = {"groups": [{"name": "job", "shard": "fsdp", "cards": list(range(8)),
                       "predicted": {str(i): 51 * GiB for i in range(8)}, "unsharded_bytes": 383 * GiB}]}  # fmt: skip
    h = w.header(exp)
    an = Analyzer(h, exp)
    for _ in range(50):
        s = w.sample()
        an.feed(s)
    con = Console(record=True, width=160)
    con.print(_live_view(s, an, h))
    text = con.export_text()
    assert "sharding not happening, above plan" in text and "1000 python" in text
    assert text.count("\n│ ") >= 8 and "host: 7" in text
    assert _bar(32 * GiB, 64 * GiB, 48 * GiB, 8) == "████  ┃ "
    assert _bar(None, 64 * GiB, None, 4) == "    "


def test_summary_says_whose_clock_and_what_peak_means(capsys):
    """A fake scenario plays its steps without waiting: the duration is on the scenario's clock
    and the wall time is given beside it; each card has its sustained peak, its highest single
    sample and its latest one, and the rule for the peak is named."""
    code = main(["watch", "--backend", "fake:dead-owner", "--samples", "40", "--interval", "0.05",
                 "--json"])  # fmt: skip
    s = json.loads(capsys.readouterr().out)
    assert code == 0 and s["samples"] == 40
    assert s["clock"] == "the scenario's clock" and s["duration_s"] == 39
    assert s["wall_s"] is not None and s["wall_s"] < s["duration_s"]
    assert "3 samples in a row" in s["peak_rule"]
    c5 = next(c for c in s["cards"] if c["index"] == 5)
    assert c5["max_bytes"] >= c5["peak_bytes"] and c5["last_bytes"] is not None


def test_a_host_without_cards_is_watched_for_its_host_figures(capsys):
    """No card tool answers: the watch samples the host alone and says why; nothing to verify
    is exit 0, a plan it cannot verify exit 4."""
    from nodeledger.machine import resolve_or_reference

    if not resolve_or_reference(None).reference:
        pytest.skip("this host has accelerators")
    code = main(["watch", "--samples", "2", "--interval", "0.05", "--json"])
    s = json.loads(capsys.readouterr().out)
    assert code == 0 and s["cards"] == [] and "no card could be sampled" in s["host_only"]
    assert s["host"]["mem_total_bytes"] > 0
    code = main(["watch", "--samples", "2", "--interval", "0.05", "--job", "serve", "--model",
                 "qwen3-0.6b", "--json"])  # fmt: skip
    assert code == 4


def test_two_loads_stream_blames_host_swapping(capsys):
    """Two ~60 GB loads at once on the 125 GiB box: the cards wait at low utilisation and the
    watch names the host's swapping (and its near-exhausted RAM) as the likely cause."""
    code = main(["watch", "--replay", str(STREAMS / "two-loads.jsonl.gz"), "--json"])
    out, _ = capsys.readouterr()
    s = json.loads(out)
    assert code in (0, None)
    idle = {f["card"]: f for f in s["idle"]}
    assert {0, 1, 7} <= set(idle)
    for c in (0, 1, 7):
        assert idle[c]["likely_cause"].startswith("host swapping"), idle[c]
    assert any("host RAM nearly exhausted" in e for e in idle[7]["evidence"])
