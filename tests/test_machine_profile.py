"""Machine profiles: presets load, round-trip through TOML and JSON, bad fields are named."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nodeledger.errors import ProfileError
from nodeledger.machine import (
    DEFAULT_PRESET,
    LinkKind,
    dump_profile,
    list_presets,
    load_profile,
    parse_profile,
    resolve_machine,
    save_profile,
)
from nodeledger.machine.profile import to_json, validate

REQUIRED_PRESETS = {
    "k100-ai-8x64g", "dgx-a100-80g", "dgx-h100", "hgx-h200", "8x-a40-48g-pcie",
    "4x-a100-80g-pcie", "8x-rtx4090", "8x-ascend-910b",
}  # fmt: skip


def test_required_presets_bundled():
    assert set(list_presets()) >= REQUIRED_PRESETS
    assert DEFAULT_PRESET == "k100-ai-8x64g"


@pytest.mark.parametrize("name", sorted(REQUIRED_PRESETS))
def test_preset_round_trips(name, tmp_path):
    p = resolve_machine(name)
    assert parse_profile(dump_profile(p, "toml"), "toml", "t") == p
    assert parse_profile(dump_profile(p, "json"), "json", "j") == p
    for suffix in (".toml", ".json"):
        f = tmp_path / f"m{suffix}"
        save_profile(p, f)
        assert load_profile(f) == p


@pytest.mark.parametrize("name", sorted(REQUIRED_PRESETS))
def test_every_known_card_figure_has_a_source(name):
    p = resolve_machine(name)
    assert p.accelerators
    for a in p.accelerators:
        for field in ("memory_bytes", "memory_bandwidth_gbps", "bf16_dense_tflops"):
            if getattr(a, field) is not None:
                assert a.sources.get(field), (name, a.index, field)


def test_reference_machine_matches_mission():
    p = resolve_machine(None)
    assert p.name == "k100-ai-8x64g"
    assert len(p.accelerators) == 8
    assert p.total_accelerator_memory_bytes() == 8 * 64 * 2**30
    assert p.host.ram_bytes == 125 * 2**30
    assert p.host.sockets == 2 and p.host.cores == 96 and len(p.host.numa_nodes) == 8
    assert [n.kind for n in p.network.nics] == ["ethernet"]
    assert p.link(0, 7).kind == LinkKind.xgmi
    # not published -> unknown, never a guess
    assert p.accelerators[0].memory_bandwidth_gbps is None
    assert p.accelerators[0].bf16_dense_tflops is None


def test_unknown_is_explicit_in_toml_and_null_in_json():
    p = resolve_machine(None)
    assert 'memory_bandwidth_gbps = "unknown"' in dump_profile(p, "toml")
    assert json.loads(dump_profile(p, "json"))["accelerators"][0]["memory_bandwidth_gbps"] is None


def _mini(**acc):
    a = {"index": 0, "vendor": "nvidia", "product": "X", **acc}
    return json.dumps({"name": "m", "accelerators": [a]})


def test_bad_field_is_named():
    with pytest.raises(ProfileError, match=r"field accelerators\.0\.memory_bytes"):
        parse_profile(_mini(memory_bytes=-5), "json", "m.json")
    with pytest.raises(ProfileError, match=r"accelerators\.0\.vendor"):
        parse_profile(_mini(vendor="intel-ish"), "json", "m.json")
    with pytest.raises(ProfileError, match=r"accelerators\.0\.colour"):
        parse_profile(_mini(colour="red"), "json", "m.json")


def test_nan_never_enters_a_profile():
    with pytest.raises(ProfileError, match="NaN"):
        parse_profile(_mini(memory_bandwidth_gbps=float("nan")), "json", "m.json")


def test_link_to_missing_card_rejected():
    data = {"name": "m", "accelerators": [{"index": 0, "vendor": "amd", "product": "X"}],
            "interconnect": {"pairs": [{"a": 0, "b": 3, "kind": "xgmi"}]}}  # fmt: skip
    with pytest.raises(ProfileError, match="card 3"):
        parse_profile(json.dumps(data), "json", "m.json")


def test_malformed_toml_and_unknown_preset():
    with pytest.raises(ProfileError, match="not valid TOML"):
        parse_profile("name = [", "toml", "x.toml")
    with pytest.raises(ProfileError, match=r"neither a bundled preset"):
        resolve_machine("no-such-box")


def test_unknown_memory_makes_total_unknown():
    p = parse_profile(_mini(memory_bytes="unknown"), "json", "m")
    assert p.total_accelerator_memory_bytes() is None


@pytest.mark.parametrize("name", list_presets())
def test_presets_validate_and_the_trusted_build_equals_validation(name):
    """Bundled presets are built without the validator (cold start); this is what makes that
    safe: each one validates, and the trusted build equals the validated profile in every field,
    type and dumped byte (an int left in a float field would show in repr and JSON)."""
    import tomllib

    from nodeledger.machine.io import _preset_dir, load_preset
    from nodeledger.machine.profile import MachineProfile, construct_trusted

    data = tomllib.loads((_preset_dir() / f"{name}.toml").read_text(encoding="utf-8"))
    validated = validate(MachineProfile, data)
    trusted = construct_trusted(MachineProfile, data)
    assert trusted == validated
    assert repr(trusted) == repr(validated)
    assert json.dumps(to_json(trusted)) == json.dumps(to_json(validated))
    assert load_preset(name) == validated


def test_a_bundled_preset_fit_and_the_default_catalogue_never_import_pydantic():
    """The cold start's mechanism (benchmarks/bench_fit.py measures the time): pydantic, the
    largest import, is loaded only to validate a user's file or a probe, not for a preset."""
    code = (
        "import sys\n"
        "from nodeledger.machine import resolve_machine\n"
        "from nodeledger.model import load_model\n"
        "from nodeledger.ledger.jobs import ServeJob\n"
        "from nodeledger.verdict.fit import fit\n"
        "spec, _ = load_model('qwen3-8b')\n"
        "fit(spec, ServeJob(context=8192), resolve_machine('k100-ai-8x64g'))\n"
        "from nodeledger.verdict.catalogue import load_catalogue\n"
        "load_catalogue(None)\n"
        "assert 'pydantic' not in sys.modules, 'pydantic imported'\n"
        "from nodeledger.machine.profile import MachineProfile, validate\n"
        "validate(MachineProfile, {'name': 'x'})\n"
        "assert 'pydantic' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
