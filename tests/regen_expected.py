"""Regenerate tests/expected/**.json from the current parsers.

Run it ONLY after a deliberate parser change (or after adding a fixture and its kind to
FIXTURE_KINDS in tests/test_parsers_expected.py), then review the diff of tests/expected/ line by
line against the raw fixtures before committing it: these files are what the parsers are held
to, so regenerating them to make a failing test pass, unreviewed, defeats the tests.

    NODELEDGER_SHARED=../shared .venv/bin/python tests/regen_expected.py            # write all
    .venv/bin/python tests/regen_expected.py --check                                # list changes
    .venv/bin/python tests/regen_expected.py shared/nvidia-topo/glm52-8x-h200-10nic.txt  # some

Fixtures whose root is absent (../shared) are skipped and their recorded files left as they are.
Recorded files whose fixture is no longer mapped are listed, not deleted.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_parsers_expected import (  # tests/ is not a package: imported by path
    EXPECTED,
    FIXTURE_KINDS,
    expected_path,
    fixture_path,
    parse_fixture,
    root_present,
)


def _flat(obj) -> bool:
    vals = obj.values() if isinstance(obj, dict) else obj
    return all(not isinstance(v, (dict, list)) for v in vals)


def _dump(obj, depth: int) -> str:
    """JSON with one line per leaf object (a card, a link, a row): short, and diffs by row."""
    if not isinstance(obj, (dict, list)) or _flat(obj):
        return json.dumps(obj, ensure_ascii=False)
    pad, end = " " * (depth + 1), " " * depth
    if isinstance(obj, dict):
        items = [
            f"{pad}{json.dumps(k, ensure_ascii=False)}: {_dump(v, depth + 1)}"
            for k, v in obj.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + end + "}"
    return "[\n" + ",\n".join(pad + _dump(v, depth + 1) for v in obj) + "\n" + end + "]"


def render(record: dict) -> str:
    text = _dump(record, 0) + "\n"
    assert json.loads(text) == record
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("fixtures", nargs="*", help="relative paths as in FIXTURE_KINDS (default: all)")
    ap.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if any would change"
    )
    args = ap.parse_args(argv)
    unknown = [r for r in args.fixtures if r not in FIXTURE_KINDS]
    if unknown:
        ap.error(f"not in FIXTURE_KINDS: {', '.join(unknown)}")
    changed = skipped = same = 0
    for rel in args.fixtures or sorted(FIXTURE_KINDS):
        if not root_present(rel) or not fixture_path(rel).is_file():
            print(f"skip      {rel} (fixture absent: {fixture_path(rel)})")
            skipped += 1
            continue
        text = render(parse_fixture(rel))
        out = expected_path(rel)
        old = out.read_text(encoding="utf-8") if out.is_file() else None
        if old == text:
            same += 1
            continue
        changed += 1
        print(f"{'new' if old is None else 'changed':9} {rel}")
        if not args.check:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
    for p in sorted(EXPECTED.rglob("*.json")):
        rel = p.relative_to(EXPECTED).as_posix().removesuffix(".json")
        if rel not in FIXTURE_KINDS:
            print(f"stale     {p} (fixture not mapped: delete it by hand if intended)")
    verb = "would change" if args.check else "written"
    print(f"{changed} {verb}, {same} unchanged, {skipped} skipped")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
