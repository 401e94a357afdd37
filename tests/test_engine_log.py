"""Serving-engine start-up logs: the parser on hand-written lines of each vLLM / SGLang format
(the real logs are checked against tests/expected/engines by test_parsers_expected.py), and
`fit --from-engine-log`: the engine's figures beside the ledger's, term by term."""

from __future__ import annotations

import contextlib

import pytest

from conftest import ROOT, cli_json, run_cli
from nodeledger.machine.parsers import ParseError, parse_kind

V07 = """\
INFO 01-20 10:00:00 api_server.py:712] vLLM API server version 0.7.1
INFO 01-20 10:00:01 llm_engine.py:232] Initializing a V0 LLM engine (v0.7.1) with config: model='meta-llama/Llama-3.1-8B-Instruct', dtype=torch.bfloat16, max_seq_len=8192, tensor_parallel_size=1, pipeline_parallel_size=1, quantization=None, enforce_eager=False, kv_cache_dtype=auto
INFO 01-20 10:00:20 model_runner.py:1115] Loading model weights took 14.9888 GB
INFO 01-20 10:00:25 worker.py:266] the current vLLM instance can use total_gpu_memory (79.10GiB) x gpu_memory_utilization (0.90) = 71.19GiB
INFO 01-20 10:00:25 worker.py:266] model weights take 14.99GiB; non_torch_memory takes 0.12GiB; PyTorch activation peak memory takes 1.19GiB; the rest of the memory reserved for KV Cache is 54.89GiB.
INFO 01-20 10:00:25 executor_base.py:108] # CUDA blocks: 28103, # CPU blocks: 2048
INFO 01-20 10:00:25 executor_base.py:113] Maximum concurrency for 8192 tokens per request: 54.89x
INFO 01-20 10:00:40 model_runner.py:1562] Graph capturing finished in 15 secs, took 0.54 GiB
"""

V1_WRAPPED = """\
(Worker_TP0 pid=1) INFO 12-17 12:56:07 [gpu_worker.py:298] Available KV cache memory: 35.82 GiB
(EngineCore_DP0 pid=2) INFO 12-17 12:56:09 [kv_cache_utils.py:1028] GPU KV cache size: 1,043,264 tokens
(Worker_TP0 pid=1) INFO 12-17 12:56:17 [gpu_worker.py:391] Free memory on device (78.76/79.25 GiB) on startup. Desir
ed GPU memory utilization is (0.9, 71.33 GiB). Actual usage is 34.38 GiB for weight, 0.69 GiB for peak activation, 0.44
 GiB for non-torch memory, and 0.94 GiB for CUDAGraph memory.
"""

SGLANG = """\
[2025-01-23 19:35:15 TP0] Load weight begin. avail mem=78.81 GB
[2025-01-23 19:35:20 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.72 GB, mem usage=15.09 GB.
[2025-01-23 19:35:20 TP0] KV Cache is allocated. K size: 27.13 GB, V size: 27.13 GB.
[2025-01-23 19:35:27 TP0] max_total_num_tokens=444500, max_prefill_tokens=16384, max_running_requests=2049, context_len=131072
"""


def test_vllm_v0_lines():
    d = parse_kind("vllm-log", V07)
    assert d["version"] == "0.7.1" and d["config"]["max_model_len"] == 8192
    assert d["weights_gib"] == 14.9888 and d["profile_weights_gib"] == 14.99
    assert (d["total_gpu_memory_gib"], d["gpu_memory_utilization"], d["budget_gib"]) == (
        79.1,
        0.9,
        71.19,
    )
    assert (d["non_torch_gib"], d["activation_peak_gib"], d["kv_cache_gib"]) == (0.12, 1.19, 54.89)
    assert (
        d["gpu_blocks"] == 28103 and d["max_concurrency"] == 54.89 and d["cuda_graph_gib"] == 0.54
    )


def test_vllm_v1_wrapped_summary_line():
    d = parse_kind("vllm-log", V1_WRAPPED)
    assert d["kv_cache_gib"] == 35.82 and d["kv_tokens"] == 1_043_264
    assert d["total_gpu_memory_gib"] == 79.25 and d["budget_gib"] == 71.33
    assert d["weights_gib"] == 34.38 and d["activation_peak_gib"] == 0.69
    assert d["non_torch_gib"] == 0.44


def test_sglang_lines():
    d = parse_kind("sglang-log", SGLANG)
    assert d["weights_gb"] == 15.09 and d["kv_cache_gb"] == pytest.approx(54.26)
    assert d["kv_tokens"] == d["max_total_num_tokens"] == 444_500


def test_a_log_without_figures_is_refused():
    with pytest.raises(ParseError, match="no vLLM memory line"):
        parse_kind("vllm-log", "INFO hello\n")
    p = run_cli("parse", "vllm-log", str(ROOT / "pyproject.toml"))  # a text with no vLLM line
    assert p.returncode == 2 and "no vLLM memory line" in p.stderr


def test_fit_from_engine_log_names_the_term_to_look_at(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text(V07)
    d = cli_json("fit", "llama-3.1-8b", "--machine", "dgx-h100", "--engine", "vllm",
                 "--context", "8192", "--from-engine-log", str(log))  # fmt: skip
    ec = d["engine_check"]
    rows = {r["term"]: r for r in ec["rows"]}
    assert rows["weights_gib"]["engine"] == 14.9888
    assert abs(rows["weights_gib"]["relative"]) < 0.01
    assert rows["kv_tokens"]["engine"] == 28103 * 16  # blocks x the job's block size
    assert ec["launch_differences"] == []
    # the log's release (0.7.1, V0 snapshot accounting) is followed: the pool agrees within 1 %,
    # and the largest term apart is the budget (the log's card total, 79.10 GiB, is not the preset's)
    assert abs(rows["kv_cache_gib"]["relative"]) < 0.01
    assert d["engine_check"]["version"] == "0.7.1"
    assert ec["look_first"].startswith("budget")
    wrong = cli_json("fit", "llama-3.1-8b", "--machine", "dgx-h100", "--engine", "vllm",
                     "--context", "4096", "--from-engine-log", str(log))  # fmt: skip
    assert any("max_model_len=8192" in x for x in wrong["engine_check"]["launch_differences"])
    p = run_cli("fit", "llama-3.1-8b", "--from-engine-log", str(log))
    assert p.returncode == 2 and "--engine vllm" in p.stderr


def test_the_last_startup_wins_and_overrides_are_not_blocks():
    restart = (
        "INFO 01-01 00:00:00 api_server.py:1] vLLM API server version 0.7.1\n"
        "INFO 01-01 00:00:01 model_runner.py:1] Loading model weights took 65.0 GB\n"
        "INFO 01-01 00:00:02 executor_base.py:1] # CUDA blocks: 100, # CPU blocks: 10\n"
        "INFO 01-01 00:10:00 api_server.py:1] vLLM API server version 0.7.1\n"
        "INFO 01-01 00:10:01 model_runner.py:1] Loading model weights took 15.0 GB\n"
        "INFO 01-01 00:10:02 gpu_model_runner.py:1] Overriding num_gpu_blocks=0 with num_gpu_blocks_override=512\n"
    )
    d = parse_kind("vllm-log", restart)
    assert d["weights_gib"] == 15.0 and "gpu_blocks" not in d
    assert any("2 start-ups" in n for n in d["notes"])
    # unprefixed lines (a pasted excerpt) join into one record: the last match in it counts
    pasted = ("Loading model weights took 10 GB\nthe rest of the memory reserved for KV Cache is 1GiB.\n"
              "Loading model weights took 20 GB\nthe rest of the memory reserved for KV Cache is 2GiB.\n")  # fmt: skip
    d = parse_kind("vllm-log", pasted)
    assert d["weights_gib"] == 20.0 and d["kv_cache_gib"] == 2.0


def test_launch_arguments_from_dicts_and_command_lines():
    text = (
        "$ vllm serve Qwen/Qwen3-8B --tensor-parallel-size 4 --gpu-memory-utilization 0.95 "
        "--max-num-batched-tokens 1024 --max-model-len 16384\n"
        "(APIServer pid=1) INFO 10-14 19:22:10 [utils.py:233] non-default args: {'model': 'x', "
        "'dtype': 'float16', 'quantization': 'compressed-tensors', 'max_num_seqs': 128}\n"
        "(Worker_TP3 pid=9) INFO 10-14 19:25:50 [gpu_worker.py:298] Available KV cache memory: 4.75 GiB\n"
    )
    cfg = parse_kind("vllm-log", text)["config"]
    assert cfg["tensor_parallel_size"] == 4 and cfg["gpu_memory_utilization"] == 0.95
    assert cfg["max_num_batched_tokens"] == 1024 and cfg["max_model_len"] == 16384
    assert cfg["dtype"] == "float16" and cfg["quantization"] == "compressed-tensors"
    assert cfg["max_num_seqs"] == 128


def test_long_garbled_logs_stay_fast():
    import time

    for kind, text in (("vllm-log", "7" * 2_000_000 + " GiB for peak activation\n"),
                       ("sglang-log", "INFO KV Cache is allocated. " * 70_000 + "\n"),
                       ("sglang-log", "Load weight end. type=X, avail mem=63.90 GB\n" * 50_000)):  # fmt: skip
        t0 = time.perf_counter()
        with contextlib.suppress(ParseError):
            parse_kind(kind, text)
        assert time.perf_counter() - t0 < 3.0, kind
