"""Mutation fuzzing of every `nodeledger parse` kind (by hand: ``python benchmarks/fuzz.py``).

Each kind's real fixtures (``tests/test_parsers_expected.py`` FIXTURE_KINDS: ../shared/fixtures/real
when present, and tests/fixtures) are mutated (byte flips, line drops / duplications, cells
replaced by hostile values: '²', '0x10', '1e400', 'NaN', '-1', 200k-character cells, extra CSV
columns, deeply nested JSON, huge cpulists) and parsed.  A parser may refuse an input
(ParseError / InputError: "parse errors", expected); anything else escaping is an internal error
and must be 0; so must a non-finite number or one out of range in the output.

    python benchmarks/fuzz.py              # 10,000 inputs per kind
    python benchmarks/fuzz.py -n 500 -k hy-smi -k numactl --seed 3
"""

from __future__ import annotations

import argparse
import math
import random
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent / "src"))

HOSTILE = ["²", "0x10", "0x10%", "1e400", "1e400W", "NaN", "nan%", "inf", "-inf", "-1", "-1%",
           "99999999999999999999999", "0-99999999999", "0-4294967296", "٣", "…", "...", ".", "",
           ",", "%", "N/A", "[N/A]", "\x00", "\t", "(16)", "0-15 (16)", "1-0", "GPU[99999999]",
           "card99999999999999999999", '{"a":', "]]]]"]  # fmt: skip

NUMBERS = re.compile(r"[0-9]+(?:\.[0-9]+)?")
TOKENS = re.compile(r"[^\s,|:]+")


def fixtures_by_kind() -> dict[str, list[str]]:
    """kind -> fixture texts (the parser kinds of FIXTURE_KINDS, the files that exist)."""
    import test_parsers_expected as tpe
    from nodeledger.machine.parsers import PARSERS

    out: dict[str, list[str]] = {k: [] for k in PARSERS}
    for rel, kind in sorted(tpe.FIXTURE_KINDS.items()):
        if kind not in PARSERS:
            continue
        path = tpe.fixture_path(rel)
        if path.is_file():
            out[kind].append(tpe.read_fixture(rel))
    return out


def deep_json(depth: int) -> str:
    return '{"card0": ' + "[" * depth + "]" * depth + "}"


def mutate(text: str, rnd: random.Random) -> str:
    """One random mutation (sometimes two or three stacked) of ``text``."""
    for _ in range(rnd.choice((1, 1, 1, 2, 3))):
        text = _mutate_once(text, rnd)
    return text


def _mutate_once(text: str, rnd: random.Random) -> str:
    op = rnd.randrange(11)
    lines = text.split("\n")
    if op == 0 and text:  # byte flip
        b = bytearray(text.encode("utf-8", "surrogatepass"))
        for _ in range(rnd.randint(1, 8)):
            i = rnd.randrange(len(b))
            b[i] ^= 1 << rnd.randrange(8)
        return b.decode("utf-8", "replace")
    if op == 1 and len(lines) > 1:  # drop lines
        i = rnd.randrange(len(lines))
        del lines[i : i + rnd.randint(1, 3)]
        return "\n".join(lines)
    if op == 2:  # duplicate a line
        i = rnd.randrange(len(lines))
        lines.insert(i, lines[i])
        return "\n".join(lines)
    if op in (3, 4, 5):  # a number replaced by a hostile value
        spans = [m.span() for m in NUMBERS.finditer(text)]
        if spans:
            a, b = rnd.choice(spans)
            return text[:a] + rnd.choice(HOSTILE) + text[b:]
    if op == 6:  # a token replaced by a hostile value
        spans = [m.span() for m in TOKENS.finditer(text)]
        if spans:
            a, b = rnd.choice(spans)
            return text[:a] + rnd.choice(HOSTILE) + text[b:]
    if op == 7:  # a huge cell
        spans = [m.span() for m in TOKENS.finditer(text)]
        if spans:
            a, b = rnd.choice(spans)
            return text[:a] + rnd.choice(("9", "x", '"', ",")) * 200_000 + text[b:]
    if op == 8:  # extra columns
        i = rnd.randrange(len(lines))
        lines[i] = lines[i] + rnd.choice((",extra", ",1,2,3", "\tX", " 1 2 3", ',"a,b"'))
        return "\n".join(lines)
    if op == 9:  # deep JSON, or a huge cpulist
        pick = rnd.choice((deep_json(100_000), "0-99999999999", "0-1048576", "0-65536"))
        spans = [m.span() for m in TOKENS.finditer(text)]
        if spans:
            a, b = rnd.choice(spans)
            return text[:a] + pick + text[b:]
    if op == 10:  # truncate
        return text[: rnd.randrange(len(text) + 1)]
    return text


def bad_numbers(obj, path: str = "") -> list[str]:
    """Paths of numbers in a parse that are not finite, or negative (every parser field counts
    something: bytes, watts, percent, ids)."""
    out: list[str] = []
    if isinstance(obj, bool) or obj is None:
        return out
    if isinstance(obj, float):
        if not math.isfinite(obj) or obj < 0:
            out.append(f"{path}={obj!r}")
    elif isinstance(obj, int):
        if obj < 0 or obj > 2**63:
            out.append(f"{path}={obj!r}")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out.extend(bad_numbers(k, f"{path}.<key>"))
            out.extend(bad_numbers(v, f"{path}.{k}"))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.extend(bad_numbers(v, f"{path}[{i}]"))
    return out


# kinds whose output may hold negative numbers on purpose: nvidia-smi-csv keeps any column's
# number as printed (a column it does not know, e.g. a temperature offset)
SIGNED_KINDS = {"nvidia-smi-csv", "vllm-log"}  # numbers kept as printed, a sign included


def check_one(kind: str, text: str) -> tuple[str, float, str]:
    """("ok" | "parse-error" | "internal", ms, detail)."""
    import json

    from nodeledger.errors import InputError
    from nodeledger.machine.parsers import PARSERS
    from nodeledger.machine.parsers.common import ParseError

    t0 = time.perf_counter()
    try:
        out = PARSERS[kind](text)
    except (ParseError, InputError):
        return "parse-error", (time.perf_counter() - t0) * 1000, ""
    except Exception as exc:
        return "internal", (time.perf_counter() - t0) * 1000, f"{type(exc).__name__}: {exc}"[:200]
    ms = (time.perf_counter() - t0) * 1000
    try:
        json.dumps(out, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return "internal", ms, f"output not strict JSON: {exc}"[:200]
    if kind not in SIGNED_KINDS:
        bad = bad_numbers(out)
        if bad:
            return "internal", ms, f"bad numbers {bad[:3]}"
    return "ok", ms, ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=10_000, help="inputs per kind (default 10,000)")
    ap.add_argument("-k", "--kind", action="append", help="only these kinds")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    corpus = fixtures_by_kind()
    kinds = args.kind or sorted(corpus)
    rows = []
    failures: list[tuple[str, str, str]] = []
    for kind in kinds:
        texts = corpus.get(kind) or []
        if not texts:
            rows.append((kind, 0, 0, 0, 0.0))
            continue
        rnd = random.Random(f"{args.seed}:{kind}")
        errors = internal = 0
        slowest = 0.0
        for _ in range(args.n):
            text = mutate(rnd.choice(texts), rnd)
            status, ms, detail = check_one(kind, text)
            slowest = max(slowest, ms)
            if status == "parse-error":
                errors += 1
            elif status == "internal":
                internal += 1
                if len(failures) < 20:
                    failures.append((kind, detail, text[:300]))
        rows.append((kind, args.n, errors, internal, slowest))
    print(f"{'kind':<22} {'inputs':>7} {'parse errors':>13} {'internal':>9} {'slowest ms':>11}")
    for kind, n, errors, internal, slowest in rows:
        print(f"{kind:<22} {n:>7} {errors:>13} {internal:>9} {slowest:>11.1f}")
    for kind, detail, text in failures:
        print(f"\nINTERNAL {kind}: {detail}\n  input starts {text[:200]!r}")
    return 1 if any(r[3] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
