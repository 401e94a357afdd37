"""A serving benchmark as the engines' own clients run it (vLLM ``benchmark_serving`` / ``vllm
bench serve``, SGLang ``bench_serving``): requests arrive (all at once, Poisson at a rate, or
under a client concurrency cap), the engine schedules them as its release does (the simulator,
speed/simulate.py, with the engine plug-in's policy, speed/engines.py), and every step takes
what the operator model says (speed/operators.py: the kernel table of the card) plus the tensor-
parallel all-reduces and the engine's host time per step.  The KV pool and max_num_seqs are the
ledger's, so the simulator never runs more sequences than the card holds.

Outputs as the clients print them: requests/s, output tokens/s, TTFT / TPOT / ITL / end-to-end
latency (mean, median, p99), the batch over time."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from nodeledger.ledger.jobs import ServeJob
from nodeledger.model.spec import ModelSpec
from nodeledger.speed import operators as O
from nodeledger.speed import simulate as S
from nodeledger.speed import terms as T
from nodeledger.speed import work as W
from nodeledger.speed.engines import EngineSpeed


@dataclass(frozen=True, eq=False)
class StepModel:
    """Everything one step's time needs, fixed for a replica: the model, the card's kernels,
    the engine's plug-in and the TP figures.  ``seconds`` is the simulator's StepCost."""

    spec: ModelSpec
    ck: O.CardKernels
    engine: EngineSpeed
    tp: int
    pp: int
    kv_dtype: str
    dtype: str
    busbw_gbps: float | None  # TP all-reduce bus bandwidth (None at tp 1)
    link_latency_s: float
    mean_input: float  # mean prompt length: how many prompts a step's prefill tokens hold
    cache: dict = field(default_factory=dict, repr=False)  # (prefill, decode, kv bucket) -> s

    @property
    def plan(self) -> O.OpPlan:
        return O.plan_for(self.spec, self.ck, self.tp, self.dtype, self.kv_dtype)

    def allreduce_s(self, tokens: float) -> float:
        if self.tp <= 1 or not self.busbw_gbps or tokens <= 0:
            return 0.0
        one = T.collective_seconds("all_reduce", W.tp_allreduce_bytes(self.spec, tokens), self.tp,
                                   self.busbw_gbps, self.link_latency_s, "ring")  # fmt: skip
        return 2 * self.spec.num_layers * one

    def seconds(self, prefill_tokens: int, decode_seqs: int, kv_tokens_read: int) -> float:
        """The simulator's StepCost: a step's seconds, cached per (prefill tokens, decoding
        sequences, context bucket) for the replica (bounded: cleared past 200,000 entries)."""
        key = (int(prefill_tokens), int(decode_seqs), _bucket(kv_tokens_read))
        t = self.cache.get(key)
        if t is None:
            if len(self.cache) > 200_000:
                self.cache.clear()
            t = self.cache[key] = self.parts(key[0], key[1], key[2])["seconds"]
        return t

    def parts(self, prefill_tokens: int, decode_seqs: int, kv_tokens_read: float) -> dict:
        """The step's operator times, the all-reduces and the host time, each in seconds."""
        eng = self.engine
        pre_seqs = 0.0
        if prefill_tokens:
            pre_seqs = max(1.0, prefill_tokens / max(1.0, self.mean_input))
        decode_ctx = kv_tokens_read / decode_seqs if decode_seqs else 0.0
        # a step runs from a captured graph when the engine captures and the step's tokens fit
        # the captured sizes (vLLM V1 captures mixed batches too, piecewise; SGLang and vLLM V0
        # decode batches only); otherwise every kernel is dispatched by the host
        tokens = prefill_tokens + decode_seqs
        captured = eng.graphs and eng.max_graph_batch is not None
        graphs = (
            captured
            and tokens <= eng.max_graph_batch
            and (not prefill_tokens or eng.piecewise_prefill)
        )
        op = self.plan.step(prefill_tokens=prefill_tokens, prefill_seqs=pre_seqs,
                            decode_seqs=decode_seqs, decode_ctx=decode_ctx, graphs=graphs,
                            calls_per_layer=eng.calls_per_layer,
                            expert_loop=eng.name == "hf")  # fmt: skip
        # piecewise graphs leave attention outside: one dispatched call per attention layer
        dispatch = 0.0
        if graphs and eng.piecewise:
            dispatch = self.plan.n_attn * self.ck.table.dispatch_s
        tp_s = self.allreduce_s(prefill_tokens + decode_seqs)
        host = eng.host_s(decode_seqs + pre_seqs)
        total = (op["seconds"] + dispatch + tp_s) * max(1, self.pp) + host
        return {"seconds": total, "operators_s": op["seconds"], "gpu_s": op["gpu_s"],
                "parts": op["parts"], "attention_dispatch_s": dispatch, "tp_s": tp_s,
                "host_s": host, "host_bound": op["host_bound"], "graphs": graphs}  # fmt: skip


def _bucket(kv: float) -> int:
    """Context totals within ~1 % share a cached step (the time is smooth in them)."""
    if kv <= 64:
        return int(kv)
    step = max(1, int(kv) >> 7)
    return int(kv) // step * step


ENGINE_OPTIONS = {
    # the launch flags that change how a step runs, as the engines name them
    "graphs": "False with vLLM --enforce-eager / SGLang --disable-cuda-graph: every kernel dispatched",
    "async_scheduling": "True with vLLM --async-scheduling (0.10+): the host prepares the next step during this one",
    "max_graph_batch": "SGLang --cuda-graph-max-bs / vLLM max capture size",
}  # fmt: skip


def with_options(engine: EngineSpeed, options: dict) -> EngineSpeed:
    """The engine plug-in with the job's launch flags applied (ENGINE_OPTIONS)."""
    upd: dict = {}
    for k, v in options.items():
        if k not in ENGINE_OPTIONS:
            raise ValueError(f"engine option {k!r} is not one of {', '.join(ENGINE_OPTIONS)}")
        if k == "graphs":
            upd["graphs"] = bool(v)
        elif k == "async_scheduling" and v:
            upd.update(host_per_seq_s=0.0, host_source=engine.host_source + "; --async-scheduling: "
                       "the gap between steps 150-170 us (vllm PR #11133)")  # fmt: skip
        elif k == "max_graph_batch":
            upd["max_graph_batch"] = int(v)
    return dataclasses.replace(engine, **upd)


def scheduler_for(job: ServeJob, engine: EngineSpeed, pool_tokens: int | None,
                  static_batch: int = 1) -> S.Scheduler:  # fmt: skip
    """The simulator's scheduler from the engine plug-in and the job's resolved settings."""
    policy = {"vllm-v0": "sglang"}.get(engine.policy, engine.policy)  # V0: prefills run alone
    seqs = job.max_num_seqs
    if seqs is None and engine.name == "sglang":
        # max_running_requests unset: min(KV tokens // 2, req pool), the pool clamped to
        # [2048, 4096] (srt/managers/tp_worker.py; model_runner.py, 0.3.6-0.5.23)
        seqs = min((pool_tokens or 8192) // 2, 4096)
    return S.Scheduler(
        policy=policy,
        max_num_seqs=int(seqs or (static_batch if policy == "static" else 256)),
        max_num_batched_tokens=int(job.max_num_batched_tokens or 8192),
        kv_pool_tokens=pool_tokens,
        block_size=int(job.block_size or 16) if engine.name == "vllm" else 1,
        static_batch=max(1, static_batch),
    )


def run_benchmark(model: StepModel, sched: S.Scheduler, reqs: S.Requests) -> dict:
    """Simulate ``reqs`` and report as the serving clients do (seconds; tokens/s)."""
    res = S.simulate(sched, reqs, model.seconds)
    return {
        "duration_s": res.duration_s,
        "completed": res.completed,
        "requests_per_s": res.requests_per_s,
        "output_tokens_per_s": res.output_tokens_per_s,
        "total_tokens_per_s": res.total_tokens_per_s,
        "ttft_s": res.ttft_s,
        "tpot_s": res.tpot_s,
        "itl_s": res.itl_s,
        "e2e_s": res.e2e_s,
        "batch": res.batch,
        "preemptions": res.preemptions,
        "steps": res.steps,
        "notes": list(res.notes),
    }


def step_model_for(spec: ModelSpec, job: ServeJob, machine, mean_input: float,
                   machines: int = 1) -> tuple[StepModel | None, list[str]]:  # fmt: skip
    """The replica's StepModel, or None with what is unknown (no kernel table for the card and
    no datasheet to move one to it)."""
    from nodeledger.speed import figures as F
    from nodeledger.speed.engines import engine_speed
    from nodeledger.speed.serve import inputs

    tp, pp = job.parallel.tp, job.parallel.pp
    cards = [a.index for a in machine.accelerators][: tp * pp]
    if not cards:
        return None, ["no card in the machine profile"]
    fig = inputs(machine, cards, fp8=job.dtype == "fp8", tp=tp, machines=machines)
    product = machine.accelerators[cards[0]].product
    peak, hbm = F.card_peak(machine, cards), F.card_hbm(machine, cards)
    ck = O.card_kernels(product, peak.value, hbm.value)
    if ck is None:
        return None, [f"card kernels: no kernel table for {product} and its datasheet figures "
                      f"are unknown ({peak.source}; {hbm.source}): `nodeledger bench --kernels` "
                      "measures them"]  # fmt: skip
    unknown = []
    busbw = fig["tp_busbw_gbps"]
    if tp > 1 and (busbw is None or busbw.value is None):
        unknown.append(f"tp_busbw_gbps: {busbw.source if busbw else 'unknown'}")
    alpha = fig["tp_latency_s"]
    model = StepModel(
        spec=spec, ck=ck, engine=engine_speed(job.engine, job.engine_version), tp=tp, pp=pp,
        kv_dtype=job.kv_dtype, dtype=job.dtype or "bf16",
        busbw_gbps=None if busbw is None else busbw.value,
        link_latency_s=0.0 if alpha is None or alpha.value is None else alpha.value,
        mean_input=mean_input,
    )  # fmt: skip
    return model, unknown


def serving_benchmark(spec: ModelSpec, job: ServeJob, machine, *, num_prompts: int,
                      request_rate: float, max_concurrency: int | None, input_len: int | None,
                      output_len: int | None, dataset: str = "random", range_ratio: float = 0.0,
                      pool_tokens: int | None = None, static_batch: int | None = None,
                      seed: int = 0, machines: int = 1,
                      engine_options: dict | None = None) -> dict:  # fmt: skip
    """One benchmark run as the engines' clients make it: ``num_prompts`` requests at
    ``request_rate`` (inf: all at once) under an optional client cap; figures in seconds and
    tokens/s (None where unknown, with the reason in ``unknown``)."""
    from nodeledger.ledger.build import resolve_job

    job, _ = resolve_job(job, machine, spec)
    reqs = S.make_requests(num_prompts, request_rate, input_len, output_len, dataset=dataset,
                           range_ratio=range_ratio, max_concurrency=max_concurrency, seed=seed)  # fmt: skip
    mean_in = sum(reqs.input_lens) / max(1, len(reqs.input_lens))
    model, unknown = step_model_for(spec, job, machine, mean_in, machines)
    if model is not None and engine_options:
        model = dataclasses.replace(model, engine=with_options(model.engine, engine_options),
                                    cache={})  # fmt: skip
    out: dict = {"num_prompts": num_prompts, "request_rate": request_rate,
                 "max_concurrency": max_concurrency, "dataset": dataset, "unknown": unknown}  # fmt: skip
    if model is None:
        out.update(output_tokens_per_s=None, ttft_median_s=None, tpot_median_s=None,
                   itl_median_s=None)  # fmt: skip
        return out
    batch = static_batch or max_concurrency or job.concurrency or 1
    sched = scheduler_for(job, model.engine, pool_tokens, static_batch=batch)
    res = run_benchmark(model, sched, reqs)
    out.update(res)
    out.update(
        ttft_median_s=res["ttft_s"].get("median"), tpot_median_s=res["tpot_s"].get("median"),
        itl_median_s=res["itl_s"].get("median"), e2e_median_s=res["e2e_s"].get("median"),
        engine=f"{model.engine.name} {model.engine.release}", kernels=model.ck.source,
        scheduler={"policy": sched.policy, "max_num_seqs": sched.max_num_seqs,
                   "max_num_batched_tokens": sched.max_num_batched_tokens,
                   "kv_pool_tokens": sched.kv_pool_tokens},
    )  # fmt: skip
    return out
