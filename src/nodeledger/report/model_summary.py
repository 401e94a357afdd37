"""The summary ``nodeledger model show`` renders: parameters, weight bytes, KV cache, checkpoint."""

from __future__ import annotations

from typing import Any

from typing_extensions import NotRequired, TypedDict  # pydantic needs these on Python < 3.12

from nodeledger.ledger.kv_cache import (
    kv_bytes_per_token,
    kv_bytes_per_token_beyond_window,
    layer_counts,
    linear_state_bytes_per_sequence,
)
from nodeledger.ledger.weights import SCHEMES, config_scheme, scheme_for, weight_bytes
from nodeledger.model.safetensors_header import checkpoint_bytes
from nodeledger.model.source import ConfigSource
from nodeledger.model.spec import ModelSpec
from nodeledger.schemas import json_schema

PARAMS_SOURCE = (
    "counted tensor by tensor from config.json, mirroring transformers' module tree for the "
    "family (tied embeddings once); checked against transformers on the meta device"
)
KV_SOURCE = (
    "2 x kv_heads x head_dim per full/sliding layer; kv_lora_rank + qk_rope_head_dim per MLA "
    "layer (DeepSeek-V2 sec. 2.1, latent cache as vLLM stores it); linear-attention layers hold a "
    "fixed state per sequence instead"
)


# ``model show --json``: the machine-readable contract (issue 31), its JSON Schema generated
# from these types and shipped as nodeledger/schemas/model.schema.json
SCHEMA_VERSION = 1


class MoEJSON(TypedDict):
    num_experts: int
    top_k: int
    moe_layers: int
    params_per_expert: int


class ArchitectureJSON(TypedDict):
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    vocab_size: int
    tied_embeddings: bool
    attention_layers: dict[str, int]  # layers by token mixer (full, sliding, mla, linear ...)
    moe: MoEJSON | None
    torch_dtype: str | None
    quantization_config: dict[str, Any] | None  # the config's, verbatim


class ParamsJSON(TypedDict):
    total: int
    active: int
    active_non_embedding: int
    active_convention: str
    by_part: dict[str, int]
    unit: str  # "parameters"
    source: str


class SchemeBytesJSON(TypedDict):
    scheme: str
    bytes: int
    source: str
    by_part: NotRequired[dict[str, int]]  # the scheme --dtype asked


class KvJSON(TypedDict):
    dtype: str
    bytes_per_token: int
    bytes_per_token_fp8: int
    bytes_per_token_beyond_window: int
    linear_state_bytes_per_sequence: int
    sliding_window: int | None
    source: str


class CheckpointJSON(TypedDict):
    total_bytes: int
    bytes_by_dtype: dict[str, int]
    elements_by_dtype: dict[str, int]
    tensor_count: int
    files: list[str]
    source: str
    config_derived_bytes: int


class ModelJSON(TypedDict):
    schema_version: int
    model: str
    source: str
    family: str
    model_type: str | None
    architecture: ArchitectureJSON
    params: ParamsJSON
    weight_bytes: dict[str, int]  # bytes per scheme
    weight_bytes_layouts: dict[str, str]
    weight_bytes_config: SchemeBytesJSON
    weight_bytes_selected: NotRequired[SchemeBytesJSON]
    kv_bytes_per_token: int
    kv: KvJSON
    checkpoint: CheckpointJSON | None
    notes: list[str]


def model_json_schema() -> dict[str, Any]:
    """The JSON Schema of ``model show --json``, generated from :class:`ModelJSON`."""
    return json_schema(ModelJSON, "nodeledger model show --json")


def model_summary(
    spec: ModelSpec, src: ConfigSource, dtype: str | None = None, read_checkpoint: bool = True
) -> ModelJSON:
    # long: a builder: one summary dict, mostly a literal of independent fields read off the spec
    by_part = spec.params_by_part()
    default = config_scheme(spec)
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "model": src.catalogue_entry["id"] if src.catalogue_entry else src.where,
        "source": src.where,
        "family": spec.family,
        "model_type": spec.model_type,
        "architecture": {
            "hidden_size": spec.hidden_size,
            "num_layers": spec.num_layers,
            "num_attention_heads": spec.num_attention_heads,
            "vocab_size": spec.vocab_size,
            "tied_embeddings": spec.tied_embeddings,
            "attention_layers": layer_counts(spec),
            "moe": None
            if spec.moe is None
            else {
                "num_experts": spec.moe.num_experts,
                "top_k": spec.moe.top_k,
                "moe_layers": spec.moe.moe_layers,
                "params_per_expert": spec.moe.expert_params,
            },
            "torch_dtype": spec.torch_dtype,
            "quantization_config": spec.quantization,
        },
        "params": {
            "total": spec.params_total(),
            "active": spec.params_active(),
            "active_non_embedding": spec.params_active() - by_part["embeddings"],
            "active_convention": (
                "active = parameters touched per generated text token: routed experts at top-k, "
                "vision tower excluded, input embeddings and lm_head included (as Qwen, Mixtral "
                "and DeepSeek count); active_non_embedding leaves the input embedding tables out "
                "(as OpenAI counts gpt-oss)"
            ),
            "by_part": by_part,
            "unit": "parameters",
            "source": PARAMS_SOURCE,
        },
        "weight_bytes": {
            name: weight_bytes(spec, scheme_for(name, spec)).total_bytes for name in SCHEMES
        },
        "weight_bytes_layouts": dict(SCHEMES),
        "weight_bytes_config": {
            "scheme": default.label(),
            "bytes": weight_bytes(spec, default).total_bytes,
            "source": default.source,
        },
        "kv_bytes_per_token": kv_bytes_per_token(spec, 2),
        "kv": {
            "dtype": "bf16",
            "bytes_per_token": kv_bytes_per_token(spec, 2),
            "bytes_per_token_fp8": kv_bytes_per_token(spec, 1),
            "bytes_per_token_beyond_window": kv_bytes_per_token_beyond_window(spec, 2),
            "linear_state_bytes_per_sequence": linear_state_bytes_per_sequence(spec, 2),
            "sliding_window": next((a.window for a in spec.attention if a.kind == "sliding"), None),
            "source": KV_SOURCE,
        },
        "checkpoint": None,
        "notes": list(spec.notes),
    }
    if dtype is not None:
        scheme = scheme_for(dtype, spec)
        wb = weight_bytes(spec, scheme)
        out["weight_bytes_selected"] = {
            "scheme": scheme.label(),
            "bytes": wb.total_bytes,
            "by_part": wb.by_part_bytes,
            "source": scheme.source or SCHEMES[scheme.name],
        }
    if read_checkpoint and src.folder is not None:
        ck = checkpoint_bytes(src.folder)
        if ck is not None:
            out["checkpoint"] = {
                "total_bytes": ck.total_bytes,
                "bytes_by_dtype": ck.bytes_by_dtype,
                "elements_by_dtype": ck.elements_by_dtype,
                "tensor_count": ck.tensor_count,
                "files": ck.files,
                "source": ck.source,
                "config_derived_bytes": out["weight_bytes_config"]["bytes"],
            }
    # built as a dict; tests/test_schemas.py validates real outputs against ModelJSON
    return out  # type: ignore[return-value]
