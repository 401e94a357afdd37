"""The command line: parse, call the library, render, map errors to exit codes.

One module per command group (``machine``, ``model``, ``fit``, ``report``, ``doctor``, ``oom``,
``bench``, ``place``, ``run``, ``watch``, ``fleet``); they share ``common`` and ``options`` and never import
each other.  Commands are registered by name in ``COMMANDS`` and their module is imported only
when the command runs, so a cold ``nodeledger fit`` pays for fit alone.

Exit codes: 0 ok; 2 bad input (one line on stderr naming the problem, never a traceback); each
command documents its own others (1 / 3 / 4 / 5); 70 an internal error (a bug); 130 interrupted.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from nodeledger import __version__
from nodeledger.errors import NodeledgerError

# name -> (module, attribute, one-line help): the top-level --help is built from this table
COMMANDS: dict[str, tuple[str, str, str]] = {
    "report": ("nodeledger.cli.report", "report", "Capacity report: can / tight / cannot per workload, what binds, the scale-out verdict."),
    "compare": ("nodeledger.cli.report", "compare_cmd", "Which machine runs which workloads in which tier, serving capacity, cost per workload."),
    "fit": ("nodeledger.cli.fit", "fit_cmd", "Account every byte of one job on each card and in host RAM; say whether it fits."),
    "collective": ("nodeledger.cli.collective", "collective_cmd", "Time of one collective (all-reduce, all-gather, reduce-scatter): algbw, busbw, seconds."),
    "doctor": ("nodeledger.cli.doctor", "doctor", "Read-only checks of this machine, or pre-flight of one job (go / wait / no-go)."),
    "oom": ("nodeledger.cli.oom", "oom", "Why a job died: host (kernel OOM killer) or card out-of-memory, with the figures."),
    "place": ("nodeledger.cli.place", "place", "Which replica goes on which cards, with a lifeboat card kept free."),
    "run": ("nodeledger.cli.run", "run_cmd", "Start one replica of a plan on its cards, with its environment and NUMA binding."),
    "watch": ("nodeledger.cli.watch", "watch", "Every card's memory, utilisation and processes against the plan; idle cards and why."),
    "exporter": ("nodeledger.cli.watch", "exporter", "Prometheus metrics of the cards, the host and the plan."),
    "slurm": ("nodeledger.cli.fleet", "slurm", "Slurm TaskProlog / Epilog: admit a job only within the host-RAM rules and off the lifeboat card."),
    "k8s": ("nodeledger.cli.fleet", "k8s", "Kubernetes: NFD feature files (node labels: cards, NUMA, lifeboat) and the exporter's DaemonSet."),
    "fleet": ("nodeledger.cli.fleet", "fleet_cmd", "One row per box (free cards, lifeboat, host-RAM headroom, findings) from bundles or Prometheus."),
    "bench": ("nodeledger.cli.bench", "bench", "Measure and judge disks, host<->card and card<->card copies, collectives."),
    "golive": ("nodeledger.cli.golive", "golive", "The pre-production checklist: doctor, card settings, bench, plan, recovery drill."),
    "machine": ("nodeledger.cli.machine", "machine", "What the box is: bundled presets, profile files, the live probe."),
    "bundle": ("nodeledger.cli.machine", "bundle_cmd", "Collect every raw output of a probe into one support bundle (.tar.gz)."),
    "parse": ("nodeledger.cli.machine", "parse_cmd", "Explain one recorded tool output (parsed field by field)."),
    "model": ("nodeledger.cli.model", "model", "What a job runs: model specs from HF config.json."),
}  # fmt: skip


class LazyGroup(click.Group):
    """The root group: lists COMMANDS without importing them; imports one when it runs."""

    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx, cmd_name):
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module, attr, _ = entry
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx, formatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, entry[2]) for name, entry in COMMANDS.items()])


def _version(ctx, _param, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        sys.stdout.write(f"nodeledger {__version__}\n")
        ctx.exit(0)


@click.group(
    "nodeledger",
    cls=LazyGroup,
    context_settings={"max_content_width": 1000},  # help wraps at the terminal's width
    help="Capacity accounting for one multi-accelerator server: what fits, what is tight, "
    "what cannot run, and which part of the machine binds.",
)
@click.option(
    "--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
    help="Show the version.",
)  # fmt: skip
def app() -> None:
    pass


def _usage_line(exc: click.UsageError) -> str:
    """A usage error as one line: the problem, then where the help is."""
    where = exc.ctx.command_path if exc.ctx is not None else "nodeledger"
    message = " ".join(exc.format_message().split())
    return f"nodeledger: error: {message} (see `{where} --help`)\n"


def main(argv: list[str] | None = None) -> int:
    try:
        code = app.main(args=argv, prog_name="nodeledger", standalone_mode=False)
    except NodeledgerError as exc:
        sys.stderr.write(f"nodeledger: error: {exc}\n")
        return exc.exit_code
    except click.exceptions.NoArgsIsHelpError as exc:  # `nodeledger` / `nodeledger machine`
        sys.stdout.write(exc.ctx.get_help() + "\n")
        return 2
    except click.UsageError as exc:
        sys.stderr.write(_usage_line(exc))
        return 2
    except click.exceptions.Abort:
        sys.stderr.write("nodeledger: interrupted\n")
        return 130
    except click.ClickException as exc:
        sys.stderr.write(f"nodeledger: error: {exc.format_message()}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("nodeledger: interrupted\n")
        return 130
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except Exception as exc:  # a bug, not bad input: one line, and the traceback on request
        if os.environ.get("NODELEDGER_DEBUG"):
            raise
        sys.stderr.write(
            f"nodeledger: internal error: {type(exc).__name__}: {exc} "
            "(a bug; set NODELEDGER_DEBUG=1 for the traceback and please report it)\n"
        )
        return 70
    return code if isinstance(code, int) else 0
