"""CLI layer of `nodeledger golive` (rendering only; the work is in nodeledger.golive).

Exit codes: 0 no step fails (unavailable allowed), 1 a step fails; 2 bad input (one line on
stderr).
"""

from __future__ import annotations

import sys

import click

from nodeledger.cli.common import (
    console,
    exit_with,
    pci_card_order,
    print_json,
    progress_lines,
)
from nodeledger.cli.options import tool_timeout_option
from nodeledger.errors import NodeledgerError

FORMATS = ("terminal", "md", "json")


@click.command("golive")
@click.option("--plan", "plan", help="Plan (TOML, as for `place`) that must fit with its lifeboat.")
@click.option(
    "--machine",
    "machine",
    help="Preset, profile file or bundle for the doctor, card-settings and plan steps; default: probe this host. Bench and drill always run on this host.",
)
@click.option(
    "--dataset",
    "dataset",
    help="Dataset folder for the bench and doctor's network-filesystem check.",
)
@click.option(
    "--bench-json",
    "bench_json",
    help="Use a recorded `bench --json` instead of running `bench --quick`.",
)
@click.option(
    "--state",
    "state",
    help="Reservations state file (as `run --state`); default $NODELEDGER_STATE or ~/.local/state/nodeledger/reservations.sqlite.",
)
@click.option(
    "--format", "-f", "fmt", default="terminal", show_default=True, help="terminal | md | json"
)
@click.option(
    "--allow-unavailable",
    "allow_unavailable",
    multiple=True,
    metavar="STEP",
    help="Accept that STEP (doctor, cards, bench, plan, drill) cannot run here, or runs in part (repeatable).",
)
@tool_timeout_option
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
def golive(
    plan=None,
    machine=None,
    dataset=None,
    bench_json=None,
    state=None,
    fmt="terminal",
    allow_unavailable=(),
    timeout=5.0,
    as_json=False,
) -> None:
    """The pre-production checklist: doctor clean, per-card settings, bench figures ok, the plan
    fits with its lifeboat, and a recovery drill (a canary on the lifeboat card, killed on
    purpose; its memory and reservation must come back).  Exit 0 when no step fails and every
    step ran whole; 1 otherwise (an unavailable or partial step too, unless
    --allow-unavailable names it)."""
    pci_card_order()
    from nodeledger.golive import render
    from nodeledger.golive.checklist import run_golive

    fmt = "json" if as_json else fmt
    if fmt not in FORMATS:
        raise NodeledgerError(f"--format {fmt!r} is not one of {', '.join(FORMATS)}")
    if not timeout > 0:
        raise NodeledgerError(f"--timeout must be > 0, got {timeout}")
    rep = run_golive(plan_file=plan, machine=machine, dataset=dataset, bench_json=bench_json,
                     state_path=state, timeout=timeout, progress=progress_lines(),
                     allow_unavailable=tuple(allow_unavailable))  # fmt: skip
    if fmt == "json":
        print_json(rep)
    elif fmt == "md":
        sys.stdout.write("\n".join(render.markdown(rep)) + "\n")
    else:
        render.terminal(rep, console())
    if rep["exit_code"]:
        exit_with(rep["exit_code"])
