"""Predicted vs measured: nodeledger's speed model against the published measurements in
``benchmarks/speed/cases.toml`` (each case with its source and the line it was read from).

    python benchmarks/speed/compare.py            # the table, then median / max |error| per kind
    python benchmarks/speed/compare.py --json     # the same as JSON
    python benchmarks/speed/compare.py --roofline # serving through the roofline (before the simulator)

Serving cases are replayed as their client ran them (speed/serving.py serving_benchmark: the
engine's scheduler simulated over the operator model), the KV pool the ledger's.

The machine of a case is a bundled preset where one matches the GPU (its datasheet figures and
links), else a machine built from nodeledger's hardware data (speed/hardware.toml) for that GPU:
``cards`` cards, all-pairs card links of the GPU's kind.  Nothing here is fitted per case: the
model's inputs are the hardware data and the case's own configuration.  A case marked
``calibration`` is among the sources an efficiency in speed/hardware.toml was read from: it is
shown, but kept out of the statistics (it cannot test what it set).  Targets: median |error|
<= 15 %, max <= 30 % per kind.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
from dataclasses import replace
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from nodeledger.ledger.jobs import Parallel, ServeJob, TrainJob
from nodeledger.machine import resolve_machine
from nodeledger.machine.profile import (
    Accelerator,
    Interconnect,
    Link,
    MachineProfile,
    Network,
    Nic,
)
from nodeledger.model import load_model
from nodeledger.speed import hardware as H
from nodeledger.speed.collective import estimate
from nodeledger.speed.serve import serve_speed
from nodeledger.speed.train import train_speed
from nodeledger.verdict.fit import largest_serving

HERE = Path(__file__).resolve().parent
CASES = HERE / "cases.toml"
TARGET_MEDIAN, TARGET_MAX = 0.15, 0.30

GPU_PRESETS = {  # a bundled preset whose cards and links are this GPU's
    "h100 sxm": "dgx-h100",
    "a100 sxm4 80": "dgx-a100-80g",
    "h200": "hgx-h200",
    "a40": "8x-a40-48g-pcie",
    "rtx 4090": "8x-rtx4090",
}
GPU_PRODUCTS = {  # otherwise: the product name the vendor tool prints, looked up in the data
    "a100 sxm4 40": "NVIDIA A100-SXM4-40GB",
    "mi300x": "AMD Instinct MI300X",
    "h100 pcie": "NVIDIA H100 PCIe",
    "h100 96gb hbm2e": "NVIDIA H100 96GB HBM2e",  # Meta's Grand Teton (torchtitan's runs)
    "l40s": "NVIDIA L40S",
}


def shared() -> Path:
    env = os.environ.get("NODELEDGER_SHARED")
    return Path(env) if env else HERE.parents[2] / "shared"


def model_of(name: str):
    if name.startswith("fixture:"):
        path = shared() / "fixtures" / "models" / name.split(":", 1)[1]
        return load_model(str(path))[0]
    return load_model(name)[0]


def _card_entry(gpu: str) -> tuple[dict | None, str]:
    product = GPU_PRODUCTS.get(gpu.lower().strip(), gpu)
    return H.card(product), product


def _nics(text: str | None) -> list[Nic]:
    """ "8 x 400 Gb/s IB", "1 x 100 GbE" -> NICs."""
    if not text:
        return []
    m = re.search(r"(?:(\d+)\s*x\s*)?(\d+(?:\.\d+)?)\s*(?:Gb/s|Gbps|GbE|G)", text, re.I)
    if not m:
        return []
    n = int(m.group(1) or 1)
    speed = float(m.group(2))
    kind = "infiniband" if re.search(r"\bIB\b|infiniband", text, re.I) else (
        "roce" if re.search(r"roce|rdma|efa|tcpx", text, re.I) else "ethernet")  # fmt: skip
    return [
        Nic(name=f"nic{i}", kind=kind, speed_gbit=speed, source=f"case: {text}") for i in range(n)
    ]


def machine_of(case: dict) -> MachineProfile:
    gpu = case["gpu"]
    cards = int(case.get("cards", 1)) // max(1, int(case.get("machines", 1)))
    preset = next((p for k, p in GPU_PRESETS.items() if k == gpu.lower().strip()), None)
    if preset:
        m = resolve_machine(preset)
        if cards < len(m.accelerators):
            m = replace(m, accelerators=m.accelerators[:max(cards, 1)],
                        interconnect=replace(m.interconnect, pairs=[
                            p for p in m.interconnect.pairs if p.a < cards and p.b < cards]))  # fmt: skip
    else:
        c, product = _card_entry(gpu)
        if c is None:
            raise KeyError(f"gpu {gpu!r} not in the hardware data")
        vendor = {"nvidia": "nvidia", "amd": "amd"}.get(c.get("vendor"), "other")
        mem = H._num(c.get("memory_gib"))
        accs = [Accelerator(index=i, vendor=vendor, product=product,
                            memory_bytes=None if mem is None else int(mem * 2**30))
                for i in range(max(cards, 1))]  # fmt: skip
        kind = {"nvlink": "nvlink", "xgmi": "xgmi", "hccs": "hccs"}.get(
            (H.link(c.get("card_link") or "") or {}).get("kind"), "pcie"
        )
        lanes = c.get("card_link_count") if isinstance(c.get("card_link_count"), int) else None
        link = Link(kind=kind, lanes=lanes if kind == "nvlink" else None)
        m = MachineProfile(name=f"{cards} x {c['id']}", accelerators=accs,
                           interconnect=Interconnect(default=link))  # fmt: skip
    if case.get("nic"):
        m = replace(m, network=Network(nics=_nics(case["nic"])))
    return m


def predict(case: dict) -> float | None:
    kind = case["kind"]
    m = machine_of(case)
    if kind in ("allreduce_busbw_gbps", "allgather_busbw_gbps"):
        op = "all_reduce" if kind.startswith("allreduce") else "all_gather"
        per = len(m.accelerators)
        d = estimate(m, op, int(case["size_bytes"]), None, int(case.get("machines", 1)),
                     nvls=case.get("nccl_nvls", True))  # fmt: skip
        del per
        return d.get("busbw_gbps")
    spec = model_of(case["model"])
    tp, pp = int(case.get("tp", 1)), int(case.get("pp", 1))
    if kind.startswith("train_"):
        dp = int(case.get("dp", max(1, int(case.get("cards", 1)) // (tp * pp))))
        shard = case.get("shard", "none")
        shard = {"fsdp2": "fsdp"}.get(shard, shard)
        if dp == 1:
            shard = "none"
        mb, seq = int(case.get("micro_batch", 1)), int(case["seq"])
        accum = int(case.get("grad_accum", 1))
        if case.get("global_batch_tokens"):
            accum = max(1, int(case["global_batch_tokens"]) // (dp * mb * seq))
        if pp > 1 and shard not in ("none", "zero1"):
            shard = (
                "zero1"  # the training model shards only without PP; ZeRO-1 moves the same bytes
            )
        job = TrainJob(micro_batch=mb, seq=seq, grad_accum=accum,
                       checkpointing=case.get("checkpointing", "none"), shard=shard,
                       fp8=case.get("dtype") == "fp8", fused_kernels=bool(case.get("fused_kernels", False)),
                       framework=case.get("framework", "auto"),
                       virtual_pipeline=int(case.get("virtual_pipeline", 1)),
                       ep=int(case.get("ep", 1)),
                       parallel=Parallel(tp=tp, pp=pp, dp=dp))  # fmt: skip
        d = train_speed(spec, job, m, int(case.get("machines", 1)))
        return d.get("tokens_per_s_per_card")
    inp, out = int(case["input_len"]), int(case["output_len"])
    if SIMULATE:
        return _simulated(case, spec, m, tp, pp, inp, out)
    conc = case.get("concurrency")
    conc = None if conc in (None, "inf") else int(conc)
    prompts = case.get("num_prompts")
    job = ServeJob(engine="vllm", dtype=case.get("dtype") if case.get("dtype") not in (None, "bf16") else None,
                   context=inp + out, concurrency=None, parallel=Parallel(tp=tp, pp=pp),
                   input_len=inp, output_len=out, engine_version=case.get("engine_version"))  # fmt: skip
    if m.accelerators[0].memory_bytes is None:
        most = None
    else:
        # the ledger's pool: vLLM's at most max_num_seqs (the release's default for the card)
        most = largest_serving(spec, job, m).get("max_concurrency_at_context")
    want = conc if conc is not None else (int(prompts) if prompts else most)
    if most is not None and want is not None:
        want = min(want, most)
    d = serve_speed(spec, job, m, inp, out, want, most, roofline=True)
    if kind == "serve_output_tokens_per_s":
        return d.get("output_tokens_per_s")
    if kind == "serve_requests_per_s":
        return d.get("requests_per_s")
    if kind in ("serve_tpot_ms", "serve_itl_ms", "decode_latency_ms"):
        return None if d.get("tpot_s") is None else d["tpot_s"] * 1e3
    if kind == "serve_ttft_ms":
        burst = prompts is not None and want is not None and int(prompts) <= want
        t = d.get("ttft_burst_s") if burst else d.get("ttft_steady_s")
        return None if t is None else t * 1e3
    raise KeyError(kind)


SIMULATE = True  # serving cases through the simulator + operator model (--roofline: the old one)


def _simulated(case: dict, spec, m, tp: int, pp: int, inp: int, out: int) -> float | None:
    """A serving case replayed as its client ran it (speed/serving.py serving_benchmark)."""
    from nodeledger.speed.serving import serving_benchmark
    from nodeledger.verdict.fit import ledger_for

    eng = str(case.get("engine", ""))
    hf = eng.startswith(("hf", "transformers"))
    engine = "hf" if hf else "sglang" if eng.startswith("sglang") else "vllm"
    version = case.get("engine_version")
    match = re.search(r"(\d+\.\d+\.\d+)", eng) if version is None else None
    version = None if hf else version or (match.group(1) if match else None)
    dtype = case.get("dtype") if case.get("dtype") not in (None, "bf16", "fp16") else None
    job = ServeJob(engine=engine, engine_version=version, dtype=dtype, context=inp + out,
                   concurrency=1, parallel=Parallel(tp=tp, pp=pp))  # fmt: skip
    pool = None if hf else ledger_for(spec, job, m).extras.get("kv_pool_tokens")
    conc = case.get("concurrency")
    prompts = int(case.get("num_prompts") or conc or 1000)
    if hf:  # generate(): one static batch of `concurrency` prompts (speed/simulate.py "static")
        d = serving_benchmark(spec, job, m, num_prompts=prompts, request_rate=float("inf"),
                              max_concurrency=None, input_len=inp, output_len=out,
                              static_batch=int(conc or 1))  # fmt: skip
        if case["kind"] in ("serve_tpot_ms", "decode_latency_ms"):
            return None if d.get("tpot_median_s") is None else d["tpot_median_s"] * 1e3
        raise KeyError(case["kind"])
    rate = case.get("request_rate", "inf")
    rate = float("inf") if rate in (None, "inf") else float(rate)
    capped = conc is not None and int(conc) < prompts
    # a ShareGPT case's input_len / output_len are its printed totals / requests: the
    # simulator's ShareGPT-like lengths rescaled to those means (the spread kept)
    sharegpt = case.get("dataset") == "sharegpt"
    d = serving_benchmark(spec, job, m, num_prompts=prompts, request_rate=rate,
                          max_concurrency=int(conc) if capped else None,
                          input_len=None if sharegpt else inp, output_len=None if sharegpt else out,
                          dataset="sharegpt" if sharegpt else "random",
                          means=(inp, out) if sharegpt else None, pool_tokens=pool)  # fmt: skip
    kind = case["kind"]
    if kind == "serve_output_tokens_per_s":
        return d.get("output_tokens_per_s")
    if kind in ("serve_tpot_ms", "decode_latency_ms"):
        return None if d.get("tpot_median_s") is None else d["tpot_median_s"] * 1e3
    if kind == "serve_itl_ms":
        return None if d.get("itl_median_s") is None else d["itl_median_s"] * 1e3
    if kind == "serve_ttft_ms":
        return None if d.get("ttft_median_s") is None else d["ttft_median_s"] * 1e3
    raise KeyError(kind)


def error_summary(errs: list[float]) -> dict:
    """Cases, median and max |error| of one figure kind, and whether they meet the target."""
    med, top = statistics.median(errs), max(errs)
    return {"cases": len(errs), "median_abs_error": med, "max_abs_error": top,
            "meets_target": med <= TARGET_MEDIAN and top <= TARGET_MAX}  # fmt: skip


def cells(r: dict) -> tuple[str, str]:
    """(predicted, error) as the tables print them."""
    p = "n/a" if r["predicted"] is None else f"{r['predicted']:,.1f}"
    return p, "" if r["error"] is None else f"{100 * r['error']:+.0f} %"


def run(path: Path = CASES) -> dict:
    cases = tomllib.loads(path.read_text(encoding="utf-8"))["cases"]
    rows = []
    for c in cases:
        try:
            pred = predict(c)
            why = None
        except Exception as exc:
            pred, why = None, f"{type(exc).__name__}: {exc}"
        meas = float(c["measured"])
        err = None if pred is None else (pred - meas) / meas
        rows.append({"id": c["id"], "kind": c["kind"], "gpu": c.get("gpu"), "model": c.get("model"),
                     "measured": meas, "predicted": pred, "error": err, "unit": c.get("unit"),
                     "engine": c.get("engine"), "source": c.get("source"), "problem": why,
                     "calibration": c.get("calibration")})  # fmt: skip
    kinds: dict[str, list[float]] = {}
    for r in rows:
        if r["error"] is not None and not r["calibration"]:
            kinds.setdefault(r["kind"], []).append(abs(r["error"]))
    summary = {k: error_summary(v) for k, v in sorted(kinds.items())}
    cal = [abs(r["error"]) for r in rows if r["error"] is not None and r["calibration"]]
    if cal:
        summary["calibration cases (not a test)"] = {
            "cases": len(cal), "median_abs_error": statistics.median(cal), "max_abs_error": max(cal),
            "meets_target": None}  # fmt: skip
    allv = [abs(r["error"]) for r in rows if r["error"] is not None and not r["calibration"]]
    summary["all"] = {"cases": len(allv), "median_abs_error": statistics.median(allv) if allv else None,
                      "max_abs_error": max(allv) if allv else None}  # fmt: skip
    return {"rows": rows, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--cases", type=Path, default=CASES)
    ap.add_argument(
        "--roofline",
        action="store_true",
        help="serving cases through the roofline model fit used before the simulator",
    )
    a = ap.parse_args(argv)
    global SIMULATE
    SIMULATE = not a.roofline
    res = run(a.cases)
    if a.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"{'case':58} {'kind':28} {'measured':>11} {'predicted':>11} {'error':>8}")
    for r in res["rows"]:
        p, e = cells(r)
        print(f"{r['id'][:58]:58} {r['kind'][:28]:28} {r['measured']:>11,.1f} {p:>11} {e:>8}"
              + (f"  (calibration: {r['calibration']})" if r["calibration"] else "")
              + (f"  ({r['problem']})" if r["problem"] else ""))  # fmt: skip
    print()
    print(
        f"{'kind':30} {'cases':>5} {'median |err|':>13} {'max |err|':>10}  target (median <= 15 %, max <= 30 %)"
    )
    for k, s in res["summary"].items():
        if s["median_abs_error"] is None:
            continue
        mark = "" if s.get("meets_target") is None else ("met" if s["meets_target"] else "NOT met")
        print(
            f"{k:30} {s['cases']:>5} {100 * s['median_abs_error']:>12.1f}% {100 * s['max_abs_error']:>9.1f}%  {mark}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
