"""Job specifications: what runs on the machine.  Validated on construction; every bad option
raises JobError naming the option, so the CLI can print one line and exit 2."""

from __future__ import annotations

from dataclasses import dataclass, field

from nodeledger.errors import InputError


class JobError(InputError):
    """A job option that makes no sense (tp not dividing heads, negative sizes, ...)."""


ENGINES = ("hf", "vllm")
PRECISIONS = ("bf16", "mixed")
OPTIMIZERS = ("adamw", "adamw8bit", "sgd", "adafactor")
OPTIMIZER_IMPLS = ("foreach", "fused", "forloop")
CHECKPOINTING = ("none", "selective", "full")
ATTENTION = ("sdpa", "eager", "math")  # math: SDPA's composite fallback (fp32 scores)
SHARDING = ("none", "zero1", "zero2", "zero3", "fsdp", "fsdp_grad_op", "fsdp_hybrid")
OFFLOAD = ("none", "optimizer", "params")
LOAD_FORMATS = ("safetensors", "bin")
LOAD_STRATEGIES = ("every_rank", "rank0", "meta")
KV_DTYPES = ("bf16", "fp16", "fp32", "fp8")


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise JobError(f"--{name.replace('_', '-')} {value!r} is not one of {', '.join(allowed)}")


def _positive(name: str, value: int | None, allow_zero: bool = False) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise JobError(f"--{name.replace('_', '-')} must be an integer, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise JobError(
            f"--{name.replace('_', '-')} must be {'>= 0' if allow_zero else '> 0'}, got {value}"
        )


@dataclass(frozen=True)
class Parallel:
    """Cards one replica spans: tp x pp x dp."""

    tp: int = 1
    pp: int = 1
    dp: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp"):
            _positive(name, getattr(self, name))

    @property
    def cards(self) -> int:
        return self.tp * self.pp * self.dp


@dataclass(frozen=True)
class HostSide:
    """Host-RAM side of a job: dataloader workers and their prefetch."""

    workers: int = 0  # DataLoader num_workers (0: loading in the main process)
    prefetch: int = 2  # DataLoader prefetch_factor (PyTorch default 2)
    sample_bytes: int | None = None  # one sample's host bytes; None -> token ids (int64 x seq)
    worker_rss_bytes: int = 300 * 2**20  # a forked worker's private RSS (documented default)

    def __post_init__(self) -> None:
        _positive("workers", self.workers, allow_zero=True)
        _positive("prefetch", self.prefetch)
        _positive("sample_bytes", self.sample_bytes)


@dataclass(frozen=True)
class ServeJob:
    kind = "serve"
    engine: str = "hf"
    dtype: str | None = None  # weight scheme; None = as the config declares
    kv_dtype: str = "bf16"
    context: int = 4096  # tokens per sequence (prompt + generated)
    concurrency: int | None = 1  # None = the most that fit
    new_tokens: int = 0  # hf: tokens generated after the prompt (context includes them)
    parallel: Parallel = field(default_factory=Parallel)
    replicas: int = 1
    attention: str = "sdpa"
    gpu_memory_utilization: float = 0.9  # vLLM default
    block_size: int = 16  # vLLM default KV block (tokens)
    max_num_batched_tokens: int = 8192  # vLLM V1 default budget per step (chunked prefill)
    max_num_seqs: int = 256  # vLLM default
    cuda_graphs: bool = True  # vLLM captures CUDA graphs unless enforce_eager

    def __post_init__(self) -> None:
        _choice("engine", self.engine, ENGINES)
        _choice("kv_dtype", self.kv_dtype, KV_DTYPES)
        _choice("attention", self.attention, ATTENTION)
        for name in ("context", "concurrency", "replicas", "block_size", "max_num_batched_tokens",
                     "max_num_seqs"):  # fmt: skip
            _positive(name, getattr(self, name))
        _positive("new_tokens", self.new_tokens, allow_zero=True)
        if self.new_tokens >= self.context:
            raise JobError(
                f"--new-tokens {self.new_tokens} must be smaller than --context {self.context}"
            )
        if not 0 < self.gpu_memory_utilization <= 1:
            raise JobError(
                f"--gpu-memory-utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        if self.parallel.dp != 1:
            raise JobError("--dp does not apply to serving; use --replicas")


@dataclass(frozen=True)
class TrainJob:
    kind = "train"
    precision: str = "bf16"
    optimizer: str = "adamw"
    optimizer_impl: str = "foreach"
    micro_batch: int = 1
    seq: int = 2048
    grad_accum: int = 1
    checkpointing: str = "none"
    attention: str = "sdpa"
    shard: str = "none"
    offload: str = "none"
    parallel: Parallel = field(default_factory=Parallel)
    host: HostSide = field(default_factory=HostSide)
    # LoRA / QLoRA (kind "lora" / "qlora" when rank is set)
    rank: int | None = None
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    qlora: bool = False

    def __post_init__(self) -> None:
        _choice("precision", self.precision, PRECISIONS)
        _choice("optimizer", self.optimizer, OPTIMIZERS)
        _choice("optimizer_impl", self.optimizer_impl, OPTIMIZER_IMPLS)
        _choice("checkpointing", self.checkpointing, CHECKPOINTING)
        _choice("attention", self.attention, ATTENTION)
        _choice("shard", self.shard, SHARDING)
        _choice("offload", self.offload, OFFLOAD)
        for name in ("micro_batch", "seq", "grad_accum", "rank"):
            _positive(name, getattr(self, name))
        if self.qlora and self.rank is None:
            raise JobError("--job qlora needs --rank")
        if self.offload != "none" and self.shard == "none":
            raise JobError("--offload needs a sharded optimizer (--shard zero1/zero2/zero3/fsdp)")
        if self.offload == "params" and self.shard not in ("zero3", "fsdp", "fsdp_hybrid"):
            raise JobError(
                "--offload params needs --shard zero3 or fsdp (parameters must be sharded)"
            )
        if self.optimizer in ("adafactor", "adamw8bit") and self.optimizer_impl != "foreach":
            raise JobError(
                f"--optimizer-impl {self.optimizer_impl} applies to PyTorch's adamw/sgd, not {self.optimizer}"
            )
        if self.parallel.pp > 1 and self.shard not in ("none", "zero1"):
            raise JobError(
                f"--shard {self.shard} with --pp > 1: gradients/parameters are sharded only without "
                "pipeline parallelism (DeepSpeed allows ZeRO-1 with PP)"
            )
        if self.shard != "none" and self.parallel.dp == 1:
            raise JobError(
                f"--shard {self.shard} needs --dp > 1 (it shards across data-parallel ranks)"
            )

    @property
    def is_lora(self) -> bool:
        return self.rank is not None


@dataclass(frozen=True)
class LoadJob:
    kind = "load"
    dtype: str | None = None
    format: str = "safetensors"
    strategy: str = "every_rank"  # every rank reads the full checkpoint (DDP / naive FSDP)
    low_cpu_mem_usage: bool = True  # transformers >= 4.x default for from_pretrained
    ranks: int = 1  # processes on this host that load

    def __post_init__(self) -> None:
        _choice("format", self.format, LOAD_FORMATS)
        _choice("strategy", self.strategy, LOAD_STRATEGIES)
        _positive("ranks", self.ranks)
