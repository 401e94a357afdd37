"""Write cases.json (the case list measured by run_cases.py).  Edit here, re-run, commit both.

Field names are read by another program -- keep them exactly:
  serve: id, model, config_overrides, job="serve", engine="hf", dtype, attention, concurrency, context, new_tokens
  train: id, model, config_overrides, job="train", dtype, precision ("bf16"|"mixed"), optimizer, optimizer_impl
         ("foreach"|"fused"|"forloop"), checkpointing ("none"|"full"), attention, micro_batch, seq
  lora:  id, model, config_overrides, job="lora", dtype, rank, target_modules, lora_alpha, optimizer, optimizer_impl,
         checkpointing, attention, micro_batch, seq
Optional extras (harness defaults when absent):
  sdpa_emulation: "cuda" -> on the fake device, call the SDPA kernel CUDA would pick (see harness.py)
  use_cache: false       -> pass use_cache=False to the training forward (default: the model's config)
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent

QKVO = ["q_proj", "k_proj", "v_proj", "o_proj"]
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def serve(cid, model, b, s, t, attention="sdpa", overrides=None, **extra):
    return {
        "id": cid,
        "model": model,
        "config_overrides": overrides or {},
        "job": "serve",
        "engine": "hf",
        "dtype": "bf16",
        "attention": attention,
        "concurrency": b,
        "context": s,
        "new_tokens": t,
        **extra,
    }


def train(
    cid,
    model,
    b,
    s,
    precision="bf16",
    impl="foreach",
    ckpt="none",
    attention="sdpa",
    overrides=None,
    **extra,
):
    return {
        "id": cid,
        "model": model,
        "config_overrides": overrides or {},
        "job": "train",
        "dtype": "bf16",
        "precision": precision,
        "optimizer": "adamw",
        "optimizer_impl": impl,
        "checkpointing": ckpt,
        "attention": attention,
        "micro_batch": b,
        "seq": s,
        **extra,
    }


def lora(
    cid,
    model,
    b,
    s,
    rank=16,
    targets=QKVO,
    alpha=32,
    impl="foreach",
    ckpt="none",
    attention="sdpa",
    overrides=None,
    **extra,
):
    return {
        "id": cid,
        "model": model,
        "config_overrides": overrides or {},
        "job": "lora",
        "dtype": "bf16",
        "rank": rank,
        "target_modules": list(targets),
        "lora_alpha": alpha,
        "optimizer": "adamw",
        "optimizer_impl": impl,
        "checkpointing": ckpt,
        "attention": attention,
        "micro_batch": b,
        "seq": s,
        **extra,
    }


MOE_L4 = {"num_hidden_layers": 4}
DSV3_L4 = {"num_hidden_layers": 4, "first_k_dense_replace": 1}
DSV3_L2 = {
    "num_hidden_layers": 2,
    "first_k_dense_replace": 1,
}  # 1 dense + 1 MoE layer: trains within 141 GB

CASES = [
    # ---------------- serve (hf generate emulation) ----------------
    serve("qwen3-0.6b-serve-b4-s1024", "Qwen3-0.6B", 4, 1024, 16),
    serve("qwen3-0.6b-serve-b1-s8192-prefill", "Qwen3-0.6B", 1, 8192, 4),
    serve("qwen3-0.6b-serve-b32-s128-t128-decode", "Qwen3-0.6B", 32, 128, 128),
    serve("llama3.2-1b-serve-b8-s2048-t32", "Llama-3.2-1B", 8, 2048, 32),
    serve("llama3.2-3b-serve-b1-s4096-t16", "Llama-3.2-3B", 1, 4096, 16),
    serve("llama3.1-8b-serve-b4-s2048-t16", "Llama-3.1-8B", 4, 2048, 16),
    serve("llama3.1-8b-serve-b16-s512-t64-decode", "Llama-3.1-8B", 16, 512, 64),
    serve("llama3.1-8b-serve-b4-s2048-t16-eager", "Llama-3.1-8B", 4, 2048, 16, attention="eager"),
    serve("qwen2.5-7b-serve-b2-s4096-t16", "Qwen2.5-7B", 2, 4096, 16),
    serve("qwen2.5-1.5b-serve-b16-s1024-t64", "Qwen2.5-1.5B-Instruct", 16, 1024, 64),
    serve("qwen3-8b-serve-b1-s16384-t4-prefill", "Qwen3-8B", 1, 16384, 4),
    serve("mistral-7b-serve-b4-s2048-t16", "Mistral-7B-v0.1", 4, 2048, 16),
    serve("gemma2-9b-serve-b2-s2048-t16", "Gemma-2-9B-it", 2, 2048, 16, attention="eager"),
    serve("phi3-mini-serve-b4-s1024-t16", "Phi-3-mini-4k-instruct", 4, 1024, 16),
    serve("phi3-mini-serve-b2-s3072-t16-slidingwin", "Phi-3-mini-4k-instruct", 2, 3072, 16),
    serve("tinyllama-serve-b64-s256-t64-decode", "TinyLlama-1.1B-Chat-v1.0", 64, 256, 64),
    serve("gpt2-serve-b8-s1000-t16", "gpt2", 8, 1000, 16),
    serve("opt-125m-serve-b8-s1024-t32", "OPT-125m", 8, 1024, 32),
    serve("bloomz-560m-serve-b4-s1024-t16", "bloomz-560m", 4, 1024, 16, attention="eager"),
    serve(
        "qwen3-30b-a3b-L8-serve-b4-s2048-t16",
        "Qwen3-30B-A3B",
        4,
        2048,
        16,
        overrides={"num_hidden_layers": 8},
    ),
    serve("mixtral-8x7b-L4-serve-b4-s4096-t16", "Mixtral-8x7B-v0.1", 4, 4096, 16, overrides=MOE_L4),
    serve("deepseek-v3-L4-serve-b2-s2048-t16", "DeepSeek-V3", 2, 2048, 16, overrides=DSV3_L4),
    serve(
        "deepseek-v3-L4-serve-b2-s2048-t16-cudaemu",
        "DeepSeek-V3",
        2,
        2048,
        16,
        overrides=DSV3_L4,
        sdpa_emulation="cuda",
    ),
    serve(
        "gpt-oss-20b-L4-serve-b4-s2048-t16",
        "gpt-oss-20b",
        4,
        2048,
        16,
        attention="eager",
        overrides=MOE_L4,
    ),
    # ---------------- full fine-tune ----------------
    train("llama3.2-1b-train-bf16-foreach-b2-s512", "Llama-3.2-1B", 2, 512),
    train(
        "llama3.2-1b-train-bf16-foreach-b2-s512-nocache", "Llama-3.2-1B", 2, 512, use_cache=False
    ),
    train("llama3.2-1b-train-bf16-fused-b4-s1024", "Llama-3.2-1B", 4, 1024, impl="fused"),
    train("llama3.2-1b-train-bf16-forloop-b2-s512", "Llama-3.2-1B", 2, 512, impl="forloop"),
    train("llama3.2-1b-train-mixed-foreach-b2-s512", "Llama-3.2-1B", 2, 512, precision="mixed"),
    train(
        "llama3.2-1b-train-mixed-fused-ckpt-b8-s1024",
        "Llama-3.2-1B",
        8,
        1024,
        precision="mixed",
        impl="fused",
        ckpt="full",
    ),
    train("llama3.2-1b-train-bf16-foreach-ckpt-b8-s2048", "Llama-3.2-1B", 8, 2048, ckpt="full"),
    train(
        "llama3.2-1b-train-bf16-foreach-b2-s1024-eager", "Llama-3.2-1B", 2, 1024, attention="eager"
    ),
    train("qwen3-0.6b-train-bf16-foreach-b4-s1024", "Qwen3-0.6B", 4, 1024),
    train(
        "qwen3-0.6b-train-mixed-foreach-ckpt-b4-s2048",
        "Qwen3-0.6B",
        4,
        2048,
        precision="mixed",
        ckpt="full",
    ),
    train("qwen2.5-1.5b-train-bf16-fused-b2-s2048", "Qwen2.5-1.5B-Instruct", 2, 2048, impl="fused"),
    train("llama3.1-8b-train-bf16-foreach-b1-s2048", "Llama-3.1-8B", 1, 2048),
    train(
        "llama3.1-8b-train-bf16-fused-ckpt-b4-s4096",
        "Llama-3.1-8B",
        4,
        4096,
        impl="fused",
        ckpt="full",
    ),
    train(
        "llama3.1-8b-train-mixed-fused-ckpt-b2-s2048",
        "Llama-3.1-8B",
        2,
        2048,
        precision="mixed",
        impl="fused",
        ckpt="full",
    ),
    train("qwen3-8b-train-bf16-foreach-ckpt-b2-s1024", "Qwen3-8B", 2, 1024, ckpt="full"),
    train(
        "phi3-mini-train-bf16-foreach-ckpt-b2-s1024", "Phi-3-mini-4k-instruct", 2, 1024, ckpt="full"
    ),
    train(
        "gemma2-9b-train-bf16-fused-ckpt-b1-s1024-eager",
        "Gemma-2-9B-it",
        1,
        1024,
        impl="fused",
        ckpt="full",
        attention="eager",
    ),
    train("gpt2-train-mixed-foreach-b8-s1024", "gpt2", 8, 1024, precision="mixed"),
    train(
        "gpt2-train-mixed-foreach-b8-s1024-cudaemu",
        "gpt2",
        8,
        1024,
        precision="mixed",
        sdpa_emulation="cuda",
    ),
    train("opt-125m-train-bf16-foreach-b8-s1024", "OPT-125m", 8, 1024),
    train(
        "qwen3-30b-a3b-L4-train-bf16-foreach-b2-s1024", "Qwen3-30B-A3B", 2, 1024, overrides=MOE_L4
    ),
    train(
        "mixtral-8x7b-L2-train-bf16-fused-ckpt-b1-s2048",
        "Mixtral-8x7B-v0.1",
        1,
        2048,
        impl="fused",
        ckpt="full",
        overrides={"num_hidden_layers": 2},
    ),
    train("deepseek-v3-L2-train-bf16-foreach-b1-s1024", "DeepSeek-V3", 1, 1024, overrides=DSV3_L2),
    train(
        "deepseek-v3-L2-train-bf16-fused-b1-s1024",
        "DeepSeek-V3",
        1,
        1024,
        impl="fused",
        overrides=DSV3_L2,
    ),
    train(
        "deepseek-v3-L2-train-bf16-fused-b1-s1024-cudaemu",
        "DeepSeek-V3",
        1,
        1024,
        impl="fused",
        overrides=DSV3_L2,
        sdpa_emulation="cuda",
    ),
    train(
        "deepseek-v3-L2-train-bf16-foreach-b1-s1024-cudaemu",
        "DeepSeek-V3",
        1,
        1024,
        overrides=DSV3_L2,
        sdpa_emulation="cuda",
    ),
    # ---------------- LoRA ----------------
    lora("llama3.1-8b-lora-r16-qkvo-b2-s512", "Llama-3.1-8B", 2, 512),
    lora(
        "llama3.1-8b-lora-r64-alllinear-b4-s1024",
        "Llama-3.1-8B",
        4,
        1024,
        rank=64,
        alpha=128,
        targets=ALL_LINEAR,
    ),
    lora("llama3.1-8b-lora-r16-qkvo-ckpt-b8-s2048", "Llama-3.1-8B", 8, 2048, ckpt="full"),
    lora(
        "qwen3-0.6b-lora-r8-qv-b8-s1024",
        "Qwen3-0.6B",
        8,
        1024,
        rank=8,
        alpha=16,
        targets=["q_proj", "v_proj"],
    ),
    lora("mistral-7b-lora-r16-qkvo-fused-b2-s2048", "Mistral-7B-v0.1", 2, 2048, impl="fused"),
    lora("qwen3-30b-a3b-L4-lora-r16-qkvo-b2-s1024", "Qwen3-30B-A3B", 2, 1024, overrides=MOE_L4),
]


# Families not measured before (issue 30): attention sinks (gpt-oss), Gated DeltaNet (Qwen3-Next),
# ERNIE-4.5 MoE, Mistral-3 (Magistral) and Gemma-3 (sliding windows) behind multimodal wrappers,
# ALiBi (BLOOM) training and LoRA, GLM-4.5 MoE, Falcon (multi-query, parallel attention), Phi-4's
# fused projections under LoRA.  Layer counts cut to fit the fake run; patterns kept.
# (Magistral / MedGemma are left out: transformers' Mistral3 / Gemma3 wrappers do not build
# for AutoModelForCausalLM or read a tensor back inside FakeTensorMode.)
FAMILY_CASES = [
    # gpt-oss and BLOOM have no SDPA path in transformers (_supports_sdpa = False): eager is what
    # transformers runs for them, and what nodeledger picks by default
    serve(
        "gpt-oss-20b-L4-serve-b1-s8192-t4-prefill",
        "gpt-oss-20b",
        1,
        8192,
        4,
        attention="eager",
        overrides=MOE_L4,
    ),
    train(
        "gpt-oss-20b-L4-train-bf16-foreach-b1-s1024",
        "gpt-oss-20b",
        1,
        1024,
        attention="eager",
        overrides=MOE_L4,
    ),
    lora(
        "gpt-oss-20b-L4-lora-r16-qkvo-b2-s1024",
        "gpt-oss-20b",
        2,
        1024,
        attention="eager",
        overrides=MOE_L4,
    ),
    serve(
        "qwen3-next-L4-serve-b1-s16384-t4-prefill",
        "Qwen3-Next-80B-A3B-Instruct",
        1,
        16384,
        4,
        overrides=MOE_L4,
    ),
    serve(
        "qwen3-next-L4-serve-b8-s4096-t16",
        "Qwen3-Next-80B-A3B-Instruct",
        8,
        4096,
        16,
        overrides=MOE_L4,
    ),
    train(
        "qwen3-next-L4-train-bf16-foreach-b1-s2048",
        "Qwen3-Next-80B-A3B-Instruct",
        1,
        2048,
        overrides=MOE_L4,
    ),
    serve(
        "ernie4.5-21b-L4-serve-b4-s2048-t16",
        "ERNIE-4.5-21B-A3B-Thinking",
        4,
        2048,
        16,
        overrides=MOE_L4,
    ),
    train(
        "ernie4.5-21b-L4-train-bf16-foreach-b2-s1024",
        "ERNIE-4.5-21B-A3B-Thinking",
        2,
        1024,
        overrides=MOE_L4,
    ),
    lora(
        "ernie4.5-21b-L4-lora-r16-qkvo-b2-s1024",
        "ERNIE-4.5-21B-A3B-Thinking",
        2,
        1024,
        overrides=MOE_L4,
    ),
    train("bloomz-560m-train-bf16-foreach-b4-s1024", "bloomz-560m", 4, 1024, attention="eager"),
    lora(
        "bloomz-560m-lora-r16-qkv-b4-s1024",
        "bloomz-560m",
        4,
        1024,
        attention="eager",
        targets=["query_key_value"],
    ),
    serve("glm4.5-L4-serve-b2-s2048-t16", "GLM-4.5", 2, 2048, 16, overrides=MOE_L4),
    train("glm4.5-L4-train-bf16-foreach-b1-s1024", "GLM-4.5", 1, 1024, overrides=MOE_L4),
    serve(
        "falcon-180b-L2-serve-b2-s2048-t16",
        "Falcon-180B-chat",
        2,
        2048,
        16,
        overrides={"num_hidden_layers": 2},
    ),
    train(
        "falcon-180b-L2-train-bf16-foreach-b1-s1024",
        "Falcon-180B-chat",
        1,
        1024,
        overrides={"num_hidden_layers": 2},
    ),
    lora(
        "phi4-L8-lora-r16-alllinear-b2-s1024",
        "Phi-4",
        2,
        1024,
        targets=["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],
        overrides={"num_hidden_layers": 8},
    ),
]
# A state-space hybrid (issue 30): Nemotron-H's Mamba-2 / attention / MLP layers, its config
# kept in tests/fixtures/models (PROVENANCE.md); 8 of its 52 layers, every kind kept
NEMOTRON_H_L8 = {"num_hidden_layers": 8, "hybrid_override_pattern": "M-M*-M-M"}
FAMILY_CASES += [
    serve(
        "nemotron-h-8b-L8-serve-b2-s4096-t16",
        "Nemotron-H-8B-Base-8K",
        2,
        4096,
        16,
        overrides=NEMOTRON_H_L8,
        fixtures="project",
    ),
    serve(
        "nemotron-h-8b-L8-serve-b1-s16384-t4-prefill",
        "Nemotron-H-8B-Base-8K",
        1,
        16384,
        4,
        overrides={**NEMOTRON_H_L8, "max_position_embeddings": 32768},
        fixtures="project",
    ),
    serve(
        "nemotron-h-8b-L8-serve-b32-s512-t64-decode",
        "Nemotron-H-8B-Base-8K",
        32,
        512,
        64,
        overrides=NEMOTRON_H_L8,
        fixtures="project",
    ),
    train(
        "nemotron-h-8b-L8-train-bf16-foreach-b1-s2048",
        "Nemotron-H-8B-Base-8K",
        1,
        2048,
        overrides=NEMOTRON_H_L8,
        fixtures="project",
    ),
]
FAMILY_CASES += [
    train(
        "nemotron-h-8b-L8-train-bf16-foreach-b2-s4096",
        "Nemotron-H-8B-Base-8K",
        2,
        4096,
        overrides=NEMOTRON_H_L8,
        fixtures="project",
    ),
]
FAMILY_CASES += [
    lora(
        "nemotron-h-8b-L8-lora-r16-inproj-qkvo-b2-s2048",
        "Nemotron-H-8B-Base-8K",
        2,
        2048,
        targets=["in_proj", "q_proj", "k_proj", "v_proj", "o_proj"],
        overrides=NEMOTRON_H_L8,
        fixtures="project",
    ),
    lora(
        "nemotron-h-8b-L8-lora-r8-inproj-updown-b1-s4096",
        "Nemotron-H-8B-Base-8K",
        1,
        4096,
        rank=8,
        alpha=16,
        targets=["in_proj", "up_proj", "down_proj"],
        overrides=NEMOTRON_H_L8,
        fixtures="project",
    ),
]
# Mistral's sliding window (4,096) at a 32k prefill (issue 30: under-counted by 6 %)
FAMILY_CASES += [
    serve("mistral-7b-serve-b1-s32760-t4-prefill-swa", "Mistral-7B-v0.1", 1, 32760, 4),
    serve("mistral-7b-serve-b2-s16384-t4-prefill-swa", "Mistral-7B-v0.1", 2, 16384, 4),
]
CASES += FAMILY_CASES
# torchtitan's op-level selective activation checkpointing (issue 28: the speed model recomputes
# what the ledger does not save): split q/k/v, biased q/k/v (addmm: not counted), fused qkv
OP_SAC_CASES = [
    train(
        "llama3.2-1b-train-bf16-opsac-b4-s1024-cudasdpa",
        "Llama-3.2-1B",
        4,
        1024,
        ckpt="selective_op",
        sdpa_emulation="cuda",
    ),
    train(
        "qwen2.5-1.5b-train-bf16-opsac-b4-s1024-cudasdpa",
        "Qwen2.5-1.5B-Instruct",
        4,
        1024,
        ckpt="selective_op",
        sdpa_emulation="cuda",
    ),
    train(
        "phi3-mini-train-bf16-opsac-b2-s1024-cudasdpa",
        "Phi-3-mini-4k-instruct",
        2,
        1024,
        ckpt="selective_op",
        sdpa_emulation="cuda",
    ),
    train(
        "qwen3-8b-train-mixed-opsac-b2-s2048-cudasdpa",
        "Qwen3-8B",
        2,
        2048,
        ckpt="selective_op",
        precision="mixed",
        sdpa_emulation="cuda",
    ),
]
CASES += OP_SAC_CASES
# Nemotron 3 Nano (NemotronH with MoE layers 'E', transformers 5): 8 of its layers, every kind
# kept; config in tests/fixtures/models (PROVENANCE.md).  The _latent cases set moe_latent_size
# (the latent projections around the experts, as Nemotron 3 Super's config has them; no config
# of that model is in the fixtures, so Nano's shapes with a latent of 1,024 stand in).
NEMOTRON3_L8 = {"num_hidden_layers": 8, "hybrid_override_pattern": "MEM*EMEM"}
NEMOTRON3_LATENT = {**NEMOTRON3_L8, "moe_latent_size": 1024}
NANO = "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"
MOE_PATH_CASES = [
    serve(
        "nemotron3-nano-30b-L8-serve-b2-s4096-t16",
        NANO,
        2,
        4096,
        16,
        overrides=NEMOTRON3_L8,
        fixtures="project",
    ),
    serve(
        "nemotron3-nano-30b-L8-serve-b1-s16384-t4-prefill",
        NANO,
        1,
        16384,
        4,
        overrides=NEMOTRON3_L8,
        fixtures="project",
    ),
    serve(
        "nemotron3-nano-30b-L8-serve-b32-s512-t64-decode",
        NANO,
        32,
        512,
        64,
        overrides=NEMOTRON3_L8,
        fixtures="project",
    ),
    train(
        "nemotron3-nano-30b-L8-train-bf16-foreach-b1-s2048",
        NANO,
        1,
        2048,
        overrides=NEMOTRON3_L8,
        fixtures="project",
    ),
    serve(
        "nemotron3-nano-30b-L8-latent1024-serve-b2-s4096-t16",
        NANO,
        2,
        4096,
        16,
        overrides=NEMOTRON3_LATENT,
        fixtures="project",
    ),
    serve(
        "nemotron3-nano-30b-L8-latent1024-serve-b1-s16384-t4-prefill",
        NANO,
        1,
        16384,
        4,
        overrides=NEMOTRON3_LATENT,
        fixtures="project",
    ),
    train(
        "nemotron3-nano-30b-L8-latent1024-train-bf16-foreach-b1-s2048",
        NANO,
        1,
        2048,
        overrides=NEMOTRON3_LATENT,
        fixtures="project",
    ),
    # transformers' experts implementations (--experts): batched_mm gathers each routed pair's
    # expert weights
    serve(
        "qwen3-30b-a3b-L8-serve-b4-s2048-t16-experts-batched_mm",
        "Qwen3-30B-A3B",
        4,
        2048,
        16,
        overrides={"num_hidden_layers": 8},
        experts="batched_mm",
    ),
    serve(
        "gpt-oss-20b-L4-serve-b1-s8192-t4-prefill-experts-batched_mm",
        "gpt-oss-20b",
        1,
        8192,
        4,
        attention="eager",
        overrides={"num_hidden_layers": 4},
        experts="batched_mm",
    ),
]
CASES += MOE_PATH_CASES


def main() -> None:
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids)), "duplicate ids"
    (HERE / "cases.json").write_text(json.dumps(CASES, indent=1) + "\n")
    print(f"wrote {len(CASES)} cases to {HERE / 'cases.json'}")


if __name__ == "__main__":
    main()
