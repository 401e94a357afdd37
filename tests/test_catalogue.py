"""The bundled catalogue (written from public facts) agrees with the real configs."""

from __future__ import annotations

import json

import pytest

from conftest import shared_models_or_skip
from nodeledger.model import build_spec, catalogue, load_model

REQUIRED = [
    "Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B", "Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-235B-A22B", "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B",
    "meta-llama/Llama-3.1-405B", "mistralai/Mixtral-8x7B-v0.1", "deepseek-ai/DeepSeek-V3",
    "openai/gpt-oss-120b",
]  # fmt: skip

FIXTURE_OF = {
    "Qwen/Qwen3-0.6B": "Qwen3-0.6B",
    "Qwen/Qwen3-8B": "Qwen3-8B",
    "Qwen/Qwen3-32B": "Qwen3-32B",
    "Qwen/Qwen3-30B-A3B": "Qwen3-30B-A3B",
    "Qwen/Qwen3-235B-A22B": "Qwen3-235B-A22B",
    "meta-llama/Llama-3.1-8B": "Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B": "Llama-3.1-70B",
    "meta-llama/Llama-3.1-405B": "Llama-3.1-405B",
    "mistralai/Mixtral-8x7B-v0.1": "Mixtral-8x7B-v0.1",
    "deepseek-ai/DeepSeek-V3": "DeepSeek-V3",
    "openai/gpt-oss-120b": "gpt-oss-120b",
}


def test_catalogue_has_required_models_with_sources():
    ids = {e["id"]: e for e in catalogue()}
    for rid in REQUIRED:
        assert rid in ids, rid
        assert ids[rid]["source"], rid


@pytest.mark.parametrize("rid", REQUIRED)
def test_catalogue_resolves_by_id_and_short_name(rid):
    spec, src = load_model(rid)
    spec2, _ = load_model(rid.split("/")[-1].upper())
    assert spec.params_total() == spec2.params_total() > 0
    assert src.catalogue_entry["id"] == rid


@pytest.mark.shared
@pytest.mark.parametrize("rid", REQUIRED)
def test_catalogue_matches_real_config(rid):
    models = shared_models_or_skip()
    real = build_spec(json.loads((models / FIXTURE_OF[rid] / "config.json").read_text()), rid)
    ours, _ = load_model(rid)
    assert ours.params_total() == real.params_total()
    assert ours.params_active() == real.params_active()
    assert ours.attention == real.attention
