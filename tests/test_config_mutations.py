"""Every damaged config gives a ConfigError (one line, exit 2 in the CLI) or a valid spec —
never another exception.  Mutations: each key (nested ones too) removed, each value replaced
by nonsense; run over the project's tiny configs and, when present, the real ones."""

from __future__ import annotations

import copy
import json

import pytest

from conftest import FIXTURES, SHARED_MODELS, shared_models_or_skip
from nodeledger.errors import ConfigError
from nodeledger.ledger.kv_cache import kv_bytes_per_sequence, kv_bytes_per_token
from nodeledger.ledger.weights import SCHEMES, config_scheme, scheme_for, weight_bytes
from nodeledger.model import build_spec

NONSENSE = [0, -1, "x", 1.5, None, [], {}, True, 10**30]


def _exercise(cfg):
    try:
        spec = build_spec(cfg, "mutated")
        spec.params_total()
        spec.params_active()
        kv_bytes_per_token(spec)
        kv_bytes_per_sequence(spec, 4096)
        weight_bytes(spec, config_scheme(spec))
        for name in SCHEMES:
            weight_bytes(spec, scheme_for(name, spec))
    except ConfigError as exc:
        msg = str(exc)
        assert "\n" not in msg and msg.startswith("mutated"), msg


def _paths(d, prefix=()):
    for k, v in d.items():
        yield (*prefix, k)
        if isinstance(v, dict) and k in ("text_config", "vision_config", "quantization_config"):
            yield from _paths(v, (*prefix, k))


def _mutated(base):
    for path in _paths(base):
        for bad in [*NONSENSE, "DELETE"]:
            cfg = copy.deepcopy(base)
            node = cfg
            for k in path[:-1]:
                node = node[k]
            if bad == "DELETE":
                del node[path[-1]]
            else:
                node[path[-1]] = bad
            yield cfg


@pytest.mark.parametrize("name", sorted(p.name for p in (FIXTURES / "configs").iterdir()))
def test_tiny_config_mutations_never_crash(name):
    base = json.loads((FIXTURES / "configs" / name / "config.json").read_text())
    for cfg in _mutated(base):
        _exercise(cfg)


@pytest.mark.shared
@pytest.mark.parametrize(
    "name",
    sorted(p.name for p in SHARED_MODELS.iterdir() if (p / "config.json").is_file())
    if SHARED_MODELS.is_dir()
    else ["(absent)"],
)
def test_real_config_mutations_never_crash(name):
    models = shared_models_or_skip()
    base = json.loads((models / name / "config.json").read_text())
    for cfg in _mutated(base):
        _exercise(cfg)
