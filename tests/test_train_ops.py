"""Training from the operator model (speed/train_ops.py): hand-derived checks against the
kernel table, the recomputation, LoRA's missing weight gradients, eager vs fused elementwise
kernels, fp8 GEMMs and their casts, the host-bound small model, the optimizer step, and the
--fp8 / --fused-kernels options from the CLI (with the ledger's fp8 weight copies)."""

from __future__ import annotations

import pytest

from conftest import cli_json, run_cli
from nodeledger.ledger.build import fp8_weight_copy_bytes
from nodeledger.ledger.jobs import JobError, build_job
from nodeledger.model import load_model
from nodeledger.speed import operators as O
from nodeledger.speed import train_ops as TO
from nodeledger.speed.kernels import table_for

H200 = "NVIDIA H200"


@pytest.fixture(scope="module")
def ck():
    return O.card_kernels(H200, 989.5, 4800, None)


@pytest.fixture(scope="module")
def llama8b():
    return load_model("llama-3.1-8b")[0]


def _mb(spec, ck, **o):
    return TO.micro_batch_seconds(spec, build_job(o.pop("kind", "train"), o), ck)


def test_gemm_forward_is_the_tables_row(ck, llama8b):
    """Llama-3.1-8B's fused q/k/v (6144 x 4096) at M = 4096 tokens is a measured row of the
    H200 table: the forward GEMM is that row less the eager call's dispatch, and the three
    GEMMs of a layer's q/k/v (forward, input and weight gradients) are each of the order of it."""
    t = table_for(H200)
    row = dict(t.gemm["bf16"][(6144, 4096)])[4096]
    fwd = O.gemm_kernel_s(ck, 4096, 6144, 4096)
    assert fwd == pytest.approx(row - t.dispatch_s)
    dgrad = O.gemm_kernel_s(ck, 4096, 4096, 6144)
    wgrad = O.gemm_kernel_s(ck, 6144, 4096, 4096)
    for x in (dgrad, wgrad):
        assert 0.5 * fwd < x < 2 * fwd
    # the micro-batch's GEMM part is, layer by layer, the forward (M, n, k), the input
    # gradient (M, k, n) and the weight gradient (n, k, M) of each fused weight
    d = _mb(llama8b, ck, micro_batch=1, seq=4096)
    want = sum(g.layers * (O.gemm_kernel_s(ck, 4096, g.n, g.k) + O.gemm_kernel_s(ck, 4096, g.k, g.n)
                           + O.gemm_kernel_s(ck, g.n, g.k, 4096))
               for g in O.gemms(llama8b) if not g.name.startswith("lm_head"))  # fmt: skip
    assert d["parts"]["gemm"] == pytest.approx(want, rel=1e-9)
    swapped = sum(g.layers * 3 * O.gemm_kernel_s(ck, 4096, g.n, g.k) for g in O.gemms(llama8b)
                  if not g.name.startswith("lm_head"))  # fmt: skip
    assert swapped != pytest.approx(want, rel=1e-6)  # each shape is read apart from the table
    # 2 x 4096 x 6 x N FLOPs at the table's bf16 rates (between 500 and 800 TFLOPS here)
    n = sum(g.n * g.k * g.layers for g in O.gemms(llama8b) if not g.name.startswith("lm_head"))
    rate = 6 * 4096 * n / d["parts"]["gemm"] / 1e12
    assert 500 < rate < 800


def test_full_recompute_is_one_more_forward(ck, llama8b):
    base = _mb(llama8b, ck, micro_batch=1, seq=4096)
    full = _mb(llama8b, ck, micro_batch=1, seq=4096, checkpointing="full")
    sel = _mb(llama8b, ck, micro_batch=1, seq=4096, checkpointing="selective")
    assert base["parts"]["recompute"] == 0
    # full: the forward GEMMs again, about a third of their forward + backward
    assert full["parts"]["recompute"] > 0.3 * base["parts"]["gemm"]
    assert full["parts"]["recompute"] < 0.5 * (base["parts"]["gemm"] + base["parts"]["attention"]
                                               + base["parts"]["elementwise"])  # fmt: skip
    # selective: only the attention forward
    assert 0 < sel["parts"]["recompute"] < 0.5 * base["parts"]["attention"]


def test_lora_has_no_weight_gradient_gemms(ck, llama8b):
    full = _mb(llama8b, ck, micro_batch=1, seq=4096)
    lora = _mb(llama8b, ck, kind="lora", micro_batch=1, seq=4096)
    # forward + input gradient of the frozen base (+ the small adapters): about 2/3
    assert 0.6 < lora["parts"]["gemm"] / full["parts"]["gemm"] < 0.75


def test_fused_elementwise_moves_fewer_bytes(ck, llama8b):
    eager = _mb(llama8b, ck, micro_batch=2, seq=4096)
    fused = _mb(llama8b, ck, micro_batch=2, seq=4096, fused_kernels=True)
    h, qk, inter = 4096, (32 + 8) * 128, 14336
    want = (8 * h + 12 * h + 4 * qk + 6 * inter) / (72 * h + 12 * h + 20 * qk + 10 * inter)
    got = fused["parts"]["elementwise"] / eager["parts"]["elementwise"]
    assert got == pytest.approx(want, rel=0.05)
    assert fused["elementwise"].startswith("fused") and eager["elementwise"].startswith("eager")
    # Megatron's layers are fused whatever the flag says
    meg = _mb(llama8b, ck, micro_batch=2, seq=4096, framework="megatron")
    assert meg["parts"]["elementwise"] == fused["parts"]["elementwise"]


def test_fp8_gemms_are_faster_and_pay_their_casts(ck, llama8b):
    bf16 = _mb(llama8b, ck, micro_batch=2, seq=8192)
    fp8 = _mb(llama8b, ck, micro_batch=2, seq=8192, fp8=True)
    assert bf16["parts"]["fp8_casts"] == 0 < fp8["parts"]["fp8_casts"]
    # the table: fp8 runs 1.4-1.9 x the bf16 rate at these sizes
    assert 1.3 < bf16["parts"]["gemm"] / fp8["parts"]["gemm"] < 2.0
    assert fp8["parts"]["lm_head"] == bf16["parts"]["lm_head"]  # the head stays bf16


def test_small_model_waits_on_the_host(ck, llama8b):
    small = load_model("qwen3-0.6b")[0]
    d = _mb(small, ck, micro_batch=1, seq=128)
    assert d["host_bound"] and d["seconds"] == d["dispatch_s"] > d["gpu_s"]
    big = _mb(llama8b, ck, micro_batch=2, seq=8192)
    assert not big["host_bound"] and big["seconds"] == big["gpu_s"]


def test_optimizer_step_is_memory_bound(ck, llama8b):
    """AdamW on fp32 params / grads / states (FSDP2 mixed) over 8 ranks: 28 B per parameter
    at the card's copy rate; unsharded DDP bf16: 2 x 2 + 2 + 2 x 2 x 2 = 14 B on every param."""
    t = table_for(H200)
    n = llama8b.params_total()
    fsdp = TO.optimizer_seconds(llama8b, build_job("train", {"dp": 8, "shard": "fsdp"}), ck)
    assert fsdp == pytest.approx(t.copy_s(n / 8 * 28), rel=1e-6)
    ddp = TO.optimizer_seconds(llama8b, build_job("train", {}), ck)
    assert ddp == pytest.approx(t.copy_s(n * 14), rel=1e-6)


def test_fp8_weight_copies_in_the_ledger(llama8b):
    meg = build_job("train", {"fp8": True, "framework": "megatron", "tp": 2})
    b, persistent = fp8_weight_copy_bytes(llama8b, meg)
    # TensorGroup.numel counts every layer already
    linear = sum(t.numel for t in llama8b.tensors
                 if t.kind == "linear" and t.module in ("attn", "mlp"))  # fmt: skip
    assert 2 * linear / 2**30 == pytest.approx(13, rel=0.05)  # ~7 B linear parameters
    assert persistent and b == pytest.approx(2 * linear / 2, rel=1e-6)
    ao, persistent = fp8_weight_copy_bytes(llama8b, build_job("train", {"fp8": True}))
    assert not persistent and ao == pytest.approx(2 * linear / 32, rel=1e-6)  # one layer's
    assert fp8_weight_copy_bytes(llama8b, build_job("train", {})) == (0, False)


def test_cli_fp8_and_fused_kernels():
    d = cli_json("fit", "llama-3.1-8b", "--job", "train", "--machine", "hgx-h200", "--dp", "8",
                 "--shard", "fsdp", "--seq", "4096", "--micro-batch", "2", "--fp8",
                 "--fused-kernels", "--json")  # fmt: skip
    items = {i["name"] for i in d["cards"][0]["items"]}
    assert "fp8 weight copies (e4m3 + transpose)" in items
    ops = d["speed"]["operators"]
    assert ops["parts_s"]["fp8_casts"] > 0 and ops["elementwise"].startswith("fused")
    r = run_cli("fit", "llama-3.1-8b", "--job", "serve", "--fp8")
    assert r.returncode == 2 and "--fp8 does not apply to --job serve" in r.stderr
    with pytest.raises(JobError):
        build_job("serve", {"fused_kernels": True})


def test_op_sac_saved_set_follows_torchtitans_policy():
    """Every other bias-free matmul's output is kept (q, v, gate, down on Llama); a biased
    linear runs addmm, neither kept nor counted (Qwen2's q/k/v); the layer keeps its input and
    SDPA's output and logsumexp."""
    from nodeledger.ledger import activations as A
    from nodeledger.ledger.dims import dims_of

    d = dims_of(load_model("llama-3.1-8b")[0])
    assert A.op_sac_saved(d) == (True, False, True, False, True, False, True)
    h, q, kv, inter = 4096, 4096, 1024, 14336
    want = 2 * h + 2 * q + 2 * kv + 2 * inter + 2 * h + 2 * q + 4 * 32
    assert A.op_sac_bytes_per_token(d, "sdpa") == want
    assert A.op_sac_bytes_per_token(d, "eager") == want - 2 * q - 4 * 32
    qwen2 = dims_of(load_model(str(shared_model("Qwen2.5-7B")))[0])
    assert A.op_sac_saved(qwen2) == (False, False, False, True, False, True, False)
    moe = dims_of(load_model("qwen3-30b-a3b")[0])
    assert A.op_sac_supported(moe) is not None


def test_op_sac_sits_between_none_and_full_and_moe_is_refused():
    def peak(ckpt, model="qwen3-8b"):
        d = cli_json("fit", model, "--job", "train", "--micro-batch", "4", "--seq", "1024",
                     "--checkpointing", ckpt, "--machine", "hgx-h200", "--json", "--no-fail")  # fmt: skip
        return next(i["bytes"] for i in d["cards"][0]["items"]
                    if i["name"].startswith("saved activations"))  # fmt: skip

    none, op, full = peak("none"), peak("selective_op"), peak("full")
    assert full < op < none
    r = run_cli("fit", "qwen3-30b-a3b", "--job", "train", "--checkpointing", "selective_op")
    assert r.returncode == 2 and "dense decoder layers only" in r.stderr


def test_pipeline_first_stage_holds_the_micro_batches_in_flight():
    from nodeledger.ledger.build import pipeline_inflight

    assert pipeline_inflight(1, 8) == 1
    assert pipeline_inflight(4, 8) == 4  # 1F1B: pp forwards before the first backward
    assert pipeline_inflight(4, 2) == 2  # fewer micro-batches than stages: all of them
    assert pipeline_inflight(4, 16, chunks=2) == pytest.approx(4 + 3 / 2)  # Korthikanti 4.2.3

    spec = load_model("llama-3.1-8b")[0]
    from nodeledger.ledger.build import saved_activation_bytes_per_card
    from nodeledger.ledger.dims import dims_of

    d = dims_of(spec)
    one, _ = saved_activation_bytes_per_card(d, build_job("train", {"pp": 4, "grad_accum": 1}))
    four, _ = saved_activation_bytes_per_card(d, build_job("train", {"pp": 4, "grad_accum": 8}))
    assert four == pytest.approx(4 * one, rel=1e-6)


def test_virtual_pipeline_shrinks_the_bubble():
    from nodeledger.machine import resolve_machine
    from nodeledger.speed.train import train_speed

    spec = load_model("llama-3.1-8b")[0]
    m = resolve_machine("dgx-h100")
    plain = train_speed(spec, build_job("train", {"pp": 4, "grad_accum": 8}), m)
    inter = train_speed(spec, build_job("train", {"pp": 4, "grad_accum": 8,
                                                  "virtual_pipeline": 2}), m)  # fmt: skip
    assert plain["bubble_fraction"] == pytest.approx(3 / 8)
    assert inter["bubble_fraction"] == pytest.approx(3 / 16)
    with pytest.raises(JobError):
        build_job("train", {"virtual_pipeline": 2})  # needs --pp


def test_expert_parallel_splits_the_experts_and_pays_all_to_all():
    from nodeledger.ledger import model_state as MS
    from nodeledger.machine import resolve_machine
    from nodeledger.speed.train import train_speed

    spec = load_model("qwen3-30b-a3b")[0]
    ex = MS.expert_params(spec)
    dense = spec.params_total() - ex
    base = build_job("train", {"dp": 8, "framework": "megatron", "precision": "bf16"})
    ep8 = build_job("train", {"dp": 8, "framework": "megatron", "precision": "bf16", "ep": 8})
    # unsharded bf16 parameters: every expert on every card, or an eighth of them
    assert MS.param_bytes_per_card(spec, base) == spec.params_total() * 2
    assert MS.param_bytes_per_card(spec, ep8) == pytest.approx(2 * (dense + ex / 8), abs=2)
    # ZeRO-1 optimizer states: the dense part over dp, the experts over tp x dp / ep (= 1 here)
    z1 = build_job("train", {"dp": 8, "framework": "megatron", "shard": "zero1", "ep": 8})
    assert MS.optimizer_state_bytes_per_card(spec, z1) == pytest.approx(
        2 * 4 * (dense / 8 + ex / 8), rel=1e-6)  # fmt: skip
    m = resolve_machine("dgx-h100")
    d0 = train_speed(spec, build_job("train", {"dp": 8, "seq": 4096}), m)
    d8 = train_speed(spec, build_job("train", {"dp": 8, "seq": 4096, "ep": 8}), m)
    assert d0["ep_alltoall_s"] == 0 < d8["ep_alltoall_s"]
    # 4 all-to-alls x 48 layers x 4096 tokens x top-8 x 2048 x 2 B, 7/8 of it leaving the card
    bytes_ = 4 * 48 * 4096 * 8 * 2048 * 2 * 7 / 8
    bw = d8["inputs"]["ep_alltoall_busbw_gbps"]["value"]
    assert d8["ep_alltoall_s"] == pytest.approx(bytes_ / (bw * 1e9), rel=1e-6)
    with pytest.raises(JobError, match="must divide tp x dp"):
        build_job("train", {"dp": 4, "ep": 8})
    with pytest.raises(JobError, match="32 experts do not split over 64"):
        _ledger_of(load_model(str(shared_model("gpt-oss-20b")))[0], {"dp": 64, "ep": 64})
    r = run_cli("fit", "llama-3.1-8b", "--job", "train", "--dp", "8", "--ep", "8",
                "--machine", "dgx-h100")  # fmt: skip
    assert r.returncode == 2 and "no routed experts" in r.stderr


def _ledger_of(spec, opts):
    from nodeledger.ledger.build import train_ledger
    from nodeledger.machine import resolve_machine

    return train_ledger(spec, build_job("train", opts), resolve_machine("dgx-h100"))


def shared_model(name):
    from conftest import shared_models_or_skip

    return shared_models_or_skip() / name


def test_fp8_on_a_card_without_an_fp8_rate_is_unknown():
    from nodeledger.machine import resolve_machine
    from nodeledger.speed.train import train_speed

    spec = load_model("llama-3.1-8b")[0]
    d = train_speed(spec, build_job("train", {"dp": 8, "shard": "fsdp", "fp8": True}),
                    resolve_machine("dgx-a100-80g"))  # fmt: skip
    assert d["step_s"] is None and any("fp8" in u for u in d["unknown"])
    h = train_speed(spec, build_job("train", {"dp": 8, "shard": "fsdp", "fp8": True}),
                    resolve_machine("dgx-h100"))  # fmt: skip
    assert h["step_s"] is not None
    with pytest.raises(JobError, match="--fp8 is modelled for full training"):
        build_job("qlora", {"fp8": True})


def test_optimizer_step_follows_the_expert_split(ck):
    spec = load_model("qwen3-30b-a3b")[0]
    one = TO.optimizer_seconds(spec, build_job("train", {"dp": 8}), ck)
    eight = TO.optimizer_seconds(spec, build_job("train", {"dp": 8, "ep": 8}), ck)
    assert 4 < one / eight < 8  # the experts (most of the model) split over 8 cards
    off = build_job("train", {"dp": 8, "shard": "zero2", "offload": "optimizer"})
    assert TO.optimizer_seconds(spec, off, ck) == 0.0
