"""Weight bytes: what a model's weights occupy for a storage scheme.

One function per scheme term; every figure is derived from the ModelSpec's tensor groups, so
scale and zero-point tensors are counted per tensor shape (block / group rounding included).

Which tensors a scheme converts: the 2-D linear weights of attention, MLP and expert blocks
(``TensorGroup.kind == "linear"`` and ``module`` in attn/mlp/expert/shared).  Embeddings,
lm_head, norms, biases, routers and vision towers stay at the 16-bit base dtype, as in the
published checkpoints of each scheme (a config's ``modules_to_not_convert`` narrows it further).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from math import ceil

from nodeledger.errors import ConfigError
from nodeledger.model.cfg import ConfigReader
from nodeledger.model.spec import PARTS, ModelSpec, TensorGroup

BYTES_PER_ELEMENT = {"fp32": 4, "bf16": 2, "fp16": 2}

# Schemes ``model show`` reports, with their documented layout.
SCHEMES: dict[str, str] = {
    "bf16": "2 B/param (bfloat16)",
    "fp16": "2 B/param (float16)",
    "fp32": "4 B/param (float32)",
    "fp8": "linear weights 1 B/param (e4m3) + one fp32 scale per 128x128 block, or per the "
    "config's weight_block_size (DeepSeek-V3 layout); other tensors bf16",
    "int8": "linear weights 1 B/param + one bf16 scale per output channel (W8A16 per-channel); "
    "other tensors bf16",
    "int4": "GPTQ/AWQ 4-bit: packed 0.5 B/param + per group (default 128 inputs) an fp16 scale "
    "and a packed 4-bit zero per output channel, + GPTQ's int32 g_idx per input; other tensors bf16",
    "nf4": "bitsandbytes NF4 with double quantisation (QLoRA): 0.5 B/param + 1 B absmax per "
    "64-value block + one fp32 per 256 blocks (a config without double quant: fp32 absmax); "
    "other tensors bf16",
    "mxfp4": "OCP MX FP4: 0.5 B/param + one E8M0 byte per 32 values (gpt-oss experts); other "
    "tensors bf16",
}

QUANTISABLE_MODULES = {"attn", "mlp", "expert", "shared"}


@dataclass(frozen=True)
class Scheme:
    name: str  # a key of SCHEMES
    base: str = "bf16"  # dtype of the tensors the scheme leaves alone
    block: tuple[int, int] | None = None  # fp8 weight_block_size (out, in)
    group_size: int = 128  # int4 group size; -1 = one group per output channel
    bits: int = 4
    g_idx: bool = True  # GPTQ stores an int32 g_idx per input feature; AWQ does not
    act_order: bool = False  # GPTQ desc_act: the g_idx permutes the input features
    double_quant: bool = True  # nf4: bitsandbytes bnb_4bit_use_double_quant
    skip: tuple[str, ...] = ()  # modules_to_not_convert patterns (without the "model." prefix)
    source: str = ""

    def label(self) -> str:
        if self.name == "fp8" and self.block:
            return f"fp8 (block {self.block[0]}x{self.block[1]})"
        if self.name == "int4":
            return f"int{self.bits} GPTQ/AWQ (group {self.group_size})"
        if self.name == "nf4" and not self.double_quant:
            return "nf4 (no double quantisation)"
        return self.name


@dataclass
class WeightBytes:
    scheme: Scheme
    total_bytes: int
    by_part_bytes: dict[str, int] = field(default_factory=dict)


def converted(t: TensorGroup, scheme: Scheme) -> bool:
    if t.kind != "linear" or t.module not in QUANTISABLE_MODULES or t.keep_fp32:
        return False
    return not any(fnmatch.fnmatchcase(t.name, pat + "*") for pat in scheme.skip)


def bytes_plain(t: TensorGroup, dtype: str) -> int:
    """Unquantised tensor: numel x width; tensors checkpoints keep in fp32 stay 4 B."""
    width = 4 if t.keep_fp32 else BYTES_PER_ELEMENT[dtype]
    return t.numel * width


def bytes_fp8(t: TensorGroup, block: tuple[int, int] | None) -> int:
    """FP8 weight (1 B) + fp32 scale_inv: per block of (bo x bi) -> ceil(out/bo)*ceil(in/bi)
    scales (DeepSeek-V3 README_WEIGHTS.md), else one per tensor."""
    out, inp = t.shape[-2], t.shape[-1]
    scales = ceil(out / block[0]) * ceil(inp / block[1]) if block else 1
    return t.count * (out * inp + 4 * scales)


def bytes_int8(t: TensorGroup) -> int:
    """int8 weight (1 B) + one bf16 scale per output channel."""
    out, inp = t.shape[-2], t.shape[-1]
    return t.count * (out * inp + 2 * out)


def bytes_int4_grouped(t: TensorGroup, group: int, bits: int, g_idx: bool) -> int:
    """GPTQ/AWQ: qweight bits/8 B per weight; per group and output channel an fp16 scale and a
    packed ``bits``-wide zero point; GPTQ adds an int32 g_idx per input feature
    (AutoGPTQ / AutoAWQ checkpoint layout)."""
    out, inp = t.shape[-2], t.shape[-1]
    groups = 1 if group <= 0 else ceil(inp / group)
    packed = out * inp * bits / 8
    scales = groups * out * 2
    zeros = groups * out * bits / 8
    gidx = inp * 4 if g_idx else 0
    return t.count * int(packed + scales + zeros + gidx)


def bytes_nf4(t: TensorGroup, double_quant: bool = True) -> int:
    """bitsandbytes NF4: 0.5 B/weight and one absmax per 64-weight block.  With double
    quantisation the absmax is 1 B plus one fp32 per 256 blocks (Dettmers et al. 2023, QLoRA,
    sec. 3); without it the absmax is fp32 (4 B)."""
    n = t.shape[-2] * t.shape[-1]
    blocks = ceil(n / 64)
    absmax = blocks + 4 * ceil(blocks / 256) if double_quant else 4 * blocks
    return t.count * (ceil(n / 2) + absmax)


def bytes_mxfp4(t: TensorGroup) -> int:
    """OCP Microscaling FP4 (E2M1): 32-value blocks of 16 B + one E8M0 scale byte."""
    out, inp = t.shape[-2], t.shape[-1]
    blocks = out * ceil(inp / 32)
    return t.count * blocks * 17


def tensor_bytes(t: TensorGroup, scheme: Scheme) -> int:
    if scheme.name in BYTES_PER_ELEMENT:
        return bytes_plain(t, scheme.name)
    if not converted(t, scheme):
        return bytes_plain(t, scheme.base)
    if scheme.name == "fp8":
        return bytes_fp8(t, scheme.block)
    if scheme.name == "int8":
        return bytes_int8(t)
    if scheme.name == "int4":
        return bytes_int4_grouped(t, scheme.group_size, scheme.bits, scheme.g_idx)
    if scheme.name == "nf4":
        return bytes_nf4(t, scheme.double_quant)
    if scheme.name == "mxfp4":
        return bytes_mxfp4(t)
    raise ValueError(f"unknown scheme {scheme.name}")


def weight_bytes(spec: ModelSpec, scheme: Scheme) -> WeightBytes:
    """Bytes of every tensor under ``scheme``, by part; remembered per spec and scheme until
    the spec's tensors change (a layout search asks for the same figure thousands of times)."""
    memo = spec.__dict__.setdefault("_weight_bytes_memo", {})
    key = (scheme, id(spec.tensors), len(spec.tensors))
    hit = memo.get(key)
    if hit is not None:
        return WeightBytes(hit.scheme, hit.total_bytes, dict(hit.by_part_bytes))
    by_part = dict.fromkeys(PARTS, 0)
    for t in spec.tensors:
        by_part[t.part] += tensor_bytes(t, scheme)
    if len(memo) > 64:
        memo.clear()
    memo[key] = out = WeightBytes(scheme, sum(by_part.values()), by_part)
    return WeightBytes(out.scheme, out.total_bytes, dict(out.by_part_bytes))


def _strip_model(patterns: list[str] | None) -> tuple[str, ...]:
    return tuple(
        p.removeprefix("model.language_model.").removeprefix("model.") for p in patterns or ()
    )


_TORCH_DTYPES = {"float16": "fp16", "float32": "fp32", "bfloat16": "bf16",
                 "half": "fp16", "float": "fp32", "fp16": "fp16", "fp32": "fp32", "bf16": "bf16"}  # fmt: skip


def _base_dtype(spec: ModelSpec) -> str:
    """The checkpoint dtype the config declares; bf16 when it declares none."""
    if not spec.torch_dtype:
        return "bf16"
    d = spec.torch_dtype.lower().removeprefix("torch.")
    if d not in _TORCH_DTYPES:
        raise ConfigError(
            f"{spec.source}: field torch_dtype {spec.torch_dtype!r} is not a weight dtype "
            "nodeledger models (float32, float16, bfloat16)"
        )
    return _TORCH_DTYPES[d]


def config_scheme(spec: ModelSpec) -> Scheme:
    """The storage scheme the config declares: quantization_config if any, else torch_dtype.

    A config without torch_dtype is taken as bf16 and says so in ``source``.
    """
    q = spec.quantization
    base = _base_dtype(spec)
    if not q:
        if spec.torch_dtype:
            return Scheme(base, source=f"config.json torch_dtype={spec.torch_dtype}")
        return Scheme("bf16", source="config.json gives no torch_dtype: assumed bf16")
    qc = ConfigReader(q, spec.source, "quantization_config.")
    method = (qc.str("quant_method") or "").lower()
    skip = _strip_model(qc.str_list("modules_to_not_convert") or qc.str_list("ignore"))
    src = f"config.json quantization_config quant_method={method}"
    if method == "fp8":
        blk = qc.int_list("weight_block_size")
        if blk is not None and (len(blk) != 2 or min(blk) < 1):
            raise qc.error("weight_block_size", f"must be two positive integers, got {blk}")
        if blk is None:  # transformers FineGrainedFP8Config default
            blk = [128, 128]
            src += " (weight_block_size not given: transformers' default 128x128)"
        return Scheme("fp8", base, block=(blk[0], blk[1]), skip=skip, source=src)
    if method == "mxfp4":
        return Scheme("mxfp4", base, skip=skip, source=src)
    if method in ("gptq", "awq"):
        bits = qc.int("bits", "w_bit", default=4)
        group = qc.int("group_size", "q_group_size", default=128, min_value=-1)
        if bits not in (2, 3, 4, 8) or group == 0:
            raise qc.error("bits", f"/ group_size {bits}/{group} is not a GPTQ/AWQ layout")
        if qc.defaults:
            src += (
                " (defaults applied: " + ", ".join(f"{k}={v}" for k, v in qc.defaults.items()) + ")"
            )
        return Scheme("int4", base, group_size=group, bits=bits, g_idx=method == "gptq",
                      act_order=method == "gptq" and qc.bool("desc_act", False), skip=skip,
                      source=src)  # fmt: skip
    if method == "bitsandbytes":
        four, eight = qc.bool("load_in_4bit", False), qc.bool("load_in_8bit", False)
        if four and eight:
            raise qc.error("load_in_4bit", "and load_in_8bit are both true")
        if four or qc.str("bnb_4bit_quant_type"):
            dq = qc.bool("bnb_4bit_use_double_quant", False)  # BitsAndBytesConfig default
            return Scheme("nf4", base, skip=skip, double_quant=dq, source=src)
        return Scheme("int8", base, skip=skip, source=src)
    raise ConfigError(
        f"{spec.source}: quantization_config.quant_method {method!r} is not modelled "
        "(supported: fp8, mxfp4, gptq, awq, bitsandbytes); pass --dtype to choose a scheme"
    )


def scheme_for(name: str, spec: ModelSpec) -> Scheme:
    """A named scheme; fp8/mxfp4/int4 take block, group and skip lists from the config when
    the config itself declares that scheme."""
    if name not in SCHEMES:
        raise ConfigError(f"unknown dtype {name!r}; choose one of {', '.join(SCHEMES)}")
    declared = config_scheme(spec) if spec.quantization else None
    if declared is not None and declared.name == name:
        return declared
    if name == "fp8":
        return Scheme(
            "fp8", block=(128, 128), source="fp8 with 128x128 block scales (transformers' default)"
        )
    return Scheme(name, source=SCHEMES[name])
