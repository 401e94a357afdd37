"""Validate the fake-PG per-rank measurement against a REAL 2-process gloo run on CPU.

For each validation case (tiny configs, world_size=2):

* fake: ``harness_sharded.measure_case(case, mode="fake")`` with the fake process group, once as
  rank 0 and once as rank 1 (FakeTensorMode, no real memory);
* real: ``torch.multiprocessing`` spawns 2 processes, each ``init_process_group("gloo")`` on
  127.0.0.1, builds the same model with real random CPU tensors, applies the same
  LoRA / checkpointing / TP / FSDP2 and runs the same two steps under the same PeakTracker
  (``mode="real"``).

Every byte figure of rank r's fake record is compared with rank r's real record
(``harness_sharded.flat_figures``: peak, phase peaks, after-phase figures, resident bytes,
per-category breakdowns).

Check 2 (``--profile``): real rank 0 is also run under ``torch.profiler`` with
``profile_memory=True`` (no 512-B rounding); the c10 CPU allocator's own alloc/free trace of this
process gives each phase's rise above its start, compared with the tracker's rise.  A gap is
memory that the tracker cannot see: allocations made inside C++ kernels or by gloo's worker thread.

Usage: python validate_sharded.py [--only ID ...] [--profile] [--json validate_sharded.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

TINY_QWEN = {
    "num_hidden_layers": 2,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
}
# odd vocab: FSDP2 pads dim-0 of the embedding (32001 rows over 2 ranks)
TINY_QWEN_ODD = dict(TINY_QWEN, vocab_size=32001)
TINY_LLAMA = {
    "num_hidden_layers": 2,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 32000,
}
BASE = {
    "world_size": 2,
    "micro_batch": 2,
    "seq": 128,
    "attention": "sdpa",
    "optimizer": "adamw",
    "optimizer_impl": "foreach",
    "framework": "fsdp2",
    "precision": "bf16",
    "checkpointing": "none",
    "lora": None,
    "tp": 1,
    "sp": False,
}

CASES = [
    dict(BASE, id="v-qwen3-fsdp2-bf16", model="Qwen3-0.6B", config_overrides=TINY_QWEN),
    dict(
        BASE,
        id="v-qwen3-fsdp2-bf16-ckpt",
        model="Qwen3-0.6B",
        config_overrides=TINY_QWEN,
        checkpointing="full",
    ),
    dict(
        BASE,
        id="v-qwen3-fsdp2-mixed",
        model="Qwen3-0.6B",
        config_overrides=TINY_QWEN_ODD,
        precision="mixed",
    ),
    dict(
        BASE,
        id="v-qwen3-fsdp2-mixed-ckpt",
        model="Qwen3-0.6B",
        config_overrides=TINY_QWEN,
        precision="mixed",
        checkpointing="full",
    ),
    dict(
        BASE,
        id="v-llama-fsdp2-lora-qv",
        model="Llama-3.1-8B",
        config_overrides=TINY_LLAMA,
        lora={"r": 16, "alpha": 32, "target_modules": ["q_proj", "v_proj"], "dropout": 0.0},
    ),
    dict(
        BASE,
        id="v-llama-tp2",
        model="Llama-3.1-8B",
        config_overrides=TINY_LLAMA,
        framework="tp",
        tp=2,
    ),
    dict(
        BASE,
        id="v-llama-tp2-sp",
        model="Llama-3.1-8B",
        config_overrides=TINY_LLAMA,
        framework="tp",
        tp=2,
        sp=True,
    ),
    # a real fixture's layer sizes (Qwen3-8B: hidden 4096, intermediate 12288, 32/8 heads; 36
    # layers -> 2, vocab 151936 -> 32000 so that 2 real processes fit in 24 GB), world_size 2
    dict(
        BASE,
        id="v-qwen3-8b-L2-fsdp2-bf16",
        model="Qwen3-8B",
        config_overrides={"num_hidden_layers": 2, "vocab_size": 32000},
        micro_batch=1,
        seq=256,
    ),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, cases: list, outdir: str, profile_ids: list):
    import torch
    import torch.distributed as dist

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    import harness_sharded as H

    for case in cases:
        t0 = time.time()
        try:
            rec = H.measure_case(case, mode="real")
            dist.barrier()
            rec["excl_backend_waits"] = H.measure_case(
                case, mode="real", untrack_backend_waits=True
            )
            if case["id"] in profile_ids:
                dist.barrier()
                rec["allocator_check"] = _allocator_check(case)
        except Exception as exc:
            rec = {
                "case": case,
                "error": f"{type(exc).__name__}: {exc}"[:3000],
                "traceback": traceback.format_exc()[-6000:],
            }
        rec["real_seconds"] = round(time.time() - t0, 2)
        Path(outdir, f"{case['id']}.rank{rank}.json").write_text(json.dumps(rec, default=str))
        with contextlib.suppress(Exception):
            dist.barrier()
    dist.destroy_process_group()


def _allocator_check(case: dict) -> dict:
    """Real run under the profiler (no rounding): per-phase rise of the c10 CPU allocator vs the
    tracker.  The tracker's phase marks are taken with time.time_ns() at every reset_peak."""
    import harness_sharded as H
    import torch
    from torch.profiler import ProfilerActivity, profile

    marks: list[tuple[int, int]] = []
    orig_reset = H.PeakTracker.reset_peak

    def reset_peak(self):
        orig_reset(self)
        marks.append((time.time_ns(), self.current()))

    H.PeakTracker.reset_peak = reset_peak
    H.ROUND_BYTES = 1
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            res = H.measure_case(case, mode="real", top_k=0)
        end_ns = time.time_ns()
    finally:
        H.PeakTracker.reset_peak = orig_reset
        H.ROUND_BYTES = 512
    events = sorted(
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == torch._C._autograd.DeviceType.CPU
    )
    bounds = [m[0] for m in marks] + [end_ns]
    cur, i, segs = 0, 0, []
    for s in range(len(marks)):
        lo, hi = bounds[s], bounds[s + 1]
        while i < len(events) and events[i][0] < lo:
            cur += events[i][1]
            i += 1
        start = peak = cur
        while i < len(events) and events[i][0] < hi:
            cur += events[i][1]
            peak = max(peak, cur)
            i += 1
        segs.append((start, peak))
    ph = res["phases"]
    out = {}
    # the last three resets: before forward, before backward, before optimizer (2nd step)
    for name, (_t, t_cur), tp, (a0, ap) in zip(
        ("forward", "backward", "optimizer"),
        marks[-3:],
        (ph["forward_peak"], ph["backward_peak"], ph["optimizer_peak"]),
        segs[-3:],
        strict=False,
    ):
        out[name] = {
            "tracker_rise": tp - t_cur,
            "allocator_rise": ap - a0,
            "gap_allocator_minus_tracker": (ap - a0) - (tp - t_cur),
        }
    return out


def run_real(cases: list, profile_ids: list, timeout: float = 1800) -> dict:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as td:
        port = _free_port()
        ctx = mp.start_processes(
            _worker,
            args=(2, port, cases, td, profile_ids),
            nprocs=2,
            join=False,
            start_method="spawn",
        )
        t0 = time.time()
        while not ctx.join(timeout=5):
            if time.time() - t0 > timeout:
                for p in ctx.processes:
                    p.kill()
                break
        out = {}
        for case in cases:
            for r in (0, 1):
                p = Path(td, f"{case['id']}.rank{r}.json")
                out[(case["id"], r)] = (
                    json.loads(p.read_text()) if p.exists() else {"error": "no record"}
                )
        return out


def compare(fake: dict, real: dict) -> dict:
    import harness_sharded as H

    if "error" in fake or "error" in real:
        return {"identical": False, "error": {"fake": fake.get("error"), "real": real.get("error")}}
    ff, rf = H.flat_figures(fake), H.flat_figures(real)
    diffs = {
        k: {
            "fake": ff.get(k),
            "real": rf.get(k),
            "real_minus_fake": (rf.get(k) or 0) - (ff.get(k) or 0),
        }
        for k in sorted(set(ff) | set(rf))
        if ff.get(k) != rf.get(k)
    }
    same_ops = fake.get("sdpa_ops") == real.get("sdpa_ops")
    return {
        "identical": not diffs and same_ops,
        "n_compared": len(ff),
        "diffs": diffs,
        "sdpa_ops_fake": fake.get("sdpa_ops"),
        "sdpa_ops_real": real.get("sdpa_ops"),
        "collective_ops_fake": fake.get("collective_ops"),
        "collective_ops_real": real.get("collective_ops"),
    }


def _fake_child(case: dict, rank: int) -> dict:
    """Fake run in a fresh interpreter (fake PG at this rank)."""
    import subprocess

    code = (
        f"import sys, json; sys.path.insert(0, {str(HERE)!r}); import harness_sharded as H\n"
        "case = json.loads(sys.argv[1]); case['rank'] = int(sys.argv[2])\n"
        "print('@@' + json.dumps(H.measure_case(case, mode='fake'), default=str))\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code, json.dumps(case), str(rank)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    for line in p.stdout.splitlines():
        if line.startswith("@@"):
            return json.loads(line[2:])
    return {"error": f"fake child rc={p.returncode}", "stderr": p.stderr[-4000:]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*")
    ap.add_argument(
        "--profile",
        nargs="*",
        default=None,
        help="ids whose real rank-0 run is repeated under the profiler (no ids: a default pair)",
    )
    ap.add_argument("--json", default=str(HERE / "validate_sharded.json"))
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    cases = [c for c in CASES if not a.only or c["id"] in a.only]
    profile_ids = []
    if a.profile is not None:
        profile_ids = a.profile or ["v-qwen3-fsdp2-bf16", "v-llama-tp2-sp"]
    t0 = time.time()
    fakes = {}
    for c in cases:
        for r in (0, 1):
            ts = time.time()
            fakes[(c["id"], r)] = _fake_child(c, r)
            fakes[(c["id"], r)]["fake_seconds"] = round(time.time() - ts, 2)
    t1 = time.time()
    reals = run_real(cases, profile_ids)
    t2 = time.time()
    rows = []
    for c in cases:
        for r in (0, 1):
            f, rr = fakes[(c["id"], r)], reals[(c["id"], r)]
            raw = compare(f, rr)
            excl = compare(
                f, rr.get("excl_backend_waits") or {"error": rr.get("error", "no record")}
            )
            row = {
                "id": c["id"],
                "rank": r,
                "identical_raw": raw["identical"],
                "identical_excl_gloo_internal": excl["identical"],
                "n_compared": raw.get("n_compared"),
                "peak_bytes_fake": f.get("peak_bytes"),
                "peak_bytes_real": rr.get("peak_bytes"),
                "peak_bytes_real_excl": (rr.get("excl_backend_waits") or {}).get("peak_bytes"),
                "diffs_raw": raw.get("diffs") or raw.get("error"),
                "diffs_excl": excl.get("diffs") or excl.get("error"),
                "untracked_ops_in_gloo_wait": (rr.get("excl_backend_waits") or {}).get(
                    "n_untracked_ops"
                ),
                "sdpa_ops": [f.get("sdpa_ops"), rr.get("sdpa_ops")],
                "collective_ops": [f.get("collective_ops"), rr.get("collective_ops")],
                "fake_seconds": f.get("fake_seconds"),
                "real_seconds": rr.get("real_seconds"),
            }
            if "allocator_check" in rr:
                row["allocator_check"] = rr["allocator_check"]
            rows.append(row)

            def st(ok, d):
                return "IDENTICAL" if ok else "DIFF " + json.dumps(d, default=str)[:400]

            print(
                f"{c['id']:28s} r{r} peak fake {f.get('peak_bytes')} real {rr.get('peak_bytes')}"
                f" | {raw.get('n_compared', 0)} figs  raw: {st(raw['identical'], row['diffs_raw'])}"
                f" | excl. gloo-internal: {st(excl['identical'], row['diffs_excl'])}",
                flush=True,
            )
            if "allocator_check" in rr:
                for ph, d in rr["allocator_check"].items():
                    print(
                        f"    allocator {ph:9s} tracker rise {d['tracker_rise']:>12,d}  allocator rise "
                        f"{d['allocator_rise']:>12,d}  gap {d['gap_allocator_minus_tracker']:>+10,d}",
                        flush=True,
                    )
    import harness_sharded as H

    n_raw = sum(r["identical_raw"] for r in rows)
    n_ok = sum(r["identical_excl_gloo_internal"] for r in rows)
    print(
        f"-> byte-identical: {n_raw}/{len(rows)} (case, rank) pairs raw, {n_ok}/{len(rows)} excluding gloo's"
        f" internal copy-out buffers;  fake {t1 - t0:.0f}s real {t2 - t1:.0f}s"
    )
    Path(a.json).write_text(
        json.dumps(
            {
                "rows": rows,
                "versions": H.versions(),
                "fake_records": {f"{k[0]}.rank{k[1]}": v for k, v in fakes.items()},
                "real_records": {f"{k[0]}.rank{k[1]}": v for k, v in reals.items()},
            },
            indent=1,
            default=str,
        )
    )
    return 0 if n_ok == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
