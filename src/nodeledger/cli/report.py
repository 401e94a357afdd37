"""`nodeledger report` and `compare`: the capacity report on one or several machines."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from nodeledger import atomic
from nodeledger.cli.common import (
    VERDICT_EXIT,
    console,
    verdict_exit,
)
from nodeledger.cli.options import json_option, no_fail_option
from nodeledger.errors import NodeledgerError

# ---------------------------------------------------------------------------------------
# report (the main job; the capacity verdicts arrive with the ledger and report issues)
# ---------------------------------------------------------------------------------------


FORMATS = ("terminal", "md", "json", "html")


def _pick_format(fmt: str | None, out: Path | None) -> str:
    if fmt is None:
        suffix = out.suffix.lower().lstrip(".") if out else ""
        known = {"md": "md", "markdown": "md", "json": "json", "html": "html", "htm": "html",
                 "txt": "terminal", "": "terminal"}  # fmt: skip
        if suffix not in known:
            raise NodeledgerError(
                f"-o {out}: no format for the suffix .{suffix}; pass --format "
                "terminal|md|json|html (or use .txt .md .json .html)"
            )
        fmt = known[suffix]
    if fmt not in FORMATS:
        raise NodeledgerError(f"--format {fmt!r} is not one of {', '.join(FORMATS)}")
    return fmt


def _write(text: str, out: Path | None) -> None:
    if out is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    try:
        atomic.write_text(out, text)  # an interrupted write leaves the old file, never half
    except OSError as exc:
        raise NodeledgerError(f"-o {out}: cannot write ({exc.strerror or exc})") from None
    sys.stderr.write(f"wrote {out} ({len(text.encode()):,} bytes)\n")


workloads_option = click.option(
    "--workloads",
    "workloads",
    help="Workload catalogue (TOML); '+FILE' adds FILE to the bundled default catalogue.",
)
output_option = click.option(
    "-o", "--output", "output", type=click.Path(path_type=Path), help="Write to this file."
)
lifeboat_option = click.option(
    "--lifeboat",
    "lifeboat",
    type=int,
    default=None,
    help="Cards kept free for triage [default: 1; 0 on a one-card machine, said once]; 0 disables, with a warning.",
)


@click.command("report")
@click.option(
    "--machine",
    "machine",
    help="Preset, profile file or bundle (.tar.gz); default: probe this host, or the bundled reference machine when it has no accelerator.",
)
@workloads_option
@click.option(
    "--format", "-f", "fmt", help="terminal | md | json | html (default: from -o's suffix)."
)
@output_option
@lifeboat_option
@click.option(
    "--details",
    "details",
    is_flag=True,
    help="Terminal: every workload's whole reason in the table (default: one line each, caveats once).",
)
@no_fail_option
@json_option
def report(machine=None, workloads=None, fmt=None, output=None, lifeboat=None, details=False,
           no_fail=False, as_json=False) -> None:  # fmt: skip
    """Capacity report: can / tight / cannot for each workload, what binds, serving capacity
    with the lifeboat card, big loads at once, links and network, and the scale-out verdict.
    Exit: the worst tier among the workloads that do not turn out as their catalogue entry
    expects (0 can, 1 tight or unknown, 3 cannot; a workload expected to be "cannot" that is
    cannot does not fail the report); --no-fail: 0 whatever the verdicts; 2 bad input."""
    from nodeledger.report.usecase import CapacityRequest, assess_capacity

    fmt = "json" if as_json else _pick_format(fmt, output)
    ans = assess_capacity(CapacityRequest(machine=machine, workloads=workloads, lifeboat=lifeboat))
    rep, intro = ans.report, ans.intro
    if fmt == "json":
        _write(json.dumps(ans.to_json(), indent=2, default=str), output)
    elif fmt in ("md", "html"):
        from nodeledger.report import documents  # (rich's tables only for the other formats)

        text = (
            documents.markdown(rep, intro)
            if fmt == "md"
            else documents.html(rep, ans.profile, intro)
        )
        _write(text, output)
    else:
        _render_report(rep, intro, output, details)
    tier, why = ans.tier, ans.why
    if tier != "can" and not no_fail:
        sys.stderr.write(f"nodeledger: {why} (exit {VERDICT_EXIT[tier]}; --no-fail: exit 0)\n")
    verdict_exit(tier, no_fail)


def _terminal_out(output: Path | None):
    """(atomic file or None, console) for the terminal format: -o FILE gets plain text, written
    to a temporary file beside it that ``_terminal_done`` puts in place (or throws away)."""
    if output is None:
        return None, console()

    try:
        af = atomic.AtomicText(output)
    except OSError as exc:
        raise NodeledgerError(f"-o {output}: cannot write ({exc.strerror or exc})") from None
    return af, console(file=af.file, width=140, no_color=True)


def _terminal_done(af: atomic.AtomicText | None, output: Path | None, ok: bool) -> None:
    """Replace -o FILE with the rendered text (ok), or leave FILE as it was (an error)."""
    if af is None:
        return
    if not ok:
        af.discard()
        return
    try:
        af.commit()
    except OSError as exc:
        raise NodeledgerError(f"-o {output}: cannot write ({exc.strerror or exc})") from None
    sys.stderr.write(f"wrote {output}\n")


def _render_report(rep: dict, intro: list[str], output: Path | None, details: bool = False) -> None:
    from nodeledger.report.documents import terminal

    fh, con = _terminal_out(output)
    try:
        terminal(con, rep, intro, details)
    except BaseException:
        _terminal_done(fh, output, ok=False)
        raise
    _terminal_done(fh, output, ok=True)


@click.command("compare")
@click.argument(
    "machines",
    nargs=-1,
    required=True,
    help="Two or more presets, profile files or bundles.",
)
@workloads_option
@click.option("--price", "price", multiple=True, help="MACHINE=AMOUNT (any currency), repeatable.")
@click.option("--format", "-f", "fmt", help="terminal | md | json (default: from -o's suffix).")
@output_option
@lifeboat_option
@json_option
def compare_cmd(
    machines, workloads=None, price=None, fmt=None, output=None, lifeboat=None, as_json=False
) -> None:
    """Which machine runs which workloads in which tier, serving capacity, cost per workload."""

    from nodeledger.report.compare import compare_machines, compare_markdown, compare_terminal

    machines, price = list(machines), list(price)
    if len(machines) < 2:
        raise NodeledgerError("compare needs at least two machines")
    if len(set(machines)) != len(machines):
        raise NodeledgerError(f"compare: a machine is named twice: {machines}")
    fmt = "json" if as_json else _pick_format(fmt, output)
    if fmt == "html":
        raise NodeledgerError(
            "compare writes terminal, md or json; use `report --format html` per machine"
        )
    res, src = compare_machines(machines, workloads, price, lifeboat)
    if fmt == "json":
        out = {"schema_version": res["schema_version"], "workloads_source": src, **res}
        _write(json.dumps(out, indent=2, default=str), output)
        return
    if fmt == "md":
        _write("\n".join(compare_markdown(res, src)), output)
        return
    fh, con = _terminal_out(output)
    try:
        compare_terminal(con, res, src)
    except BaseException:
        _terminal_done(fh, output, ok=False)
        raise
    _terminal_done(fh, output, ok=True)
