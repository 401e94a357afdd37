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
    num,
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

    from nodeledger.report.compare import compare_machines

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
    lines = _compare_md(res, src)
    if fmt == "md":
        _write("\n".join(lines), output)
        return
    fh, con = _terminal_out(output)
    try:
        _render_compare(con, res, src, machines)
    except BaseException:
        _terminal_done(fh, output, ok=False)
        raise
    _terminal_done(fh, output, ok=True)


def _binding_note(cell: dict) -> str:
    """What binds a compare cell that is not "can", as " (resource)" after its tier."""
    return f" ({cell['binding']})" if cell["tier"] != "can" and cell["binding"] else ""


def _render_compare(con, res: dict, src: str, machines: list[str]) -> None:
    from rich.table import Table

    from nodeledger.report.sections import TIER_STYLE

    t = Table(title=f"Workloads ({src})")
    t.add_column("workload")
    for m in machines:
        t.add_column(m)
    for row in res["workloads"]:
        cells = []
        for m in machines:
            c = row["machines"][m]
            cells.append(f"[{TIER_STYLE[c['tier']]}]{c['tier']}[/]{_binding_note(c)}")
        t.add_row(row["id"], *cells)
    con.print(t)
    s = Table(title="Per machine")
    for col in (
        "machine",
        "cards",
        "card memory",
        "can / tight / cannot / unknown",
        "first bottleneck",
        "price",
        "price per runnable workload",
    ):
        s.add_column(col)
    for m in res["machines"]:
        c = m["counts"]
        s.add_row(m["machine"], str(m["cards"]), num(m["card_memory_bytes"] and m["card_memory_bytes"] / 2**30, "GiB"),
                  f"{c['can']} / {c['tight']} / {c['cannot']} / {c['unknown']}", m["bottleneck"] or "none",
                  num(m["price"]), num(m["price_per_runnable_workload"]))  # fmt: skip
    con.print(s)
    sv = Table(title="Serving capacity on the business cards (sequences at the workload's context)")
    sv.add_column("workload")
    for m in machines:
        sv.add_column(m)
    ids = [w for w in res["machines"][0]["serving_sequences"]]
    for wid in ids:
        sv.add_row(wid, *[num(m["serving_sequences"].get(wid)) + (
            f" ({m['price_per_sequence'][wid]:,.0f}/seq)" if m["price_per_sequence"].get(wid) else "")
            + (" *" if (m.get("serving_notes") or {}).get(wid) else "")
            for m in res["machines"]])  # fmt: skip
    con.print(sv)
    for m in res["machines"]:
        for wid, note in (m.get("serving_notes") or {}).items():
            con.print(f"  * {m['machine']} {wid}: {note}", markup=False)
    tp = Table(
        title="Serving throughput on the business cards (output tokens/s at the most that fit)"
    )
    tp.add_column("workload")
    for m in machines:
        tp.add_column(m)
    tp.add_column("faster")
    for wid in ids:
        f = res["faster"].get(wid, {})
        tp.add_row(wid, *[_tput_cell(m, wid) for m in res["machines"]],
                   _faster_cell(f))  # fmt: skip
    con.print(tp)
    slo_ids = [w for w in ids if any(w in (m.get("requests_per_s_at_slo") or {})
                                     for m in res["machines"])]  # fmt: skip
    if slo_ids:
        ts = Table(title="Capacity within each workload's service levels (requests/s on the "
                   "business cards, Poisson arrivals, the engine simulated)")  # fmt: skip
        ts.add_column("workload")
        for m in machines:
            ts.add_column(m)
        for wid in slo_ids:
            ts.add_row(wid, *[("-" if (v := (m.get("requests_per_s_at_slo") or {}).get(wid)) is None
                               else f"{v:,.2f} req/s") for m in res["machines"]])  # fmt: skip
        con.print(ts)
    con.print(f"  basis: {res['throughput_basis']}", markup=False)
    for m in res["machines"]:
        con.print(f"{m['machine']}: {m['scale_out']}", markup=False)


def _tput_cell(m: dict, wid: str) -> str:
    v = m["output_tokens_per_s"].get(wid)
    if not v:
        return "unknown" if m["serving_sequences"].get(wid) else "-"
    cell = f"{v:,.0f} tok/s"
    pm = m["price_per_million_output_tokens"].get(wid)
    if pm is not None:
        cell += f" ({pm:,.3f} per M tokens)"
    return cell


def _faster_cell(f: dict) -> str:
    if not f.get("fastest"):
        return ""
    cell = f"{f['fastest']}" + (f" x{f['ratio']:.2f}" if f.get("ratio") else "")
    if f.get("most_per_price"):
        cell += f"; per price: {f['most_per_price']}"
    return cell


def _compare_md(res: dict, src: str) -> list[str]:
    names = [m["machine"] for m in res["machines"]]
    L = [f"# Machine comparison ({src})", "", "| workload | " + " | ".join(names) + " |",
         "|---|" + "---|" * len(names)]  # fmt: skip
    for row in res["workloads"]:
        cells = [row["machines"][n]["tier"] + _binding_note(row["machines"][n]) for n in names]
        L.append(f"| {row['id']} | " + " | ".join(cells) + " |")
    L += ["", "| machine | cards | can / tight / cannot / unknown | first bottleneck | price | price per runnable workload |", "|---|---|---|---|---|---|"]  # fmt: skip
    for m in res["machines"]:
        c = m["counts"]
        L.append(f"| {m['machine']} | {m['cards']} | {c['can']} / {c['tight']} / {c['cannot']} / {c['unknown']} | "
                 f"{m['bottleneck'] or 'none'} | {num(m['price'])} | {num(m['price_per_runnable_workload'])} |")  # fmt: skip
    L += ["", "Serving capacity (sequences on the business cards):", ""]
    for m in res["machines"]:
        L.append(
            f"- {m['machine']}: "
            + ", ".join(f"{k} {num(v)}" for k, v in m["serving_sequences"].items())
        )
    L += ["", "Serving throughput (output tokens/s on the business cards, at the most that fit):", "",
          "| workload | " + " | ".join(names) + " | faster |", "|---|" + "---|" * (len(names) + 1)]  # fmt: skip
    for wid in res["machines"][0]["output_tokens_per_s"] if res["machines"] else []:
        cells = [_tput_cell(m, wid) for m in res["machines"]]
        L.append(
            f"| {wid} | " + " | ".join(cells) + f" | {_faster_cell(res['faster'].get(wid, {}))} |"
        )
    L += ["", f"Basis: {res['throughput_basis']}", ""]
    return L
