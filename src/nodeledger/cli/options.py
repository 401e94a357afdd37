"""Options generated from declarations below the CLI: the job options of ``fit``, ``doctor
--job``, ``watch --model`` and ``exporter`` come from the one table in
``nodeledger.ledger.jobs.JOB_OPTIONS`` (name, type, job kinds, help), so the commands cannot
disagree."""

from __future__ import annotations

import click

from nodeledger.ledger.jobs import JOB_OPTIONS

_TYPES = {int: int, float: float, str: None}


def job_options(func):
    """Add every job option to a click command function (values arrive in ``**job_opts``,
    snake_case, None when not given)."""
    for o in reversed(JOB_OPTIONS):
        kw = {"help": o.help}
        if _TYPES[o.type] is not None:
            kw["type"] = _TYPES[o.type]
        func = click.option(o.cli_flag, o.name, default=None, **kw)(func)
    return func
