"""GPU must-show of issue 9 (prepared; needs an NVIDIA box with torch): `nodeledger bench --quick`
beside independent reference measurements on the same machine, and whether nodeledger is
within 5 % of each.

References (each written here without nodeledger's code):
- a plain torch copy loop: 256 MiB pinned host buffer, 20 copies between CUDA events, per card
  and direction; a peer copy 0 -> 1 the same way;
- nccl-tests `all_reduce_perf` / `all_gather_perf` when found on PATH or in $NCCL_TESTS_DIR
  (`-b 256M -e 256M -g <cards>`), parsed with nodeledger's nccl-tests parser;
- nvbandwidth when on PATH (host_to_device_memcpy_ce, device_to_host_memcpy_ce).

Writes everything to $OUT (or ./gpu-reference) as JSON and prints a table.  Budget: <= 5 min
(`bench --quick` <= 60 s; the references a few seconds per card).

    python benchmarks/bench_gpu_reference.py [--cards 0,1,...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

MiB = 2**20


def torch_reference(cards: list[int], nbytes: int = 256 * MiB, iters: int = 20) -> dict:
    import torch

    out: dict = {"h2d": {}, "d2h": {}, "peer": {}}
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    host.fill_(1)
    for c in cards:
        dev = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{c}")
        for name, fn in (
            ("h2d", lambda d=dev: d.copy_(host)),
            ("d2h", lambda d=dev: host.copy_(d)),
        ):
            with torch.cuda.device(c):
                fn()
                torch.cuda.synchronize()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(iters):
                    fn()
                e.record()
                e.synchronize()
                out[name][c] = nbytes * iters / (s.elapsed_time(e) / 1e3) / 1e9
    if len(cards) >= 2:
        a, b = cards[0], cards[1]
        src = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{a}")
        dst = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{b}")
        dst.copy_(src)
        torch.cuda.synchronize(a)
        torch.cuda.synchronize(b)
        t0 = time.perf_counter()
        for _ in range(iters):
            dst.copy_(src)
        torch.cuda.synchronize(a)
        torch.cuda.synchronize(b)
        out["peer"][f"{a}->{b}"] = nbytes * iters / (time.perf_counter() - t0) / 1e9
    return out


def find_tool(name: str) -> str | None:
    d = os.environ.get("NCCL_TESTS_DIR")
    if d and (Path(d) / name).is_file():
        return str(Path(d) / name)
    return shutil.which(name)


def nccl_tests(cards: list[int], outdir: Path) -> dict:
    from nodeledger.bench.nccl import parse_nccl_tests

    res = {}
    for tool, op in (("all_reduce_perf", "all_reduce"), ("all_gather_perf", "all_gather")):
        exe = find_tool(tool)
        if exe is None:
            res[op] = {"unavailable": f"{tool} not found (PATH, $NCCL_TESTS_DIR)"}
            continue
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(map(str, cards)))
        p = subprocess.run([exe, "-b", "256M", "-e", "256M", "-g", str(len(cards)), "-n", "20", "-w", "5"],
                           capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
        (outdir / f"{tool}.txt").write_text(p.stdout + p.stderr)
        try:
            d = parse_nccl_tests(p.stdout, tool, op)
            r = d["rows"][-1]
            res[op] = {"size_bytes": r["size_bytes"], "busbw_oop": r["out_of_place"]["busbw"],
                       "busbw_ip": r["in_place"]["busbw"] if r["in_place"] else None}  # fmt: skip
        except Exception as exc:
            res[op] = {"unavailable": f"{tool}: {exc}"}
    return res


def nvbandwidth(outdir: Path) -> dict:
    exe = shutil.which("nvbandwidth")
    if exe is None:
        return {"unavailable": "nvbandwidth not on PATH"}
    p = subprocess.run([exe, "-t", "host_to_device_memcpy_ce", "device_to_host_memcpy_ce"],
                       capture_output=True, text=True, timeout=180)  # fmt: skip
    (outdir / "nvbandwidth.txt").write_text(p.stdout + p.stderr)
    res: dict = {}
    test = None
    for line in p.stdout.splitlines():
        m = re.match(r"Running (\S+)", line)
        if m:
            test = m.group(1)
            continue
        m = re.match(r"\s*0\s+((?:[\d.]+\s+)+)$", line)
        if test and m:
            res[test] = [float(x) for x in m.group(1).split()]
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cards", default=None)
    a = ap.parse_args()
    outdir = Path(os.environ.get("OUT") or "gpu-reference")
    outdir.mkdir(parents=True, exist_ok=True)
    import torch

    cards = (
        [int(x) for x in a.cards.split(",")] if a.cards else list(range(torch.cuda.device_count()))
    )
    t0 = time.perf_counter()
    argv = [sys.executable, "-m", "nodeledger", "bench", "--quick", "--json"]
    if a.cards:
        argv += ["--cards", a.cards]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=240)
    (outdir / "nodeledger-bench.json").write_text(p.stdout)
    (outdir / "nodeledger-bench.stderr").write_text(p.stderr)
    nl_s = time.perf_counter() - t0
    nl = json.loads(p.stdout)
    ref = torch_reference(cards)
    nccl = nccl_tests(cards, outdir) if len(cards) >= 2 else {}
    nvb = nvbandwidth(outdir)
    rows = []
    for hc in nl["cards"]["host_card"]:
        key = next(k for k in hc if k.startswith("pinned_"))
        for d in ("h2d", "d2h"):
            mine, theirs = hc[key][d], ref[d].get(hc["card"])
            rows.append((f"card {hc['card']} {d} pinned ({key})", mine, theirs, "torch loop"))
    for pr in nl["cards"]["peer"]:
        k = f"{pr['src']}->{pr['dst']}"
        if k in ref["peer"]:
            rows.append((f"peer {k}", pr["gbps"], ref["peer"][k], "torch loop"))
    for c in nl["cards"]["collectives"]:
        r = nccl.get(c["op"], {})
        if "busbw_oop" in r and r["size_bytes"] == c["size_bytes"]:
            rows.append((f"{c['op']} busbw {c['size_bytes'] // MiB} MiB", c["busbw_gbps"],
                         r["busbw_ip"] if c["in_place"] else r["busbw_oop"], "nccl-tests"))  # fmt: skip
    print(f"nodeledger bench --quick: {nl_s:.1f} s (target <= 60 s)")
    print(f"{'figure':48} {'nodeledger':>11} {'reference':>11} {'ratio':>7}  within 5 %")
    worst = 0.0
    for name, mine, theirs, src in rows:
        ratio = mine / theirs if theirs else None
        if ratio is not None:
            worst = max(worst, abs(ratio - 1))
        ok = "yes" if ratio is not None and abs(ratio - 1) <= 0.05 else "NO"
        print(f"{name:48} {mine:11.2f} {theirs or 0:11.2f} {ratio or 0:7.3f}  {ok} ({src})")
    summary = {"bench_seconds": nl_s, "rows": rows, "torch_reference": ref, "nccl_tests": nccl,
               "nvbandwidth": nvb, "worst_deviation": worst}  # fmt: skip
    (outdir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return 0 if rows and worst <= 0.05 and nl_s <= 60 else 1


if __name__ == "__main__":
    sys.exit(main())
