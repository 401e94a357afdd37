"""How the planner and the report grow with the machine and the catalogue.  Prints the curves;
exits 1 when a target is missed.

- ``place`` on synthetic machines of 8 / 16 / 32 / 64 identical 80 GiB cards (a sparse link
  matrix: NVLink within groups of 8, SYS between them; and a full one: every pair listed), with
  TP1, TP2, TP4, TP8 and mixed plans of a small model filling the cards.  Target: <= 2 s each.
  Each case runs as its own process with a time bound (``--bound``, default 20 s): a case past
  it is printed as "> bound" and counts as missed.
- ``place`` against brute force on 8 cards: every assignment of the plan's replicas to disjoint
  card groups, for every lifeboat card, scored by (replicas placed, sum of the groups' weakest
  links); the planner must reach the brute-force best on both.
- ``watch`` analysis: the dead-owner scenario's samples widened to 8 / 16 / 32 / 64 cards (each
  card repeated under new indices) fed to the Analyzer; CPU ms per sample must grow no faster
  than the cards (target: ms per card at 64 cards <= 1.5 x that at 8).
- ``report`` on catalogues of 16 / 64 / 256 workloads (the default catalogue repeated under new
  ids, each copy's contexts and sequence lengths shortened by 16 tokens per copy, so every job
  is distinct): seconds per workload must not grow with the catalogue (linear), target ratio of
  the per-workload time at the largest size to the smallest <= 1.5.

    python benchmarks/bench_scale.py [--bound 20] [--cards 8,16,32,64]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLACE_TARGET_S = 2.0
REPORT_GROWTH_TARGET = 1.5
TP_PLANS = {
    "TP1": [(1, None)],
    "TP2": [(2, None)],
    "TP4": [(4, None)],
    "TP8": [(8, None)],
    "mixed": [(4, 1), (2, 2), (1, None)],  # (tp, replicas or None = fill)
}


def machine_toml(cards: int, full_matrix: bool) -> str:
    """A synthetic box: cards in NVLink islands of 8, SYS between islands; NUMA node per 8."""
    nodes = max(1, cards // 8)
    lines = [
        f'name = "synthetic-{cards}"',
        'description = "synthetic machine for bench_scale.py"',
        "[host]",
        "sockets = 2",
        f"cores = {max(2, cards * 4)}",
        f"threads = {max(2, cards * 8)}",
        f"ram_bytes = {cards * 256 * 2**30}",
    ]
    for n in range(nodes):
        lo = n * (cards * 8 // nodes)
        hi = lo + cards * 8 // nodes - 1
        lines += ["[[host.numa_nodes]]", f"id = {n}", f'cpus = "{lo}-{hi}"',
                  f"memory_bytes = {cards * 256 * 2**30 // nodes}"]  # fmt: skip
    for i in range(cards):
        lines += ["[[accelerators]]", f"index = {i}", 'vendor = "nvidia"', 'product = "SYN-80G"',
                  f"memory_bytes = {80 * 2**30}", "bf16_dense_tflops = 900.0",
                  f"numa_node = {i // 8 % nodes}"]  # fmt: skip
    lines += ["[interconnect.default]", 'kind = "sys"', 'label = "SYS"']
    for a in range(cards):
        for b in range(a + 1, cards):
            same = a // 8 == b // 8
            if same or full_matrix:
                kind, label = ("nvlink", "NV18") if same else ("sys", "SYS")
                lanes = "lanes = 18\n" if same else ""
                lines += ["[[interconnect.pairs]]", f"a = {a}", f"b = {b}", f'kind = "{kind}"',
                          f'label = "{label}"'] + ([lanes.strip()] if lanes else [])  # fmt: skip
    return "\n".join(lines) + "\n"


def plan_toml(cards: int, shape: list[tuple[int, int | None]]) -> str:
    lines = []
    for n, (tp, replicas) in enumerate(shape):
        if replicas is None:
            used = sum(t * (r or 0) for t, r in shape)
            replicas = max(1, (cards - 1 - used) // tp)
        lines += ["[[workloads]]", f'id = "serve-tp{tp}-{n}"', f'title = "TP{tp} x {replicas}"',
                  'model = "qwen3-8b"', 'job = "serve"', f"tp = {tp}", f"replicas = {replicas}",
                  "context = 4096"]  # fmt: skip
    return "\n".join(lines) + "\n"


def _renamed(catalogue: str, prefix: str) -> str:
    """The catalogue with every id, and every id a `beside` list names, given ``prefix``."""
    import re

    ids = re.findall(r'^id = "([^"]+)"', catalogue, flags=re.M)
    out = re.sub(r'^id = "', f'id = "{prefix}', catalogue, flags=re.M)
    for i in ids:
        out = re.sub(rf'(beside = \[[^\]]*)"{re.escape(i)}"', rf'\1"{prefix}{i}"', out)
    return out


def _distinct(catalogue: str, k: int) -> str:
    """Copy ``k`` of the catalogue with every context and training sequence shortened by 16 k
    tokens, so no two copies are the same job (nothing is answered from a cache)."""
    import re

    return re.sub(r"^(context|seq) = (\d+)", lambda m: f"{m.group(1)} = {int(m.group(2)) - 16 * k}",
                  catalogue, flags=re.M)  # fmt: skip


def timed(argv: list[str], bound: float) -> tuple[float | None, int | None, str]:
    t0 = time.perf_counter()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=bound)
    except subprocess.TimeoutExpired:
        return None, None, ""
    return time.perf_counter() - t0, p.returncode, p.stdout


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bound", type=float, default=20.0, help="seconds one case may run")
    ap.add_argument("--cards", default="8,16,32,64")
    args = ap.parse_args(argv)
    cli = [sys.executable, "-m", "nodeledger"]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        print("place (one process per case; seconds; replicas placed of asked)")
        print()
        print("| cards | link matrix | plan | seconds | placed | result |")
        print("|---|---|---|---|---|---|")
        for cards in (int(c) for c in args.cards.split(",")):
            for full in (False, True):
                m = d / f"m{cards}{'f' if full else 's'}.toml"
                m.write_text(machine_toml(cards, full))
                for name, shape in TP_PLANS.items():
                    if max(t for t, _ in shape) > cards:
                        continue
                    p = d / f"p{cards}{name}.toml"
                    p.write_text(plan_toml(cards, shape))
                    s, rc, out = timed([*cli, "place", str(p), "--machine", str(m), "--json"],
                                       args.bound)  # fmt: skip
                    if s is None:
                        placed, res = "-", f"> {args.bound:g} s: MISSED"
                        ok = False
                    else:
                        try:
                            data = json.loads(out)
                            done, left = len(data["replicas"]), len(data["not_placed"])
                            placed = f"{done} of {done + left}"
                        except (json.JSONDecodeError, TypeError):
                            placed = f"exit {rc}"
                        good = s <= PLACE_TARGET_S and rc == 0
                        ok &= good
                        res = "PASS" if good else "MISSED"
                    secs = "-" if s is None else f"{s:.2f}"
                    print(
                        f"| {cards} | {'full' if full else 'sparse'} | {name} | {secs} | {placed} | {res} |"
                    )
        print()
        print("place vs brute force on 8 cards (replicas placed, sum of weakest links)")
        print()
        print("| link matrix | plan | planner | brute force | result |")
        print("|---|---|---|---|---|")
        for full in (False, True):
            for name, shape in TP_PLANS.items():
                mine, best = brute_force_check(8, full, shape)
                good = mine == best
                ok &= good
                print(f"| {'full' if full else 'sparse'} | {name} | {mine} | {best} | "
                      f"{'PASS' if good else 'MISSED'} |")  # fmt: skip
        print()
        print("report (one process per catalogue, --machine k100-ai-8x64g --format json)")
        print()
        print("| workloads | seconds | ms per workload |")
        print("|---|---|---|")
        from nodeledger.verdict.catalogue import default_catalogue_text

        base = default_catalogue_text()
        per = {}
        for copies in (1, 4, 16):
            text = "\n".join(_distinct(_renamed(base, f"c{k}-"), k) for k in range(copies))
            f = d / f"cat{copies}.toml"
            f.write_text(text)
            n = text.count("[[workloads]]")
            s, rc, _ = timed([*cli, "report", "--machine", "k100-ai-8x64g", "--workloads", str(f),
                              "--format", "json"], 600)  # fmt: skip
            if s is None or rc != 0:
                print(f"| {n} | failed (exit {rc}) | - |")
                ok = False
                continue
            per[n] = s / n
            print(f"| {n} | {s:.2f} | {1e3 * s / n:.1f} |")
        if len(per) >= 2:
            ok &= growth_line("per-workload time, largest / smallest catalogue", per)
        print()
        print("watch analysis (Analyzer.feed, CPU ms per sample)")
        print()
        print("| cards | ms per sample | ms per card |")
        print("|---|---|---|")
        per_card = {}
        for cards, ms in watch_curve(d):
            per_card[cards] = ms / cards
            print(f"| {cards} | {ms:.3f} | {ms / cards:.4f} |")
        ok &= growth_line("ms per card, 64 cards / 8 cards", per_card)
    return 0 if ok else 1


def growth_line(what: str, per: dict) -> bool:
    """Print the largest-over-smallest ratio of a per-unit cost against its target; True if met."""
    growth = per[max(per)] / per[min(per)]
    good = growth <= REPORT_GROWTH_TARGET
    print()
    print(
        f"{what}: {growth:.2f} (target <= {REPORT_GROWTH_TARGET}): {'PASS' if good else 'MISSED'}"
    )
    return good


def brute_force_check(cards: int, full: bool, shape) -> tuple[tuple, tuple]:
    """(planner's, brute force's best) (replicas placed, sum of weakest links) on one box."""
    from nodeledger.machine import parse_profile
    from nodeledger.placement import planner as P
    from nodeledger.verdict.catalogue import load_specs, parse_catalogue

    m = parse_profile(machine_toml(cards, full), "toml", "bench")
    ws = parse_catalogue(plan_toml(cards, shape), "bench")
    specs = load_specs(ws)
    res = P.plan(m, ws, specs, lifeboat=1)
    score = P.LinkScores(m)
    numa = {a.index: a.numa_node for a in m.accelerators}
    weakest = {tuple(r["cards"]): P.group_score(score, tuple(r["cards"]), numa)[0]
               for r in res["replicas"]}  # fmt: skip
    mine = (len(res["replicas"]), sum(weakest.values()))
    units, _ = P.units_of(ws, specs, m)
    best = (0, 0)

    def rec(i, left, placed, links):
        nonlocal best
        best = max(best, (placed, links))
        if i == len(units):
            return
        rec(i + 1, left, placed, links)  # this replica not placed
        for g in itertools.combinations(sorted(left), units[i].cards):
            rec(i + 1, left - set(g), placed + 1, links + P.group_score(score, g, numa)[0])

    import itertools

    for boat in range(cards):
        rec(0, set(range(cards)) - {boat}, 0, 0)
    return mine, best


def watch_curve(d: Path, repeat: int = 3):
    """(cards, CPU ms per sample) for the widened dead-owner stream."""
    import copy

    from nodeledger.watch.analyze import Analyzer
    from nodeledger.watch.fake import record_scenario
    from nodeledger.watch.record import read_stream

    f = d / "dead-owner.jsonl"
    record_scenario("dead-owner", f)
    header, stream = read_stream(f)
    samples = list(stream)
    out = []
    for k in (1, 2, 4, 8):
        wide = []
        for s in samples:
            s = copy.deepcopy(s)
            base = s.get("cards", [])
            s["cards"] = [dict(c, index=c["index"] + 8 * j) for j in range(k) for c in base]
            wide.append(s)
        h = copy.deepcopy(header)
        m = h.get("machine", {})
        if m.get("cards"):
            m["cards"] = [dict(c, index=c["index"] + 8 * j) for j in range(k) for c in m["cards"]]
        best = None
        for _ in range(repeat):
            an = Analyzer(h)
            t0 = time.process_time()
            for s in wide:
                an.feed(s)
            ms = (time.process_time() - t0) * 1e3 / len(wide)
            best = ms if best is None else min(best, ms)
        out.append((8 * k, best))
    return out


if __name__ == "__main__":
    raise SystemExit(main())
