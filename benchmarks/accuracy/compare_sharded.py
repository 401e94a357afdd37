"""Predicted vs measured torch_peak_bytes of sharded and tensor-parallel training (issue 17).

The measurements (``sharded/measured_sharded.json``) are one rank of an 8-rank job run by
``sharded/harness_sharded.py`` inside FakeTensorMode over a fake process group
(torch.testing._internal.distributed.fake_pg): FSDP2 ``fully_shard`` per decoder layer + the
root, and DTensor tensor parallelism with and without sequence parallelism; the harness was
checked against a real 2-process gloo CPU run (``sharded/validate_sharded.py``, results in
``sharded/RESULTS.md``).  Nothing here imports torch.

    python benchmarks/accuracy/compare_sharded.py [--fixtures ../shared/fixtures/models]

Target (issue 17): median |error| <= 2 %, max <= 8 %.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from nodeledger.ledger.build import train_ledger
from nodeledger.ledger.jobs import Parallel, TrainJob
from nodeledger.machine import resolve_machine
from nodeledger.model import build_spec

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compare import DEFAULT_FIXTURES, load_config  # noqa: E402

GiB = 2**30


def job_for(case: dict) -> TrainJob:
    """The nodeledger job a sharded case ran: FSDP2 over the data-parallel ranks, or DTensor
    TP (framework fsdp2's tensor-parallel conventions: logits gathered for the loss, the
    sequence-parallel all-gathered inputs saved) when the case is tensor parallel."""
    tp = case.get("tp", 1)
    dp = case["world_size"] // tp
    lora = case.get("lora")
    return TrainJob(
        precision=case["precision"], optimizer=case["optimizer"],
        optimizer_impl=case["optimizer_impl"], micro_batch=case["micro_batch"], seq=case["seq"],
        checkpointing=case["checkpointing"], attention=case["attention"],
        shard="fsdp" if dp > 1 else "none", framework="fsdp2" if dp > 1 else "ddp",
        parallel=Parallel(tp=tp, dp=dp), sequence_parallel=bool(case.get("sp")),
        rank=lora["r"] if lora else None,
        **({"lora_targets": tuple(lora["target_modules"])} if lora else {}),
    )  # fmt: skip


def predicted_peak(case: dict, fixtures: Path, machine) -> int:
    """torch_peak_bytes without the cuBLAS workspaces (a CUDA allocation the fake CPU run does
    not make)."""
    spec = build_spec(load_config(case, fixtures), case["model"])
    card = train_ledger(spec, job_for(case), machine).cards[0]
    return card.torch_peak_bytes - sum(i.bytes for i in card.items if i.name.startswith("cuBLAS"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", type=Path, default=DEFAULT_FIXTURES)
    args = ap.parse_args(argv)
    if not args.fixtures.is_dir():
        print(f"fixtures not found at {args.fixtures}: nothing to compare")
        return 0
    cases = json.loads((HERE / "sharded" / "cases_sharded.json").read_text())
    measured = json.loads((HERE / "sharded" / "measured_sharded.json").read_text())
    machine = resolve_machine("hgx-h200")
    print(f"{'case':46s} {'measured GiB':>13s} {'nodeledger GiB':>15s} {'error':>8s}  peak phase")
    errors = []
    for case in cases:
        rec = measured.get(case["id"])
        if not rec or rec.get("error"):
            print(f"{case['id']:46s} {'(not measured)':>13s}")
            continue
        pred = predicted_peak(case, args.fixtures, machine)
        err = (pred - rec["peak_bytes"]) / rec["peak_bytes"]
        errors.append(abs(err))
        print(
            f"{case['id']:46s} {rec['peak_bytes'] / GiB:13.3f} {pred / GiB:15.3f} {err:+8.2%}  {rec['peak_phase']}"
        )
    med, mx = statistics.median(errors), max(errors)
    ok = med <= 0.02 and mx <= 0.08
    print()
    print("| estimator | cases | median abs error | max abs error |")
    print("|---|---|---|---|")
    print(f"| nodeledger | {len(errors)} | {med:.2%} | {mx:.2%} |")
    print()
    print(f"nodeledger target (median <= 2 %, max <= 8 %): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
