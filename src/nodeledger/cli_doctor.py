"""CLI layer of `nodeledger doctor` (rendering only; the work is in nodeledger.doctor).

Exit codes: checks — 0 ok (info / unknown / skip included), 1 warnings, 3 errors; pre-flight
(``--job`` or a MODEL) — 0 go, 1 wait, 3 no-go; 2 stays "bad input" (one line on stderr).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from nodeledger.errors import NodeledgerError

SEV_STYLE = {"ok": "green", "skip": "grey50", "unknown": "grey50", "info": "cyan",
             "warning": "dark_orange", "error": "red"}  # fmt: skip
LEVEL_STYLE = {
    "ok": "green",
    "info": "cyan",
    "warning": "dark_orange",
    "wait": "yellow",
    "no-go": "red",
}
VERDICT_STYLE = {"go": "green", "wait": "yellow", "no-go": "red"}
JOB_OPTS = ("tp", "pp", "dp", "replicas", "dtype", "kv_dtype", "context", "concurrency", "new_tokens",
            "engine", "gpu_memory_utilization", "max_num_batched_tokens", "micro_batch", "seq",
            "grad_accum", "precision", "optimizer", "optimizer_impl", "attention", "checkpointing",
            "shard", "offload", "workers", "prefetch", "rank", "lora_targets", "load_format",
            "load_strategy", "ranks")  # fmt: skip


def register(app) -> None:
    """Add the command(s) to the typer app (called by cli.py)."""
    app.command("doctor")(doctor)


def doctor(
    model: Annotated[str | None, typer.Argument(help="Pre-flight this model's job (config.json path, checkpoint folder, catalogue name or cached Hub id); or --model.")] = None,
    model_opt: Annotated[str | None, typer.Option("--model", help="Same as the MODEL argument.")] = None,
    job: Annotated[str | None, typer.Option("--job", help="Pre-flight of one job: serve | train | lora | qlora | load (the options of `fit`).")] = None,
    from_bundle: Annotated[str | None, typer.Option("--from", help="Replay a support bundle (`nodeledger bundle`) instead of this machine.")] = None,
    machine: Annotated[str | None, typer.Option("--machine", help="--job only: a preset, profile file or bundle; default: this machine, or the reference machine when it has no accelerator.")] = None,
    dataset: Annotated[list[str] | None, typer.Option("--dataset", help="A dataset path to check for a network filesystem (repeatable).")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds each vendor tool may run.")] = 5.0,
    lifeboat: Annotated[int, typer.Option("--lifeboat", help="--job: cards to keep free for triage (default 1).")] = 1,
    tp: Annotated[int | None, typer.Option("--tp", help="Tensor-parallel cards per replica.")] = None,
    pp: Annotated[int | None, typer.Option("--pp", help="Pipeline stages per replica.")] = None,
    dp: Annotated[int | None, typer.Option("--dp", help="Data-parallel ranks (training).")] = None,
    replicas: Annotated[int | None, typer.Option("--replicas", help="Serving replicas (e.g. 8 x TP1).")] = None,
    dtype: Annotated[str | None, typer.Option("--dtype", help="Weight scheme for serve/load: bf16 fp16 fp32 fp8 int8 int4 nf4 mxfp4.")] = None,
    kv_dtype: Annotated[str | None, typer.Option("--kv-dtype", help="KV cache dtype: bf16 fp16 fp32 fp8.")] = None,
    context: Annotated[int | None, typer.Option("--context", help="Tokens per sequence (prompt + generated).")] = None,
    concurrency: Annotated[str | None, typer.Option("--concurrency", help="Concurrent sequences, or 'max'.")] = None,
    new_tokens: Annotated[int | None, typer.Option("--new-tokens", help="hf engine: tokens generated after the prompt.")] = None,
    engine: Annotated[str | None, typer.Option("--engine", help="hf | vllm")] = None,
    gpu_memory_utilization: Annotated[float | None, typer.Option("--gpu-memory-utilization", help="vLLM budget fraction (default 0.9).")] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option("--max-num-batched-tokens", help="vLLM tokens per step (default 8192).")] = None,
    micro_batch: Annotated[int | None, typer.Option("--micro-batch", help="Sequences per micro-batch per rank.")] = None,
    seq: Annotated[int | None, typer.Option("--seq", help="Training sequence length.")] = None,
    grad_accum: Annotated[int | None, typer.Option("--grad-accum", help="Gradient accumulation steps.")] = None,
    precision: Annotated[str | None, typer.Option("--precision", help="bf16 (pure) | mixed (fp32 master + bf16 autocast).")] = None,
    optimizer: Annotated[str | None, typer.Option("--optimizer", help="adamw | adamw8bit | sgd | adafactor")] = None,
    optimizer_impl: Annotated[str | None, typer.Option("--optimizer-impl", help="foreach | fused | forloop")] = None,
    attention: Annotated[str | None, typer.Option("--attention", help="sdpa (flash path) | eager | math (SDPA fallback)")] = None,
    checkpointing: Annotated[str | None, typer.Option("--checkpointing", help="none | selective | full")] = None,
    shard: Annotated[str | None, typer.Option("--shard", help="none | zero1 | zero2 | zero3 | fsdp | fsdp_grad_op | fsdp_hybrid")] = None,
    offload: Annotated[str | None, typer.Option("--offload", help="none | optimizer | params")] = None,
    workers: Annotated[int | None, typer.Option("--workers", help="DataLoader workers per rank.")] = None,
    prefetch: Annotated[int | None, typer.Option("--prefetch", help="DataLoader prefetch_factor.")] = None,
    rank: Annotated[int | None, typer.Option("--rank", help="LoRA rank.")] = None,
    lora_targets: Annotated[str | None, typer.Option("--lora-targets", help="Comma-separated module names (default q,k,v,o_proj).")] = None,
    load_format: Annotated[str | None, typer.Option("--format", help="load: safetensors | bin")] = None,
    load_strategy: Annotated[str | None, typer.Option("--load-strategy", help="load: every_rank | rank0 | meta")] = None,
    ranks: Annotated[int | None, typer.Option("--ranks", help="load: processes on this host that load.")] = None,
    online: Annotated[bool, typer.Option("--online", help="Allow downloading config.json from the Hub.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")] = False,
) -> None:  # fmt: skip
    """Read-only checks of this machine (or a bundle): THP, NUMA balancing, swap, free RAM,
    persistence, ECC, NUMA binding, dead card holders, MIG/MPS, IOMMU/ACS, HF cache and dataset
    mounts — each with evidence and the command that would fix it (printed, never run).
    With --job (and a MODEL): pre-flight of that job, go / wait / no-go."""
    local = locals()
    opts = {k: local[k] for k in JOB_OPTS}
    if model and model_opt and model != model_opt:
        raise NodeledgerError(f"MODEL {model!r} and --model {model_opt!r} disagree; give one")
    model = model or model_opt
    if not timeout > 0:
        raise NodeledgerError(f"--timeout must be > 0, got {timeout}")
    if model is None and job is None:
        given = sorted(k for k, v in opts.items() if v is not None)
        if given:
            names = ", ".join("--" + k.replace("_", "-") for k in given)
            raise NodeledgerError(f"{names} applies to a pre-flight: add --job and a MODEL")
        if lifeboat != 1:
            raise NodeledgerError("--lifeboat applies to a pre-flight: add --job and a MODEL")
        _checks(from_bundle, machine, tuple(dataset or ()), timeout, as_json)
        return
    if model is None:
        raise NodeledgerError("doctor --job needs a MODEL (argument or --model)")
    if dataset:
        raise NodeledgerError("--dataset applies to the checks (doctor without --job)")
    _preflight(
        model, job or "serve", opts, from_bundle, machine, lifeboat, timeout, online, as_json
    )


def _value(v: Any) -> str:
    from nodeledger.cli import gib

    if isinstance(v, int) and not isinstance(v, bool) and v >= 2**20:
        return f"{gib(v)} ({v:,} B)"
    return str(v)


def _checks(from_bundle, machine, datasets, timeout, as_json) -> None:
    from nodeledger.doctor import exit_code, load_state, run_checks, worst

    if machine and not (machine.endswith((".tar.gz", ".tgz"))):
        raise NodeledgerError(
            "--machine applies to --job: a preset or profile has no live state to check "
            "(use --from BUNDLE for another machine)"
        )
    state = load_state(from_bundle, machine, timeout)
    findings = run_checks(state, datasets)
    code = exit_code(findings)
    if as_json:
        from nodeledger.cli import _print_json

        _print_json({"origin": state.origin, "machine": state.profile.name,
                     "checks": [f.to_json() for f in findings], "worst": worst(findings),
                     "exit_code": code, "notes": state.notes})  # fmt: skip
        raise typer.Exit(code)
    from rich.markup import escape
    from rich.table import Table

    from nodeledger.cli import _console

    con = _console()
    con.print(f"doctor: {state.origin}", markup=False, highlight=False)
    t = Table(title="Checks (read-only; fixes are printed, never run)")
    for col in ("check", "severity", "finding / evidence"):
        t.add_column(col, no_wrap=col != "finding / evidence")
    for f in findings:
        st = SEV_STYLE[f.severity]
        body = escape(f.message) + "".join(
            f"\n  [dim]seen: {escape(f'{e.what} = {_value(e.value)} ({e.source})')}[/dim]"
            for e in f.evidence
        )
        t.add_row(f.id, f"[{st}]{f.severity}[/]", body)
    con.print(t)
    fixes = [f for f in findings if f.fix and f.severity in ("info", "warning", "error")]
    if fixes:
        con.print("[bold]Fixes[/bold] (run them yourself, after reading them):")
        for f in fixes:
            con.print(f"  {f.id}: {f.fix}", markup=False, highlight=False)
    con.print(f"worst: {worst(findings)} (exit {code})", markup=False)
    raise typer.Exit(code)


def _preflight(
    model, job_kind, opts, from_bundle, machine, lifeboat, timeout, online, as_json
) -> None:
    from nodeledger.doctor import load_state, preflight
    from nodeledger.ledger.jobs import build_job
    from nodeledger.model import load_model

    if lifeboat < 0:
        raise NodeledgerError(f"--lifeboat must be >= 0, got {lifeboat}")
    job_obj = build_job(job_kind, opts)
    state = load_state(from_bundle, machine, timeout, fallback_preset=True)
    spec, src = load_model(model, online=online)
    res = preflight(spec, job_obj, state, lifeboat)
    name = src.catalogue_entry["id"] if src.catalogue_entry else src.where
    if as_json:
        from nodeledger.cli import _print_json

        _print_json(
            {"model": name, "job": job_kind, "machine": state.profile.name, **res.to_json()}
        )
        raise typer.Exit(res.exit_code)
    from rich.markup import escape

    from nodeledger.cli import _console

    con = _console()
    con.print(f"doctor: {res.origin}", markup=False, highlight=False)
    st = VERDICT_STYLE[res.verdict]
    con.print(f"[bold]{name}[/bold] --job {job_kind} on {state.profile.name}: "
              f"[bold {st}]{res.verdict.upper()}[/bold {st}] (exit {res.exit_code})")  # fmt: skip
    con.print(f"  ledger: {res.fit['tier']} — {res.fit['reason']}", markup=False, highlight=False)
    for r in res.reasons:
        s = LEVEL_STYLE[r.level]
        con.print(f"  [{s}]{r.level:>7}[/] {escape(r.topic)}: {escape(r.text)}", highlight=False)
    if res.binding:
        con.print("Cards and NUMA binding:")
        for line in res.binding:
            con.print(f"  {line}", markup=False, highlight=False)
    for n in res.notes:
        con.print(f"  note: {n}", markup=False, highlight=False)
    raise typer.Exit(res.exit_code)
