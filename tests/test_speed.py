"""The speed layer: hardware data, machine figures (measured > profile > data > unknown, with
bounds), hand-derived serving / training / collective cases, and the CLI surfaces (fit --json
speed, collective, compare, report criterion 2)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from conftest import cli_json, run_cli
from nodeledger.ledger.jobs import JobError, build_job
from nodeledger.machine import resolve_machine
from nodeledger.machine.profile import CollectiveFigure
from nodeledger.model import load_model
from nodeledger.report.capacity import capacity_report
from nodeledger.speed import figures as F
from nodeledger.speed import hardware as H
from nodeledger.speed import work as W
from nodeledger.speed.collective import estimate
from nodeledger.speed.job import KEYS, job_speed
from nodeledger.speed.serve import serve_speed
from nodeledger.speed.train import train_speed
from nodeledger.verdict.catalogue import parse_catalogue

EFFICIENCIES = ("hbm_read", "mfu_train", "mfu_prefill", "busbw_nvswitch", "busbw_pcie",
                "busbw_xgmi", "busbw_network", "busbw_socket")  # fmt: skip


# -- the hardware data ---------------------------------------------------------------------


def test_parsed_json_is_the_toml():
    """hardware.json (read at run time) must be hardware.toml parsed: regen_hardware_json.py."""
    import json

    assert json.loads(H.PARSED.read_text(encoding="utf-8")) == H.parse_source(), (
        "hardware.json is stale: run python tests/regen_hardware_json.py"
    )


def test_every_card_and_efficiency_has_a_source():
    for c in H.cards():
        assert c.get("source"), c["id"]
        for key in ("bf16_dense_tflops", "memory_bandwidth_gbps"):
            v = c.get(key)
            assert v == "unknown" or (isinstance(v, (int, float)) and v > 0), (c["id"], key, v)
    for name in EFFICIENCIES:
        e = H.efficiency(name)
        assert e.value is not None and 0 < e.value <= 1.2 and len(e.source) > 40, name


@pytest.mark.parametrize(
    ("product", "card_id"),
    [("NVIDIA H100 80GB HBM3", "h100-sxm5-80g"), ("NVIDIA A40", "a40-48g"),
     ("NVIDIA A100 80GB PCIe", "a100-pcie-80g"), ("K100_AI", "hygon-k100-ai-64g"),
     ("AMD Instinct MI300X OAM", "mi300x-192g")],
)  # fmt: skip
def test_product_names_find_their_card(product, card_id):
    assert H.card(product)["id"] == card_id


def test_unknown_figures_stay_unknown_for_the_reference_card():
    m = resolve_machine("k100-ai-8x64g")
    assert F.card_peak(m).value is None and F.card_hbm(m).value is None
    # the bound rests on datasheet-checked cards of the same class and memory only
    floor = F.card_peak_floor(m)
    assert floor.value == 181.0 and "mi210" in floor.source


# -- measured beats assumed ------------------------------------------------------------------


def test_measured_collective_beats_the_link_estimate():
    m = resolve_machine("dgx-h100")
    assumed, _, _ = F.busbw(m, "all_reduce", list(range(8)))
    assert assumed.value == pytest.approx(450 * 1.07)  # NV18 x NVLS fraction
    fig = CollectiveFigure(op="all_reduce", cards=list(range(8)), size_bytes=2**33,
                           busbw_gbps=401.5, source="measured by bench, 2026-12-01")  # fmt: skip
    measured = replace(m, **{"interconnect": replace(m.interconnect, **{"collectives": [fig]})})
    got, _, _ = F.busbw(measured, "all_reduce", list(range(8)))
    assert got.value == 401.5 and "measured by bench, 2026-12-01" in got.source
    d = estimate(measured, "all_reduce", 2**33)
    assert d["busbw_large_message_gbps"] == 401.5


def test_profile_without_figures_takes_the_data_file():
    m = resolve_machine("dgx-h100")
    bare = replace(m, **{"accelerators": [
        replace(a, **{"bf16_dense_tflops": None, "memory_bandwidth_gbps": None, "sources": {}})
        for a in m.accelerators]})  # fmt: skip
    peak = F.card_peak(bare)
    assert peak.value == 989.5 and peak.source.startswith("h100-sxm5-80g")


# -- hand-derived serving cases ----------------------------------------------------------------


def test_decode_8b_bf16_batch1_on_h100():
    """Llama-3.1-8B bf16 at batch 1 reads every weight but the embedding lookup table once per
    token: 16.06 GB - 1.05 GB = 15.01 GB at 3.35 TB/s x 0.8 = 5.6 ms (>= 4.8 ms at 16 GB)."""
    spec = load_model("llama-3.1-8b")[0]
    m = resolve_machine("dgx-h100")
    job = build_job("serve", {"engine": "vllm", "input_len": 32, "output_len": 128})
    d = serve_speed(spec, job, m, 32, 128, 1, None, roofline=True)  # the roofline's formula
    wb = W.decode_weight_bytes(spec, None, 1)
    embed = spec.vocab_size * spec.hidden_size * 2
    assert wb["bytes"] == wb["checkpoint_bytes"] - embed
    dec = d["step"]["decode"]
    kv = W.kv_bytes_per_sequence(spec, 32 + 64, "bf16")
    assert dec["memory_s"] == pytest.approx((wb["bytes"] + kv) / (3.35e12 * 0.8))
    assert d["tpot_batch1_s"] >= 16e9 / 3.35e12 == pytest.approx(4.78e-3, rel=1e-3)
    assert d["binding"] == "memory bandwidth"
    # prefill of 1,000 tokens is compute-bound: 2 x body params x 1000 at 989.5 TFLOPS x 0.6
    t = serve_speed(spec, job, m, 1000, 128, 1, None, roofline=True)["ttft"]
    assert t["binding"] == "compute"
    assert t["compute_s"] == pytest.approx(W.prefill_flops(spec, 1000) / (989.5e12 * 0.6))


def test_moe_batch1_reads_only_the_chosen_experts():
    spec = load_model("qwen3-30b-a3b")[0]  # 128 experts, top 8, 48 MoE layers
    one = W.decode_weight_bytes(spec, None, 1)
    many = W.decode_weight_bytes(spec, None, 10_000)
    assert one["experts_touched_per_layer"] == pytest.approx(8)
    assert many["experts_touched_per_layer"] == pytest.approx(128)
    per_expert = many["expert_bytes"] / (48 * 128)
    assert one["expert_bytes"] == pytest.approx(48 * 8 * per_expert)
    assert one["bytes"] < 0.15 * many["bytes"]


def test_tensor_parallel_adds_two_all_reduces_per_layer():
    spec = load_model("qwen3-32b")[0]
    m = resolve_machine("dgx-h100")
    j1 = build_job("serve", {"engine": "vllm"})
    j2 = build_job("serve", {"engine": "vllm", "tp": 2})
    s1 = serve_speed(spec, j1, m, 1000, 200, 8, None, roofline=True)["step"]["decode"]
    s2 = serve_speed(spec, j2, m, 1000, 200, 8, None, roofline=True)["step"]["decode"]
    assert s1["card_links_s"] == 0 and s2["card_links_s"] > 0
    bw = 450 * 0.8e9  # two cards: ring, no NVLS
    one = 2 * 2e-6 + 8 * 5120 * 2 * 1.0 / bw  # ring latency 2(n-1) x 2 us + bytes x 2(n-1)/n
    assert s2["card_links_s"] == pytest.approx(2 * 64 * one)
    assert s2["memory_s"] == pytest.approx(s1["memory_s"] / 2, rel=0.02)


def test_more_sequences_more_throughput_until_compute():
    spec = load_model("qwen3-8b")[0]
    m = resolve_machine("dgx-h100")
    job = build_job("serve", {"engine": "vllm"})
    rates = [
        serve_speed(spec, job, m, 500, 500, b, None)["output_tokens_per_s"] for b in (1, 8, 64)
    ]
    assert rates[0] < rates[1] < rates[2]


# -- training ----------------------------------------------------------------------------------


def test_train_step_compute_bound_when_sync_hides():
    """8B FSDP over 8 NVSwitch H100s: the sync hides behind compute, so the step is the
    micro-batch's operators (the kernel table, moved to the H100) x grad_accum + the optimizer
    step; full recomputation adds about one forward (a third of forward + backward)."""
    spec = load_model("llama-3.1-8b")[0]
    m = resolve_machine("dgx-h100")
    job = build_job("train", {"dp": 8, "shard": "fsdp", "seq": 4096, "micro_batch": 2})
    d = train_speed(spec, job, m)
    assert d["dp_exposed_s"] == 0 and d["binding"] == "compute"
    ops = d["operators"]
    assert "kernel table" in ops["kernel_table"] and "train_efficiency" not in d["inputs"]
    assert d["compute_s"] == pytest.approx(ops["micro_batch_s"] + ops["optimizer_s"])
    # 6 N + attention: between 6 x 7.4e9 (no embedding table) and 6 x 8.1e9 + attention
    assert 6 * 7.4e9 < d["flops_per_token"] < 6 * 8.1e9 + 6 * 32 * 4096 * 4096
    # an 8B model at 8k tokens a micro-batch runs its GEMMs near the table's plateau: between
    # 40 % and 85 % of the datasheet peak (H200 table: 787 of 989 TFLOPS at 8192^3)
    assert 0.4 < d["mfu"] < 0.85
    full = train_speed(spec, build_job("train", {"dp": 8, "shard": "fsdp", "seq": 4096,
                                                 "micro_batch": 2, "checkpointing": "full"}), m)  # fmt: skip
    ratio = full["tokens_per_s_per_card"] / d["tokens_per_s_per_card"]
    assert 0.7 < ratio < 0.82  # 3/4 if every operator ran at one rate; the LM head is not redone


def test_pipeline_bubble_and_unknown_peak():
    spec = load_model("qwen3-8b")[0]
    m = resolve_machine("dgx-h100")
    d = train_speed(spec, build_job("train", {"pp": 4, "grad_accum": 12}), m)
    assert d["bubble_fraction"] == pytest.approx(3 / 12)
    ref = train_speed(
        spec, build_job("train", {"dp": 8, "shard": "fsdp"}), resolve_machine("k100-ai-8x64g")
    )
    assert ref["step_s"] is None and ref["tokens_per_s_per_card"] is None
    assert any("unknown" in u for u in ref["unknown"])


# -- collectives -------------------------------------------------------------------------------


def test_collective_ring_matches_nccl_tests_definitions():
    m = resolve_machine("dgx-a100-80g")  # NV12 to an NVSwitch, 300 GB/s per direction
    d = estimate(m, "all_reduce", 2**33)
    assert d["busbw_large_message_gbps"] == pytest.approx(300 * 0.8)
    assert d["busbw_gbps"] == pytest.approx(d["algbw_gbps"] * 1.75)
    assert d["busbw_gbps"] < 240 and d["busbw_gbps"] > 239  # 8 GiB: latency negligible
    small = estimate(m, "all_reduce", 8)
    assert small["busbw_gbps"] < 0.01  # latency-bound
    ag = estimate(m, "all_gather", 2**33)
    assert ag["bus_factor"] == pytest.approx(7 / 8)


def test_collective_across_machines_bounded_by_the_nics():
    m = resolve_machine("dgx-h100")  # 8 x 400 Gb/s InfiniBand = 400 GB/s per machine
    four = estimate(m, "all_reduce", 2**33, machines=4)
    assert four["binding"] == "network"
    assert four["busbw_large_message_gbps"] == pytest.approx(400 * 0.92)
    ref = estimate(resolve_machine("k100-ai-8x64g"), "all_reduce", 2**30, machines=2)
    assert ref["seconds"] is None and ref["busbw_ceiling_gbps"]["value"] == 6.0


def test_collective_cli():
    d = cli_json("collective", "dgx-h100", "--op", "all_reduce", "--size", "8G", "--cards", "0-1")
    assert d["ranks"] == 2 and d["busbw_gbps"] == pytest.approx(360, rel=0.01)
    assert {"algbw_gbps", "busbw_gbps", "seconds"} <= set(d)
    ref = run_cli("collective")
    assert ref.returncode == 0 and "unknown" in ref.stdout and "bandwidth unknown" in ref.stdout
    # the figure first (issue 32): the first line is the answer, the citations come last
    first, *rest = run_cli("collective", "dgx-h100").stdout.splitlines()
    assert re.search(r"\(8 ranks\): [\d.,]+ (us|ms|s), busbw [\d.,]+ GB/s$", first), first
    assert "datasheet" not in "".join(rest[:4]) and rest[4] == "sources:", rest[:5]
    for bad, msg in ((["--size", "lots"], "--size"), (["--cards", "0,9"], "not in the machine"),
                     (["--size", "0"], "between 1 byte"), (["--op", "alltoall"], "alltoall")):  # fmt: skip
        p = run_cli("collective", "dgx-h100", *bad)
        assert p.returncode == 2 and msg in p.stderr and "Traceback" not in p.stderr, p.stderr


# -- fit, compare, report ----------------------------------------------------------------------


def test_fit_json_has_speed():
    d = cli_json("fit", "qwen3-8b", "--machine", "dgx-h100", "--engine", "vllm",
                 "--input-len", "1000", "--output-len", "200", "--concurrency", "32")  # fmt: skip
    sp = d["speed"]
    assert set(KEYS) <= set(sp)
    assert sp["ttft_s"] > 0 and sp["tpot_s"] > 0 and sp["binding"] in (
        "compute", "memory bandwidth", "card links", "host")  # fmt: skip
    # the simulated benchmark: clients keeping 32 requests in flight, every answer 200 tokens
    sim = sp["simulation"]
    assert sp["model"] == "simulated" and sim["max_concurrency"] == 32
    assert sim["batch"]["max"] <= 32 and sim["completed"] == sim["num_prompts"]
    assert sp["output_tokens_per_s"] == pytest.approx(sim["output_tokens_per_s"])
    assert sp["requests_per_s"] == pytest.approx(sp["output_tokens_per_s"] / 200)
    # throughput over the run: below 32 / TPOT (prefills and the ramp count), not far below
    assert 0.5 * 32 / sp["tpot_s"] < sp["output_tokens_per_s"] <= 32 / sp["tpot_s"] * 1.01
    assert d["job_options"]["context"] == 1200  # input + output when --context is absent
    assert all(v["source"] for v in sp["inputs"].values() if isinstance(v, dict))
    t = cli_json("fit", "qwen3-8b", "--machine", "dgx-h100", "--job", "train", "--dp", "8",
                 "--shard", "fsdp")["speed"]  # fmt: skip
    assert t["step_s"] > 0 and t["tokens_per_s_per_card"] > 0 and t["ttft_s"] is None


def test_input_output_lengths_must_fit_the_context():
    with pytest.raises(JobError, match="exceed the context of 1,000 tokens"):
        build_job("serve", {"context": 1000, "input_len": 900, "output_len": 200})
    p = run_cli("fit", "qwen3-8b", "--input-len", "0")
    assert p.returncode == 2 and "--input-len" in p.stderr
    # the default engine (hf) takes them too: its searches vary the context internally
    d = cli_json(
        "fit", "qwen3-8b", "--machine", "dgx-h100", "--input-len", "100", "--output-len", "100"
    )
    assert d["job_options"]["context"] == 200 and d["speed"]["tpot_s"] > 0


def test_speed_of_unknown_cards_is_unknown_with_the_reason():
    spec = load_model("qwen3-8b")[0]
    d = job_speed(spec, build_job("serve", {}), resolve_machine("k100-ai-8x64g"))
    assert d["tpot_s"] is None and d["output_tokens_per_s"] is None
    assert any("bf16_dense_tflops unknown" in u for u in d["unknown"])


PEAK = """
[[workloads]]
id = "chat-8b"
model = "qwen3-8b"
job = "serve"
engine = "vllm"
input_len = 1000
output_len = 200
peak_requests_per_s = {rps}
"""


def test_criterion_2_compares_declared_peak_with_throughput():
    m = resolve_machine("dgx-h100")
    ws = parse_catalogue(PEAK.format(rps=1.0), "t")
    specs = {"qwen3-8b": load_model("qwen3-8b")[0]}
    ok = capacity_report(m, ws, specs)["scale_out"]["criteria"][1]
    assert not ok["holds"] and "one machine serves" in ok["evidence"][0]
    have = capacity_report(m, ws, specs)["serving"]["workloads"][0]["requests_per_s"]
    assert have > 1.0
    short = capacity_report(m, parse_catalogue(PEAK.format(rps=have * 2), "t"), specs)
    c2 = short["scale_out"]["criteria"][1]
    assert c2["holds"] and "requests/s" in c2["evidence"][0] and "7 replica(s)" in c2["evidence"][0]
    with pytest.raises(Exception, match="peak_requests_per_s -1: Input should be greater than 0"):
        parse_catalogue(PEAK.format(rps=-1), "t")


def test_compare_answers_a100_vs_a40_in_tokens_per_second_per_price():
    d = cli_json("compare", "4x-a100-80g-pcie", "8x-a40-48g-pcie",
                 "--price", "4x-a100-80g-pcie=100000", "--price", "8x-a40-48g-pcie=100000")  # fmt: skip
    a100, a40 = d["machines"]
    for m in (a100, a40):
        assert m["output_tokens_per_s"]["serve-8b-tp1"] > 0
        assert m["price_per_million_output_tokens"]["serve-8b-tp1"] > 0
        assert m["output_tokens_per_s_per_price"]["serve-8b-tp1"] == pytest.approx(
            m["output_tokens_per_s"]["serve-8b-tp1"] / 100000
        )
    f = d["faster"]["serve-8b-tp1"]
    assert f["fastest"] in ("4x-a100-80g-pcie", "8x-a40-48g-pcie") and f["ratio"] >= 1
    assert "years" in d["throughput_basis"]


def test_a_saved_measured_profile_drives_every_command(tmp_path):
    """What bench --save-profile writes (a measured collective, a measured link, a NIC speed)
    is what collective, fit and report then use, with the measurement named as the source."""
    from nodeledger.machine.io import save_profile
    from nodeledger.machine.profile import LinkPair

    m = resolve_machine("k100-ai-8x64g")
    src = "measured by bench, 2026-12-01: all_reduce 1 GiB"
    ic = replace(m.interconnect, **{
        "collectives": [CollectiveFigure(op="all_reduce", cards=list(range(8)), size_bytes=2**30,
                                         busbw_gbps=88.0, source=src)],
        "pairs": [LinkPair(a=0, b=1, kind="xgmi", bandwidth_gbps=40.0,
                           source="measured by bench, 2026-12-01: peer copy 0->1")],
    })  # fmt: skip
    nics = [
        replace(
            m.network.nics[0], **{"speed_gbit": 25.0, "source": "measured by bench, 2026-12-01"}
        )
    ]
    saved = replace(m, **{"interconnect": ic, "network": replace(m.network, **{"nics": nics})})
    path = tmp_path / "box.toml"
    save_profile(saved, path)
    d = cli_json("collective", str(path), "--size", "1G")
    assert d["busbw_large_message_gbps"] == 88.0 and "measured by bench" in d["source"]
    pair = cli_json("collective", str(path), "--size", "1G", "--cards", "0,1")
    assert pair["busbw_large_message_gbps"] == pytest.approx(40.0 * 0.7)  # link x busbw_xgmi
    net = cli_json("collective", str(path), "--size", "1G", "--machines", "2")
    assert net["binding"] == "network" and net["nic"]["gbps"] == pytest.approx(25 / 8)


def test_measured_fabric_decides_in_box_rows_by_the_upper_bound(tmp_path):
    """K100_AI peak unknown, fabric measured at 88 GB/s all-reduce bus bandwidth: ZeRO-3 training
    of 8B stays under 0.5x of compute even for the fastest card in the data, so `can`."""
    m = resolve_machine("k100-ai-8x64g")
    ic = replace(m.interconnect, **{"collectives": [
        CollectiveFigure(op="all_reduce", cards=list(range(8)), size_bytes=2**30, busbw_gbps=88.0,
                         source="measured by bench, 2026-12-01")]})  # fmt: skip
    saved = replace(m, **{"interconnect": ic})
    from nodeledger.verdict.links import link_check

    spec = load_model("qwen3-8b")[0]
    big = build_job("train", {"dp": 8, "shard": "fsdp", "micro_batch": 16})
    lk = link_check(spec, big, saved)
    assert lk["tier"] == "fits" and lk["bound"] == "upper" and lk["ratio"] <= 0.5
    assert "at most" in lk["reason"] and "measured by bench" in lk["path"]
    # 4x less per step: between the bounds, the row says for which card peaks it is `can`
    mid = link_check(spec, build_job("train", {"dp": 8, "shard": "fsdp", "micro_batch": 4}), saved)
    assert mid["tier"] == "unknown" and mid["bound"] == "range"
    assert mid["ratio_lower_bound"] <= 0.5 < mid["ratio_upper_bound"]
    assert f"can for any card up to {mid['can_below_card_tflops']:,.0f} TFLOPS" in mid["reason"]
    # without the measurement the same row names what would decide it
    lk0 = link_check(spec, build_job("train", {"dp": 8, "shard": "fsdp", "micro_batch": 4}), m)
    assert lk0["tier"] == "unknown" and "nodeledger bench" in lk0["reason"]


def test_load_rows_time_the_cache_disk():
    from nodeledger.machine.profile import Mount, Storage
    from nodeledger.report.capacity import disk_resource

    spec = load_model("qwen3-32b")[0]
    job = build_job("load", {})
    m = resolve_machine("k100-ai-8x64g")
    assert disk_resource(spec, job, m)["tier"] == "unknown"  # no mount in the preset
    nvme = replace(m, **{"storage": Storage(mounts=[Mount(path="/", kind="nvme")])})
    r = disk_resource(spec, job, nvme)
    assert r["tier"] == "fits" and "from / (nvme) in 9 s at 7.00 GB/s" in r["reason"]
    measured = replace(m, **{"storage": Storage(mounts=[Mount(
        path="/", kind="network", sequential_read_gbps=0.5,
        sources={"sequential_read_gbps": "measured by bench, 2026-12-01"})])})  # fmt: skip
    r = disk_resource(spec, job, measured)
    assert "in 131 s at 0.50 GB/s (measured by bench, 2026-12-01)" in r["reason"]
