"""The serving benchmark: simulator + operator step time + engine plug-ins (issue 28)."""

from __future__ import annotations

import dataclasses

import pytest

from nodeledger.errors import InputError
from nodeledger.ledger.jobs import Parallel, ServeJob
from nodeledger.machine import resolve_machine
from nodeledger.model import load_model
from nodeledger.speed import engines as E
from nodeledger.speed.serving import serving_benchmark
from nodeledger.verdict.fit import ledger_for


@pytest.fixture(scope="module")
def setup():
    spec, _ = load_model("llama-3.1-8b")
    return spec, resolve_machine("hgx-h200")


def _bench(spec, m, engine="vllm", version=None, pool=None, **kw):
    job = ServeJob(engine=engine, engine_version=version, context=2048, concurrency=1,
                   parallel=Parallel(tp=1))  # fmt: skip
    if pool == "ledger":
        pool = ledger_for(spec, job, m).extras.get("kv_pool_tokens")
    args = {"num_prompts": 200, "request_rate": float("inf"), "max_concurrency": None,
            "input_len": 1000, "output_len": 200} | kw  # fmt: skip
    return serving_benchmark(spec, job, m, pool_tokens=pool, **args)


def test_a_small_pool_caps_the_batch_and_still_serves_everyone(setup):
    spec, m = setup
    small = _bench(spec, m, pool=8 * 1200)  # eight sequences of 1,200 tokens
    # vLLM admits a request on its first chunk's blocks: at most the pool's worth of prompts,
    # plus one partly prefilled; the rest queue (or are preempted and recomputed)
    assert small["batch"]["max"] <= 8 * 1200 // 1000 + 1 and small["completed"] == 200
    big = _bench(spec, m, pool="ledger")
    assert big["batch"]["max"] > 8
    assert big["output_tokens_per_s"] > 3 * small["output_tokens_per_s"]


def test_engine_release_changes_the_answer_where_the_engines_differ(setup):
    """vLLM 0.9 (no asynchronous scheduling: host time per sequence per step) is slower per
    token than 0.14+ (asynchronous scheduling), the same model on the same card."""
    spec, m = setup
    old = _bench(spec, m, version="0.9.2", pool="ledger")
    new = _bench(spec, m, version="0.14.0", pool="ledger")
    assert old["tpot_median_s"] > new["tpot_median_s"] * 1.05
    assert old["engine"].startswith("vllm 0.8.0-0.10.2") and new["engine"].startswith("vllm 0.14")


def test_hf_generate_is_bound_by_the_host(setup):
    spec, m = setup
    hf = _bench(spec, m, engine="hf", num_prompts=4, max_concurrency=1)
    vllm = _bench(spec, m, num_prompts=4, max_concurrency=1, pool="ledger")
    # eager PyTorch dispatches every call: several times the graph-replayed step
    assert hf["tpot_median_s"] > 3 * vllm["tpot_median_s"]


def test_poisson_arrivals_queue_at_high_rate(setup):
    spec, m = setup
    slow = _bench(spec, m, request_rate=1.0, num_prompts=100, pool="ledger")
    fast = _bench(spec, m, request_rate=1000.0, num_prompts=100, pool="ledger")
    assert fast["ttft_median_s"] > 3 * slow["ttft_median_s"]


def test_a_fake_engine_is_one_registration():
    base = E.engine_speed("vllm")
    E.register("fake", lambda v: dataclasses.replace(base, name="fake", host_base_s=1e-3))
    try:
        assert E.engine_speed("fake").host_s(10) == pytest.approx(1e-3)
        assert "fake" in E.names()
    finally:
        E._REGISTRY.pop("fake")
    with pytest.raises(InputError, match="no speed model"):
        E.engine_speed("fake")


def test_capacity_at_a_service_level_is_sustained_and_tighter_levels_give_less(tmp_path):
    import json

    from conftest import run_cli

    def cap(ttft: str) -> dict:
        proc = run_cli("fit", "llama-3.1-8b", "--engine", "vllm", "--machine", "dgx-h100",
                       "--input-len", "1000", "--output-len", "200", "--slo-ttft-p99", ttft,
                       "--slo-tpot-p99", "0.05", "--json")  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["speed"]["capacity_at_slo"]

    loose, tight = cap("2.0"), cap("0.3")
    assert 0 < tight["requests_per_s"] <= loose["requests_per_s"]
    row = loose["at_rate"]
    assert row["ttft_p99_s"] <= 2.0 and row["tpot_p99_s"] <= 0.05
    # the rate is one the replica keeps up with: it completes what arrives
    assert row["output_tokens_per_s"] >= 0.9 * loose["requests_per_s"] * 200


def _slo_catalogue(tmp_path, extra: str = ""):
    """One 8B chat workload on 7 replicas with service levels TTFT p99 1 s, TPOT p99 50 ms."""
    cat = tmp_path / "w.toml"
    cat.write_text(
        '[[workloads]]\nid = "chat"\nmodel = "llama-3.1-8b"\njob = "serve"\nengine = "vllm"\n'
        "input_len = 1000\noutput_len = 200\nreplicas = 7\nslo_ttft_p99_s = 1.0\n"
        "slo_tpot_p99_s = 0.05\n" + extra
    )
    return cat


def test_report_criterion_2_uses_the_capacity_within_the_workload_service_levels(tmp_path):
    import json

    from conftest import run_cli

    cat = _slo_catalogue(tmp_path, "peak_requests_per_s = 1000.0\n")
    d = json.loads(run_cli("report", "--machine", "dgx-h100", "--workloads", str(cat),
                           "--format", "json").stdout)  # fmt: skip
    w = d["serving"]["workloads"][0]
    assert w["requests_per_s_at_slo"] == pytest.approx(w["slo"]["per_replica"] * 7)
    c2 = next(c for c in d["scale_out"]["criteria"] if "throughput" in c["criterion"])
    assert c2["holds"]  # 1,000 requests/s is beyond one box within those levels
    assert "within TTFT p99 <= 1 s and TPOT p99 <= 0.05 s" in c2["evidence"][0]
    bad = tmp_path / "bad.toml"
    bad.write_text(cat.read_text().replace("slo_ttft_p99_s = 1.0", "slo_ttft_p99_s = -1"))
    proc = run_cli("report", "--machine", "dgx-h100", "--workloads", str(bad))
    assert (
        proc.returncode == 2 and "slo_ttft_p99_s -1: Input should be greater than 0" in proc.stderr
    )


def test_multi_step_streams_tokens_in_groups(setup):
    """vLLM 0.6 --num-scheduler-steps 10: tokens reach the client ten at a time, and a new
    request waits for the running group (the SGLang team's vLLM 0.6.0 runs: ITL 129 ms at a
    13 ms TPOT)."""
    spec, m = setup
    one = _bench(spec, m, version="0.6.0", pool="ledger", request_rate=4.0, num_prompts=100)
    ten = _bench(spec, m, version="0.6.0", pool="ledger", request_rate=4.0, num_prompts=100,
                 engine_options={"multi_step": 10})  # fmt: skip
    assert ten["itl_s"]["median"] == pytest.approx(10 * one["itl_s"]["median"])
    assert ten["ttft_s"]["median"] > one["ttft_s"]["median"] + 4 * one["tpot_s"]["median"]
    assert ten["tpot_s"] == one["tpot_s"]
    assert any("multi-step" in n for n in ten["notes"])


def test_compare_puts_the_capacity_within_service_levels_side_by_side(tmp_path):
    import json

    from conftest import run_cli

    cat = _slo_catalogue(tmp_path)
    d = json.loads(run_cli("compare", "dgx-h100", "hgx-h200", "--workloads", str(cat),
                           "--format", "json").stdout)  # fmt: skip
    rates = {m["machine"]: m["requests_per_s_at_slo"]["chat"] for m in d["machines"]}
    # same cards' compute, the H200's 4.8 TB/s against 3.35: more requests within the levels
    assert 0 < rates["dgx-h100"] < rates["hgx-h200"]
    text = run_cli("compare", "dgx-h100", "hgx-h200", "--workloads", str(cat)).stdout
    assert "Capacity within each" in text and "req/s" in text


def test_sglang_dp_attention_chunks_a_prompt_on_its_rank():
    """SGLang with --enable-dp-attention (server_args.py): 0.3.6-0.4.3 give each of the tp ranks
    chunked_prefill_size // 2, the 0.4.4+ line chunked_prefill_size // dp_size; both scale the
    admission reserve by 0.3.  The scheduler gets a per-prompt cap of the rank's budget, the
    machine's budget, and new_token_ratio 0.7 x 0.3; without DP attention none of it."""
    from nodeledger.speed.serving import scheduler_for

    old = E.engine_speed("sglang", "0.4.3")
    job = ServeJob(engine="sglang", engine_version="0.4.3", max_num_batched_tokens=8192,
                   dp_attention=True, parallel=Parallel(tp=8))  # fmt: skip
    s = scheduler_for(job, old, 400_000)
    assert s.prompt_chunk == 4096 and s.max_num_batched_tokens == 8 * 4096
    assert s.new_token_ratio == pytest.approx(0.21)
    assert s.min_new_token_ratio == pytest.approx(0.21 * 0.14)
    new = E.engine_speed("sglang", "0.5.0")
    s = scheduler_for(dataclasses.replace(job, engine_version="0.5.0"), new, 400_000)
    assert s.prompt_chunk == 1024 and s.max_num_batched_tokens == 8192
    plain = scheduler_for(dataclasses.replace(job, dp_attention=False), old, 400_000)
    assert plain.prompt_chunk is None and plain.new_token_ratio == pytest.approx(0.7)
    assert plain.max_num_batched_tokens == 8192


def test_an_engines_eager_prefill_counts_its_tp_all_reduce_calls():
    """StepModel wiring: an eager prefill step of an engine dispatches 11 calls a layer beside
    its GEMMs and attention, 13 under tensor parallelism (the two all-reduces); transformers'
    unfused layer (hf) keeps its own count."""
    from nodeledger.speed import operators as O
    from nodeledger.speed.serving import step_model_for

    spec, _ = load_model("llama-3.1-8b")
    m = resolve_machine("hgx-h200")
    calls = {}
    for engine, tp in (("vllm", 1), ("vllm", 2), ("hf", 1)):
        job = ServeJob(engine=engine, engine_version="0.6.3" if engine == "vllm" else None,
                       parallel=Parallel(tp=tp))  # fmt: skip
        model, _ = step_model_for(spec, job, m, 512)
        p = model.parts(512, 0, 512)  # V0 runs a prefill eager
        assert p["graphs"] is False
        calls[(engine, tp)] = p["parts"]["dispatch"] / model.ck.table.dispatch_s
    assert calls[("vllm", 2)] - calls[("vllm", 1)] == pytest.approx(32 * O.ENGINE_EAGER_TP_CALLS)
    gemms_attn_head = 32 * (4 + 1) + 1
    assert calls[("vllm", 1)] == pytest.approx(
        gemms_attn_head + 32 * O.ENGINE_EAGER_CALLS_PER_LAYER
    )
    assert calls[("hf", 1)] > calls[("vllm", 1)]  # transformers' 32 calls a layer
