"""Serving speed of one replica: time to first token, time per output token, output tokens/s and
requests/s for prompts of ``input_len`` and answers of ``output_len`` tokens.

Model (speed/terms.py numbers the formulas):
  1. TTFT (one prompt alone, no queue): the prefill of ``input_len`` tokens, compute-bound:
     (2 N_body x I + causal attention + the last token's logits) / (tp x peak x prefill
     efficiency) (speed/work.py: N_body leaves out the embedding lookup), at least the
     weight read (roofline), plus its 2 x layers tensor-parallel all-reduces of I x hidden.
  2. Between two output tokens of B live sequences (continuous batching with chunked prefill,
     as vLLM V1 and SGLang run it): one decode pass, which reads the weights the B tokens touch
     once and each sequence's KV cache at its mean context I + O/2 (memory time), computes B
     tokens and all-reduces over the tp cards twice per layer (latency-bound at small B):
     max(compute, memory) + TP; plus the share of prefill that admits new requests: each
     request's I prompt tokens spread over its O steps, B x I / O tokens per output step, run in
     chunks of at least one prompt up to max_num_batched_tokens beside the batch; a step that
     carries a chunk costs pass(B + chunk) instead of pass(B), and 1 in chunk / (B x I / O)
     steps carries one.  TPOT = that mean (benchmark_serving's TPOT counts the prefill stalls of others).
  3. Output tokens/s = B / step; requests/s = output tokens/s / O.  At the most that fit, B is
     the KV pool the ledger computed, capped by the engine's max_num_seqs.
  5. TTFT under load (``ttft_burst_s``: C prompts at once, mean (C + 1) / 2 prefills;
     ``ttft_steady_s``: one prefill after the step in flight).
  6. --engine hf (transformers generate()) batches statically: the B prompts prefill once, then
     B sequences decode together; TPOT = the decode pass, output tokens/s = B x O / (the
     batch's prefill + O x TPOT).
  4. Pipeline parallel: a token passes the pp stages one after another (per-token time = sum of
     the stages); the engine's micro-batching across stages is not modelled (a lower bound on
     throughput).
The binding resource is the largest of compute, memory bandwidth and card links in a step.
"""

from __future__ import annotations

from nodeledger.ledger import kv_cache as kv
from nodeledger.ledger.build import resolve_job
from nodeledger.ledger.jobs import ServeJob
from nodeledger.machine.profile import MachineProfile
from nodeledger.model.spec import ModelSpec
from nodeledger.speed import figures as F
from nodeledger.speed import terms as T
from nodeledger.speed import work as W


def _static(job: ServeJob) -> bool:
    """Whether the job's engine runs static batches (transformers' generate(): the prompts
    prefill once, then the batch decodes together), as its speed plug-in declares."""
    from nodeledger.speed.engines import engine_speed

    return engine_speed(job.engine, job.engine_version).policy == "static"


def _fig(f) -> dict:
    return {"value": f.value, "unit": f.unit, "source": f.source}


def _tp_seconds(spec: ModelSpec, tokens: float, tp: int, busbw, alpha) -> float | None:
    if tp <= 1:
        return 0.0
    if busbw is None or busbw.value is None:
        return None
    a = alpha.value if alpha is not None and alpha.value is not None else 0.0
    one = T.collective_seconds("all_reduce", W.tp_allreduce_bytes(spec, tokens), tp,
                               busbw.value, a, "ring")  # fmt: skip
    return 2 * spec.num_layers * one


def _pass(spec: ModelSpec, job: ServeJob, fig: dict, tokens: float, kv_bytes: float,
          flops: float) -> dict:  # fmt: skip
    """One forward pass of ``tokens`` tokens on one card of the replica: memory time (the weights
    these tokens touch + ``kv_bytes`` of cache), compute time, TP all-reduces; seconds or None."""
    tp, pp = job.parallel.tp, job.parallel.pp
    wt = W.decode_weight_bytes(spec, job.dtype, tokens)
    kv_split = kv.kv_split_across_tp(spec, tp)
    mem_b = wt["bytes"] / (tp * pp) + kv_bytes / (kv_split * pp)
    peak, hbm = fig["compute_tflops"], fig["card_memory_gbps"]
    e_mem, e_cmp = fig["hbm_efficiency"], fig["decode_compute_efficiency"]
    mem_s = None if hbm.value is None or e_mem.value is None else (
        T.memory_seconds(mem_b, hbm.value, e_mem.value) * pp)  # fmt: skip
    cmp_s = None if peak.value is None or e_cmp.value is None else (
        T.compute_seconds(flops / (tp * pp), peak.value, e_cmp.value) * pp)  # fmt: skip
    tp_s = _tp_seconds(spec, tokens, tp, fig["tp_busbw_gbps"], fig["tp_latency_s"])
    out = {"tokens": tokens, "bytes_per_card": mem_b, "flops_per_card": flops / (tp * pp),
           "experts_touched_per_layer": wt["experts_touched_per_layer"],
           "memory_s": mem_s, "compute_s": cmp_s, "card_links_s": tp_s}  # fmt: skip
    if mem_s is None or cmp_s is None or tp_s is None:
        out["seconds"] = None
    else:
        out["seconds"] = T.roofline_seconds(cmp_s, mem_s) + tp_s
    return out


def step(spec: ModelSpec, job: ServeJob, fig: dict, batch: float, input_len: int,
         output_len: int) -> dict:  # fmt: skip
    """The mean time between two output tokens of ``batch`` live sequences (2.): one decode pass
    of the batch plus its share of the chunked prefills that admit new requests (each request's
    ``input_len`` prompt tokens spread over its ``output_len`` steps, run in chunks of
    max_num_batched_tokens as vLLM V1 and SGLang schedule them); seconds or None if unknown."""
    ctx = input_len + output_len / 2
    dec = _pass(spec, job, fig, batch, batch * W.kv_bytes_per_sequence(spec, ctx, job.kv_dtype),
                batch * W.flops_per_token_forward(spec, ctx))  # fmt: skip
    prefill_tokens = batch * input_len / max(1, output_len)
    # a prefill chunk holds at least one whole prompt, up to the step's token budget beside the
    # decoding batch; a step that carries one costs pass(B + chunk) instead of pass(B)
    step_tokens = job.max_num_batched_tokens  # hf (None): a static batch prefills whole prompts
    budget = max(1.0, (step_tokens if step_tokens is not None else batch * input_len) - batch)
    chunk = float(min(budget, max(input_len, prefill_tokens)))
    per_token_flops = W.prefill_flops(spec, input_len) / max(1, input_len)
    kv_dec = batch * W.kv_bytes_per_sequence(spec, ctx, job.kv_dtype)
    pre = _pass(spec, job, fig, batch + chunk, kv_dec,
                batch * W.flops_per_token_forward(spec, ctx) + chunk * per_token_flops)  # fmt: skip
    out = {
        "batch": batch,
        "mean_context": ctx,
        "prefill_tokens_per_step": prefill_tokens,
        "prefill_chunk_tokens": chunk,
        "decode": dec,
        "prefill_chunk": pre,
        "weight_bytes_read_per_card": dec["bytes_per_card"],
        "experts_touched_per_layer": dec["experts_touched_per_layer"],
        "memory_s": dec["memory_s"],
        "compute_s": dec["compute_s"],
        "card_links_s": dec["card_links_s"],
    }
    if dec["seconds"] is None or pre["seconds"] is None:
        out.update(seconds=None, binding=None, prefill_s=None)
        return out
    if _static(job):  # static batch: the prompts prefill once, before the decode steps
        terms = {"memory bandwidth": dec["memory_s"], "compute": dec["compute_s"],
                 "card links": dec["card_links_s"]}  # fmt: skip
        out.update(seconds=dec["seconds"], prefill_s=0.0, binding=max(terms, key=terms.get))
        return out
    share = prefill_tokens / chunk
    prefill_s = max(0.0, pre["seconds"] - dec["seconds"]) * share
    secs = dec["seconds"] + prefill_s
    terms = {
        "memory bandwidth": max(0.0, dec["memory_s"] - dec["compute_s"]) and dec["memory_s"],
        "compute": (dec["compute_s"] if dec["compute_s"] >= dec["memory_s"] else 0.0) + prefill_s,
        "card links": dec["card_links_s"]
        + max(0.0, pre["card_links_s"] - dec["card_links_s"]) * share,
    }
    out.update(seconds=secs, prefill_s=prefill_s, binding=max(terms, key=terms.get))
    return out


def ttft(spec: ModelSpec, job: ServeJob, fig: dict, input_len: int, batch: int = 1) -> dict:
    """1.: prefill of one prompt alone (``batch`` prompts prefilled together: hf generate())."""
    tp, pp = job.parallel.tp, job.parallel.pp
    flops = W.prefill_flops(spec, input_len) * batch
    wt = W.decode_weight_bytes(spec, job.dtype, input_len * batch)
    peak, hbm = fig["compute_tflops"], fig["card_memory_gbps"]
    e_cmp, e_mem = fig["prefill_efficiency"], fig["hbm_efficiency"]
    out = {"flops": flops, "tokens": input_len * batch}
    if None in (peak.value, hbm.value, e_cmp.value, e_mem.value):
        out.update(seconds=None, binding=None)
        return out
    cmp_s = T.compute_seconds(flops / (tp * pp), peak.value, e_cmp.value) * pp
    mem_s = T.memory_seconds(wt["bytes"] / (tp * pp), hbm.value, e_mem.value) * pp
    tp_s = _tp_seconds(spec, input_len * batch, tp, fig["tp_busbw_gbps"], fig["tp_latency_s"])
    if tp_s is None:
        out.update(seconds=None, binding=None, compute_s=cmp_s, memory_s=mem_s)
        return out
    terms = {"compute": cmp_s, "memory bandwidth": mem_s, "card links": tp_s}
    out.update(seconds=T.roofline_seconds(cmp_s, mem_s) + tp_s, compute_s=cmp_s,
               memory_s=mem_s, card_links_s=tp_s, binding=max(terms, key=terms.get))  # fmt: skip
    return out


def serve_speed(spec: ModelSpec, job: ServeJob, machine: MachineProfile, input_len: int,
                output_len: int, concurrency: int | None,
                max_concurrency: int | None, machines: int = 1,
                pool_tokens: int | None = None, bench=None,
                roofline: bool = False) -> dict:  # fmt: skip
    # long: the simulator's section when it can run, else the roofline's figures one after another
    """The speed section of one serving replica.  ``concurrency``: the sequences served at once
    (None = the most that fit); ``max_concurrency``: the most that fit (the ledger's KV pool,
    capped by max_num_seqs), None if unknown."""
    job, _ = resolve_job(job, machine, spec)  # the engine's defaults for its release and card
    cards = [a.index for a in machine.accelerators][: job.parallel.tp * job.parallel.pp]
    fig = F.serve_inputs(machine, cards, fp8=W.scheme(spec, job.dtype).name == "fp8", tp=job.parallel.tp,
                         machines=machines)  # fmt: skip
    conc = concurrency if concurrency is not None else max_concurrency
    capped = None
    if conc and max_concurrency and conc > max_concurrency:
        # the engine never runs more sequences than its KV pool (and max_num_seqs) holds: the
        # rest wait in its queue, so the decode batch is the pool's, not the clients'
        capped = {"asked": conc, "batch": max_concurrency,
                  "why": f"{conc:,} sequences asked, the KV pool holds {max_concurrency:,} "
                  "(the ledger's largest; max_num_seqs caps it too): the rest queue"}  # fmt: skip
        conc = max_concurrency
    sim = None
    if not roofline:
        from nodeledger.speed.serving import simulated_speed

        sim = simulated_speed(spec, job, machine, input_len, output_len, concurrency,
                              max_concurrency, pool_tokens, bench, machines, fig)  # fmt: skip
    if sim is not None:
        sim.update(input_len=input_len, output_len=output_len, concurrency=conc,
                   cards_per_replica=len(cards), batch_capped=capped, model="simulated",
                   inputs={k: (_fig(v) if hasattr(v, "unit") else v) for k, v in fig.items()
                           if v is not None and not k.endswith("_efficiency")})  # fmt: skip
        steady = sim["simulation"]
        sim["ttft_burst_s"] = None
        sim["ttft_steady_s"] = steady["ttft_s"].get("median")
        return sim
    out: dict = {
        "model": "roofline",
        "input_len": input_len,
        "output_len": output_len,
        "concurrency": conc,
        "cards_per_replica": len(cards),
        "inputs": {
            k: (_fig(v) if hasattr(v, "unit") else v) for k, v in fig.items() if v is not None
        },
        "batch_capped": capped,
        "source": "nodeledger.speed.serve: roofline decode step (weights + live KV vs memory "
        "bandwidth, FLOPs vs peak) + tensor-parallel all-reduces; speed/terms.py",
    }
    one = ttft(spec, job, fig, input_len)
    out["ttft_s"] = one["seconds"]
    out["ttft"] = one
    single = step(spec, job, fig, 1, input_len, output_len)
    out["tpot_batch1_s"] = single["seconds"]

    def rate(batch: int, st: dict) -> float | None:
        """Output tokens/s: continuous batching (vllm) = batch / step; a static generate() batch
        (hf) = batch x output / (the batch's prefill + output x step)."""
        if st["seconds"] is None:
            return None
        if not _static(job):
            return batch / st["seconds"]
        pre = ttft(spec, job, fig, input_len, batch)["seconds"]
        return None if pre is None else batch * output_len / (pre + output_len * st["seconds"])

    if conc:
        st = step(spec, job, fig, conc, input_len, output_len)
        out["step"] = st
        out["tpot_s"] = st["seconds"]
        out["binding"] = st["binding"]
        tps = rate(conc, st)
        out["output_tokens_per_s"] = tps
        out["requests_per_s"] = None if tps is None else tps / output_len
    else:
        out.update(step=None, tpot_s=None, binding=None, output_tokens_per_s=None,
                   requests_per_s=None)  # fmt: skip
    # 5. TTFT under load: a burst of C prompts at once is prefilled at the compute rate one
    # chunk after another, so the k-th waits k prefills: mean (C + 1) / 2 x one prefill; in the
    # steady state a new prompt waits for the step in flight, then its own prefill
    t1, st = one["seconds"], out.get("step") or {}
    out["ttft_burst_s"] = None if t1 is None or not conc else (conc + 1) / 2 * t1
    out["ttft_steady_s"] = (None if t1 is None or st.get("seconds") is None
                            else t1 + st["seconds"])  # fmt: skip
    if max_concurrency:
        same = conc == max_concurrency and out.get("step") is not None
        st = out["step"] if same else step(spec, job, fig, max_concurrency, input_len, output_len)
        tps = rate(max_concurrency, st)
        out["at_most_that_fit"] = {
            "concurrency": max_concurrency,
            "tpot_s": st["seconds"],
            "output_tokens_per_s": tps,
            "requests_per_s": None if tps is None else tps / output_len,
            "binding": st["binding"],
        }
    else:
        out["at_most_that_fit"] = None
    missing = [f"{k}: {v.source}" for k, v in fig.items()
               if hasattr(v, "unit") and v.value is None and k != "tp_latency_s"
               and not (k.startswith("tp_") and job.parallel.tp == 1)]  # fmt: skip
    lat = fig.get("tp_latency_s")
    if job.parallel.tp > 1 and lat is not None and lat.value is None:
        out["lower_bound"] = f"{lat.source}: left out of the all-reduces, so times are lower bounds"
    out["unknown"] = missing
    return out
