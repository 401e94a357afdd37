"""Job specifications: what runs on the machine.  Validated on construction; every bad option
raises JobError naming the option, so the CLI can print one line and exit 2."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields

from nodeledger.errors import InputError


class JobError(InputError):
    """A job option that makes no sense (tp not dividing heads, negative sizes, ...)."""


ENGINES = ("hf", "vllm", "sglang")
ENGINE_NAMES = {"hf": "transformers", "vllm": "vLLM", "sglang": "SGLang"}  # as printed


@dataclass(frozen=True)
class EngineTraits:
    """What an engine's launch accepts, asked by name instead of branching on it (the memory
    side's plug-ins are ledger/serve.py SERVE_ENGINES, the speed side's speed/engines.py)."""

    start_log: bool = False  # prints a start-up log nodeledger reads (--from-engine-log)
    dp_attention: bool = False  # --enable-dp-attention (attention data-parallel over TP ranks)
    transformers_modules: bool = False  # runs transformers' own modules (--experts applies)


ENGINE_TRAITS = {
    "hf": EngineTraits(transformers_modules=True),
    "vllm": EngineTraits(start_log=True),
    "sglang": EngineTraits(start_log=True, dp_attention=True),
}
PRECISIONS = ("bf16", "mixed")
OPTIMIZERS = ("adamw", "adamw8bit", "sgd", "adafactor")
OPTIMIZER_IMPLS = ("foreach", "fused", "forloop")
# selective: Megatron's (the attention core recomputed); selective_op: torchtitan's op-level
# selective activation checkpointing (every other matmul's output and SDPA's kept)
CHECKPOINTING = ("none", "selective", "full", "selective_op")
ATTENTION = ("sdpa", "eager", "math")  # math: SDPA's composite fallback (fp32 scores)
# transformers 5's MoE experts path (experts_implementation): grouped_mm its default,
# batched_mm (each routed pair gathers its expert's weights), eager (a loop over the experts)
EXPERTS = ("grouped_mm", "batched_mm", "eager")
SSM_KERNELS = ("auto", "torch", "fused")  # model/kernel_path.py CHOICES
SHARDING = ("none", "zero1", "zero2", "zero3", "fsdp", "fsdp_grad_op", "fsdp_hybrid")
# training frameworks (ledger/frameworks.toml): which --shard values each takes, its default
# precision; "auto" = the framework --shard implies (zero* DeepSpeed, fsdp* FSDP2, none DDP)
FRAMEWORKS = ("auto", "ddp", "fsdp1", "fsdp2", "deepspeed", "megatron", "hf-trainer")
FRAMEWORK_SHARDS = {
    "ddp": ("none",),
    "fsdp1": ("fsdp", "fsdp_grad_op", "fsdp_hybrid"),
    "fsdp2": ("fsdp", "fsdp_grad_op", "fsdp_hybrid"),
    "deepspeed": ("none", "zero1", "zero2", "zero3"),
    "megatron": ("none", "zero1"),
    "hf-trainer": SHARDING,
}
# each framework's precision when --precision is not given (sources in frameworks.toml)
FRAMEWORK_PRECISION = {"ddp": "bf16", "fsdp1": "mixed", "fsdp2": "mixed", "deepspeed": "bf16",
                       "megatron": "bf16", "hf-trainer": "bf16"}  # fmt: skip
# the AdamW implementation each framework steps with when --optimizer-impl is not given:
# DeepSpeed's FusedAdam and Megatron's (Apex / Transformer Engine) FusedAdam are fused;
# torch.optim.AdamW picks foreach on CUDA tensors by default
FRAMEWORK_OPTIMIZER_IMPL = {"ddp": "foreach", "fsdp1": "foreach", "fsdp2": "foreach",
                            "deepspeed": "fused", "megatron": "fused", "hf-trainer": "foreach"}  # fmt: skip
ADAPTER_DTYPES = ("fp32", "bf16")


def default_framework(shard: str) -> str:
    """The framework a --shard value implies when --framework is not given."""
    if shard.startswith("zero"):
        return "deepspeed"
    if shard.startswith("fsdp"):
        return "fsdp2"
    return "ddp"


OFFLOAD = ("none", "optimizer", "params")
LOAD_FORMATS = ("safetensors", "bin")
LOAD_STRATEGIES = ("every_rank", "rank0", "meta")
KV_DTYPES = ("bf16", "fp16", "fp32", "fp8")
DEFAULT_OUTPUT_LEN = 256  # speed: generated tokens per request when neither length is given


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
    experts: str = "grouped_mm"  # hf engine, MoE: transformers' experts_implementation
    # Gated DeltaNet / Mamba-2 layers: transformers' path (model/kernel_path.py): auto | torch |
    # fused
    ssm_kernels: str = "auto"
    # vLLM prefix caching: None = the release's default (on for hybrids from 0.26), False =
    # --no-enable-prefix-caching
    prefix_caching: bool | None = None
    # engine options: None = the engine's own default for its release and the card
    # (ledger/engines.py resolve_serve_job fills them in before any term is computed)
    engine_version: str | None = None
    gpu_memory_utilization: float | None = None  # vLLM: 0.9, 0.92 from 0.20
    block_size: int = 16  # vLLM default KV block (tokens)
    # the block asked, kept when vLLM raises block_size for a hybrid (so a resolved job resolved
    # again with another TP / KV dtype raises it from what was asked, not from the raised one)
    block_size_asked: int | None = None
    max_num_batched_tokens: int | None = None  # vLLM/SGLang tokens per step (chunked prefill)
    max_num_seqs: int | None = None  # vLLM: 256, or 1024 on >= 70 GiB cards (V1)
    cuda_graphs: bool = True  # CUDA graphs are captured unless --enforce-eager
    mem_fraction_static: float | None = None  # SGLang: weights + KV share of the free memory
    input_len: int | None = None  # prompt tokens per request (speed); None: context - output_len
    output_len: int | None = None  # generated tokens per request (speed); None: see lengths()
    # SGLang --enable-dp-attention: attention data-parallel across the TP ranks (each holds the
    # attention weights whole and the KV of its own requests; the MLP / experts stay TP)
    dp_attention: bool = False

    def __post_init__(self) -> None:
        _choice("engine", self.engine, ENGINES)
        if self.dp_attention and (
            not ENGINE_TRAITS[self.engine].dp_attention or self.parallel.tp < 2
        ):
            raise JobError("--dp-attention is SGLang's --enable-dp-attention: it needs "
                           "--engine sglang and --tp of 2 or more")  # fmt: skip
        _choice("kv_dtype", self.kv_dtype, KV_DTYPES)
        _choice("attention", self.attention, ATTENTION)
        _choice("experts", self.experts, EXPERTS)
        _choice("ssm_kernels", self.ssm_kernels, SSM_KERNELS)
        if self.prefix_caching is True:
            raise JobError("prefix caching switched on where the release keeps it off is not "
                           "modelled: leave it at the release's default, or --no-prefix-caching")  # fmt: skip
        if self.experts != "grouped_mm" and not ENGINE_TRAITS[self.engine].transformers_modules:
            raise JobError(f"--experts {self.experts} is transformers' experts_implementation: "
                           "it needs --engine hf (a serving engine runs its own fused MoE)")  # fmt: skip
        for name in ("context", "concurrency", "replicas", "block_size", "max_num_batched_tokens",
                     "max_num_seqs"):  # fmt: skip
            _positive(name, getattr(self, name))
        _positive("new_tokens", self.new_tokens, allow_zero=True)
        _positive("input_len", self.input_len)
        _positive("output_len", self.output_len)
        if self.new_tokens >= self.context:
            raise JobError(
                f"--new-tokens {self.new_tokens} must be smaller than --context {self.context}"
            )
        for name in ("gpu_memory_utilization", "mem_fraction_static"):
            value = getattr(self, name)
            if value is not None and not 0 < value <= 1:
                raise JobError(f"--{name.replace('_', '-')} must be in (0, 1], got {value}")
        if self.parallel.dp != 1:
            raise JobError("--dp does not apply to serving; use --replicas")

    def lengths(self) -> tuple[int, int]:
        """(input, output) tokens per request for the speed model: as given; output defaults to
        --new-tokens (hf) when set, else DEFAULT_OUTPUT_LEN capped at half the context; input
        defaults to the rest of the context."""
        out = self.output_len
        if out is None:
            out = self.new_tokens or max(1, min(DEFAULT_OUTPUT_LEN, self.context // 2))
        inp = self.input_len if self.input_len is not None else max(1, self.context - out)
        return inp, out


@dataclass(frozen=True)
class ResolvedServeJob(ServeJob):
    """A serve job with its engine's defaults for the release and the card filled in
    (ledger/serve.py ``resolve_job``), and ``settings``: where each value came from.  The type
    says the job is resolved: resolving it again for the same machine returns it as it is, so
    the settings keep the first resolution's sources ("given" only for what the user gave).
    A copy with another option (``dataclasses.replace(job, parallel=...)``) or the job on
    another machine no longer matches ``resolved_as``: the options changed since then are
    applied to the job as given and that is resolved afresh (the defaults of the first
    resolution are not carried over)."""

    settings: dict = field(default_factory=dict, compare=False, repr=False)
    # (the options as resolved, the machine's identity): what the settings hold for
    resolved_as: tuple = field(default=(), compare=False, repr=False)
    # the job as it was given, before the engine's defaults: a copy with another option is
    # resolved again from it (those defaults depend on the card and the parallel layout)
    given: ServeJob | None = field(default=None, compare=False, repr=False)

    def options(self) -> tuple:
        return tuple(getattr(self, f.name) for f in fields(ServeJob))


@dataclass(frozen=True)
class TrainJob:
    kind = "train"
    # None: the framework's default (FRAMEWORK_PRECISION); filled in on construction
    precision: str | None = None
    optimizer: str = "adamw"
    optimizer_impl: str | None = None  # None: the framework's (FRAMEWORK_OPTIMIZER_IMPL)
    micro_batch: int = 1
    seq: int = 2048
    grad_accum: int = 1
    checkpointing: str = "none"
    attention: str = "sdpa"
    ssm_kernels: str = "auto"  # as ServeJob.ssm_kernels
    experts: str = "grouped_mm"  # MoE: transformers' experts_implementation (as ServeJob)
    shard: str = "none"
    offload: str = "none"
    parallel: Parallel = field(default_factory=Parallel)
    host: HostSide = field(default_factory=HostSide)
    # LoRA / QLoRA (kind "lora" / "qlora" when rank is set)
    rank: int | None = None
    # None: PEFT's default target modules for the model type (model_state.lora_targets)
    lora_targets: tuple[str, ...] | None = None
    qlora: bool = False
    adapter_dtype: str = (
        "fp32"  # PEFT autocast_adapter_dtype=True (its default) keeps adapters fp32
    )
    framework: str = "auto"
    sequence_parallel: bool = False  # Megatron SP: TP ranks keep 1/tp of the layer inputs
    # speed: the elementwise kernels fused (torch.compile, Transformer Engine / Liger layers);
    # fp8: the linear layers' GEMMs in FP8 (Transformer Engine / torchao float8)
    fused_kernels: bool = False
    fp8: bool = False
    # model chunks per pipeline rank (Megatron's interleaved 1F1B schedule; 1: plain 1F1B)
    virtual_pipeline: int = 1
    # expert-parallel ranks (MoE): the routed experts split over ep ranks of the tp x dp group
    ep: int = 1
    # how framework / precision / optimizer_impl were chosen ("given", or the default that
    # chose them)
    framework_source: str = ""
    precision_source: str = ""
    optimizer_impl_source: str = ""

    def __post_init__(self) -> None:
        # long: TrainJob validation: defaults resolved, then one check per option rule, in order
        _choice("framework", self.framework, FRAMEWORKS)
        _choice("shard", self.shard, SHARDING)
        # a choice made by a default is made again (dataclasses.replace of a --shard, say)
        if self.framework_source.startswith("implied by"):
            object.__setattr__(self, "framework", "auto")
        if self.precision_source.endswith("'s default"):
            object.__setattr__(self, "precision", None)
        if self.optimizer_impl_source.endswith("'s default"):
            object.__setattr__(self, "optimizer_impl", None)
        if self.framework == "auto":
            object.__setattr__(self, "framework", default_framework(self.shard))
            object.__setattr__(self, "framework_source", f"implied by --shard {self.shard}")
        elif not self.framework_source:
            object.__setattr__(self, "framework_source", "given")
        if self.shard not in FRAMEWORK_SHARDS[self.framework]:
            raise JobError(
                f"--framework {self.framework} does not take --shard {self.shard} (it takes "
                f"{', '.join(FRAMEWORK_SHARDS[self.framework])})"
            )
        if self.precision is None:
            object.__setattr__(self, "precision", FRAMEWORK_PRECISION[self.framework])
            object.__setattr__(self, "precision_source", f"{self.framework}'s default")
        elif not self.precision_source:
            object.__setattr__(self, "precision_source", "given")
        if self.optimizer_impl is None:
            impl = FRAMEWORK_OPTIMIZER_IMPL[self.framework]
            if self.optimizer not in ("adamw", "sgd") or (
                self.framework == "hf-trainer" and self.shard.startswith("zero")
            ):
                impl = "fused" if self.optimizer in ("adamw", "sgd") else "foreach"
            object.__setattr__(self, "optimizer_impl", impl)
            object.__setattr__(self, "optimizer_impl_source", f"{self.framework}'s default")
        elif not self.optimizer_impl_source:
            object.__setattr__(self, "optimizer_impl_source", "given")
        _choice("adapter_dtype", self.adapter_dtype, ADAPTER_DTYPES)
        if self.sequence_parallel and self.parallel.tp == 1:
            raise JobError(
                "--sequence-parallel needs --tp > 1 (it splits the layer inputs across TP ranks)"
            )
        _choice("precision", self.precision, PRECISIONS)
        _choice("optimizer", self.optimizer, OPTIMIZERS)
        _choice("optimizer_impl", self.optimizer_impl, OPTIMIZER_IMPLS)
        _choice("checkpointing", self.checkpointing, CHECKPOINTING)
        _choice("attention", self.attention, ATTENTION)
        _choice("ssm_kernels", self.ssm_kernels, SSM_KERNELS)
        _choice("experts", self.experts, EXPERTS)
        if self.experts != "grouped_mm" and self.framework == "megatron":
            raise JobError(f"--experts {self.experts} is transformers' experts_implementation: "
                           "Megatron runs its own MoE layers")  # fmt: skip
        _choice("shard", self.shard, SHARDING)
        _choice("offload", self.offload, OFFLOAD)
        for name in ("micro_batch", "seq", "grad_accum", "rank", "virtual_pipeline", "ep"):
            _positive(name, getattr(self, name))
        if self.ep > 1 and (self.parallel.tp * self.parallel.dp) % self.ep:
            raise JobError(f"--ep {self.ep} must divide tp x dp = "
                           f"{self.parallel.tp * self.parallel.dp} (the ranks that share the "
                           "experts)")  # fmt: skip
        if self.ep > 1 and self.rank is not None:
            raise JobError("--ep is modelled for full training (--job train) only")
        if self.fp8 and self.rank is not None:
            raise JobError("--fp8 is modelled for full training (--job train) only (a LoRA / "
                           "QLoRA base runs its own kernels)")  # fmt: skip
        if self.virtual_pipeline > 1 and self.parallel.pp == 1:
            raise JobError("--virtual-pipeline needs --pp > 1 (it interleaves model chunks over "
                           "the pipeline ranks)")  # fmt: skip
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

    def rechoose(self, **changes) -> TrainJob:
        """This job with ``changes``, the framework, precision and optimizer implementation
        the user did not give chosen again for the new layout (a search or a suggestion that
        changes --shard changes the framework it implies).  ``__post_init__`` makes the
        defaulted choices again; what ``changes`` names is marked given so that it stays."""
        again = {f"{k}_source": "given" for k in ("framework", "precision", "optimizer_impl")
                 if k in changes}  # fmt: skip
        return dataclasses.replace(self, **again, **changes)


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


@dataclass(frozen=True)
class JobOption:
    """One job option: the single declaration that `fit`, `doctor --job`, `watch --model`, the
    workload catalogue and plan files all use (the CLI generates its options from it).

    ``group``: which job kinds take it — "all" (serve, train, lora, qlora), "serve", "train"
    (train, lora, qlora), "lora" (lora, qlora), "load"; ``engine``: a serve option that only
    one engine takes; ``type``: int, float or str (``concurrency`` is a str: an integer or
    "max"); ``flag``: the CLI spelling when it is not ``--name-with-dashes``."""

    name: str
    type: type
    group: str
    help: str
    flag: str | None = None
    engine: str | None = None

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")


def _flags(names: list[str]) -> str:
    """The options as the user typed them (``load_format`` is ``--format``)."""
    flag = {o.name: o.cli_flag for o in JOB_OPTIONS}
    return ", ".join(flag.get(n, "--" + n.replace("_", "-")) for n in names)


JOB_OPTIONS: tuple[JobOption, ...] = (
    JobOption("tp", int, "all", "Tensor-parallel cards per replica."),
    JobOption("pp", int, "all", "Pipeline stages per replica."),
    JobOption("dp", int, "train", "Data-parallel ranks (training)."),
    JobOption("replicas", int, "serve", "Serving replicas (e.g. 8 x TP1)."),
    JobOption("dtype", str, "all", "Weight scheme for serve/load: bf16 fp16 fp32 fp8 int8 int4 nf4 mxfp4."),
    JobOption("kv_dtype", str, "serve", f"KV cache dtype: {' '.join(KV_DTYPES)}."),
    JobOption("context", int, "serve", "Tokens per sequence (prompt + generated)."),
    JobOption("concurrency", str, "serve", "Concurrent sequences, or 'max'."),
    JobOption("input_len", int, "serve", "Prompt tokens per request (speed; context = input + output when --context is absent)."),
    JobOption("output_len", int, "serve", f"Generated tokens per request (speed; default {DEFAULT_OUTPUT_LEN}, at most half the context)."),
    JobOption("new_tokens", int, "serve", "hf engine: tokens generated after the prompt.", engine="hf"),
    JobOption("engine", str, "serve", " | ".join(ENGINES)),
    JobOption("engine_version", str, "serve", "vllm | sglang release whose accounting to follow (default: the newest modelled; docs/reference.md).", engine="vllm,sglang"),
    JobOption("gpu_memory_utilization", float, "serve", "vLLM budget fraction (default: the release's, 0.9 or 0.92).", engine="vllm"),
    JobOption("mem_fraction_static", float, "serve", "SGLang share of free memory for weights + KV (default: SGLang's rule for the card).", engine="sglang"),
    JobOption("max_num_batched_tokens", int, "serve", "vLLM tokens per step / SGLang chunked_prefill_size (default: the engine's for the card).", engine="vllm,sglang"),
    JobOption("max_num_seqs", int, "serve", "vLLM sequences per step (default: the release's for the card, 256 or 1024).", engine="vllm"),
    JobOption("enforce_eager", bool, "serve", "vLLM/SGLang: no CUDA graphs (--enforce-eager / --disable-cuda-graph).", engine="vllm,sglang"),
    JobOption("no_prefix_caching", bool, "serve", "vLLM --no-enable-prefix-caching: a hybrid (Mamba-2 / Gated DeltaNet) model keeps one state block per sequence (from 0.26 prefix caching is on by default for hybrids and keeps 1-3).", engine="vllm"),
    JobOption("dp_attention", bool, "serve", "SGLang --enable-dp-attention: attention data-parallel over the TP ranks (attention weights whole on each, KV of its own requests).", engine="sglang"),
    JobOption("micro_batch", int, "train", "Sequences per micro-batch per rank."),
    JobOption("seq", int, "train", "Training sequence length."),
    JobOption("grad_accum", int, "train", "Gradient accumulation steps."),
    JobOption("framework", str, "train", "ddp | fsdp1 | fsdp2 | deepspeed | megatron | hf-trainer: whose state layout (default: the one --shard implies: zero* deepspeed, fsdp* fsdp2, none ddp)."),
    JobOption("precision", str, "train", "bf16 | mixed: pure bf16, or fp32 parameters/master with bf16 compute (default: the framework's; docs/reference.md)."),
    JobOption("sequence_parallel", bool, "train", "Megatron sequence parallelism with --tp: layer inputs split across TP ranks (without it each TP rank holds them whole)."),
    JobOption("fused_kernels", bool, "train", "Elementwise kernels fused: torch.compile, Transformer Engine or Liger layers (speed; --framework megatron is fused already)."),
    JobOption("fp8", bool, "train", "Linear layers in FP8 (Transformer Engine / torchao float8, current scaling): the GEMMs at the card's fp8 rate, their casts, and the fp8 weight copies."),
    JobOption("virtual_pipeline", int, "train", "Model chunks per pipeline rank (Megatron's interleaved 1F1B, --virtual-pipeline-model-parallel-size; default 1: plain 1F1B)."),
    JobOption("ep", int, "train", "Expert-parallel ranks (MoE): the routed experts split over ep of the tp x dp ranks, whole experts each (Megatron --expert-model-parallel-size, expert TP 1; torchtitan / NeMo AutoModel ep)."),
    JobOption("optimizer", str, "train", " | ".join(OPTIMIZERS)),
    JobOption("optimizer_impl", str, "train", " | ".join(OPTIMIZER_IMPLS) + " (default: the framework's: fused for deepspeed and megatron, PyTorch's foreach otherwise)."),
    JobOption("attention", str, "all", "sdpa (flash path) | eager | math (SDPA fallback)"),
    JobOption("experts", str, "all", "MoE, transformers' experts_implementation (hf serving, training): grouped_mm (its default) | batched_mm (every routed token gathers its expert's weights) | eager (a loop over the experts, one at a time; balanced routing assumed; in training each expert's weight gradient is built full-size and added).", engine="hf"),
    JobOption("ssm_kernels", str, "all", "Gated DeltaNet / Mamba-2 layers run by transformers (hf serving, training): auto (fused where fla / mamba_ssm is installed here, else transformers' pure-torch fallback) | torch | fused.", engine="hf"),
    JobOption("checkpointing", str, "train", " | ".join(CHECKPOINTING)),
    JobOption("shard", str, "train", " | ".join(SHARDING)),
    JobOption("offload", str, "train", " | ".join(OFFLOAD)),
    JobOption("workers", int, "train", "DataLoader workers per rank."),
    JobOption("prefetch", int, "train", "DataLoader prefetch_factor."),
    JobOption("rank", int, "lora", "LoRA rank (default 8, PEFT's; --job qlora too)."),
    JobOption("lora_targets", str, "lora", "Comma-separated module names (default: PEFT's target modules for the model type)."),
    JobOption("adapter_dtype", str, "lora", "fp32 (PEFT's autocast_adapter_dtype default) | bf16 (autocast_adapter_dtype=False)."),
    JobOption("load_format", str, "load", "load: " + " | ".join(LOAD_FORMATS), flag="--format"),
    JobOption("load_strategy", str, "load", "load: " + " | ".join(LOAD_STRATEGIES)),
    JobOption("ranks", int, "load", "load: processes on this host that load."),
)  # fmt: skip
JOB_OPTION_NAMES = tuple(o.name for o in JOB_OPTIONS)


def _group(name: str) -> set[str]:
    return {o.name for o in JOB_OPTIONS if o.group == name}


COMMON_OPTS = _group("all")  # serve and training jobs; a load job takes only dtype of these
SERVE_OPTS = _group("serve")
TRAIN_OPTS = _group("train")
LORA_OPTS = _group("lora")
LOAD_OPTS = _group("load")
ENGINE_ONLY = {
    e: {o.name for o in JOB_OPTIONS if o.engine and e in o.engine.split(",")} for e in ENGINES
}


def build_job(kind: str, o: dict):
    # long: which options apply to the kind, then one constructor per kind (serve, load, train)
    """A job from option values named as `nodeledger fit`'s options (snake_case; None = not
    given).  Options that do not apply to the job kind or engine raise JobError."""
    given = {k for k, v in o.items() if v is not None}
    allowed = set(COMMON_OPTS)
    if kind == "serve":
        allowed |= SERVE_OPTS
    elif kind in ("train", "lora", "qlora"):
        allowed |= TRAIN_OPTS | (LORA_OPTS if kind != "train" else set())
    elif kind == "load":
        allowed = {"dtype"} | LOAD_OPTS
    else:
        raise JobError(f"--job {kind!r} is not one of serve, train, lora, qlora, load")
    if kind == "serve":
        engine = o.get("engine") or "hf"
        _choice("engine", engine, ENGINES)
        other = set().union(*(v for e, v in ENGINE_ONLY.items() if e != engine))
        wrong = sorted((given & other) - ENGINE_ONLY[engine])
        if wrong:
            raise JobError(f"{_flags(wrong)} does not apply to --engine {engine}")
    stray = sorted(given - allowed)
    if stray:
        raise JobError(f"{_flags(stray)} does not apply to --job {kind}")
    pick = {k: v for k, v in o.items() if v is not None}
    par = Parallel(tp=pick.get("tp", 1), pp=pick.get("pp", 1), dp=pick.get("dp", 1))
    if kind == "serve":
        conc = pick.get("concurrency", "1")
        if conc == "max":
            concurrency = None
        else:
            try:
                concurrency = int(conc)
            except ValueError:
                raise JobError(f"--concurrency must be an integer or 'max', got {conc!r}") from None
        inp, outl = pick.get("input_len"), pick.get("output_len")
        context = pick.get("context")
        given = context is not None
        if context is None:
            context = inp + outl if inp is not None and outl is not None else 4096
        if (inp or outl) and isinstance(context, int):
            i = inp if inp is not None else 0
            o = outl if outl is not None else 0
            if i + o > context:
                what = " + ".join(
                    f"--{n.replace('_', '-')} {v:,}"
                    for n, v in (("input_len", inp), ("output_len", outl))
                    if v
                )
                raise JobError(
                    f"{what} exceed{'s' if (inp is None) != (outl is None) else ''} the context of "
                    f"{context:,} tokens"
                    + (
                        " (--context)"
                        if given
                        else " (the default; give --context, or both lengths)"
                    )
                )
        return ServeJob(
            engine=pick.get("engine", "hf"), dtype=pick.get("dtype"), kv_dtype=pick.get("kv_dtype", "bf16"),
            context=context, input_len=inp, output_len=outl, concurrency=concurrency, new_tokens=pick.get("new_tokens", 0),
            parallel=par, replicas=pick.get("replicas", 1), attention=pick.get("attention", "sdpa"),
            experts=pick.get("experts", "grouped_mm"), ssm_kernels=pick.get("ssm_kernels", "auto"),
            engine_version=pick.get("engine_version"),
            gpu_memory_utilization=pick.get("gpu_memory_utilization"),
            mem_fraction_static=pick.get("mem_fraction_static"),
            max_num_batched_tokens=pick.get("max_num_batched_tokens"),
            max_num_seqs=pick.get("max_num_seqs"),
            cuda_graphs=not pick.get("enforce_eager", False),
            prefix_caching=False if pick.get("no_prefix_caching") else None,
            dp_attention=bool(pick.get("dp_attention", False)),
        )  # fmt: skip
    if kind == "load":
        return LoadJob(dtype=pick.get("dtype"), format=pick.get("load_format", "safetensors"),
                       strategy=pick.get("load_strategy", "every_rank"), ranks=pick.get("ranks", 1))  # fmt: skip
    if "dtype" in pick:
        raise JobError("--dtype does not apply to training; use --precision bf16|mixed")
    targets = None
    if "lora_targets" in pick:
        targets = tuple(t.strip() for t in pick["lora_targets"].split(","))
        if not all(targets):
            raise JobError(f"--lora-targets {pick['lora_targets']!r} has an empty module name")
    if "prefetch" in pick and not pick.get("workers"):
        raise JobError(
            "--prefetch needs --workers > 0 (PyTorch's DataLoader refuses it without workers)"
        )
    return TrainJob(
        optimizer=pick.get("optimizer", "adamw"),
        optimizer_impl=pick.get("optimizer_impl"), micro_batch=pick.get("micro_batch", 1),
        seq=pick.get("seq", 2048), grad_accum=pick.get("grad_accum", 1),
        checkpointing=pick.get("checkpointing", "none"), attention=pick.get("attention", "sdpa"),
        ssm_kernels=pick.get("ssm_kernels", "auto"), experts=pick.get("experts", "grouped_mm"),
        shard=pick.get("shard", "none"), offload=pick.get("offload", "none"), parallel=par,
        host=HostSide(workers=pick.get("workers", 0), prefetch=pick.get("prefetch", 2)),
        rank=pick.get("rank", 8) if kind in ("lora", "qlora") else None, qlora=kind == "qlora",
        framework=pick.get("framework", "auto"), precision=pick.get("precision"),
        sequence_parallel=bool(pick.get("sequence_parallel", False)),
        fused_kernels=bool(pick.get("fused_kernels", False)), fp8=bool(pick.get("fp8", False)),
        virtual_pipeline=pick.get("virtual_pipeline", 1), ep=pick.get("ep", 1),
        adapter_dtype=pick.get("adapter_dtype", "fp32"),
        **({"lora_targets": targets} if targets else {}),
    )  # fmt: skip
