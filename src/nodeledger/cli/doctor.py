"""CLI layer of `nodeledger doctor` (rendering only; the use case is doctor/usecase.py).

Exit codes: checks — 0 ok (info / unknown / skip included), 1 warnings, 3 errors; pre-flight
(``--job`` or a MODEL) — 0 go, 1 wait, 3 no-go; 2 stays "bad input" (one line on stderr).
"""

from __future__ import annotations

import click

from nodeledger.cli.common import (
    console,
    exit_with,
    print_json,
    verdict_exit,
)
from nodeledger.cli.options import (
    job_options,
    json_option,
    no_fail_option,
    online_option,
    tool_timeout_option,
)
from nodeledger.errors import NodeledgerError

LEVEL_STYLE = {
    "ok": "green",
    "info": "cyan",
    "warning": "dark_orange",
    "wait": "yellow",
    "no-go": "red",
}
VERDICT_STYLE = {"go": "green", "wait": "yellow", "no-go": "red"}


@click.command("doctor")
@click.argument(
    "model",
    required=False,
    help="Pre-flight this model's job (config.json path, checkpoint folder, catalogue name or cached Hub id); or --model.",
)
@click.option("--model", "model_opt", help="Same as the MODEL argument.")
@click.option(
    "--job",
    "job",
    help="Pre-flight of one job: serve | train | lora | qlora | load (the options of `fit`).",
)
@click.option(
    "--from",
    "from_bundle",
    help="Replay a support bundle (`nodeledger bundle`) instead of this machine.",
)
@click.option(
    "--machine",
    "machine",
    help="--job only: a preset, profile file or bundle; default: this machine, or the reference machine when it has no accelerator.",
)
@click.option(
    "--dataset",
    "dataset",
    multiple=True,
    help="A dataset path to check for a network filesystem (repeatable).",
)
@tool_timeout_option
@click.option(
    "--lifeboat",
    "lifeboat",
    type=int,
    default=None,
    help="--job: cards to keep free for triage [default: 1; 0 on a one-card machine, said once].",
)
@online_option
@no_fail_option
@json_option
@job_options
def doctor(
    model=None,
    model_opt=None,
    job=None,
    from_bundle=None,
    machine=None,
    dataset=None,
    timeout=5.0,
    lifeboat=None,
    online=False,
    no_fail=False,
    as_json=False,
    **job_opts,
) -> None:
    """Read-only checks of this machine (or a bundle): THP, NUMA balancing, swap, free RAM,
    persistence, ECC, NUMA binding, dead card holders, MIG/MPS, IOMMU/ACS, HF cache and dataset
    mounts — each with evidence and the command that would fix it (printed, never run).
    With --job (and a MODEL): pre-flight of that job, go / wait / no-go."""
    from nodeledger.doctor.usecase import ChecksAnswer, DoctorRequest, run_doctor

    if model and model_opt and model != model_opt:
        raise NodeledgerError(f"MODEL {model!r} and --model {model_opt!r} disagree; give one")
    answer = run_doctor(DoctorRequest(
        model=model or model_opt, job=job, job_options=job_opts, from_bundle=from_bundle,
        machine=machine, datasets=tuple(dataset or ()), timeout=timeout, lifeboat=lifeboat,
        online=online,
    ))  # fmt: skip
    if isinstance(answer, ChecksAnswer):
        _render_checks(answer, as_json)
    else:
        _render_preflight(answer, as_json, no_fail)


def _render_checks(a, as_json: bool) -> None:
    if as_json:
        print_json(a.to_json())
        exit_with(a.exit_code)
    con = console()
    con.print(f"doctor: {a.state.origin}", markup=False, highlight=False)
    a.checklist().terminal(con)
    con.print(f"worst: {a.worst} (exit {a.exit_code})", markup=False)
    exit_with(a.exit_code)


def _render_preflight(a, as_json: bool, no_fail: bool) -> None:
    res, name, job_kind, state = a.result, a.name, a.job, a.state
    if as_json:
        print_json(a.to_json())
        verdict_exit(res.verdict, no_fail)
        return
    from rich.markup import escape

    con = console()
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
    verdict_exit(res.verdict, no_fail)
