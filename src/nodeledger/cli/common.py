"""What every command module shares: the console, JSON output, number formatting, the card
lists the options take.  Command modules import this, never each other."""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Any

import click

from nodeledger.units import gib_text, num  # noqa: F401 (num: re-exported for the commands)

UNKNOWN = "unknown"


def console(**kwargs):
    """The one Console of the CLI.  Text from profiles, tools, logs and paths may hold brackets:
    known fields are escaped where printed, and anything that still does not parse as markup
    (e.g. a path "/tmp/[/x]" that rich reads as a closing tag) prints as plain text instead of
    failing."""
    from rich.console import Console
    from rich.errors import MarkupError

    class SafeConsole(Console):
        def render_str(self, text, *args, **kw):
            try:
                return super().render_str(text, *args, **kw)
            except MarkupError:
                kw["markup"] = False
                return super().render_str(text, *args, **kw)

    return SafeConsole(**kwargs)


def escape(text: str) -> str:
    """User- and tool-supplied text for a markup string: '[nvidia]' stays '[nvidia]' (rich would
    take it for a style tag and drop it)."""
    from rich.markup import escape as _escape

    return _escape(text)


def short(text: str | None, limit: int = 120) -> str:
    """Tool-supplied text for a terminal cell: at most ``limit`` characters, the rest counted
    (a 20,000-character "name" in a recorded output would otherwise take rich seconds to wrap)."""
    if text is None:
        return UNKNOWN
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")  # strict JSON


gib = functools.partial(gib_text, decimals=2, unknown=UNKNOWN)  # bytes as GiB, 2 decimals


MAX_ROWS = 50  # list items / incident rows drawn on a terminal; --json has every one


# One exit-code scheme for the commands that judge (fit, report, doctor --job): a CI job can
# gate on it.  2 stays "bad input" (one line on stderr) everywhere.
VERDICT_EXIT = {"fits": 0, "can": 0, "go": 0, "tight": 1, "wait": 1, "unknown": 1,
                "cannot": 3, "no-go": 3}  # fmt: skip


def verdict_exit(tier: str, no_fail: bool = False) -> None:
    """Exit with the verdict's code (0 fits, 1 tight or unknown, 3 cannot) unless
    ``no_fail``; returns normally for 0."""
    code = 0 if no_fail else VERDICT_EXIT.get(tier, 1)
    if code:
        exit_with(code)


def exit_with(code: int) -> None:
    """End the command with ``code`` (the CLI's main returns it as the process exit code)."""
    raise click.exceptions.Exit(code)


def ranges(indices) -> str:
    """[0,1,2,3,5] -> "0-3,5"."""
    from nodeledger.machine.parsers.numa import compress_cpus

    return compress_cpus(sorted(indices))


def card_indices(text: str | None, flag: str = "--cards") -> list[int] | None:
    """``--cards 0-3`` / ``0,2,4,6`` in the order given (machine.parsers.common)."""
    from nodeledger.machine.parsers.common import card_indices as parse

    return parse(text, flag)


def progress_lines():
    """A progress line per step on stderr, when stderr is a terminal (else None)."""
    if not sys.stderr.isatty():
        return None
    return lambda msg: sys.stderr.write(f"nodeledger: {msg} ...\n")


def pci_card_order() -> None:
    """torch's card N must be nvidia-smi's card N: the process that loads torch asks for PCI
    bus order (unless the user chose an order), and the collective workers inherit it.  The
    library never changes the environment; this command owns its process."""
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
