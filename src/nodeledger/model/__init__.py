"""What a job runs: model specs from HF config.json, parameter counting."""

from __future__ import annotations

from nodeledger.model.families import build_spec, supported_families
from nodeledger.model.source import ConfigSource, catalogue, resolve_config
from nodeledger.model.spec import PARTS, AttentionLayer, ModelSpec, MoEInfo, TensorGroup

__all__ = [
    "PARTS",
    "AttentionLayer",
    "ConfigSource",
    "MoEInfo",
    "ModelSpec",
    "TensorGroup",
    "build_spec",
    "catalogue",
    "load_model",
    "resolve_config",
    "supported_families",
]


def load_model(ref: str, online: bool = False) -> tuple[ModelSpec, ConfigSource]:
    """Resolve ``ref`` (path, catalogue name, cached Hub id, or Hub id with ``online``) to a spec."""
    src = resolve_config(ref, online=online)
    return build_spec(src.config, src.where), src
