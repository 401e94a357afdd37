"""The attention path transformers takes for a family with no SDPA path (issue 30, first
step): gpt-oss (attention sinks) and BLOOM (ALiBi) run eagerly whatever --attention asks, in
generate() and in training, LoRA included (BLOOM LoRA was counted with SDPA: 51 % low)."""

from __future__ import annotations

import json

from conftest import run_cli, shared_models_or_skip


def _peak(*args: str) -> int:
    d = json.loads(run_cli("fit", *args, "--machine", "hgx-h200", "--json", "--no-fail").stdout)
    return d["cards"][0]["torch_peak_bytes"]


def test_gpt_oss_generate_runs_eager_by_default():
    common = ("gpt-oss-120b", "--job", "serve", "--context", "8192", "--concurrency", "4")
    default = _peak(*common)
    assert default == _peak(*common, "--attention", "eager")  # the family's own eager path
    assert default == _peak(*common, "--attention", "sdpa")  # a request it cannot honour


def test_bloom_lora_trains_with_eager_attention():
    models = shared_models_or_skip()
    cfg = str(models / "bloomz-560m")
    common = (cfg, "--job", "lora", "--micro-batch", "4", "--seq", "1024")
    sdpa = _peak(*common, "--attention", "sdpa")
    eager = _peak(*common, "--attention", "eager")
    assert sdpa == eager == _peak(*common)  # eager whatever was asked: ALiBi has no SDPA path
    full = (cfg, "--job", "train", "--micro-batch", "4", "--seq", "1024")
    assert _peak(*full, "--attention", "sdpa") == _peak(*full, "--attention", "eager")
