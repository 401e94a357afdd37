"""Options generated from declarations below the CLI: the job options of ``fit``, ``doctor
--job``, ``watch --model`` and ``exporter`` come from the one table in
``nodeledger.ledger.jobs.JOB_OPTIONS`` (name, type, job kinds, help), so the commands cannot
disagree."""

from __future__ import annotations

import click

from nodeledger.ledger.jobs import JOB_OPTIONS

_TYPES = {int: int, float: float, str: None, bool: None}

json_option = click.option(
    "--json", "as_json", is_flag=True, help="Machine-readable JSON on stdout."
)
no_fail_option = click.option(
    "--no-fail",
    "no_fail",
    is_flag=True,
    help="Exit 0 whatever the verdict (for scripts that only read the output); bad input still exits 2.",
)
online_option = click.option(
    "--online", "online", is_flag=True, help="Allow downloading config.json from the Hub."
)
tool_timeout_option = click.option(
    "--timeout",
    "timeout",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds each vendor tool may run.",
)


def job_options(func):
    """Add every job option to a click command function (values arrive in ``**job_opts``,
    snake_case, None when not given)."""
    for o in reversed(JOB_OPTIONS):
        kw = {"help": o.help}
        if o.type is bool:
            kw["is_flag"] = True
        elif _TYPES[o.type] is not None:
            kw["type"] = _TYPES[o.type]
        func = click.option(o.cli_flag, o.name, default=None, **kw)(func)
    return func
