"""Mutation fuzzing of every `nodeledger parse` kind (by hand: ``python benchmarks/fuzz.py``).

Each kind's real fixtures (``tests/test_parsers_expected.py`` FIXTURE_KINDS: ../shared/fixtures/real
when present, and tests/fixtures) are mutated (byte flips, line drops / duplications, cells
replaced by hostile values: '²', '0x10', '1e400', 'NaN', '-1', 200k-character cells, extra CSV
columns, deeply nested JSON, huge cpulists) and parsed.  A parser may refuse an input
(ParseError / InputError: "parse errors", expected); anything else escaping is an internal error
and must be 0; so must a non-finite number or one out of range in the output.

    python benchmarks/fuzz.py              # 10,000 inputs per kind
    python benchmarks/fuzz.py -n 500 -k hy-smi -k numactl --seed 3

``--hostile`` instead runs the CLI, as a user would (a fresh process each), on big and hostile
inputs built in a temporary folder (issue 27): an integer of 5,000 digits at each entry point
that reads JSON / TOML (config.json: model show, fit; a plan TOML: place, report --workloads;
a placement JSON: watch --plan; a profile JSON: machine show, report --machine), the terminal
renderers on 20,000 rows (parse nvidia-smi-csv, oom on identical kill lines, dense card-OOM
text) and bundles built to hurt (a million sample times, huge glob lists, a gzip bomb).  Each
input of at most 10 MB must end within ``BUDGET_S`` seconds and ``BUDGET_MB`` MB of peak RSS,
with an exit code other than 70 (internal error) or a kill; a table says which did:

    python benchmarks/fuzz.py --hostile [--case NAME ...] [--keep DIR]
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


# -- hostile inputs through the CLI (--hostile) ----------------------------------------------

BUDGET_S = 2.0  # for an input of at most BUDGET_INPUT_MB
BUDGET_MB = 200.0  # peak RSS
BUDGET_INPUT_MB = 10.0
CASE_TIMEOUT_S = 180.0  # a case still running then is killed (and over budget)
BIG_INT = "1" * 5000  # over Python's 4,300-digit int-from-string limit
ROOT = HERE.parent
FIX = ROOT / "tests" / "fixtures"


def _tar_gz(path: Path, members: dict[str, bytes], sizes: dict[str, int] | None = None) -> Path:
    """A .tar.gz of ``members``; ``sizes`` may declare a member larger than the bytes given
    (the rest is zeros, written through the compressor, never held)."""
    import gzip
    import tarfile

    with gzip.open(path, "wb", compresslevel=6) as gz:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = (sizes or {}).get(name, len(data))
            gz.write(info.tobuf(tarfile.GNU_FORMAT))
            gz.write(data)
            left = info.size - len(data)
            zeros = bytes(1 << 20)
            while left > 0:
                gz.write(zeros[: min(left, len(zeros))])
                left -= min(left, len(zeros))
            if info.size % 512:
                gz.write(b"\0" * (512 - info.size % 512))
        gz.write(b"\0" * 1024)
    return path


def _bundle_manifest(**extra) -> dict:
    return {"format": "nodeledger-bundle-1", "commands": [], "files": {}, "tools": {},
            "globs": {}, **extra}  # fmt: skip


def _mi300x_bundle(out: Path) -> tuple[dict, dict[str, bytes]]:
    """(manifest, blobs) of the 8 x MI300X bundle the tests compose (public recordings)."""
    import json
    import tarfile

    sys.path.insert(0, str(FIX / "bundles"))
    from compose import compose

    b = compose(FIX / "bundles" / "8x-mi300x-rocmblogs.toml", out)
    with tarfile.open(b) as tar:
        blobs = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    return json.loads(blobs.pop("manifest.json")), blobs


def build_hostile(d: Path) -> list[tuple[str, list[str], Path | None, str | None]]:
    """(case, nodeledger argv, the input file whose size counts, stdin file) for every case."""
    import json

    cases: list[tuple[str, list[str], Path | None, str | None]] = []
    cfg = d / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096})
                   .replace("4096", BIG_INT))  # fmt: skip
    plan = d / "plan.toml"
    plan.write_text(f'[[workloads]]\nid = "a"\nmodel = "x"\njob = "serve"\nmachines = {BIG_INT}\n')
    placement = d / "placement.json"
    placement.write_text(f'{{"replicas": [], "lifeboat": [{BIG_INT}]}}')
    profile = d / "profile.json"
    profile.write_text(f'{{"name": "x", "host_ram_bytes": {BIG_INT}}}')
    cases += [
        ("bigint: model show config.json", ["model", "show", str(cfg)], cfg, None),
        ("bigint: fit config.json", ["fit", str(cfg)], cfg, None),
        ("bigint: place plan.toml", ["place", str(plan)], plan, None),
        ("bigint: report --workloads plan.toml", ["report", "--workloads", str(plan)], plan, None),
        ("bigint: watch --plan placement.json",
         ["watch", "--plan", str(placement), "--backend", "fake:two-loads", "--samples", "1"],
         placement, None),
        ("bigint: machine show profile.json", ["machine", "show", str(profile)], profile, None),
        ("bigint: report --machine profile.json", ["report", "--machine", str(profile)], profile,
         None),
    ]  # fmt: skip

    # terminal renderers: 20,000 rows
    lines = (FIX / "h200" / "nvidia_smi___query_gpu_index_name_pci_bus_id_uuid_memory_tot.txt"
             ).read_text().splitlines()  # fmt: skip
    csv_path = d / "nvidia-smi-20k.csv"
    with open(csv_path, "w") as f:
        f.write(lines[1] + "\n")
        for i in range(20_000):
            f.write(lines[2].replace("0, NVIDIA", f"{i}, NVIDIA", 1) + "\n")
    cases += [
        ("parse nvidia-smi-csv, 20,000 rows", ["parse", "nvidia-smi-csv", str(csv_path)],
         csv_path, None),
        ("parse nvidia-smi-csv, 20,000 rows --json",
         ["parse", "nvidia-smi-csv", str(csv_path), "--json"], csv_path, None),
    ]  # fmt: skip
    kills = d / "oom-kill-20k.log"
    kills.write_text(
        "Out of memory: Killed process 1234 (python) total-vm:100kB, anon-rss:50kB, "
        "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:0kB oom_score_adj:0\n" * 20_000
    )
    dense = d / "card-oom-dense-10MB.log"
    block = (FIX / "oom" / "job-torch-card-oom.log").read_text().rstrip("\n") + "\n"
    dense.write_text(block * (10 * 10**6 // len(block)))
    kernel = d / "kernel-10MB.log"
    block = (FIX / "oom" / "kernel-dmesg-iso-global-dataloader.txt").read_text()
    kernel.write_text(block * (10 * 10**6 // len(block)))
    cases += [
        ("oom, 20,000 identical kill lines", ["oom", "--no-kernel-log", str(kills)], kills, None),
        ("oom, 20,000 identical kill lines --json",
         ["oom", "--no-kernel-log", str(kills), "--json"], kills, None),
        ("oom, dense card-OOM text", ["oom", "--no-kernel-log", str(dense)], dense, None),
        ("oom -, dense card-OOM text on stdin", ["oom", "--no-kernel-log", "-"], dense,
         str(dense)),
        ("oom, kernel reports back to back", ["oom", "--no-kernel-log", str(kernel)], kernel,
         None),
    ]  # fmt: skip

    # bundles
    manifest, blobs = _mi300x_bundle(d / "mi300x.tar.gz")

    def bundle(name: str, m: dict, members: dict[str, bytes] | None = None, **kw) -> Path:
        return _tar_gz(d / name, {"manifest.json": json.dumps(m).encode(), **(members or {})},
                       **kw)  # fmt: skip

    def times(n: int) -> dict:
        return dict(manifest, watch=dict(manifest["watch"], t=list(range(n))))

    def globs(n: int, lists: int = 8) -> dict:
        return _bundle_manifest(globs={f"/sys/class/net/*{k}": [
            f"/sys/class/net/eth{i}" for i in range(n // lists)] for k in range(lists)})  # fmt: skip

    b_times = bundle("bundle-900k-times.tar.gz", times(900_000), blobs)
    b_times_2m = bundle("bundle-2M-times.tar.gz", times(2_000_000), blobs)
    b_globs = bundle("bundle-2M-glob-paths.tar.gz", globs(2_000_000))
    b_globs_600k = bundle("bundle-600k-glob-paths.tar.gz", globs(600_000))
    b_globs_60k = bundle("bundle-60k-glob-paths.tar.gz", globs(60_000))
    b_bomb = bundle("bundle-bomb.tar.gz", _bundle_manifest(),
                    {f"files/{i:04d}": b"" for i in range(6)},
                    sizes={f"files/{i:04d}": 60 << 20 for i in range(6)})  # fmt: skip
    b_bomb_total = bundle("bundle-bomb-total.tar.gz", _bundle_manifest(),
                          {f"files/{i:04d}": b"" for i in range(12)},
                          sizes={f"files/{i:04d}": 20 << 20 for i in range(12)})  # fmt: skip
    cases += [
        ("watch --from, 900,000 sample times over 1 recording",
         ["watch", "--from", str(b_times), "--json"], b_times, None),
        ("watch --from, 2,000,000 sample times", ["watch", "--from", str(b_times_2m), "--json"],
         b_times_2m, None),
        ("doctor --from, 2,000,000 glob paths", ["doctor", "--from", str(b_globs)], b_globs, None),
        ("doctor --from, 600,000 glob paths", ["doctor", "--from", str(b_globs_600k)],
         b_globs_600k, None),
        ("doctor --from, 60,000 glob paths", ["doctor", "--from", str(b_globs_60k)], b_globs_60k,
         None),
        ("machine probe --from, 600,000 glob paths",
         ["machine", "probe", "--from", str(b_globs_600k)], b_globs_600k, None),
        ("doctor --from, gzip bomb (6 x 60 MiB of zeros)", ["doctor", "--from", str(b_bomb)],
         b_bomb, None),
        ("doctor --from, gzip bomb (12 x 20 MiB of zeros)",
         ["doctor", "--from", str(b_bomb_total)], b_bomb_total, None),
    ]  # fmt: skip

    # watch --samples far past any scenario
    cases.append(("watch fake --samples 10**12",
                  ["watch", "--backend", "fake:two-loads", "--samples", str(10**12), "--json"],
                  None, None))  # fmt: skip
    return cases


SRC = ROOT / "src"  # --src: measure another tree (e.g. `git archive HEAD src`, for "before")


def run_case(argv: list[str], stdin: str | None, timeout: float) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MB of the child, exit code; -9 when killed at ``timeout``)."""
    import os
    import signal
    import subprocess

    env = dict(os.environ, COLUMNS="120", PYTHONPATH=str(SRC))
    with open(stdin or os.devnull, "rb") as fin:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "nodeledger", *argv], stdin=fin,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)  # fmt: skip
        deadline = t0 + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.send_signal(signal.SIGKILL)
                _, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.01)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024 * 1.048576, proc.returncode  # kB -> MB


def hostile(names: list[str] | None, keep: Path | None, timeout: float) -> int:
    import json
    import shutil
    import subprocess
    import tempfile

    d = keep or Path(tempfile.mkdtemp(prefix="nodeledger-fuzz-"))
    d.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        # built in a child: Linux counts the memory a parent held at fork in the child's peak
        # RSS, so this process stays small while it measures
        subprocess.run([sys.executable, __file__, "--build-hostile", str(d)], check=True)
        cases = json.loads((d / "cases.json").read_text())
        for name, argv, src, stdin in cases:
            src = Path(src) if src else None
            if names and not any(n.lower() in name.lower() for n in names):
                continue
            size_mb = src.stat().st_size / 1e6 if src is not None else 0.0
            wall, peak, rc = run_case(argv, stdin, timeout)
            bounded = size_mb <= BUDGET_INPUT_MB
            ok = rc not in (70, -9) and (not bounded or (wall <= BUDGET_S and peak <= BUDGET_MB))
            rows.append((name, size_mb, wall, peak, rc, ok))
            print(f"  {name}: {wall:.2f} s, {peak:.0f} MB, exit {rc}", file=sys.stderr)
    finally:
        if keep is None:
            shutil.rmtree(d, ignore_errors=True)
    head = ("input", "size MB", "seconds", "peak MB", "exit", "within budget")
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for name, size_mb, wall, peak, rc, ok in rows:
        print(f"{name} | {size_mb:.2f} | {wall:.2f} | {peak:.0f} | {rc} | {'yes' if ok else 'NO'}")
    print(f"budget: inputs <= {BUDGET_INPUT_MB:g} MB end in <= {BUDGET_S:g} s and <= "
          f"{BUDGET_MB:g} MB peak RSS; never exit 70 (internal error) or killed at {timeout:g} s")  # fmt: skip
    return 0 if all(r[5] for r in rows) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=10_000, help="inputs per kind (default 10,000)")
    ap.add_argument("-k", "--kind", action="append", help="only these kinds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hostile", action="store_true",
                    help="run the CLI on big and hostile inputs and print the budget table")  # fmt: skip
    ap.add_argument("--case", action="append", help="with --hostile: only cases naming this")
    ap.add_argument("--keep", type=Path, default=None, help="with --hostile: build inputs here")
    ap.add_argument("--timeout", type=float, default=CASE_TIMEOUT_S,
                    help="with --hostile: seconds before a case is killed")  # fmt: skip
    ap.add_argument("--src", type=Path, default=None,
                    help="with --hostile: the nodeledger source tree to run (default: this one)")  # fmt: skip
    ap.add_argument("--build-hostile", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.src is not None:
        global SRC
        SRC = args.src.resolve()
    if args.build_hostile:
        import json

        cases = build_hostile(args.build_hostile)
        (args.build_hostile / "cases.json").write_text(
            json.dumps([(n, a, str(s) if s else None, i) for n, a, s, i in cases])
        )
        return 0
    if args.hostile:
        return hostile(args.case, args.keep, args.timeout)
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
