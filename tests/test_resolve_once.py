"""A serve job is resolved once (ResolvedServeJob): again for the same options and machine it
comes back as it is; a copy with another option, or the job on another machine, is resolved
afresh from the job as given -- the first resolution's defaults are not carried over."""

from __future__ import annotations

import dataclasses

from conftest import cli_json
from nodeledger.ledger.build import resolve_job
from nodeledger.ledger.jobs import Parallel, ServeJob
from nodeledger.machine.io import load_preset
from nodeledger.model import load_model


def test_resolving_again_is_the_same_job_and_a_changed_one_is_resolved_afresh():
    spec, _ = load_model("qwen3-8b")
    h100, rtx = load_preset("dgx-h100"), load_preset("8x-rtx4090")
    job, settings = resolve_job(ServeJob(engine="sglang"), h100, spec)
    again, same = resolve_job(job, h100, spec)
    assert again is job and same is settings
    tp4 = resolve_job(dataclasses.replace(job, parallel=Parallel(tp=4)), h100, spec)[0]
    fresh = resolve_job(ServeJob(engine="sglang", parallel=Parallel(tp=4)), h100, spec)[0]
    assert tp4.mem_fraction_static == fresh.mem_fraction_static != job.mem_fraction_static
    vllm = resolve_job(ServeJob(engine="vllm"), h100, spec)[0]
    moved = resolve_job(vllm, rtx, spec)[0]
    on_rtx = resolve_job(ServeJob(engine="vllm"), rtx, spec)[0]
    assert (moved.max_num_batched_tokens, moved.max_num_seqs) == (
        on_rtx.max_num_batched_tokens, on_rtx.max_num_seqs) != (
        vllm.max_num_batched_tokens, vllm.max_num_seqs)  # fmt: skip
    # what the user gave stays given
    mine = resolve_job(ServeJob(engine="vllm", max_num_seqs=7), h100, spec)[0]
    assert resolve_job(mine, rtx, spec)[0].max_num_seqs == 7


def test_concurrency_max_keeps_the_sources_of_the_engine_defaults():
    d = cli_json("fit", "qwen3-8b", "--job", "serve", "--engine", "vllm", "--concurrency", "max",
                 "--machine", "dgx-h100", "--no-fail")  # fmt: skip
    src = d["extras"]["engine"]["settings"]["sources"]
    assert src["engine_version"] == "nodeledger's default release"
    assert "gpu_memory_utilization" in src and "max_num_seqs" in src
