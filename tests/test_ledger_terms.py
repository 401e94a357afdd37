"""Ledger terms against hand derivations (each identity was also observed in
benchmarks/accuracy/measured.json; the accuracy bar itself is checked by the benchmark)."""

from __future__ import annotations

from nodeledger.ledger import state
from nodeledger.ledger.build import serve_ledger, train_ledger
from nodeledger.ledger.jobs import Parallel, ServeJob, TrainJob
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
    assert lg.cards[0].phases["optimizer step"] == 5 * p_bytes + ws


def test_mixed_fused_step_is_sixteen_bytes_per_param():
    spec, _ = load_model("meta-llama/Llama-3.1-8B")
    job = TrainJob(precision="mixed", optimizer_impl="fused", micro_batch=1, seq=512)
    lg = train_ledger(spec, job, H200)
    ws = sum(i.bytes for i in lg.cards[0].items if i.name.startswith("cuBLAS"))
    assert lg.cards[0].phases["optimizer step"] == 16 * spec.params_total() + ws


def test_hf_prefill_cache_is_whole_prompt():
    spec, _ = load_model("meta-llama/Llama-3.1-8B")
    lg = serve_ledger(spec, ServeJob(context=2048 + 16, new_tokens=16, concurrency=4), H200)
    kv = next(i for i in lg.cards[0].items if i.name.startswith("KV cache"))
    # 4 sequences x 2064 tokens x 32 layers x 2 x 8 heads x 128 x 2 B
    assert kv.bytes == 4 * 2064 * 131072


def test_lora_trainable_params_qkvo_r16():
    spec, _ = load_model("meta-llama/Llama-3.1-8B")
    job = TrainJob(rank=16, micro_batch=1, seq=512)
    # per layer r x (in + out): q 4096+4096, k 4096+1024, v 4096+1024, o 4096+4096
    assert state.trainable_params(spec, job) == 32 * 16 * (8192 + 5120 + 5120 + 8192)
    # peft keeps adapters in fp32: grads 4 B, AdamW states 8 B per trainable parameter
    assert state.grad_bytes_per_card(spec, job) == 4 * state.trainable_params(spec, job)
    assert state.optimizer_state_bytes_per_card(spec, job) == 8 * state.trainable_params(spec, job)


def test_zero3_shards_params_grads_and_states():
    spec, _ = load_model("Qwen/Qwen3-32B")
    one = TrainJob(micro_batch=1, seq=1024, shard="zero1", parallel=Parallel(dp=2))
    three = TrainJob(micro_batch=1, seq=1024, shard="zero3", parallel=Parallel(dp=8))
    n = spec.params_total()
    assert state.optimizer_state_bytes_per_card(spec, one) == 2 * n * 2 // 2
    assert state.param_bytes_per_card(spec, one) == 2 * n
    assert state.param_bytes_per_card(spec, three) == -(-2 * n // 8)
    assert state.grad_bytes_per_card(spec, three) == -(-2 * n // 8)


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
