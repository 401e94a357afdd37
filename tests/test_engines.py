"""vLLM accounting by release family and SGLang's pool (ledger/engines.py, engines.toml)."""

from __future__ import annotations

import pytest

from conftest import cli_json, run_cli
from nodeledger.ledger import engines as eng
from nodeledger.ledger.build import serve_ledger
from nodeledger.ledger.jobs import JobError, build_job
from nodeledger.machine import resolve_machine
from nodeledger.machine.profile import Accelerator, MachineProfile
from nodeledger.model import load_model
from nodeledger.units import GiB


@pytest.fixture(scope="module")
def llama():
    return load_model("llama-3.1-8b")[0]


def card(product: str, total_gib: float, n: int = 1, reserved: int | None = 0) -> MachineProfile:
    return MachineProfile(name="t", accelerators=[
        Accelerator(index=i, vendor="nvidia", product=product, memory_bytes=int(total_gib * GiB),
                    memory_reserved_bytes=reserved) for i in range(n)])  # fmt: skip


def serve(spec, machine, **o):
    return serve_ledger(spec, build_job("serve", {"engine": "vllm", **o}), machine)


@pytest.mark.parametrize(
    ("version", "family"),
    [("0.5.4", "v0-free-delta"), ("0.6.4", "v0-whole-card"), ("0.7.2", "v0-snapshot"),
     ("0.8.5.post1", "v1-whole-card"), ("0.10.1.1", "v1-snapshot-before-nccl"),
     ("0.11.0", "v1-snapshot-after-nccl"), ("0.19.1", "v1-snapshot-after-nccl"),
     ("0.20.0", "v1-graph-estimate"), ("0.27.0", "v1-total-consumed"), ("0.40.0", "v1-total-consumed"),
     ("0.15.0rc2.dev46+gc4e744dbd", "v1-snapshot-after-nccl"), ("0.7.1-v1", "v1-whole-card"),
     ("0.9.2 v0", "v0-snapshot")],
)  # fmt: skip
def test_release_families(version, family):
    assert eng.vllm_family(version).id == family


def test_bad_versions_are_refused():
    for bad in ("latest", "0.3.3", "0.20.0-v0"):
        with pytest.raises(JobError):
            eng.vllm_family(bad)
    p = run_cli("fit", "llama-3.1-8b", "--engine", "vllm", "--engine-version", "nightly")
    assert p.returncode == 2 and "--engine-version" in p.stderr


def test_defaults_follow_the_card_and_release(llama):
    # >= 70 GiB and not an A100: 1024 seqs / 8192 tokens; an A100 80GB gets 256 / 2048 (0.9+)
    h = serve(llama, card("NVIDIA H100 80GB HBM3", 79.19), engine_version="0.11.0").extras["engine"]
    a = serve(llama, card("NVIDIA A100-SXM4-80GB", 79.25), engine_version="0.11.0").extras["engine"]
    assert (h["max_num_seqs"], h["max_num_batched_tokens"]) == (1024, 8192)
    assert (a["max_num_seqs"], a["max_num_batched_tokens"]) == (256, 2048)
    assert (
        serve(llama, card("x", 79), engine_version="0.19.0").extras["engine"][
            "gpu_memory_utilization"
        ]
        == 0.9
    )
    assert (
        serve(llama, card("x", 79), engine_version="0.20.0").extras["engine"][
            "gpu_memory_utilization"
        ]
        == 0.92
    )
    # V0: 256 seqs, and one whole prompt per step without chunked prefill
    v0 = serve(llama, card("x", 79), engine_version="0.6.3", context=16384).extras["engine"]
    assert (v0["max_num_seqs"], v0["max_num_batched_tokens"]) == (256, 16384)


def test_what_each_family_charges(llama):
    m = card("NVIDIA H100 80GB HBM3", 79.19, n=2)
    pool = {v: serve(llama, m, engine_version=v, tp=2, gpu_memory_utilization=0.9, max_num_seqs=256,
                     max_num_batched_tokens=2048).extras["engine"]["kv_available_bytes"]
            for v in ("0.10.2", "0.11.0", "0.19.1", "0.20.0")}  # fmt: skip
    # 0.11 takes its baseline after NCCL: the pool grows by the NCCL buffers
    assert pool["0.11.0"] - pool["0.10.2"] == pytest.approx(300 * 2**20, abs=2**20)
    # 0.20 subtracts its CUDA graph estimate
    g = serve(llama, m, engine_version="0.20.0", tp=2, max_num_seqs=256).extras["engine"][
        "cuda_graph_bytes"
    ]
    assert pool["0.19.1"] - pool["0.20.0"] == pytest.approx(g, abs=2**20)
    eager = serve(llama, m, engine_version="0.20.0", tp=2, gpu_memory_utilization=0.9, max_num_seqs=256,
                  max_num_batched_tokens=2048, enforce_eager=True).extras["engine"]  # fmt: skip
    assert eager["cuda_graph_bytes"] == 0 and eager["kv_available_bytes"] == pool["0.19.1"]


def test_card_total_as_the_runtime_sees_it(llama):
    # the preset holds nvidia-smi's 81559 MiB; vLLM budgets from 81559 - 450 reserved
    e = serve(llama, resolve_machine("dgx-h100")).extras["engine"]
    assert e["card_total_bytes"] == (81559 - 450) * 2**20
    unknown = serve(llama, card("Mystery card", 48, reserved=None)).extras["engine"]
    assert "unknown" in unknown["card_total_source"]


def test_sliding_window_concurrency_counts_blocks_per_group():
    # gpt-oss: 18 sliding (128) + 18 full layers; a 131072-token request holds 8192 full blocks
    # plus cdiv(127 + max_num_batched_tokens, 16) + 1 sliding ones: concurrency nearly doubles
    spec = load_model("gpt-oss-120b")[0]
    m = card("NVIDIA A100-SXM4-80GB", 79.25, n=2)
    ex = serve(spec, m, engine_version="0.12.0", tp=2, context=131072).extras
    blocks = ex["kv_blocks"]
    assert ex["max_concurrency_printed"] == pytest.approx(blocks / (8192 + 137))
    assert ex["kv_pool_tokens"] == blocks // 2 * 16


def test_mxfp4_weights_as_the_backend_holds_them():
    spec = load_model("gpt-oss-120b")[0]
    marlin = serve(spec, card("NVIDIA A100-SXM4-80GB", 79.25, n=2), engine_version="0.12.0", tp=2)
    w = next(i.bytes for i in marlin.cards[0].items if i.name == "weights") / GiB
    assert w == pytest.approx(34.35, rel=0.01)  # printed 34.38 GiB (public log, A100 TP2)


def test_sglang_pool_is_the_static_fraction_of_free_memory(llama):
    m = card("NVIDIA H100 80GB HBM3", 79.19)
    job = build_job("serve", {"engine": "sglang", "mem_fraction_static": 0.88, "context": 131072})
    e = serve_ledger(llama, job, m).extras["engine"]
    free = e["free_before_weights_bytes"]
    assert e["kv_available_bytes"] == int(free * 0.88) - e["weights_bytes"]
    # SGLang 0.5.23's own default for an 81559 MiB card at TP1: reserved 512 + 8192 x 1.5 +
    # 256 x 2 + 1/8 x 1024 + 58 piecewise prefill graphs x 8 = 13,904 MiB -> 0.830
    d = build_job("serve", {"engine": "sglang"})
    e = serve_ledger(llama, d, resolve_machine("dgx-h100")).extras["engine"]
    assert e["mem_fraction_static"] == round((81559 - 13904) / 81559, 3) == 0.83


def test_engine_options_belong_to_their_engine():
    p = run_cli("fit", "llama-3.1-8b", "--mem-fraction-static", "0.8")
    assert p.returncode == 2 and "--mem-fraction-static" in p.stderr
    p = run_cli("fit", "llama-3.1-8b", "--engine", "sglang", "--gpu-memory-utilization", "0.8")
    assert p.returncode == 2 and "--gpu-memory-utilization" in p.stderr
    d = cli_json("fit", "llama-3.1-8b", "--machine", "dgx-h100")
    assert (
        "gpu_memory_utilization" not in d["job_options"] and "max_num_seqs" not in d["job_options"]
    )


def _weights(lg) -> int:
    return next(i.bytes for i in lg.cards[0].items if i.name == "weights")


def test_dense_quantised_linears_as_vllm_loads_them():
    from nodeledger.ledger.weights import Scheme

    fp8_block = Scheme("fp8", block=(128, 128))
    # below sm89 (A100) block scales become bf16 [K/128, N]: 2 x 4096 x 32 - 4 x 32 x 32
    assert eng.vllm_linear_delta_bytes(fp8_block, "layers.*.self_attn.q_proj.weight",
                                       4096, 4096, 1, 80, "nvidia", "0.11.0") == 2 * 4096 * 32 - 4 * 32 * 32  # fmt: skip
    # sm89/sm90 run fp8 natively: as the checkpoint
    assert (
        eng.vllm_linear_delta_bytes(
            fp8_block, "q_proj.weight", 4096, 4096, 1, 90, "nvidia", "0.11.0"
        )
        == 0
    )
    # ROCm pads rows of 4096 fp8 values (a multiple of 512 B) by 256 values; o_proj is row-parallel
    assert eng.vllm_linear_delta_bytes(fp8_block, "layers.*.self_attn.o_proj.weight",
                                       4096, 4096, 2, None, "amd", "0.11.0") == 4096 * 256  # fmt: skip
    assert eng.vllm_linear_delta_bytes(fp8_block, "layers.*.self_attn.o_proj.weight",
                                       4096, 4096, 16, None, "amd", "0.11.0") == 0  # 256 B rows  # fmt: skip
    gptq = Scheme("int4", group_size=128, g_idx=True)
    # Marlin (A100) drops the packed zero points and g_idx; sm90 Machete keeps them
    drop = eng.vllm_linear_delta_bytes(
        gptq, "mlp.gate_proj.weight", 14336, 4096, 1, 80, "nvidia", "0.11.0"
    )
    assert drop == -(32 * 14336 * 4 // 8) - 4 * 4096
    assert (
        eng.vllm_linear_delta_bytes(
            gptq, "mlp.gate_proj.weight", 14336, 4096, 1, 90, "nvidia", "0.11.0"
        )
        == 0
    )
    awq = Scheme("int4", group_size=128, g_idx=False)
    assert (
        eng.vllm_linear_delta_bytes(
            awq, "mlp.gate_proj.weight", 14336, 4096, 1, 80, "nvidia", "0.11.0"
        )
        == 0
    )


def test_fp8_weights_grow_on_an_a100_and_not_on_an_h100(llama):
    a100 = _weights(
        serve(llama, card("NVIDIA A100-SXM4-80GB", 80), dtype="fp8", engine_version="0.11.0")
    )
    h100 = _weights(
        serve(llama, card("NVIDIA H100 80GB HBM3", 80), dtype="fp8", engine_version="0.11.0")
    )
    # 1.5 % of the linear bytes: bf16 group-wise scales (2 B per 128 weights) in place of fp32 block ones
    assert 0.08 * GiB < a100 - h100 < 0.12 * GiB


def test_pipeline_stages_carry_the_embeddings_and_the_head(llama):
    from nodeledger.ledger.build import pipeline_stage_layers

    assert pipeline_stage_layers(32, 4) == [8, 8, 8, 8]
    assert pipeline_stage_layers(30, 4) == [
        7,
        8,
        8,
        7,
    ]  # vLLM get_pp_indices: remainder before the last
    one = _weights(
        serve(llama, card("NVIDIA H100 80GB HBM3", 80, n=4), engine_version="0.6.3", pp=4)
    )
    # the first stage: 8 of 32 layers + the whole 128256 x 4096 bf16 embedding, where an even
    # quarter holds a quarter of the embedding and of the lm_head: half a table more, and the
    # rotary cache (131072 x 128 x 2 B) whole on every stage
    even = (
        _weights(serve(llama, card("NVIDIA H100 80GB HBM3", 80, n=1), engine_version="0.6.3")) / 4
    )
    assert one - even == pytest.approx(0.5 * 128256 * 4096 * 2 + 0.75 * 131072 * 128 * 2, rel=0.01)
