"""CLI layer of `nodeledger oom` (rendering only; the work is in nodeledger.triage)."""

from __future__ import annotations

import sys

import click

from nodeledger.cli.common import MAX_ROWS, console
from nodeledger.cli.options import json_option


@click.command("oom")
@click.argument(
    "files",
    nargs=-1,
    help="Job logs, or saved kernel logs (dmesg, kern.log, journalctl -k), to read: regular "
    "files, or - for standard input.",
)
@click.option(
    "--since",
    "since",
    help="Only incidents in the last DURATION (90s, 30m, 2h, 1d); undated ones are kept.",
)
@click.option(
    "--no-kernel-log",
    "no_kernel_log",
    is_flag=True,
    help="Do not read this machine's kernel log (for logs from another machine).",
)
@click.option(
    "--link-window",
    "window",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds within which a kernel kill and a job-log incident are linked by time.",
)
@click.option(
    "--timeout",
    "timeout",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds dmesg / journalctl may run.",
)
@json_option
def oom(
    files=None, since=None, no_kernel_log=False, window=60.0, timeout=5.0, as_json=False
) -> None:
    """Why did the job die? Find out-of-memory incidents in the kernel log and job logs, say
    whether host RAM or card memory ran out, with every figure, and the fixes for that side."""
    from nodeledger.triage.usecase import OomRequest, diagnose

    report = diagnose(OomRequest(files=tuple(files or ()), since=since, no_kernel_log=no_kernel_log,
                                 window_s=window, timeout=timeout))  # fmt: skip
    import gc

    # the report is what this process holds until it ends: out of the cyclic collector's sight
    # (tens of thousands of incidents, no cycles; a collection would re-walk them all)
    gc.freeze()
    if as_json:  # print_json(report.to_dict()), written as it is made
        for chunk in report.json_chunks():
            sys.stdout.write(chunk)
        sys.stdout.write("\n")
        return
    _render(report)


_KEY_FIGURES = {
    "host": (
        ("anon-rss", "anon_rss_bytes"),
        ("file-rss", "file_rss_bytes"),
        ("shmem-rss", "shmem_rss_bytes"),
        ("total-vm", "total_vm_bytes"),
        ("cgroup usage", "memcg_usage_bytes"),
        ("cgroup limit", "memcg_limit_bytes"),
        ("cgroup rss", "memcg_rss_bytes"),
        ("swap total", "swap_total_bytes"),
    ),
    "card": (
        ("requested", "requested_bytes"),
        ("total", "total_bytes"),
        ("free", "free_bytes"),
        ("allocated", "allocated_bytes"),
        ("reserved", "reserved_bytes"),
        ("reserved-unallocated", "reserved_unallocated_bytes"),
        ("allowed", "allowed_bytes"),
        ("this process", "this_process_bytes"),
        ("non-PyTorch", "non_pytorch_bytes"),
        ("other processes", "other_processes_bytes"),
        ("outside PyTorch", "outside_pytorch_bytes"),
        ("KV needed", "kv_cache_needed_bytes"),
        ("KV available", "kv_cache_available_bytes"),
    ),
}


def _figures_line(inc) -> str:
    from nodeledger.logs.units import human

    parts = [
        f"{label} {human(inc.figures[key])}"
        for label, key in _KEY_FIGURES[inc.side]
        if inc.figures.get(key) is not None
    ]
    d = inc.details
    if d.get("max_model_len_tokens"):
        parts.append(f"max_model_len {d['max_model_len_tokens']:,} tokens")
    if d.get("kv_cache_tokens"):
        parts.append(f"KV cache {d['kv_cache_tokens']:,} tokens")
    if d.get("estimated_max_model_len"):
        parts.append(f"vLLM's estimated max length {d['estimated_max_model_len']:,}")
    if d.get("constraint"):
        parts.append(d["constraint"])
    return ", ".join(parts) or "no figures in the text"


def _who(inc) -> str:
    bits = []
    if inc.process:
        bits.append(inc.process)
    if inc.pid is not None:
        bits.append(f"pid {inc.pid}")
    if inc.card is not None:
        bits.append(f"card {inc.card}")
    return " ".join(bits) or "-"


def _when(inc) -> str:
    t = inc.time
    if t is None:
        return "-"
    if t.dt is not None:
        return t.text
    return f"{t.uptime_s:.0f} s after boot" if t.uptime_s is not None else "-"


def _row_key(inc) -> tuple:
    """What a row and its details draw of an incident, all but its number and line (the
    figures as numbers, not yet as text): two incidents with the same key are one row,
    counted (×N)."""
    links = tuple((k["to"], k["kind"], k["by"], k["detail"]) for k in inc.links)
    d = inc.details
    shown = (d.get("max_model_len_tokens"), d.get("kv_cache_tokens"),
             d.get("estimated_max_model_len"), d.get("constraint"))  # fmt: skip
    return (inc.side, inc.kind, inc.complete, _when(inc), inc.process, inc.pid, inc.card,
            inc.source, inc.message, tuple(inc.figures.items()), shown, inc.occurrences,
            tuple(inc.also_at), links, tuple(inc.fixes), tuple(inc.notes))  # fmt: skip


def _rows(incidents) -> list[list]:
    """Incidents grouped by :func:`_row_key`, in order of first appearance."""
    groups: dict[tuple, list] = {}
    for inc in incidents:
        groups.setdefault(_row_key(inc), []).append(inc)
    return list(groups.values())


def _others(group) -> str:
    """The other incidents of a merged row: the first few by number and place, then a count."""
    shown = ", ".join(f"#{i.id} ({i.where})" for i in group[1:6])
    more = len(group) - 6
    return shown + (f" and {more:,} more" if more > 0 else "")


def _render(report) -> None:
    from rich.table import Table

    con = console()
    v = report.verdict
    head = "inconclusive" if v.get("verdict") == "inconclusive" else v["side"]
    con.print(f"[bold]oom: {head}[/bold] — ", end="")
    con.print(v["summary"], markup=False, highlight=False)
    read = ", ".join(
        f"{s['source']} ({s['lines']:,} lines, {s['incidents']:,} incidents)"
        for s in report.sources_read
    )
    con.print(f"read: {read or 'nothing'}", markup=False, highlight=False)
    rows = _rows(report.incidents)
    drawn = rows[:MAX_ROWS]
    if rows:
        title = f"{len(report.incidents):,} incident(s)"
        if len(rows) < len(report.incidents):
            title += f" in {len(rows):,} distinct row(s): ×N counts identical ones"
        t = Table(title=title)
        for col in ("#", "side", "kind", "when", "who", "source"):
            t.add_column(col, overflow="fold")
        for group in drawn:
            inc = group[0]
            t.add_row(
                str(inc.id) + (f" ×{len(group):,}" if len(group) > 1 else ""),
                inc.side,
                inc.kind + ("" if inc.complete else " (cut)"),
                _when(inc),
                _who(inc),
                inc.where,
            )
        con.print(t)
    for group in drawn:
        inc = group[0]
        con.print(
            f"\n#{inc.id} {inc.side} · {inc.kind} · {_who(inc)} · {inc.where}"
            + (f" · ×{len(group):,}" if len(group) > 1 else ""),
            markup=False,
            highlight=False,
        )
        if len(group) > 1:
            con.print(f"  the same as: {_others(group)}", markup=False, highlight=False)
        con.print(f"  figures: {_figures_line(inc)}", markup=False, highlight=False)
        if inc.occurrences > 1:
            also = ", ".join(inc.also_at[:5])
            more = inc.occurrences - 1 - min(len(inc.also_at), 5)
            con.print(
                f"  seen {inc.occurrences:,} times"
                + (f" (also at {also}" + (f" and {more:,} more" if more > 0 else "") + ")"
                   if also else ""),
                markup=False,
                highlight=False,
            )  # fmt: skip
        for link in inc.links[:MAX_ROWS]:
            con.print(
                f"  linked to #{link['to']} ({link['kind']}, {link['source']}) by {link['by']}: "
                f"{link['detail']}",
                markup=False,
                highlight=False,
            )
        if len(inc.links) > MAX_ROWS:
            con.print(f"  … and {len(inc.links) - MAX_ROWS:,} more links (--json lists them)",
                      markup=False, highlight=False)  # fmt: skip
        for fix in inc.fixes:
            con.print(f"  fix: {fix}", markup=False, highlight=False)
        for note in inc.notes:
            con.print(f"  note: {note}", markup=False, highlight=False)
    if len(rows) > MAX_ROWS:
        left = sum(len(g) for g in rows[MAX_ROWS:])
        con.print(
            f"\n… {len(rows) - MAX_ROWS:,} more row(s) ({left:,} incident(s)) not drawn: the "
            f"first {MAX_ROWS} are; `nodeledger oom --json` lists every incident",
            markup=False,
            highlight=False,
        )
    for note in report.notes:
        con.print(f"note: {note}", markup=False, highlight=False)
