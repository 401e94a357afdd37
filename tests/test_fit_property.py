"""Thousands of random option sets thrown at the library: a ledger or a one-line InputError,
never another exception (hypothesis).  Two regimes: plausible options (the ledger's
invariants are checked on what it builds) and nonsense options (only errors may come back)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeledger.errors import InputError
from nodeledger.ledger.jobs import HostSide, LoadJob, Parallel, ServeJob, TrainJob
from nodeledger.machine import resolve_machine
from nodeledger.model import load_model
from nodeledger.verdict.fit import fit

MODELS = {
    m: load_model(m)[0]
    for m in ("qwen3-0.6b", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-120b", "llama-3.1-70b")
}
MACHINES = {
    m: resolve_machine(m) for m in ("k100-ai-8x64g", "dgx-h100", "8x-rtx4090", "4x-a100-80g-pcie")
}
BUILT = {"n": 0, "tried": 0}
SETTINGS = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])

model_st = st.sampled_from(sorted(MODELS))
machine_st = st.sampled_from(sorted(MACHINES))
pos = st.one_of(st.integers(1, 4096), st.integers(1, 131072))
par = st.sampled_from([1, 2, 4, 8])
any_int = st.integers(-(2**40), 2**40)
any_text = st.one_of(
    st.text(max_size=8), st.sampled_from(["hf", "vllm", "bf16", "fp8", "adamw", "full"])
)


def _run(factory, model, machine):
    BUILT["tried"] += 1
    try:
        job = factory()
        res = fit(MODELS[model], job, MACHINES[machine])
    except InputError as exc:
        assert "\n" not in str(exc) and str(exc)
        return False
    BUILT["n"] += 1
    for c in res.ledger.cards:
        assert 0 <= c.torch_peak_bytes <= c.total_bytes
        assert sum(i.bytes for i in c.items if not i.torch) == c.total_bytes - c.torch_peak_bytes
    h = res.ledger.host
    assert h.peak_bytes == sum(i.bytes for i in h.items if not i.reclaimable)
    assert h.reclaimable_bytes == sum(i.bytes for i in h.items if i.reclaimable)
    assert res.verdict.tier in ("fits", "tight", "cannot", "unknown")
    for s in res.verdict.suggestions:
        assert s["tier"] == "fits"
    return True


@SETTINGS
@given(model=model_st, machine=machine_st, engine=st.sampled_from(["hf", "vllm"]),
       dtype=st.sampled_from([None, "bf16", "fp8", "int4", "mxfp4"]), kv=st.sampled_from(["bf16", "fp8"]),
       context=pos, conc=st.one_of(st.none(), st.integers(1, 256)), new=st.integers(0, 64), tp=par, pp=st.sampled_from([1, 2]),
       replicas=st.sampled_from([1, 2, 8]), util=st.floats(0.5, 0.95))  # fmt: skip
def test_random_serve(
    model, machine, engine, dtype, kv, context, conc, new, tp, pp, replicas, util
):
    _run(lambda: ServeJob(engine=engine, dtype=dtype, kv_dtype=kv, context=context + new, concurrency=conc,
                          new_tokens=new, parallel=Parallel(tp=tp, pp=pp), replicas=replicas,
                          gpu_memory_utilization=util), model, machine)  # fmt: skip


@SETTINGS
@given(model=model_st, machine=machine_st, precision=st.sampled_from(["bf16", "mixed"]),
       opt=st.sampled_from(["adamw", "adamw8bit", "sgd", "adafactor"]), impl=st.sampled_from(["foreach", "fused", "forloop"]),
       mb=st.integers(1, 32), seq=st.integers(1, 32768), accum=st.integers(1, 8),
       ckpt=st.sampled_from(["none", "selective", "full"]), attn=st.sampled_from(["sdpa", "eager"]),
       shard=st.sampled_from(["none", "zero1", "zero2", "zero3", "fsdp", "fsdp_hybrid"]),
       offload=st.sampled_from(["none", "optimizer", "params"]), tp=par, pp=st.sampled_from([1, 2]), dp=par,
       rank=st.one_of(st.none(), st.integers(1, 256)), qlora=st.booleans(), workers=st.integers(0, 16),
       prefetch=st.integers(1, 8))  # fmt: skip
def test_random_train(model, machine, precision, opt, impl, mb, seq, accum, ckpt, attn, shard, offload,
                      tp, pp, dp, rank, qlora, workers, prefetch):  # fmt: skip
    _run(lambda: TrainJob(precision=precision, optimizer=opt, optimizer_impl=impl, micro_batch=mb, seq=seq,
                          grad_accum=accum, checkpointing=ckpt, attention=attn, shard=shard, offload=offload,
                          parallel=Parallel(tp=tp, pp=pp, dp=dp), host=HostSide(workers=workers, prefetch=prefetch),
                          rank=rank if qlora is False or rank else 8, qlora=qlora), model, machine)  # fmt: skip


@SETTINGS
@given(model=model_st, machine=machine_st, fmt=st.sampled_from(["safetensors", "bin"]),
       strat=st.sampled_from(["every_rank", "rank0", "meta"]), ranks=st.integers(1, 8),
       dtype=st.sampled_from([None, "bf16", "int4"]), low=st.booleans())  # fmt: skip
def test_random_load(model, machine, fmt, strat, ranks, dtype, low):
    _run(
        lambda: LoadJob(
            dtype=dtype, format=fmt, strategy=strat, ranks=ranks, low_cpu_mem_usage=low
        ),
        model,
        machine,
    )


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=model_st, machine=machine_st, kind=st.sampled_from(["serve", "train", "load"]),
       a=any_int, b=any_int, c=any_int, t1=any_text, t2=any_text, t3=any_text,
       f=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.just(0.9)))  # fmt: skip
def test_nonsense_options_only_raise_input_errors(model, machine, kind, a, b, c, t1, t2, t3, f):
    if kind == "serve":
        factory = lambda: ServeJob(engine=t1, dtype=t2, kv_dtype=t3, context=a, concurrency=b, new_tokens=c,  # noqa: E731
                                   parallel=Parallel(tp=b, pp=c), gpu_memory_utilization=f)  # fmt: skip
    elif kind == "train":
        factory = lambda: TrainJob(precision=t1, optimizer=t2, checkpointing=t3, micro_batch=a, seq=b,  # noqa: E731
                                   parallel=Parallel(dp=c), rank=a)  # fmt: skip
    else:
        factory = lambda: LoadJob(dtype=t1, format=t2, strategy=t3, ranks=a)  # noqa: E731
    _run(factory, model, machine)


def test_plausible_cases_mostly_reach_the_ledger():
    """Guard against a vacuous property test: plausible options must mostly build ledgers."""
    BUILT.update(n=0, tried=0)
    test_random_serve()
    test_random_train()
    test_random_load()
    assert BUILT["n"] >= 0.4 * BUILT["tried"], BUILT
