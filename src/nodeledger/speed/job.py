"""The speed section of one job (what ``fit`` prints and puts under ``speed`` in its JSON)."""

from __future__ import annotations

from nodeledger.ledger.engines import hybrid_sim_pool_tokens
from nodeledger.ledger.jobs import LoadJob, ServeJob, TrainJob
from nodeledger.machine.profile import MachineProfile
from nodeledger.model.spec import ModelSpec
from nodeledger.speed import work as W
from nodeledger.speed.load import load_speed
from nodeledger.speed.serve import serve_speed
from nodeledger.speed.train import train_speed

KEYS = ("ttft_s", "tpot_s", "output_tokens_per_s", "requests_per_s", "step_s",
        "tokens_per_s_per_card", "binding")  # fmt: skip


def job_speed(spec: ModelSpec, job, machine: MachineProfile, extras: dict | None = None,
              machines: int = 1, bench=None) -> dict:  # fmt: skip
    """``extras``: the ledger's extras (its ``largest`` entry caps serving concurrency, its
    ``kv_pool_tokens`` is the engine's pool the simulator schedules in, ``sim_pool_tokens`` its
    attention blocks for a hybrid whose state pages are set aside); ``bench``: a
    speed.serving.BenchOptions for a serving job.  Every key of KEYS is present (None where it
    does not apply to the job or is unknown)."""
    d = _speed(spec, job, machine, extras or {}, machines, bench)
    for k in KEYS:
        d.setdefault(k, None)
    return d


def _speed(spec: ModelSpec, job, machine: MachineProfile, extras: dict, machines: int,
           bench=None) -> dict:  # fmt: skip
    if isinstance(job, ServeJob):
        inp, out = job.lengths()
        largest = extras.get("largest") or {}
        most = largest.get("max_concurrency_at_context")  # vLLM: already capped at max_num_seqs
        pool = extras.get("sim_pool_tokens", extras.get("kv_pool_tokens"))
        e = extras.get("engine") or {}
        if e.get("kv_state_groups") and extras.get("kv_blocks") is not None:
            # a hybrid: the state pages of the sequences that run at this job's lengths
            pool = hybrid_sim_pool_tokens(extras["kv_blocks"], e["kv_attn_groups"],
                                          e["kv_state_groups"], e["block_size"],
                                          (inp or 0) + (out or 0), e["max_num_seqs"],
                                          e.get("kv_state_blocks_per_sequence", 1))  # fmt: skip
        d = serve_speed(spec, job, machine, inp, out, job.concurrency, most or None, machines,
                        pool_tokens=pool, bench=bench)  # fmt: skip
        d["kind"] = "serve"
        return d
    if isinstance(job, TrainJob):
        d = train_speed(spec, job, machine, machines)
        d["kind"] = "train"
        return d
    if isinstance(job, LoadJob):
        ck = W.decode_weight_bytes(spec, job.dtype, 1)["checkpoint_bytes"]
        d = load_speed(ck, machine, job.ranks)
        d["kind"] = "load"
        return d
    raise TypeError(type(job))
