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


def _fake_transformers(tmp_path, files: dict[str, str]):
    root = tmp_path / "transformers"
    for rel, text in {"__init__.py": '__version__ = "9.9.0"\n', **files}.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_the_path_is_read_from_the_installed_transformers_class_flags(tmp_path, monkeypatch):
    from nodeledger.model import attention_path as AP

    root = _fake_transformers(tmp_path, {
        "modeling_utils.py": "class PreTrainedModel:\n    _supports_sdpa: bool = False\n",
        "models/sinky/modeling_sinky.py": (
            "class SinkyVisionModel:\n    _supports_sdpa = True\n\n"
            "class SinkyPreTrainedModel(PreTrainedModel):\n    _supports_sdpa = False\n"),
        "models/plain/modeling_plain.py": "class PlainPreTrainedModel(PreTrainedModel):\n    _supports_sdpa = True\n",
        "models/silent/modeling_silent.py": "class SilentPreTrainedModel(PreTrainedModel):\n    pass\n",
    })  # fmt: skip
    monkeypatch.setattr(AP, "_transformers_dir", lambda: root)
    AP.attention_path.cache_clear()
    try:
        sinky = AP.attention_path("sinky")
        assert not sinky.sdpa and "installed transformers 9.9.0" in sinky.source
        assert AP.attention_path("plain").sdpa
        # no flag of its own: PreTrainedModel's default (False in transformers 5)
        assert not AP.attention_path("silent").sdpa
        # a family the installed release lacks: nodeledger's table
        assert "nodeledger's table" in AP.attention_path("gpt_oss").source
        assert not AP.attention_path("gpt_oss").sdpa
        assert AP.attention_path("../etc").source.startswith("nodeledger's table")  # no path games
    finally:
        AP.attention_path.cache_clear()


def test_without_transformers_the_table_answers(monkeypatch):
    from nodeledger.model import attention_path as AP

    monkeypatch.setattr(AP, "_transformers_dir", lambda: None)
    AP.attention_path.cache_clear()
    try:
        assert not AP.attention_path("bloom").sdpa and AP.attention_path("llama").sdpa
        assert "transformers 5.24.0" in AP.attention_path("bloom").source
    finally:
        AP.attention_path.cache_clear()


def test_fit_says_which_path_and_why():
    out = run_cli(
        "fit", "gpt-oss-120b", "--job", "serve", "--machine", "hgx-h200", "--no-fail"
    ).stdout
    flat = " ".join(out.split())
    assert (
        "attention: eager, not --attention sdpa: transformers has no SDPA path for gpt_oss" in flat
    )
