"""nodeledger as a library: the answers the commands print, as Python objects.

    import nodeledger

    r = nodeledger.fit("llama-3.1-8b", job="serve", machine="dgx-h100", engine="vllm",
                       context=8192, concurrency="max")
    r.verdict["tier"], r.extras["max_concurrency"], r.speed["output_tokens_per_s"]

    cap = nodeledger.capacity_report(machine="k100-ai-8x64g")   # nodeledger report
    cap.tier, [w["tier_name"] for w in cap.report["workloads"]]

    box = nodeledger.probe()                                # this host's MachineProfile

Every figure is in bytes, seconds or its unit named in its key, as ``--json`` prints it
(``FitReport.to_json()`` is ``nodeledger fit --json``).  Bad input raises
``nodeledger.errors.NodeledgerError`` (its message is the command's one line); nothing prints.
"""

from __future__ import annotations

from typing import Any

from nodeledger.machine.profile import MachineProfile
from nodeledger.report.usecase import CapacityAnswer, CapacityRequest, assess_capacity
from nodeledger.verdict.assess import FitReport, FitRequest, assess_fit

__all__ = ["CapacityAnswer", "FitReport", "capacity_report", "fit", "probe"]


def fit(model: str, job: str = "serve", machine: str | None = None, *, search: bool = False,
        lifeboat: int | None = None, engine_log: str | None = None, online: bool = False,
        request_rate: float | None = None, num_prompts: int | None = None,
        dataset: str | None = None, slo_ttft_p99_s: float | None = None,
        slo_tpot_p99_s: float | None = None, **job_options: Any) -> FitReport:  # fmt: skip
    """``nodeledger fit MODEL --job JOB``: every byte of one job on each card and in host RAM,
    its verdict and its speed.  ``job_options`` are fit's options in snake_case (``tp=4``,
    ``engine="vllm"``, ``context=8192``, ``concurrency="max"`` ...); one that does not apply to
    the job raises.  ``machine`` None: the bundled reference machine."""
    return assess_fit(FitRequest(
        model=model, job=job, job_options=job_options, machine=machine, online=online,
        search=search, lifeboat=lifeboat, engine_log=engine_log, request_rate=request_rate,
        num_prompts=num_prompts, dataset=dataset, slo_ttft_p99_s=slo_ttft_p99_s,
        slo_tpot_p99_s=slo_tpot_p99_s,
    ))  # fmt: skip


def capacity_report(machine: str | None = None, workloads: str | None = None,
           lifeboat: int | None = None) -> CapacityAnswer:  # fmt: skip
    """``nodeledger report``: the workload catalogue judged on ``machine`` (None: probe this
    host, or the bundled reference machine when it has no accelerator).  (Not ``report``: that
    name is the ``nodeledger.report`` package.)"""
    return assess_capacity(CapacityRequest(machine=machine, workloads=workloads, lifeboat=lifeboat))


def probe() -> MachineProfile:
    """``nodeledger machine probe``: this host's profile (cards, host RAM, NUMA, links, NICs,
    disks), every figure with its source; a missing or failing vendor tool becomes a note."""
    from nodeledger.machine.probe import probe_machine

    return probe_machine()
