"""Serving-engine start-up logs: what vLLM and SGLang reported about their own memory.

Pure: text in, a dict out.  Every figure is the engine's own, in the unit it printed (GiB for
vLLM's "GiB" lines; vLLM 0.4-0.6 print "GB" for what ``torch`` counts in GiB (bytes / 2^30) —
kept as printed, with ``weights_unit``); a figure the log does not print is absent, never
guessed.  When a log holds several start-ups (a restart, several TP ranks), the last complete
one wins for each figure and ``notes`` says how many were seen.

vLLM lines (format strings from vllm/worker/model_runner.py, vllm/worker/worker.py,
vllm/v1/worker/gpu_model_runner.py, vllm/v1/worker/gpu_worker.py, vllm/v1/core/kv_cache_utils.py
and vllm/executor/*; the family that prints each is in brackets):
  "Loading model weights took 14.9888 GB"                              [V0 0.4-0.7]
  "Model loading took 14.99 GiB and 4.5 seconds" / "... took 14.99 GiB memory and 4.5 seconds"
                                                                        [V1 0.8+]
  "# GPU blocks: 27830, # CPU blocks: 2048" (0.7: "# CUDA blocks:")      [V0]
  "Memory profiling results: total_gpu_memory=79.15GiB initial_memory_usage=... peak_torch_memory=
   ... non_torch_memory=0.55GiB kv_cache_size=54.46GiB gpu_memory_utilization=0.90"   [0.6.4-0.6.6]
  "the current vLLM instance can use total_gpu_memory (79.10GiB) x gpu_memory_utilization (0.90)
   = 71.19GiB" / "model weights take 14.99GiB (profile_weights_gib); non_torch_memory takes 0.12GiB; PyTorch activation
   peak memory takes 1.19GiB; the rest of the memory reserved for KV Cache is 54.89GiB."  [0.7-0.9]
  "Available KV cache memory: 54.89 GiB"                                [V1]
  "GPU KV cache size: 449,616 tokens"                                   [V1]
  "Maximum concurrency for 8192 tokens per request: 55.70x"            [0.6+]
  "Graph capturing finished in 12 secs, took 0.54 GiB"                  [0.5+]
  "vLLM API server version 0.7.1" / "Initializing a V0 LLM engine (v0.6.3.post1) with config:
   model='...', ..., tensor_parallel_size=1, ..." / "non-default args: {...}"
SGLang lines (python/sglang/srt/model_executor/model_runner.py, managers/scheduler.py):
  "Load weight end. type=..., dtype=torch.bfloat16, avail mem=63.90 GB, mem usage=14.99 GB."
  "KV Cache is allocated. #tokens: 421000, K size: 25.70 GB, V size: 25.70 GB"
  "Memory pool end. avail mem=11.20 GB"
  "max_total_num_tokens=421000, chunked_prefill_size=8192, max_prefill_tokens=16384,
   max_running_requests=4097, context_len=131072"
  "Capture cuda graph end. Time elapsed: 10.00 s. mem usage=0.50 GB. avail mem=10.70 GB."
"""

from __future__ import annotations

import re
from typing import Any

from nodeledger.machine.parsers.common import ParseError

# at most 16 digits / separators before the point and 8 after: every figure an engine prints
# fits, and a number from a garbled line stays a sane JSON number
_NUM = r"([0-9][0-9,]{0,15}(?:\.[0-9]{1,8})?)(?![0-9])"
_SNUM = r"(-?[0-9][0-9,]{0,15}(?:\.[0-9]{1,8})?)(?![0-9])"  # figures vLLM can print negative (a failed start-up)


def _f(text: str) -> float:
    return float(text.replace(",", ""))


def _i(text: str) -> int:
    return int(float(text.replace(",", "")))


# (key, needle, pattern, conversion): a pattern runs only on a record that holds its needle (a
# plain substring test), so a long or garbled log stays linear and fast; conversion None marks a
# row of several groups, which the parser reads by its key
VLLM_PATTERNS: list[tuple[str, str, re.Pattern, Any]] = [
    ("weights_gib", "Loading model weights took", re.compile(r"Loading model weights took " + _NUM + r" ?(GiB|GB)"), _f),
    ("weights_gib", "Model loading took", re.compile(r"Model loading took " + _NUM + r" ?(GiB|GB)"), _f),
    ("gpu_blocks", "blocks: ", re.compile(r"(?<![A-Za-z])(?:GPU|CUDA|ROCM|XPU|HPU|NPU|TPU|neuron) blocks: " + _NUM, re.I), _i),
    ("cpu_blocks", "# CPU blocks", re.compile(r"# CPU blocks: " + _NUM), _i),
    ("gpu_blocks", "num_gpu_blocks is", re.compile(r"num_gpu_blocks is:?\s*" + _NUM), _i),
    ("total_gpu_memory_gib", "total_gpu_memory", re.compile(r"total_gpu_memory[ =(]+" + _NUM + r" ?GiB"), _f),
    ("gpu_memory_utilization", "gpu_memory_utilization", re.compile(r"gpu_memory_utilization'?[ =(:]+" + _NUM + r"\)?"), _f),
    ("budget_gib", "gpu_memory_utilization (", re.compile(r"gpu_memory_utilization \(" + _NUM + r"\) = " + _NUM + r" ?GiB"), None),
    ("budget_gib", "instance can use", re.compile(r"the current vLLM instance can use\s+" + _NUM + r" ?GiB"), _f),
    ("profile_weights_gib", "model weights take", re.compile(r"model weights take\s+" + _NUM + r" ?GiB"), _f),
    ("non_torch_gib", "non_torch_memory", re.compile(r"non_torch_memory(?:\s+takes\s+|\s*=\s*|\s+)" + _NUM + r" ?GiB"), _f),
    ("activation_peak_gib", "PyTorch activation peak memory", re.compile(r"PyTorch activation peak memory(?:\s+takes)?\s+" + _NUM + r" ?GiB"), _f),
    ("peak_torch_memory_gib", "peak_torch_memory=", re.compile(r"peak_torch_memory=" + _NUM + r" ?GiB"), _f),
    ("kv_cache_gib", "reserved for KV Cache is", re.compile(r"reserved for KV Cache is " + _SNUM + r" ?GiB"), _f),
    ("kv_cache_gib", "kv_cache_size=", re.compile(r"kv_cache_size=" + _SNUM + r" ?GiB"), _f),
    ("kv_cache_gib", "Available KV cache memory", re.compile(r"Available KV cache memory: " + _SNUM + r" ?GiB"), _f),
    ("kv_cache_gib", "available_kv_cache_memory", re.compile(r"available_kv_cache_memory\s+" + _SNUM + r" ?GiB"), _f),
    ("kv_tokens", "KV cache size: ", re.compile(r"KV cache size: " + _NUM + r" tokens"), _i),
    ("kv_tokens", "can be stored in KV cache", re.compile(r"number of tokens that can be stored in KV cache \(" + _NUM + r"\)"), _i),
    # 0.11+: "Free memory on device (78.76/79.25 GiB) on startup. Desired GPU memory utilization is
    # (0.9, 71.33 GiB). Actual usage is 34.38 GiB for weight, 0.69 GiB for peak activation, 0.44 GiB
    # for non-torch memory, and 0.94 GiB for CUDAGraph memory." (vllm/v1/worker/gpu_worker.py)
    ("free_at_startup_gib", "Free memory on device", re.compile(r"Free memory on device \(" + _NUM + r"/" + _NUM + r" ?GiB\)"), None),
    ("budget_gib", "Desired GPU memory utilization", re.compile(r"Desired GPU memory utilization is \(" + _NUM + r", " + _NUM + r" ?GiB\)"), None),
    ("weights_gib", "GiB for weight", re.compile(r"Actual usage is " + _NUM + r" ?GiB for weight\b"), _f),
    ("weights_plus_non_torch_gib", "for consumed memory", re.compile(r"Actual usage is " + _NUM + r" ?GiB for consumed memory \(weights \+ non-torch\)"), _f),
    ("activation_peak_gib", "GiB for peak activation", re.compile(r"(?<![0-9.,])" + _NUM + r" ?GiB for peak activation"), _f),
    ("non_torch_gib", "GiB for non-torch memory", re.compile(r"(?<![0-9.,])" + _NUM + r" ?GiB for non-torch memory"), _f),
    ("cudagraph_budget_gib", "GiB for CUDAGraph memory", re.compile(r"(?<![0-9.,])" + _SNUM + r" ?GiB for CUDAGraph memory"), _f),
    ("kv_cache_gib", "Current kv cache memory in use", re.compile(r"Current kv cache memory in use is " + _SNUM + r" ?GiB"), _f),
    ("cuda_graph_estimated_gib", "CUDA graph pool memory", re.compile(r"CUDA graph pool memory: " + _NUM + r" ?GiB \(actual\), " + _NUM + r" ?GiB \(estimated\)"), None),
    ("max_concurrency", "Maximum concurrency for", re.compile(r"Maximum concurrency for " + _NUM + r" tokens per request: " + _NUM + r"x"), None),
    ("cuda_graph_gib", "Graph capturing finished", re.compile(r"Graph capturing finished in " + _NUM + r" secs?, took " + _SNUM + r" ?(GiB|GB)"), None),
    ("version", "vLLM API server version", re.compile(r"vLLM API server version ([0-9][\w.+-]{0,40})"), str),
    ("version", "LLM engine (v", re.compile(r"Initializing an? (?:V[01] )?LLM engine \(v([0-9][\w.+-]{0,40})\)"), str),
    ("version", "vLLM version", re.compile(r"\bvLLM version ([0-9][\w.+-]{0,40})"), str),
    # 0.2x+ start-up banner (block-letter logo): "... █  version 0.31.0"
    ("version", "█  version ", re.compile(r"█\s+version ([0-9][\w.+-]{0,40})"), str),
]  # fmt: skip
# a new start-up begins on these lines: what an earlier one printed is dropped (the last wins)
STARTUP_NEEDLES = ("vLLM API server version", "LLM engine (v")
NOT_FIGURES = ("engine", "config", "version", "gpu_memory_utilization")

_CONFIG = {  # engine config fields printed in "with config: ...", "non-default args: {...}"
    "model": re.compile(r"\bmodel'?[=:]\s*'([^']{1,300})'"),
    "tensor_parallel_size": re.compile(r"\btensor_parallel_size'?[=:\s]+([0-9]{1,4})"),
    "pipeline_parallel_size": re.compile(r"\bpipeline_parallel_size'?[=:\s]+([0-9]{1,4})"),
    "max_model_len": re.compile(r"\b(?:max_seq_len|max_model_len)'?[=:\s]+([0-9]{1,9})"),
    "dtype": re.compile(r"(?<![A-Za-z_])dtype'?[=:]\s*'?(?:torch\.)?([a-z0-9_]{1,20})"),
    "quantization": re.compile(r"\bquantization'?[=:\s]+'?([A-Za-z0-9_-]{1,40})"),
    "kv_cache_dtype": re.compile(r"\bkv_cache_dtype'?[=:\s]+'?([A-Za-z0-9_]{1,20})"),
    "enforce_eager": re.compile(r"\benforce_eager'?[=:\s]+(True|False)"),
    "max_num_seqs": re.compile(r"\bmax_num_seqs'?[=:\s]+([0-9]{1,7})"),
    "max_num_batched_tokens": re.compile(r"\bmax_num_batched_tokens'?[=:\s]+([0-9]{1,9})"),
    "gpu_memory_utilization": re.compile(r"\bgpu_memory_utilization'?:\s*([0-9.]{1,8})"),
}
# the same on a `vllm serve` command line (flags with dashes or underscores)
_FLAGS = {
    "tensor_parallel_size": re.compile(r"--(?:tensor[-_]parallel[-_]size|tp)[ =]([0-9]{1,4})"),
    "pipeline_parallel_size": re.compile(r"--(?:pipeline[-_]parallel[-_]size|pp)[ =]([0-9]{1,4})"),
    "max_model_len": re.compile(r"--max[-_]model[-_]len[ =]([0-9]{1,9})"),
    "gpu_memory_utilization": re.compile(r"--gpu[-_]memory[-_]utilization[ =]([0-9.]{1,8})"),
    "max_num_seqs": re.compile(r"--max[-_]num[-_]seqs[ =]([0-9]{1,7})"),
    "max_num_batched_tokens": re.compile(r"--max[-_]num[-_]batched[-_]tokens[ =]([0-9]{1,9})"),
    "quantization": re.compile(r"--quantization[ =]([A-Za-z0-9_-]{1,40})"),
    "kv_cache_dtype": re.compile(r"--kv[-_]cache[-_]dtype[ =]([A-Za-z0-9_]{1,20})"),
    "enforce_eager": re.compile(r"--(enforce[-_]eager)\b"),
}
_INTS = {"tensor_parallel_size", "pipeline_parallel_size", "max_model_len", "max_num_seqs",
         "max_num_batched_tokens"}  # fmt: skip
_TP_RANK = re.compile(r"\(?(?:Worker|VllmWorker)_TP([0-9]{1,4})\b")

MAX_LINE = 20_000  # characters of one line looked at (a pasted config can be long)


def _set_config(out: dict, key: str, v: Any) -> None:
    if key in _INTS:
        v = int(v)
    elif key == "enforce_eager":
        v = v in ("True", "enforce-eager", "enforce_eager")
    elif key == "gpu_memory_utilization":
        try:
            v = float(v)
        except ValueError:
            return
    elif v in ("None", "none", "auto") and key == "quantization":
        return
    out.setdefault("config", {})[key] = v


def _config(line: str, out: dict) -> None:
    for key, rx in _CONFIG.items():
        m = rx.search(line)
        if m:
            _set_config(out, key, m.group(1))


def _flags(line: str, out: dict) -> None:
    for key, rx in _FLAGS.items():
        m = rx.search(line)
        if m:
            _set_config(out, key, m.group(1))


_RECORD_START = re.compile(
    r"^\s*(?:\(|\[|INFO|WARNING|ERROR|DEBUG|CRITICAL|[0-9]{4}-|[A-Za-z]+Error\b)"
)


def records(text: str) -> list[str]:
    """Log records: a line that does not open a record (a log prefix, a bracket, an error name)
    continues the one before, as a record wrapped by the page it was copied from; each record
    is cut at MAX_LINE characters (linear in the text: parts are joined once per record)."""
    out: list[str] = []
    parts: list[str] = []
    size = 0
    for line in text.splitlines():
        if parts and line.strip() and not _RECORD_START.match(line):
            if size < MAX_LINE:
                parts.append(line[: MAX_LINE - size])
                size += len(parts[-1])
            continue
        if parts:
            out.append("".join(parts))
        parts, size = [line[:MAX_LINE]], min(len(line), MAX_LINE)
    if parts:
        out.append("".join(parts))
    return out


def parse_vllm_log(text: str) -> dict[str, Any]:
    """The figures a vLLM start-up log printed (see the module docstring).  Within a record the
    last match counts; a log holding several start-ups is read from the last one that printed a
    figure, and ``notes`` says so."""
    out: dict[str, Any] = {"engine": "vllm"}
    notes: list[str] = []
    seen: dict[int, int] = {}
    startups = 0
    top_rank = -1
    for line in records(text):
        if any(n in line for n in STARTUP_NEEDLES) and any(k not in NOT_FIGURES for k in out):
            startups += 1
            out, seen = {"engine": "vllm"}, {}
        if "with config:" in line or "non-default args" in line or "Initializing" in line:
            _config(line, out)
        if "vllm serve" in line or "--tensor" in line or "--max-model-len" in line:
            _flags(line, out)
        m = _TP_RANK.search(line)
        if m:
            top_rank = max(top_rank, int(m.group(1)))
        for n, (key, needle, rx, conv) in enumerate(VLLM_PATTERNS):
            if needle not in line:
                continue
            m = None
            for m in rx.finditer(line):  # noqa: B007 - the last match in the record counts
                pass
            if m is None:
                continue
            seen[n] = seen.get(n, 0) + 1
            if conv is not None:  # one figure in group 1
                out[key] = conv(m.group(1))
                if key == "weights_gib" and m.lastindex and m.lastindex >= 2 and m.group(2) == "GB":
                    out["weights_unit"] = "GB (as printed; vLLM divides bytes by 2^30)"
            elif key == "budget_gib":
                out["gpu_memory_utilization"] = _f(m.group(1))
                out["budget_gib"] = _f(m.group(2))
            elif key == "free_at_startup_gib":
                out["free_at_startup_gib"] = _f(m.group(1))
                out["total_gpu_memory_gib"] = _f(m.group(2))
            elif key == "cuda_graph_estimated_gib":
                out["cuda_graph_gib"] = _f(m.group(1))
                out["cuda_graph_estimated_gib"] = _f(m.group(2))
            elif key == "max_concurrency":
                out["max_concurrency_tokens_per_request"] = _i(m.group(1))
                out["max_concurrency"] = _f(m.group(2))
            elif key == "cuda_graph_gib":
                out["cuda_graph_seconds"] = _f(m.group(1))
                out["cuda_graph_gib"] = _f(m.group(2))
                if m.group(3) == "GB":
                    out["cuda_graph_unit"] = "GB"
    figures = [k for k in out if k not in ("engine", "config", "version")]
    if not figures:
        raise ParseError(
            "no vLLM memory line found (expected e.g. 'Loading model weights took', "
            "'# GPU blocks:', 'GPU KV cache size:', 'Available KV cache memory:')"
        )
    if startups:
        notes.append(f"{startups + 1} start-ups in the log: the figures are the last one's")
    cfg = out.get("config") or {}
    if top_rank >= 1 and "tensor_parallel_size" not in cfg:
        out.setdefault("config", {})["tensor_parallel_size_at_least"] = top_rank + 1
        notes.append(f"tensor parallel size not printed: ranks up to Worker_TP{top_rank} seen")
    for n, times in seen.items():
        key = VLLM_PATTERNS[n][0]
        if times > 1 and key not in ("version", "gpu_memory_utilization", "total_gpu_memory_gib"):
            notes.append(f"{key}: printed {times} times (several ranks); the last is kept")
    if "kv_tokens" not in out and "gpu_blocks" in out:
        notes.append(
            "KV tokens = gpu_blocks x block_size; the block size is not printed (16 by default)"
        )
    if notes:
        out["notes"] = notes
    return out


# (key, needle, pattern): the needle opens the statement, the pattern reads its figure from
# there on (no ".*?" across the record: linear in its length)
SGLANG_PATTERNS: list[tuple[str, str, re.Pattern]] = [
    ("avail_before_weights_gb", "Load weight begin.", re.compile(r"avail mem=" + _NUM + r" ?GB")),
    ("weights_gb", "Load weight end.", re.compile(r"mem usage=" + _NUM + r" ?GB")),
    ("avail_after_weights_gb", "Load weight end.", re.compile(r"avail mem=" + _NUM + r" ?GB")),
    ("kv_tokens", "KV Cache is allocated.", re.compile(r"#tokens: " + _NUM)),
    ("k_gb", "KV Cache is allocated.", re.compile(r"K size: " + _NUM + r" ?GB")),
    ("v_gb", "KV Cache is allocated.", re.compile(r"V size: " + _NUM + r" ?GB")),
    ("avail_after_pool_gb", "Memory pool end.", re.compile(r"avail mem=" + _NUM + r" ?GB")),
    ("max_total_num_tokens", "max_total_num_tokens=", re.compile(r"max_total_num_tokens=" + _NUM)),
    ("chunked_prefill_size", "chunked_prefill_size=", re.compile(r"chunked_prefill_size=" + _NUM)),
    ("max_running_requests", "max_running_requests=", re.compile(r"max_running_requests=" + _NUM)),
    ("context_len", "context_len=", re.compile(r"context_len=" + _NUM)),
    ("cuda_graph_gb", "Capture cuda graph end.", re.compile(r"mem usage=" + _NUM + r" ?GB")),
    ("mem_fraction_static", "mem_fraction_static=", re.compile(r"mem_fraction_static=" + _NUM)),
    ("tp_size", "tp_size=", re.compile(r"\btp_size=" + _NUM)),
]
_SG_INTS = {"kv_tokens", "max_total_num_tokens", "chunked_prefill_size", "max_running_requests",
            "context_len", "tp_size"}  # fmt: skip


def parse_sglang_log(text: str) -> dict[str, Any]:
    """The figures an SGLang start-up log printed (GB as SGLang prints them: bytes / 2^30)."""
    out: dict[str, Any] = {"engine": "sglang"}
    for line in records(text):
        for key, needle, rx in SGLANG_PATTERNS:
            at = line.rfind(needle)  # the last statement of the kind in the record
            if at < 0:
                continue
            m = rx.search(line, at, at + 400)  # its figures follow within a few hundred characters
            if m:
                out[key] = _i(m.group(1)) if key in _SG_INTS else _f(m.group(1))
        m = re.search(r"\bmodel_path='([^']{1,300})'", line)
        if m:
            out.setdefault("config", {})["model"] = m.group(1)
    if len(out) == 1 or all(
        k in ("engine", "config", "mem_fraction_static", "tp_size") for k in out
    ):
        raise ParseError(
            "no SGLang memory line found (expected e.g. 'Load weight end.', 'KV Cache is allocated.', "
            "'max_total_num_tokens=')"
        )
    if "k_gb" in out and "v_gb" in out:
        out["kv_cache_gb"] = round(out["k_gb"] + out["v_gb"], 4)
    if "kv_tokens" not in out and "max_total_num_tokens" in out:
        out["kv_tokens"] = out[
            "max_total_num_tokens"
        ]  # the pool's size in tokens, as SGLang names it
    return out
