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
import math
from dataclasses import dataclass, field

from nodeledger.ledger.engines import state_layers
from nodeledger.ledger.jobs import ServeJob
from nodeledger.model.spec import ModelSpec
from nodeledger.speed import figures as F
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
    dtype: str | None  # the weight scheme asked; None: the config's own
    busbw_gbps: float | None  # TP all-reduce bus bandwidth (None at tp 1)
    link_latency_s: float
    mean_input: float  # mean prompt length: how many prompts a step's prefill tokens hold
    dp_attn: int = 1  # SGLang DP attention: attention data-parallel over this many TP ranks
    cache: dict = field(default_factory=dict, repr=False)  # (prefill, decode, kv bucket) -> s

    @property
    def plan(self) -> O.OpPlan:
        return O.plan_for(self.spec, self.ck, self.tp, self.dtype, self.kv_dtype, self.dp_attn,
                          self.engine.moe_block_fp8_stream, self.engine.block_fp8_gemm)  # fmt: skip

    def allreduce_s(self, tokens: float) -> float:
        if self.tp <= 1 or not self.busbw_gbps or tokens <= 0:
            return 0.0
        one = T.collective_seconds("all_reduce", W.tp_allreduce_bytes(self.spec, tokens), self.tp,
                                   self.busbw_gbps, self.link_latency_s, "ring")  # fmt: skip
        # DP attention: no all-reduce after the attention (o_proj is whole on each rank); the
        # hidden states are gathered before the MLP and scattered after it, the bytes of one
        return (1 if self.dp_attn > 1 else 2) * self.spec.num_layers * one

    def seconds(self, prefill_tokens: int, decode_seqs: int, kv_tokens_read: int) -> float:
        """The simulator's StepCost: a step's seconds, cached per (prefill tokens, decoding
        sequences, context bucket) for the replica (bounded: cleared past 200,000 entries)."""
        key = (int(prefill_tokens), int(decode_seqs), O.round_128th(kv_tokens_read))
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
        pp = max(1, self.pp)
        if pp > 1:
            # pipeline parallel (vLLM's virtual engines / V1's pp batches in flight): the running
            # sequences go through the stages as pp groups, one group per stage at a time, so
            # every stage card works on one group while the others work on the rest; a round in
            # which each sequence advances one token lasts one group's pass through all the
            # layers (the op model's whole-model time on one card of the stage's TP group).  A
            # lone prompt is not split: it passes the stages one after another
            decode_seqs = math.ceil(decode_seqs / pp) if decode_seqs else 0
            if prefill_tokens:
                split = min(float(pp), max(1.0, pre_seqs))
                prefill_tokens = math.ceil(prefill_tokens / split)
                pre_seqs = pre_seqs / split
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
                            calls_per_layer=eng.calls_per_layer + (
                                O.ENGINE_EAGER_TP_CALLS if self.tp > 1 and not eng.expert_loop else 0),
                            expert_loop=eng.expert_loop)  # fmt: skip
        # piecewise graphs leave attention outside: one dispatched call per attention layer
        dispatch = 0.0
        if graphs and eng.piecewise:
            dispatch = self.plan.n_attn * self.ck.table.dispatch_s
        tp_s = self.allreduce_s(tokens)
        host = eng.host_s(decode_seqs + pre_seqs)
        total = op["seconds"] + dispatch + tp_s + host
        return {"seconds": total, "operators_s": op["seconds"], "gpu_s": op["gpu_s"],
                "parts": op["parts"], "attention_dispatch_s": dispatch, "tp_s": tp_s,
                "host_s": host, "host_bound": op["host_bound"], "graphs": graphs}  # fmt: skip


ENGINE_OPTIONS = {
    # the launch flags that change how a step runs, as the engines name them
    "graphs": "False with vLLM --enforce-eager / SGLang --disable-cuda-graph: every kernel dispatched",
    "async_scheduling": "True with vLLM --async-scheduling (0.10+): the host prepares the next step during this one",
    "max_graph_batch": "SGLang --cuda-graph-max-bs / vLLM max capture size",
    "multi_step": "vLLM 0.6-0.7 --num-scheduler-steps N: N decode steps per scheduling decision",
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
        elif k == "multi_step":
            upd["multi_step"] = max(1, int(v))
    return dataclasses.replace(engine, **upd)


def scheduler_for(job: ServeJob, engine: EngineSpeed, pool_tokens: int | None,
                  static_batch: int = 1, hybrid: bool = False) -> S.Scheduler:  # fmt: skip
    """The simulator's scheduler from the engine plug-in and the job's resolved settings;
    ``hybrid``: a model with Mamba-style state layers, for which vLLM turns prefix caching off
    (so a preempted request is recomputed)."""
    policy = engine.policy
    if policy == "vllm-v0":
        # V0 runs a prompt alone in its step unless chunked prefill is on (by default above
        # 32,768 tokens of context on CUDA: ledger/engines.py v0_max_num_batched_tokens), then
        # chunks mix with the decodes under the token budget as V1 does
        budget, ctx = job.max_num_batched_tokens, job.context
        policy = "vllm" if budget and ctx and budget < ctx else "sglang"
    seqs = job.max_num_seqs
    if seqs is None and engine.seqs_rule == "half_pool":
        # SGLang's max_running_requests unset: min(KV tokens // 2, req pool), the pool clamped
        # to [2048, 4096] (srt/managers/tp_worker.py; model_runner.py, 0.3.6-0.5.23)
        seqs = min((pool_tokens or 8192) // 2, 4096)
    budget = int(job.max_num_batched_tokens or 8192)
    dp_kw: dict = {}
    if job.dp_attention and engine.policy == "sglang":
        # SGLang with DP attention: a prompt is prefilled on one rank, at most that rank's
        # budget a step ("half": chunked_prefill_size // 2 on each of the tp ranks; "per_dp":
        # chunked_prefill_size // dp_size, dp_size = tp here), and the admission reserve is
        # scaled by schedule_conservativeness x 0.3: new_token_ratio 0.7 x 0.3, its floor 0.14
        # of that (engines.toml dp_attention_source; scheduler.py init_new_token_ratio /
        # min_new_token_ratio, global_config 0.7 / 0.14)
        dp = max(1, job.parallel.tp)
        rank = max(1, budget // 2) if engine.dp_attention_chunk == "half" else max(1, budget // dp)
        budget = rank * dp if engine.dp_attention_chunk == "half" else budget
        dp_kw = {"prompt_chunk": rank, "new_token_ratio": 0.7 * 0.3,
                 "min_new_token_ratio": 0.7 * 0.3 * 0.14}  # fmt: skip
    return S.Scheduler(
        policy=policy,
        max_num_seqs=int(seqs or (static_batch if policy == "static" else 256)),
        max_num_batched_tokens=budget,
        kv_pool_tokens=pool_tokens,
        block_size=int(job.block_size or 16) if engine.paged_blocks else 1,
        static_batch=max(1, static_batch),
        resume_cached=engine.prefix_cache and policy == "vllm" and not hybrid,
        **dp_kw,
    )


def run_benchmark(model: StepModel, sched: S.Scheduler, reqs: S.Requests) -> dict:
    """Simulate ``reqs`` and report as the serving clients do (seconds; tokens/s)."""
    res = S.simulate(sched, reqs, model.seconds)
    itl, ttft, notes = res.itl_s, res.ttft_s, list(res.notes)
    n = model.engine.multi_step
    if n > 1 and res.steps:
        # vLLM 0.6's multi-step scheduling (--num-scheduler-steps N) runs N decode steps per
        # scheduling decision and streams their N tokens together: a client sees one gap of N
        # steps, then N - 1 of none, and a new request waits for the running group to end
        # (half of it on average) before its prefill.  The simulator schedules step by step;
        # the streaming and the wait are applied to its figures here.
        step = res.tpot_s.get("median") or 0.0
        itl = {k: v * n for k, v in res.itl_s.items()}
        ttft = {k: v + (n - 1) / 2 * step for k, v in res.ttft_s.items()}
        notes.append(f"multi-step scheduling ({n} steps): tokens stream {n} at a time; ITL per "
                     f"chunk, TTFT + half a group ({(n - 1) / 2 * step * 1e3:.1f} ms)")  # fmt: skip
    over = model.engine.request_overhead_s
    if over:
        # the API server's share of every request (engines.toml server_overhead): it delays the
        # first token and the end, not the steps
        ttft = {k: v + over for k, v in ttft.items()}
        e2e = {k: v + over for k, v in res.e2e_s.items()}
        notes.append(f"TTFT and end-to-end + {over * 1e3:.1f} ms of API server per request "
                     f"({model.engine.request_overhead_source})")  # fmt: skip
    else:
        e2e = res.e2e_s
    return {
        "duration_s": res.duration_s,
        "completed": res.completed,
        "requests_per_s": res.requests_per_s,
        "output_tokens_per_s": res.output_tokens_per_s,
        "total_tokens_per_s": res.total_tokens_per_s,
        "ttft_s": ttft,
        "tpot_s": res.tpot_s,
        "itl_s": itl,
        "e2e_s": e2e,
        "batch": res.batch,
        "preemptions": res.preemptions,
        "steps": res.steps,
        "notes": notes,
    }


def step_model_for(spec: ModelSpec, job: ServeJob, machine, mean_input: float,
                   machines: int = 1, fig: dict | None = None) -> tuple[StepModel | None, list[str]]:  # fmt: skip
    """The replica's StepModel, or None with what is unknown (no kernel table for the card and
    no datasheet to move one to it).  ``fig``: the replica's figures
    (speed/figures.py serve_inputs) where the caller has them already."""
    from nodeledger.speed.engines import engine_speed

    tp, pp = job.parallel.tp, job.parallel.pp
    cards = [a.index for a in machine.accelerators][: tp * pp]
    if not cards:
        return None, ["no card in the machine profile"]
    if fig is None:
        fig = F.serve_inputs(
            machine, cards, fp8=W.scheme(spec, job.dtype).name == "fp8", tp=tp, machines=machines
        )
    product = machine.accelerators[0].product  # the replica's first card (its kind)
    peak, hbm = fig["card_bf16_tflops"], fig["card_memory_gbps"]
    ck = O.card_kernels(product, peak.value, hbm.value, machine.kernels.get(product))
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
        kv_dtype=job.kv_dtype, dtype=job.dtype,
        busbw_gbps=None if busbw is None else busbw.value,
        link_latency_s=0.0 if alpha is None or alpha.value is None else alpha.value,
        mean_input=mean_input, dp_attn=tp if job.dp_attention else 1,
    )  # fmt: skip
    return model, unknown


def serving_benchmark(spec: ModelSpec, job: ServeJob, machine, *, num_prompts: int,
                      request_rate: float, max_concurrency: int | None, input_len: int | None,
                      output_len: int | None, dataset: str = "random", range_ratio: float = 0.0,
                      pool_tokens: int | None = None, static_batch: int | None = None,
                      seed: int = 0, machines: int = 1,
                      engine_options: dict | None = None,
                      means: tuple[float, float] | None = None) -> dict:  # fmt: skip
    """One benchmark run as the engines' clients make it: ``num_prompts`` requests at
    ``request_rate`` (inf: all at once) under an optional client cap; figures in seconds and
    tokens/s (None where unknown, with the reason in ``unknown``).  ``means``: the drawn
    lengths rescaled to these means (simulate.make_requests)."""
    from nodeledger.ledger.build import resolve_job

    job, _ = resolve_job(job, machine, spec)
    reqs = S.make_requests(num_prompts, request_rate, input_len, output_len, dataset=dataset,
                           range_ratio=range_ratio, max_concurrency=max_concurrency, seed=seed,
                           means=means)  # fmt: skip
    mean_in = sum(reqs.input_lens) / max(1, len(reqs.input_lens))
    model, unknown = step_model_for(spec, job, machine, mean_in, machines)
    if model is not None and engine_options:
        model = dataclasses.replace(model, engine=with_options(model.engine, engine_options),
                                    cache={})  # fmt: skip
    out: dict = {"num_prompts": num_prompts, "request_rate": request_rate,
                 "max_concurrency": max_concurrency, "dataset": dataset, "unknown": unknown}  # fmt: skip
    if model is not None and pool_tokens is not None and pool_tokens < (job.block_size or 16):
        model, unknown = None, [f"the KV pool holds {max(pool_tokens, 0):,} tokens: no sequence"]
        out["unknown"] = unknown
    if model is None:
        out.update(output_tokens_per_s=None, ttft_median_s=None, tpot_median_s=None,
                   itl_median_s=None)  # fmt: skip
        return out
    batch = static_batch or max_concurrency or job.concurrency or 1
    sched = scheduler_for(job, model.engine, pool_tokens, static_batch=batch,
                          hybrid=bool(state_layers(spec)))  # fmt: skip
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


@dataclass(frozen=True)
class BenchOptions:
    """How the serving figures are measured, named as the engines' benchmark clients name them
    (``vllm bench serve`` / ``sglang.bench_serving``)."""

    request_rate: float = float("inf")  # requests/s, Poisson; inf = all at once
    num_prompts: int | None = None  # None: 8 x the concurrency, at least 64, at most 1,000
    dataset: str = "random"  # "random" (the job's lengths) | "sharegpt"
    slo_ttft_p99_s: float | None = None
    slo_tpot_p99_s: float | None = None
    seed: int = 0
    # at a finite rate, the client's cap only when the job's concurrency was given (a rate alone
    # sends every request as it arrives, as vllm bench serve does without --max-concurrency)
    capped_at_rate: bool = False


def _engine_terms(model: StepModel, job: ServeJob) -> list[str]:
    """The engine plug-in's step terms the figures rest on: the host calls of a step that runs
    eager, and SGLang DP attention's prefill budget."""
    eng, out = model.engine, []
    if not eng.expert_loop:
        tp = O.ENGINE_EAGER_TP_CALLS if model.tp > 1 else 0
        if not eng.graphs or eng.max_graph_batch is None:
            when = "every step (no graphs)"
        elif eng.piecewise_prefill:
            when = f"steps of more than {eng.max_graph_batch} tokens"
        else:
            when = f"prefill steps and decode above {eng.max_graph_batch} sequences"
        out.append(f"eager steps ({when}) dispatch {eng.calls_per_layer + tp} host calls a layer "
                   "beside its GEMMs and attention at the kernel table's dispatch (counted in "
                   "vLLM's and SGLang's llama.py; an eager Qwen3-4B prefill at 0.46 ms a layer, "
                   "wejoncy/sfllm PR 46)")  # fmt: skip
    if job.dp_attention and eng.dp_attention_source:
        out.append(f"DP attention prefill budget: {eng.dp_attention_source}")
    return out


def _binding(model: StepModel, seqs: int, ctx: float) -> str:
    """What a decode step of ``seqs`` sequences at context ``ctx`` waits on most."""
    p = model.parts(0, seqs, seqs * ctx)
    weights = sum(g.n * g.k * g.layers for g in model.plan.dense) * 2
    stream = weights / ((model.ck.table.stream_gbps or 1e3) * 1e9) * model.ck.ratio_memory
    mm = p["parts"]["gemm"] + p["parts"]["experts"] + p["parts"]["lm_head"]
    terms = {
        "memory bandwidth": p["parts"]["attention"] + p["parts"]["elementwise"]
        + (mm if mm < 1.3 * stream else 0.0),
        "compute": mm if mm >= 1.3 * stream else 0.0,
        "card links": p["tp_s"],
        "host": p["host_s"] + p["attention_dispatch_s"] + p["parts"]["dispatch"],
    }  # fmt: skip
    return max(terms, key=terms.get)


def _rounds(conc: int) -> int:
    """Requests for clients keeping ``conc`` in flight: 4 rounds of them, 32 to 4,000 (long
    enough for the batch to settle; one round is a burst, where the ramp dominates)."""
    return max(32, min(4000, 4 * conc))


def simulated_speed(spec: ModelSpec, job: ServeJob, machine, input_len: int, output_len: int,
                    concurrency: int | None, max_concurrency: int | None,
                    pool_tokens: int | None, opts: BenchOptions | None = None,
                    machines: int = 1, fig: dict | None = None) -> dict | None:  # fmt: skip
    # long: one replica's runs: a prompt alone, the job's concurrency, the most that fit, the bench
    """The speed section of a serving replica from the simulator and the operator model, or
    None when no kernel table reaches the card (the caller keeps its roofline, unknowns said).
    Figures as fit prints them: ttft_s (one prompt alone), tpot_s / output_tokens_per_s /
    requests_per_s at the job's concurrency (clients keeping that many requests in flight), the
    same at the most that fit, and ``simulation``: the benchmark the options describe."""
    from nodeledger.ledger.build import resolve_job

    opts = opts or BenchOptions()
    job, _ = resolve_job(job, machine, spec)
    model, unknown = step_model_for(spec, job, machine, float(input_len), machines, fig)
    if model is None or (pool_tokens is not None and pool_tokens < (job.block_size or 16)):
        return None  # no kernel table reaches the card, or no sequence fits: the roofline says
    static = model.engine.policy == "static"
    sched = scheduler_for(job, model.engine, pool_tokens, static_batch=concurrency or 1,
                          hybrid=bool(state_layers(spec)))  # fmt: skip

    done: dict = {}  # one simulation per (prompts, rate, cap, dataset): deterministic

    def bench(prompts: int, rate: float, cap: int | None, dataset: str = "random") -> dict:
        key = (prompts, rate, cap, dataset)
        if key not in done:
            s = sched if not static else dataclasses.replace(sched, static_batch=cap or 1,
                                                               max_num_seqs=cap or 1)  # fmt: skip
            sharegpt = dataset == "sharegpt"
            reqs = S.make_requests(prompts, rate, None if sharegpt else input_len,
                                   None if sharegpt else output_len, dataset=dataset,
                                   max_concurrency=cap, seed=opts.seed)  # fmt: skip
            done[key] = run_benchmark(model, s, reqs)
        return done[key]

    one = bench(1, float("inf"), 1)
    out: dict = {
        "ttft_s": one["ttft_s"].get("median"),
        "tpot_batch1_s": one["tpot_s"].get("median") or one["itl_s"].get("median"),
        "engine": f"{model.engine.name} {model.engine.release}",
        "engine_source": {"host": model.engine.host_source, "graphs": model.engine.graph_source},
        "kernels": model.ck.source,
        "step_terms": model.plan.assumptions() + ([
            f"TTFT + {model.engine.request_overhead_s * 1e3:.1f} ms of API server per request "
            f"({model.engine.request_overhead_source})"] if model.engine.request_overhead_s else [])
        + _engine_terms(model, job),
        "unknown": unknown,
        "source": "nodeledger.speed.serving: the engine's scheduler simulated (speed/simulate.py) "
        "over operator-level step times from the card's kernel table (speed/operators.py) + "
        "tensor-parallel all-reduces + the engine's host time per step (speed/engines.toml)",
    }  # fmt: skip

    def at(conc: int) -> dict:
        r = bench(_rounds(conc), float("inf"), conc)
        return {"concurrency": conc, "tpot_s": r["tpot_s"].get("median"),
                "output_tokens_per_s": r["output_tokens_per_s"],
                "requests_per_s": r["requests_per_s"], "batch_mean": r["batch"]["mean"],
                "binding": _binding(model, max(1, round(r["batch"]["mean"])),
                                    input_len + output_len / 2)}  # fmt: skip

    conc = concurrency if concurrency is not None else max_concurrency
    if conc:
        a = at(conc)
        out.update(tpot_s=a["tpot_s"], output_tokens_per_s=a["output_tokens_per_s"],
                   requests_per_s=a["requests_per_s"], binding=a["binding"])  # fmt: skip
    else:
        out.update(tpot_s=None, output_tokens_per_s=None, requests_per_s=None, binding=None)
    if max_concurrency:
        out["at_most_that_fit"] = at(max_concurrency) if max_concurrency != conc else dict(
            concurrency=conc, tpot_s=out["tpot_s"], output_tokens_per_s=out["output_tokens_per_s"],
            requests_per_s=out["requests_per_s"], binding=out["binding"])  # fmt: skip
    else:
        out["at_most_that_fit"] = None
    prompts = opts.num_prompts or _rounds(conc or 1)
    cap = concurrency  # the client's cap: the job's concurrency (None: as many as sent)
    if opts.request_rate != float("inf") and not opts.capped_at_rate:
        cap = None
    sim = dict(bench(prompts, opts.request_rate, cap, opts.dataset))
    rate = "inf" if opts.request_rate == float("inf") else opts.request_rate  # JSON has no inf
    sim.update(num_prompts=prompts, request_rate=rate, max_concurrency=cap,
               dataset=opts.dataset, scheduler={"policy": sched.policy,
               "max_num_seqs": sched.max_num_seqs,
               "max_num_batched_tokens": sched.max_num_batched_tokens,
               "kv_pool_tokens": sched.kv_pool_tokens})  # fmt: skip
    out["simulation"] = sim
    if opts.slo_ttft_p99_s or opts.slo_tpot_p99_s:
        out["capacity_at_slo"] = capacity_at_slo(bench, opts, prompts)
    return out


def capacity_at_slo(bench, opts: BenchOptions, prompts: int) -> dict:
    """The highest Poisson request rate (requests/s) one replica sustains with TTFT p99 and
    TPOT p99 within the service levels: bisection on the rate between one that meets them and
    one that does not (the simulator is deterministic for its seed, so the answer is too)."""

    def ok(rate: float) -> tuple[bool, dict]:
        # long enough to reach the steady state (at least 30 s of arrivals, 300 requests), and
        # sustained: the replica completes what arrives (a queue that keeps growing fails,
        # however short the run's tail)
        n = max(prompts, 300, min(20_000, round(rate * 30)))
        r = bench(n, rate, None, opts.dataset)
        good = r["completed"] == n and r["requests_per_s"] >= 0.9 * rate and (
            opts.slo_ttft_p99_s is None or r["ttft_s"]["p99"] <= opts.slo_ttft_p99_s) and (
            opts.slo_tpot_p99_s is None or r["tpot_s"].get("p99", 0.0) <= opts.slo_tpot_p99_s)  # fmt: skip
        return good, r

    lo, hi = 0.0, None
    rate = 1.0
    best = None
    for _ in range(12):  # grow until it fails
        good, r = ok(rate)
        if not good:
            hi = rate
            break
        lo, best = rate, r
        rate *= 2
    if hi is None:
        return {
            "requests_per_s": lo,
            "bound": "at least (the rate kept growing)",
            "at_rate": _slo_row(best),
        }
    if lo == 0.0:
        rate = hi
        for _ in range(8):  # shrink until it holds
            rate /= 4
            good, r = ok(rate)
            if good:
                lo, best = rate, r
                break
        if lo == 0.0:
            return {"requests_per_s": 0.0, "bound": "none: not even at a trickle",
                    "at_rate": None}  # fmt: skip
    for _ in range(10):
        mid = (lo + hi) / 2
        good, r = ok(mid)
        if good:
            lo, best = mid, r
        else:
            hi = mid
    return {"requests_per_s": lo, "bound": f"between {lo:.3g} and {hi:.3g} requests/s",
            "at_rate": _slo_row(best), "ttft_p99_s": opts.slo_ttft_p99_s,
            "tpot_p99_s": opts.slo_tpot_p99_s}  # fmt: skip


def _slo_row(r: dict | None) -> dict | None:
    if r is None:
        return None
    return {"output_tokens_per_s": r["output_tokens_per_s"], "ttft_p99_s": r["ttft_s"]["p99"],
            "tpot_p99_s": r["tpot_s"].get("p99"), "batch_mean": r["batch"]["mean"]}  # fmt: skip
