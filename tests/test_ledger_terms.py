"""Ledger terms against hand derivations (each identity was also observed in
benchmarks/accuracy/measured.json; the accuracy bar itself is checked by the benchmark)."""

from __future__ import annotations

import pytest

from nodeledger.ledger import model_state
from nodeledger.ledger.build import serve_ledger, train_ledger
from nodeledger.ledger.jobs import JobError, Parallel, ServeJob, TrainJob
from nodeledger.machine import resolve_machine
from nodeledger.model import load_model

H200 = resolve_machine("hgx-h200")


def test_bf16_foreach_adamw_step_is_five_model_copies():
    spec, _ = load_model("meta-llama/Llama-3.1-8B")
    lg = train_ledger(spec, TrainJob(micro_batch=1, seq=512), H200)
    p_bytes = spec.params_total() * 2
    ws = sum(i.bytes for i in lg.cards[0].items if i.name.startswith("cuBLAS"))
    assert ws == 64 * 2**20  # two cuBLAS workspaces in training (measured on H200)
    # weights + grads + exp_avg + exp_avg_sq + the _foreach_sqrt temporary
    assert lg.cards[0].phases_bytes["optimizer step"] == 5 * p_bytes + ws


def test_mixed_fused_step_is_sixteen_bytes_per_param():
    spec, _ = load_model("meta-llama/Llama-3.1-8B")
    job = TrainJob(precision="mixed", optimizer_impl="fused", micro_batch=1, seq=512)
    lg = train_ledger(spec, job, H200)
    ws = sum(i.bytes for i in lg.cards[0].items if i.name.startswith("cuBLAS"))
    assert lg.cards[0].phases_bytes["optimizer step"] == 16 * spec.params_total() + ws


def test_hf_prefill_cache_is_whole_prompt():
    spec, _ = load_model("meta-llama/Llama-3.1-8B")
    lg = serve_ledger(spec, ServeJob(context=2048 + 16, new_tokens=16, concurrency=4), H200)
    kv = next(i for i in lg.cards[0].items if i.name.startswith("KV cache"))
    # 4 sequences x 2064 tokens x 32 layers x 2 x 8 heads x 128 x 2 B
    assert kv.bytes == 4 * 2064 * 131072


def test_lora_trainable_params_qkvo_r16():
    spec, _ = load_model("meta-llama/Llama-3.1-8B")
    job = TrainJob(rank=16, micro_batch=1, seq=512,
                   lora_targets=("q_proj", "k_proj", "v_proj", "o_proj"))  # fmt: skip
    # per layer r x (in + out): q 4096+4096, k 4096+1024, v 4096+1024, o 4096+4096
    assert model_state.trainable_params(spec, job) == 32 * 16 * (8192 + 5120 + 5120 + 8192)
    # peft keeps adapters in fp32: grads 4 B, AdamW states 8 B per trainable parameter
    assert model_state.grad_bytes_per_card(spec, job) == 4 * model_state.trainable_params(spec, job)
    assert model_state.optimizer_state_bytes_per_card(
        spec, job
    ) == 8 * model_state.trainable_params(spec, job)
    # --adapter-dtype bf16 (autocast_adapter_dtype=False): 2 B and 4 B
    bf = TrainJob(rank=16, lora_targets=job.lora_targets, adapter_dtype="bf16")
    assert model_state.grad_bytes_per_card(spec, bf) == 2 * model_state.trainable_params(spec, bf)


def test_lora_defaults_are_peft_s():
    """No --lora-targets: PEFT's default target modules for the model type (q_proj and v_proj
    for llama); a type PEFT has none for is refused, as PEFT raises."""
    spec, _ = load_model("meta-llama/Llama-3.1-8B")
    job = TrainJob(rank=8)
    assert model_state.lora_target_names(spec, job) == ("q_proj", "v_proj")
    assert model_state.trainable_params(spec, job) == 32 * 8 * (8192 + 5120)
    moe, _ = load_model("qwen3-30b-a3b")
    with pytest.raises(
        JobError, match="PEFT has no default LoRA target modules for model_type 'qwen3_moe'"
    ):
        model_state.lora_target_names(moe, job)


def test_framework_layouts_per_parameter():
    """Bytes of model state per parameter per card, each framework's data (frameworks.toml)."""
    from nodeledger.ledger import frameworks

    spec, _ = load_model("Qwen/Qwen3-32B")
    n = spec.params_total()
    ms = model_state

    def state(job):
        return (ms.param_bytes_per_card(spec, job) + ms.grad_bytes_per_card(spec, job)
                + ms.master_bytes_per_card(spec, job) + ms.grad_partition_bytes_per_card(spec, job)
                + ms.optimizer_state_bytes_per_card(spec, job) + ms.grad_bucket_bytes_per_card(spec, job))  # fmt: skip

    # DeepSpeed ZeRO-3 (bf16 mode): its estimator's 18 B / dp; ZeRO-1/2: 2 + 2 + 16 / dp
    z3 = TrainJob(shard="zero3", parallel=Parallel(dp=8))
    assert z3.framework == "deepspeed" and z3.precision == "bf16" and z3.optimizer_impl == "fused"
    assert ms.grad_bytes_per_card(spec, z3) == 0
    assert state(z3) == pytest.approx(18 * n / 8, abs=8)
    z1 = TrainJob(shard="zero1", parallel=Parallel(dp=2))
    assert state(z1) == pytest.approx((4 + 16 / 2) * n, abs=8)
    # FSDP2: torchtitan's fp32 parameters + bf16 MixedPrecisionPolicy by default, 16 B / dp;
    # pure bf16 8 B / dp
    f = TrainJob(shard="fsdp", parallel=Parallel(dp=8))
    assert f.framework == "fsdp2" and f.precision == "mixed"
    assert state(f) == pytest.approx(16 * n / 8, abs=8)
    fb = TrainJob(shard="fsdp", precision="bf16", parallel=Parallel(dp=8))
    assert state(fb) == pytest.approx(8 * n / 8, abs=8)
    assert ms.param_bytes_per_card(spec, fb) == -(-2 * n // 8)
    # Megatron: 18 B, distributed optimizer (--shard zero1) 6 + 12 / d (its docs' table)
    mg = TrainJob(framework="megatron", shard="zero1", parallel=Parallel(dp=8))
    assert state(mg) == pytest.approx((6 + 12 / 8) * n, abs=8)
    assert state(TrainJob(framework="megatron")) == pytest.approx(18 * n, abs=8)
    # DDP: the reducer's buckets are a second copy of the gradients (dp > 1)
    ddp = TrainJob(parallel=Parallel(dp=2))
    assert ms.grad_bucket_bytes_per_card(spec, ddp) == ms.grad_bytes_per_card(spec, ddp) == 2 * n
    assert ms.grad_bucket_bytes_per_card(spec, TrainJob()) == 0
    # HF Trainer hands --shard fsdp to FSDP1 with accelerate's fp32 upcast
    hf = TrainJob(framework="hf-trainer", shard="fsdp", parallel=Parallel(dp=8))
    assert frameworks.layout(hf).framework == "fsdp1" and frameworks.layout(hf).precision == "mixed"
    with pytest.raises(JobError, match="--framework ddp does not take --shard zero3"):
        TrainJob(framework="ddp", shard="zero3", parallel=Parallel(dp=8))


def test_total_adds_only_non_torch_items():
    spec, _ = load_model("qwen3-8b")
    card = serve_ledger(spec, ServeJob(context=4096, concurrency=2), H200).cards[0]
    assert card.total_bytes - card.torch_peak_bytes == sum(
        i.bytes for i in card.items if not i.torch
    )


def test_largest_serving_is_the_boundary():
    import dataclasses

    from nodeledger.verdict.fit import _within, largest_serving

    spec, _ = load_model("qwen3-8b")
    machine = resolve_machine(None)
    job = ServeJob(context=8192, concurrency=4)
    big = largest_serving(spec, job, machine)
    n = big["max_concurrency_at_context"]
    assert n >= 4
    assert _within(spec, dataclasses.replace(job, concurrency=n), machine)
    assert not _within(spec, dataclasses.replace(job, concurrency=n + 1), machine)
    c = big["max_context_at_concurrency"]
    assert _within(spec, dataclasses.replace(job, context=c), machine)
    if c < spec.max_position_embeddings:
        assert not _within(spec, dataclasses.replace(job, context=c + 1), machine)
    else:  # capped by the model's own context length
        assert c == spec.max_position_embeddings == 40960


# -- the term functions the ledgers are composed of (expected values derived by hand) ------

LLAMA_8B = "meta-llama/Llama-3.1-8B"  # h 4096, 32 layers, V 128256, 32 heads, 8 KV heads x 128


def test_kv_split_and_per_card_cache():
    from nodeledger.ledger import kv_cache as kv

    spec, _ = load_model(LLAMA_8B)
    dsv3, _ = load_model("deepseek-ai/DeepSeek-V3")
    assert kv.kv_split_across_tp(spec, 2) == 2
    assert kv.kv_split_across_tp(spec, 16) == 8  # 8 KV heads: replicated beyond tp 8
    assert kv.kv_split_across_tp(dsv3, 8) == 1  # MLA's latent is not split
    # 1000 tokens x 32 layers x 2 x 8 x 128 x 2 B x 3 sequences / 2 cards
    assert kv.kv_cache_bytes_per_card(spec, 1000, 2, 3, 2) == 1000 * 32 * 4096 * 3 // 2
    # torch.cat growth: one layer's 2 x 8 x 128 elements x 2 B x 1000 tokens x 3 seqs / tp 2
    assert kv.cache_growth_bytes_per_card(spec, 1000, 2, 3, 2) == 2048 * 2 * 1000 * 3 // 2
    # vLLM: 131072 B per token / 4 cards (a page: 16 tokens of one layer); 1000 tokens occupy
    # 63 blocks of 16
    per_token = kv.paged_page_bytes_per_layer(spec, 16, 2, 4) * 32 / 16
    assert per_token == 32768
    assert kv.paged_kv_bytes_per_sequence(per_token, 1000, 16) == 63 * 16 * 32768


def test_runtime_terms():
    from nodeledger.ledger import runtime as rt

    mib = 2**20
    assert rt.cublas_workspace_bytes() == 32 * mib
    assert rt.cublas_workspace_bytes(training=True) == 64 * mib
    assert rt.serving_communicators(1) == 0 and rt.serving_communicators(4) == 1
    assert rt.training_communicators(1, 1, 1) == 0
    assert rt.training_communicators(2, 1, 8) == 2
    assert rt.training_communicators(2, 2, 2) == 3


def test_activation_terms():
    from nodeledger.ledger import activations as act
    from nodeledger.ledger.dims import dims_of

    spec, _ = load_model(LLAMA_8B)
    d = dims_of(spec)  # intermediate 14336, gated
    assert act.checkpointed_inputs_bytes(d, 32, 512) == 32 * 2 * 4096 * 512
    assert act.embedding_grad_transient_bytes(d) == 4 * 128256 * 4096
    assert act.lm_head_autocast_copy_bytes(d) == 2 * 128256 * 4096
    # max(3 x loss_saved, recompute + 4h x tokens); 4h x 2 tokens = 32768
    assert act.loss_backward_bytes(20000, 10, d, 2) == 60000
    assert act.loss_backward_bytes(100, 10, d, 2) == 10 + 32768
    # sdpa prefill: the MLP moment, 2 x 100 tokens x (8h + 6I): four h-wide tensors (the model's
    # input embeddings, the layer's input, the residual, its normed copy) beside the MLP's three
    assert act.inference_prefill_transient_bytes(d, 2, 100, "sdpa") == 200 * (8 * 4096 + 6 * 14336)
    # a serving engine's own model code holds no input embeddings: 6h + 6I
    assert act.inference_layer_transient_bytes(d, 200, transformers=False) == 200 * 6 * (
        4096 + 14336
    )
    # eager prefill of 1 x 1000: 10 B per score x 32 heads x 1000^2 + bf16 mask 2 x 1000^2
    # + 1000 x (6h + 4q) beside them; larger than the MLP moment 1000 x (6h + 6I)
    eager = 10 * 32 * 1000**2 + 2 * 1000**2 + 1000 * (6 * 4096 + 4 * 4096)
    assert act.inference_prefill_transient_bytes(d, 1, 1000, "eager") == eager


def test_lora_activations_full_checkpointing_keep_stage_inputs():
    from nodeledger.ledger import activations as act
    from nodeledger.ledger.dims import dims_of

    spec, _ = load_model(LLAMA_8B)
    d = dims_of(spec)
    targets = ("q_proj", "v_proj")
    per_layer = act.saved_lora_layer_bytes(d, 2, 256, "sdpa", targets, 16)
    held, recompute = act.saved_lora_activations_bytes(d, 2, 256, "sdpa", "full", targets, 16, 2)
    assert held == 16 * 2 * 4096 * 512  # 16 layers per stage x 2h x 512 tokens
    assert recompute == per_layer
    held, recompute = act.saved_lora_activations_bytes(d, 2, 256, "sdpa", "none", targets, 16, 2)
    assert (held, recompute) == (16 * per_layer, 0)


def test_state_offload_and_gather_terms():
    spec, _ = load_model("Qwen/Qwen3-32B")  # 64 layers
    n = spec.params_total()
    zero3 = TrainJob(shard="zero3", offload="params", grad_accum=4, parallel=Parallel(dp=8))
    zero2 = TrainJob(shard="zero2", parallel=Parallel(dp=8))
    body = n - model_state._root_params(spec)  # the root unit (embeddings, norm, lm_head) apart
    assert model_state.gathered_layer_param_bytes(spec, zero3) == 2 * (2 * body // 64)
    assert model_state.gathered_layer_param_bytes(spec, zero2) == 0
    assert model_state.offloaded_optimizer_host_bytes(spec, zero3) == 16 * n
    assert model_state.offloaded_param_host_bytes(spec, zero3) == -(-2 * n // 8) * 8
    # DeepSpeed ZeRO-3 reduces straight into its fp32 partition: no full-size gradients held
    assert model_state.accumulated_grad_bytes(spec, zero3) == 0
    assert model_state.accumulated_grad_bytes(spec, zero2) == 0  # grad_accum 1


def test_host_and_load_terms():
    from nodeledger.ledger import build
    from nodeledger.ledger.jobs import HostSide, LoadJob

    assert build.process_rss_bytes(4) == 12 * 2**30
    job = TrainJob(
        seq=1024, micro_batch=2, host=HostSide(workers=4, prefetch=2), parallel=Parallel(dp=2)
    )
    # 2 ranks x 4 workers x (300 MiB + 2 prefetched batches x 2 samples x 1024 x 3 x 8 B)
    assert build.dataloader_host_bytes(job) == 8 * (300 * 2**20 + 2 * 2 * 1024 * 24)
    assert build.load_cpu_copies(LoadJob(ranks=4)) == 4
    assert build.load_cpu_copies(LoadJob(ranks=4, strategy="rank0")) == 1
    assert build.load_cpu_copies(LoadJob(ranks=4, strategy="meta")) == 0
    assert build.load_cpu_copies(LoadJob(ranks=3, format="bin")) == 3
    assert build.load_cpu_copies(LoadJob(ranks=3, format="bin", strategy="meta")) == 1
    assert build.weights_bytes_per_card(10, 4) == 3
    assert build.vllm_budget_bytes(None, 0.9) is None
    assert build.vllm_budget_bytes(1000, 0.9) == 900
    assert build.vllm_kv_pool_bytes(900, 500, 100) == 300
    assert build.vllm_kv_pool_bytes(None, 500, 100) is None


def test_train_phases_sum_their_terms():
    from nodeledger.ledger.build import train_phases

    phases = train_phases(
        resident_bytes=1000, accumulated_grads_bytes=100, grads_bytes=200, autocast_bytes=30,
        held_bytes=400, loss_peak_bytes=50, backward_extra_bytes=70, optimizer_temp_bytes=9,
        embedding_grad_bytes=5, workspace_bytes=1,
    )  # fmt: skip
    assert phases == {
        "forward (loss)": 1000 + 100 + 30 + 400 + 50 + 1,
        "backward": 1000 + 100 + 30 + 400 + 70 + 1,
        "optimizer step": 1000 + 200 + 9 + 1,
        "backward (embedding grad)": 1000 + 200 + 5 + 1,
    }


def test_tensor_parallel_keeps_layer_inputs_whole_without_sequence_parallelism():
    """TP alone splits what column/row-parallel linears split; the checkpointed layer inputs
    (2 h per token per layer) stay whole on every rank unless --sequence-parallel."""
    from nodeledger.ledger.build import saved_activation_bytes_per_card
    from nodeledger.ledger.dims import dims_of

    spec, _ = load_model("Qwen/Qwen3-32B")
    d = dims_of(spec)
    tp = TrainJob(micro_batch=32, seq=2048, checkpointing="full", parallel=Parallel(tp=8))
    sp = TrainJob(micro_batch=32, seq=2048, checkpointing="full", parallel=Parallel(tp=8),
                  sequence_parallel=True)  # fmt: skip
    inputs = 64 * 32 * 2048 * 5120 * 2  # layers x tokens x hidden x bf16 = 40 GiB
    assert saved_activation_bytes_per_card(d, tp)[0] == inputs
    assert saved_activation_bytes_per_card(d, sp)[0] == inputs // 8
    with pytest.raises(JobError, match="--sequence-parallel needs --tp > 1"):
        TrainJob(sequence_parallel=True)


def test_fsdp_root_unit_and_backward_working_set():
    """FSDP2 as measured on an 8-rank fake process group (benchmarks/accuracy/sharded): the root
    unit (embeddings + lm_head) stays gathered, one layer's all-gather buffer is kept in
    forward, and a layer's backward holds 3 layers gathered plus, with an fp32 reduce dtype,
    the reduce-scatter input; DeepSpeed ZeRO-3 keeps none of these."""
    spec, _ = load_model("Qwen/Qwen3-32B")
    root = 2 * 151936 * 5120  # embeddings + untied lm_head
    layer = (spec.params_total() - root - 5120) // 64
    bf = TrainJob(shard="fsdp", precision="bf16", parallel=Parallel(dp=8))
    mixed = TrainJob(shard="fsdp", parallel=Parallel(dp=8))
    assert model_state.root_unit_bytes(spec, bf) == 2 * (root + 5120)
    assert model_state.gathered_layer_param_bytes(spec, bf) == pytest.approx(2 * layer, abs=64)
    assert model_state.fsdp_backward_layer_bytes(spec, bf) == pytest.approx(3 * 2 * layer, abs=64)
    # reduce_dtype fp32 beside bf16 compute: + one layer of fp32 gradients
    assert model_state.fsdp_backward_layer_bytes(spec, mixed) == pytest.approx(
        3 * 2 * layer + 4 * layer, abs=64
    )
    assert model_state.fsdp_root_grad_bytes(spec, bf) == 2 * 151936 * 5120
    z3 = TrainJob(shard="zero3", parallel=Parallel(dp=8))
    assert (
        model_state.root_unit_bytes(spec, z3)
        == model_state.fsdp_backward_layer_bytes(spec, z3)
        == 0
    )
    assert model_state.gathered_layer_param_bytes(spec, z3) == pytest.approx(2 * 2 * layer, abs=64)


def test_tp_loss_is_whole_unless_vocab_parallel():
    """With --tp, transformers' and DTensor's TP gather the logits to every rank for the loss;
    Megatron's vocab-parallel cross-entropy keeps 1/tp of them."""
    spec, _ = load_model("meta-llama/Llama-3.1-8B")
    m = resolve_machine("hgx-h200")

    def loss(job):
        card = train_ledger(spec, job, m).cards[0]
        return next(i.bytes for i in card.items if i.name.startswith("loss"))

    dt = loss(TrainJob(seq=2048, parallel=Parallel(tp=8)))
    mg = loss(TrainJob(seq=2048, framework="megatron", parallel=Parallel(tp=8)))
    assert dt == pytest.approx(8 * mg, rel=1e-6)
