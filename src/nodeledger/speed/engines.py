"""Serving engines as plug-ins of the speed model, registered by name: each says, for its release,
how a step runs (graph replay or eager), the largest decode batch its graphs hold, the scheduler
the simulator plays, and the host time per step the card waits for (speed/engines.toml, each
figure with its source).  The speed model never branches on an engine's name: it asks the
registry.  ``register`` adds one (a test does, with a fake engine)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from nodeledger.errors import InputError
from nodeledger.ledger.engines import data as memory_data
from nodeledger.ledger.engines import parse_version
from nodeledger.speed.operators import ENGINE_EAGER_CALLS_PER_LAYER

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class EngineSpeed:
    """One engine release as the speed model runs it."""

    name: str
    release: str  # the release range the figures were read for ("0.8.0-0.10.2")
    policy: str  # the simulator's scheduler: "vllm" | "vllm-v0" | "sglang" | "static"
    graphs: bool  # decode steps replayed from CUDA / HIP graphs
    max_graph_batch: int | None  # the largest decode batch a graph holds (eager above it)
    piecewise: bool  # graphs around attention, which runs as one dispatched call per layer
    host_base_s: float  # host time per step the card waits for
    host_per_seq_s: float  # + per running sequence
    host_source: str
    graph_source: str
    piecewise_prefill: bool = False  # prefill / mixed steps replayed too (vLLM V1's piecewise)
    # host calls per layer beside the GEMMs and attention when a step is not replayed
    # (+ ENGINE_EAGER_TP_CALLS under TP; speed/operators.py, where the count is derived)
    calls_per_layer: int = ENGINE_EAGER_CALLS_PER_LAYER
    multi_step: int = 1  # decode steps scheduled at once (vLLM 0.6 --num-scheduler-steps)
    expert_loop: bool = False  # routed experts one call each (transformers' eager MoE)
    paged_blocks: bool = True  # KV in blocks of the job's block_size (vLLM); False: per token
    # max_num_seqs when the job leaves it unset: "job" (the engine's resolved default, vLLM),
    # "half_pool" (SGLang's max_running_requests: min(KV tokens // 2, 4096)), "batch" (static)
    seqs_rule: str = "job"
    # time to first token beyond the steps (API server, tokenisation, first-token streaming)
    request_overhead_s: float = 0.0
    request_overhead_source: str = ""
    # the share of the card's streaming rate its fused MoE kernel reaches on block-fp8 experts
    # (DeepSeek-V3's 128 x 128 scales), where a kernel benchmark of the release's era measured it
    moe_block_fp8_stream: float = 1.0  # its source: engines.toml moe_source
    # the dense block-fp8 GEMM kernel the release runs (triton | cutlass; "": not known)
    block_fp8_gemm: str = ""
    # prefix caching on by default: a preempted request resumes from its cached blocks
    prefix_cache: bool = False
    # SGLang --enable-dp-attention: each rank's prefill budget, "half" (chunked_prefill_size // 2
    # per rank, dp_size = tp_size) or "per_dp" (chunked_prefill_size // dp_size per rank, the
    # machine's budget the flag's value); its source in engines.toml dp_attention_source
    dp_attention_chunk: str = "per_dp"
    dp_attention_source: str = ""

    def host_s(self, running: float) -> float:
        """Host seconds per step not hidden behind the card, at ``running`` sequences."""
        return self.host_base_s + self.host_per_seq_s * running


_REGISTRY: dict[str, object] = {}


def register(name: str, resolve) -> None:
    """Add an engine: ``resolve(version) -> EngineSpeed`` (version None: its default)."""
    _REGISTRY[name] = resolve


def names() -> list[str]:
    return sorted(_REGISTRY)


def engine_speed(name: str, version: str | None = None) -> EngineSpeed:
    """The speed plug-in of engine ``name`` at ``version``; InputError for an unknown engine."""
    if name not in _REGISTRY:
        raise InputError(f"engine {name!r} has no speed model (known: {', '.join(names())})")
    return _REGISTRY[name](version)


@lru_cache(maxsize=1)
def _data() -> dict:
    text = resources.files("nodeledger.speed").joinpath("engines.toml").read_text("utf-8")
    return tomllib.loads(text)


def _releases(name: str):
    """The resolver of an engine whose releases are rows of engines.toml ``[[name]]``; no
    version: the memory side's default release (ledger/engines.toml), read when first asked."""

    def resolve(version: str | None) -> EngineSpeed:
        rows, over = _data()[name], _data().get("server_overhead", {})
        v = parse_version(version or memory_data()[name]["default_version"])
        # the last release line begun at or before v: a build between two lines (0.7.4.dev,
        # main after 0.7.3 and before 0.8.0 made V1 the default) behaves as the line before
        row = rows[0]
        for r in rows:
            if parse_version(r["first"]) <= v:
                row = r
        return EngineSpeed(
            name=name, release=f"{row['first']}-{row['last']}", policy=row["policy"],
            graphs=row["graphs"], max_graph_batch=row.get("max_graph_batch"),
            piecewise=row.get("piecewise", False), host_base_s=row["host_base_s"],
            host_per_seq_s=row["host_per_seq_s"], host_source=row["host_source"],
            graph_source=row["graph_source"],
            piecewise_prefill=row.get("piecewise_prefill", False),
            paged_blocks=row.get("paged_blocks", True), seqs_rule=row.get("seqs_rule", "job"),
            request_overhead_s=over.get("ttft_s", 0.0), request_overhead_source=over.get("source", ""),
            moe_block_fp8_stream=row.get("moe_block_fp8_stream", 1.0),
            block_fp8_gemm=row.get("block_fp8_gemm", ""),
            prefix_cache=row.get("prefix_cache", False),
            dp_attention_chunk=_dp_chunk(row),
            dp_attention_source=row.get("dp_attention_source", ""),
        )  # fmt: skip

    return resolve


def _dp_chunk(row: dict) -> str:
    """A release row's DP-attention prefill rule, checked: "half" or "per_dp"."""
    v = row.get("dp_attention_chunk", "per_dp")
    if v not in ("half", "per_dp"):
        raise InputError(f"speed/engines.toml: dp_attention_chunk {v!r} is not 'half' or 'per_dp'")
    return v


def _hf(version: str | None) -> EngineSpeed:
    d = _data()["hf"]
    return EngineSpeed(name="hf", release=version or "any", policy=d["policy"], graphs=False,
                       max_graph_batch=None, piecewise=False, host_base_s=0.0,
                       host_per_seq_s=0.0, host_source=d["host"], graph_source=d["source"],
                       calls_per_layer=d["calls_per_layer"], expert_loop=True,
                       paged_blocks=False, seqs_rule="batch")  # fmt: skip


def _defaults() -> None:
    register("hf", _hf)
    register("vllm", _releases("vllm"))
    register("sglang", _releases("sglang"))


_defaults()
