"""Validate the fake-tensor measurement against real CPU runs.

Check 1 (fake vs real, same tracker, 512-byte rounding): every case is run twice with
``harness.measure_case`` -- once under FakeTensorMode, once with real CPU tensors and random
weights -- and every byte figure is compared.  They must be identical.

Check 2 (tracker vs the CPU allocator itself, no rounding): for a few cases the real CPU run is
repeated under ``torch.profiler`` with ``profile_memory=True``; the c10 CPU allocator's own
alloc/free trace gives the true peak of each phase (prefill / decode, forward / backward /
optimizer of the measured step).  The tracker's per-phase rise above the phase start is compared
with the allocator's.  A positive gap is memory allocated inside kernels by C++ (never visible to a
TorchDispatchMode: e.g. the CPU flash-attention scratch buffers) -- on CUDA the equivalent
kernel-internal allocations are different, so this gap is reported, not corrected.

Usage:  python benchmarks/accuracy/validate_fake.py [--skip-profiler] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import harness  # noqa: E402

L2 = {"num_hidden_layers": 2}
# DeepSeek-V3 shrunk to run on a CPU: 1 dense + 1 MoE layer of 16 small experts
DSV3_SMALL = {
    "num_hidden_layers": 2,
    "first_k_dense_replace": 1,
    "hidden_size": 1024,
    "intermediate_size": 2048,
    "moe_intermediate_size": 256,
    "n_routed_experts": 16,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "q_lora_rank": 256,
    "kv_lora_rank": 128,
    "vocab_size": 32000,
}
BASE_TRAIN = {
    "optimizer": "adamw",
    "micro_batch": 2,
    "seq": 256,
    "attention": "sdpa",
    "dtype": "bf16",
}

CASES = [
    {
        "id": "v-qwen3-serve",
        "model": "Qwen3-0.6B",
        "config_overrides": L2,
        "job": "serve",
        "engine": "hf",
        "dtype": "bf16",
        "attention": "sdpa",
        "concurrency": 2,
        "context": 256,
        "new_tokens": 4,
    },
    {
        "id": "v-qwen3-serve-eager",
        "model": "Qwen3-0.6B",
        "config_overrides": L2,
        "job": "serve",
        "engine": "hf",
        "dtype": "bf16",
        "attention": "eager",
        "concurrency": 2,
        "context": 128,
        "new_tokens": 3,
    },
    dict(
        BASE_TRAIN,
        id="v-qwen3-train-bf16-foreach",
        model="Qwen3-0.6B",
        config_overrides=L2,
        job="train",
        precision="bf16",
        optimizer_impl="foreach",
        checkpointing="none",
    ),
    dict(
        BASE_TRAIN,
        id="v-qwen3-train-mixed-fused-ckpt",
        model="Qwen3-0.6B",
        config_overrides=L2,
        job="train",
        precision="mixed",
        optimizer_impl="fused",
        checkpointing="full",
    ),
    dict(
        BASE_TRAIN,
        id="v-qwen3-train-eager-forloop",
        model="Qwen3-0.6B",
        config_overrides=L2,
        job="train",
        precision="bf16",
        optimizer_impl="forloop",
        checkpointing="none",
        attention="eager",
    ),
    dict(
        BASE_TRAIN,
        id="v-qwen3-lora",
        model="Qwen3-0.6B",
        config_overrides=L2,
        job="lora",
        rank=16,
        lora_alpha=32,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        optimizer_impl="foreach",
        checkpointing="none",
    ),
    {
        "id": "v-qwen3moe-serve",
        "model": "Qwen3-30B-A3B",
        "config_overrides": {"num_hidden_layers": 2, "num_experts": 16},
        "job": "serve",
        "engine": "hf",
        "dtype": "bf16",
        "attention": "sdpa",
        "concurrency": 2,
        "context": 128,
        "new_tokens": 3,
    },
    dict(
        BASE_TRAIN,
        id="v-qwen3moe-train",
        model="Qwen3-30B-A3B",
        config_overrides={"num_hidden_layers": 2, "num_experts": 16},
        job="train",
        precision="bf16",
        optimizer_impl="foreach",
        checkpointing="none",
        seq=128,
    ),
    {
        "id": "v-dsv3-serve",
        "model": "DeepSeek-V3",
        "config_overrides": DSV3_SMALL,
        "job": "serve",
        "engine": "hf",
        "dtype": "bf16",
        "attention": "sdpa",
        "concurrency": 2,
        "context": 128,
        "new_tokens": 3,
    },
    dict(
        BASE_TRAIN,
        id="v-dsv3-train",
        model="DeepSeek-V3",
        config_overrides=DSV3_SMALL,
        job="train",
        precision="bf16",
        optimizer_impl="foreach",
        checkpointing="none",
        seq=128,
    ),
    dict(
        BASE_TRAIN,
        id="v-gpt2-train-dropout",
        model="gpt2",
        config_overrides={"n_layer": 2},
        job="train",
        precision="bf16",
        optimizer_impl="foreach",
        checkpointing="none",
        seq=128,
    ),
]

PROFILE_IDS = [
    "v-qwen3-serve",
    "v-qwen3-train-bf16-foreach",
    "v-qwen3-train-mixed-fused-ckpt",
    "v-dsv3-train",
]

BYTE_KEYS = [
    "torch_peak_bytes",
    "prefill_peak_bytes",
    "decode_peak_bytes",
    "held_bytes",
    "held_end_bytes",
    "held_after_prefill_bytes",
    "start_bytes",
    "cache_bytes_after_prefill",
    "cache_bytes_end",
    "param_bytes",
    "buffer_bytes",
    "optimizer_state_bytes",
    "optimizer_step_scalar_bytes",
]
PHASE_KEYS = [
    "start",
    "forward_peak",
    "after_forward",
    "backward_peak",
    "after_backward",
    "optimizer_peak",
]


def flat_bytes(r: dict) -> dict:
    out = {k: r.get(k) for k in BYTE_KEYS if k in r}
    for k in PHASE_KEYS:
        if k in r.get("phases", {}):
            out["phases." + k] = r["phases"][k]
    for k, v in (r.get("held_breakdown") or {}).items():
        out["held_breakdown." + k] = v
    return out


def check_fake_vs_real() -> list[dict]:
    rows = []
    for case in CASES:
        t0 = time.time()
        fake = harness.measure_case(case, device="fake")
        t1 = time.time()
        real = harness.measure_case(case, device="cpu")
        t2 = time.time()
        ff, rf = flat_bytes(fake), flat_bytes(real)
        diffs = {
            k: (ff.get(k), rf.get(k)) for k in sorted(set(ff) | set(rf)) if ff.get(k) != rf.get(k)
        }
        same_kernel = fake.get("sdpa_backend") == real.get("sdpa_backend")
        row = {
            "id": case["id"],
            "identical": not diffs and same_kernel,
            "n_compared": len(ff),
            "torch_peak_bytes": fake["torch_peak_bytes"],
            "sdpa_backend_fake": fake.get("sdpa_backend"),
            "sdpa_backend_real": real.get("sdpa_backend"),
            "diffs": diffs,
            "fake_s": round(t1 - t0, 2),
            "real_s": round(t2 - t1, 2),
        }
        rows.append(row)
        status = "IDENTICAL" if row["identical"] else f"DIFFERENT {diffs}"
        print(
            f"{case['id']:34s} peak={fake['torch_peak_bytes']:>13,d} B  {len(ff):2d} figures  {status}  "
            f"[{row['sdpa_backend_fake'][:48]}]  fake {row['fake_s']}s real {row['real_s']}s",
            flush=True,
        )
    return rows


def _allocator_segments(case: dict) -> dict:
    """Real CPU run under the profiler, no rounding; per-phase rise above phase start."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    harness.ROUND_BYTES = 1
    harness.RECORD_MARKS = True
    harness.MARKS.clear()
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            res = harness.measure_case(case, device="cpu")
        end_ns = time.time_ns()
        marks = list(harness.MARKS)
    finally:
        harness.ROUND_BYTES = 512
        harness.RECORD_MARKS = False
    events = sorted(
        (
            (e.start_ns(), e.nbytes())
            for e in prof.profiler.kineto_results.events()
            if e.name() == "[memory]" and e.device_type() == torch._C._autograd.DeviceType.CPU
        ),
    )
    # allocator "current" relative to profile start, and its max within each segment
    seg_bounds = [m[0] for m in marks] + [end_ns]
    cur = 0
    i = 0
    seg = []
    for s in range(len(marks)):
        lo, hi = seg_bounds[s], seg_bounds[s + 1]
        while i < len(events) and events[i][0] < lo:
            cur += events[i][1]
            i += 1
        start = cur
        peak = cur
        while i < len(events) and events[i][0] < hi:
            cur += events[i][1]
            peak = max(peak, cur)
            i += 1
        seg.append((start, peak))
    if case["job"] == "serve":
        tracker_peaks = [res["prefill_peak_bytes"], res["decode_peak_bytes"]]
        names = ["prefill", "decode"]
        marks_used = marks[-2:]
        seg = seg[-2:]
    else:
        ph = res["phases"]
        tracker_peaks = [ph["forward_peak"], ph["backward_peak"], ph["optimizer_peak"]]
        names = ["forward", "backward", "optimizer"]
        marks_used = marks[-3:]
        seg = seg[-3:]
    out = {}
    for name, (_t_ns, t_cur), tp, (a_start, a_peak) in zip(  # noqa: B905 (lengths checked above)
        names, marks_used, tracker_peaks, seg
    ):
        out[name] = {
            "tracker_rise": tp - t_cur,
            "allocator_rise": a_peak - a_start,
            "gap_allocator_minus_tracker": (a_peak - a_start) - (tp - t_cur),
        }
    return out


def check_against_allocator() -> dict:
    out = {}
    by_id = {c["id"]: c for c in CASES}
    for cid in PROFILE_IDS:
        segs = _allocator_segments(by_id[cid])
        out[cid] = segs
        for name, d in segs.items():
            print(
                f"{cid:34s} {name:9s} tracker rise {d['tracker_rise']:>13,d}  allocator rise {d['allocator_rise']:>13,d}"
                f"  gap {d['gap_allocator_minus_tracker']:>+12,d} B",
                flush=True,
            )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-profiler", action="store_true")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    print("== check 1: fake vs real CPU (same tracker, 512-B rounding) ==", flush=True)
    rows = check_fake_vs_real()
    n_ok = sum(r["identical"] for r in rows)
    print(f"-> {n_ok}/{len(rows)} cases byte-identical", flush=True)
    alloc = None
    if not args.skip_profiler:
        print(
            "== check 2: tracker vs the c10 CPU allocator trace (no rounding, real CPU) ==",
            flush=True,
        )
        alloc = check_against_allocator()
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "fake_vs_real": rows,
                    "tracker_vs_allocator": alloc,
                    "versions": harness.versions(),
                },
                indent=1,
            )
        )
    return 0 if n_ok == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
