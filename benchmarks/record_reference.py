"""Record reference parameter counts with transformers' own models (the ``reference`` extra).

For every ``config.json`` under ``../shared/fixtures/models`` this builds the model that
transformers builds from that config **on the meta device** (no memory, no weights) and
records ``sum(p.numel() for p in model.parameters())`` -- the figure nodeledger's
parameter counter must equal exactly.  Configs that need custom code (``trust_remote_code``)
or that transformers cannot build are recorded with the reason, never silently dropped.

Usage::

    pip install -e '.[reference]'
    python benchmarks/record_reference.py [--fixtures ../shared/fixtures/models] \
        [-o benchmarks/reference_params.json]

The output file is committed; ``tests/test_reference_params.py`` reads it.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_FIXTURES = HERE.parent.parent / "shared" / "fixtures" / "models"


def build_on_meta(folder: Path):
    import torch
    import transformers
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(folder), trust_remote_code=False)
    # from_config never applies quantization_config: the counted model is the unquantised one.
    errors = []
    for auto_name in ("AutoModelForCausalLM", "AutoModelForImageTextToText", "AutoModel"):
        auto = getattr(transformers, auto_name)
        try:
            with torch.device("meta"):
                model = auto.from_config(config, trust_remote_code=False)
            return config, model, auto_name
        except (ValueError, KeyError) as exc:
            errors.append(f"{auto_name}: {exc}".splitlines()[0])
    raise RuntimeError("; ".join(errors))


def record(folder: Path) -> dict:
    import transformers

    entry: dict = {"transformers": transformers.__version__}
    try:
        config, model, auto_name = build_on_meta(folder)
    except Exception as exc:  # recorded with its reason, not dropped
        entry["status"] = "not-built"
        entry["reason"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        return entry
    entry["status"] = "built"
    entry["auto_class"] = auto_name
    entry["model_class"] = type(model).__name__
    entry["params_total"] = int(sum(p.numel() for p in model.parameters()))
    by_prefix: dict[str, int] = defaultdict(int)
    for name, p in model.named_parameters():
        parts = name.split(".")
        # group "model.layers.N.mlp.experts.x" -> "layers.*.mlp.experts"
        key = ".".join("*" if part.isdigit() else part for part in parts[:-1])
        by_prefix[key] += int(p.numel())
    entry["params_by_module"] = dict(sorted(by_prefix.items()))
    entry["tied_embeddings"] = bool(getattr(config, "tie_word_embeddings", False))
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", type=Path, default=DEFAULT_FIXTURES)
    parser.add_argument("-o", "--output", type=Path, default=HERE / "reference_params.json")
    args = parser.parse_args(argv)
    if not args.fixtures.is_dir():
        print(f"fixtures folder not found: {args.fixtures}", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore")
    out = {}
    for folder in sorted(p for p in args.fixtures.iterdir() if (p / "config.json").is_file()):
        out[folder.name] = record(folder)
        e = out[folder.name]
        figure = e.get("params_total", e.get("reason"))
        print(f"{folder.name:45s} {e['status']:10s} {figure}")
    args.output.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
