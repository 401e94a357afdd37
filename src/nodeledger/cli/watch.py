"""CLI layer of `nodeledger watch` / `nodeledger exporter` (rendering only; the work is in
nodeledger.watch).

Exit codes of `watch` (a gate for a job's first minutes):
  0  watched; nothing failed (verification passed, pending or not asked)
  2  bad input (one line naming the problem)
  3  verification failed: sharding not happening / extra contexts / above plan / the
     engine log's KV-cache pool differs from the plan (--engine-log)
  4  no sample: no backend could read any card
  5  an idle card was found and --fail-on-idle was given
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

import click

from nodeledger.cli.common import (
    console,
    exit_with,
    print_json,
)
from nodeledger.cli.options import job_options, json_option
from nodeledger.errors import InputError
from nodeledger.machine.vendors import samplers as vendor_samplers
from nodeledger.units import gib_num, gib_text

EXIT_VERIFY, EXIT_NO_SAMPLE, EXIT_IDLE = 3, 4, 5
# `nodeledger fit` options that describe the job (the same names, help and checks as fit)


def _check_tolerance(tolerance: float, tolerance_gib: float) -> None:
    """watch and exporter judge "above plan" with the same tolerance: the same bounds."""
    if tolerance < 0 or tolerance_gib < 0:
        raise InputError("--tolerance and --tolerance-gib must be >= 0")


def _positive(name: str, v: float | None) -> None:
    if v is not None and not v > 0:
        raise InputError(f"{name} must be > 0, got {v}")


# ---------------------------------------------------------------------------------------------
# watch
# ---------------------------------------------------------------------------------------------


# the demos `--backend fake:SCENARIO` plays (watch/fake.py SCENARIOS), and what each shows
_SCENARIO_HELP = (
    "fsdp-sharded (a 32B FSDP job whose shards match its plan), fsdp-unsharded (the same job "
    "where sharding did not happen: card 0 holds it all, the other seven wait idle in a "
    "collective), dead-owner (a card still held by a process the kernel OOM killer took), "
    "remote-numa (one rank running on a far NUMA node, its card starved), extra-contexts (the "
    "other ranks' stray contexts on card 0: set_device not called), two-loads (two jobs "
    "loading at once while host RAM runs out)."
)


def _sampled_and_verified(func):
    """The options watch and exporter share: where the samples come from and what they are
    verified against."""
    for option in reversed(_SHARED):
        func = option(func)
    return func


_SHARED = [
    click.option(
        "--backend",
        "backend",
        default="auto",
        show_default=True,
        help=" | ".join(("auto", *(s.name for s in vendor_samplers()), "fake:SCENARIO"))
        + " (auto: the first that lists cards, each vendor's library before its tool). "
        "A fake scenario is a scripted 8-card box that runs at once to its finding: "
        + _SCENARIO_HELP,
    ),
    click.option(
        "--plan",
        "plan",
        help="PLAN.toml (as for `place`) or `place --json` output: verify each replica's cards against the ledger.",
    ),
    click.option("--model", "model", help="MODEL for --job (as `fit` takes it)."),
    click.option(
        "--job",
        "job",
        help="serve | train | lora | qlora | load: verify against this job's ledger (with fit's options).",
    ),
    click.option(
        "--cards",
        "cards",
        help="Cards the --job runs on, rank order (e.g. 0-7 or 4,5); default 0..n-1.",
    ),
    click.option(
        "--machine",
        "machine",
        help="Machine for the ledger (preset, file, bundle); default: probe this host (a replay: its recorded preset, else the reference machine).",
    ),
    click.option(
        "--idle-window",
        "idle_window",
        type=float,
        default=60.0,
        show_default=True,
        help="Seconds a card must stay below the idle threshold.",
    ),
    click.option(
        "--tolerance",
        "tolerance",
        type=float,
        default=0.1,
        show_default=True,
        help="Above plan: more than prediction x (1 + this) + --tolerance-gib.",
    ),
    click.option(
        "--tolerance-gib",
        "tolerance_gib",
        type=float,
        default=1.0,
        show_default=True,
        help="The fixed part of the above-plan tolerance (GiB).",
    ),
    click.option(
        "--timeout",
        "timeout",
        type=float,
        default=5.0,
        show_default=True,
        help="Seconds each vendor tool call may take.",
    ),
]


WATCH_MAX_SAMPLES = 1_000_000  # 11.6 days at one sample a second
WATCH_MAX_SECONDS = 366 * 86400  # --duration, --interval: a year


@click.command("watch")
@click.option(
    "--interval",
    "interval",
    type=float,
    default=1.0,
    show_default=True,
    help="Seconds between samples.",
)
@click.option("--samples", "samples", type=int, help="Stop after N samples.")
@click.option("--duration", "duration", type=float, help="Stop after S seconds.")
@click.option(
    "--record",
    "record",
    type=click.Path(path_type=Path),
    help="Write the samples to FILE (.jsonl, or .jsonl.gz).",
)
@click.option(
    "--replay",
    "replay",
    type=click.Path(path_type=Path),
    help="Judge a recorded stream instead of sampling.",
)
@click.option(
    "--from",
    "from_bundle",
    type=click.Path(path_type=Path),
    metavar="BUNDLE",
    help="Replay a support bundle's recorded tool outputs (`nodeledger bundle --watch-samples N` "
    "on the box) through --backend, as a live watch would read them.",
)
@click.option(
    "--fail-fast", "fail_fast", is_flag=True, help="Stop (exit 3) at the first failed verification."
)
@click.option(
    "--fail-on-idle", "fail_on_idle", is_flag=True, help="Exit 5 when an idle card was found."
)
@click.option(
    "--engine-log",
    "engine_log",
    metavar="FILE",
    help="The running vLLM/SGLang server's log (with --job serve --engine vllm|sglang): its "
    "KV-cache pool, as the engine sized it at start-up, is checked against the plan's "
    "(a difference beyond --tolerance fails verification; the plan follows the release the "
    "log prints). Read at the end of the watch, first and last 8 MiB only.",
)
@json_option
@_sampled_and_verified
@job_options
def watch(
    interval=1.0,
    samples=None,
    duration=None,
    backend="auto",
    plan=None,
    model=None,
    job=None,
    cards=None,
    machine=None,
    record=None,
    replay=None,
    from_bundle=None,
    fail_fast=False,
    fail_on_idle=False,
    idle_window=60.0,
    tolerance=0.1,
    tolerance_gib=1.0,
    timeout=5.0,
    engine_log=None,
    as_json=False,
    **job_opts,
) -> None:
    """Watch every card (memory, utilisation, processes) and the host; verify against the
    ledger (--plan / --job); find idle cards and their likely cause.  Exit 3: verification
    failed; 4: no sample; 5: idle card with --fail-on-idle; 2: bad input."""

    for name, v in (("--interval", interval), ("--duration", duration), ("--idle-window", idle_window),
                    ("--timeout", timeout), ("--samples", samples)):  # fmt: skip
        _positive(name, v)
    # bounded, so that a typo (1e12) is one line, not a watch that runs until killed; a longer
    # live watch leaves --samples / --duration out and is stopped with Ctrl-C
    longer = "; a longer live watch leaves --samples and --duration out and is stopped with Ctrl-C"
    for name, v, cap, unit, more in (("--samples", samples, WATCH_MAX_SAMPLES, "", longer),
                                     ("--duration", duration, WATCH_MAX_SECONDS, " s", longer),
                                     ("--interval", interval, WATCH_MAX_SECONDS, " s", "")):  # fmt: skip
        if v is not None and v > cap:
            shown = f"{v:,}" if isinstance(v, int) else f"{v:g}"
            raise InputError(
                f"{name} {shown}{unit} is over the most a watch takes ({cap:,}{unit}){more}"
            )
    _check_tolerance(tolerance, tolerance_gib)
    if replay and record:
        raise InputError("--record applies to a live watch, not to --replay")
    if replay and from_bundle:
        raise InputError("give --replay (a recorded stream) or --from (a bundle), not both")
    from nodeledger.watch.session import WatchOptions, WatchSession

    started = time.monotonic()
    session = WatchSession.open(WatchOptions(
        interval=interval, samples=samples, duration=duration, backend=backend, plan=plan,
        model=model, job=job, cards=cards, machine=machine, record=record, replay=replay,
        from_bundle=from_bundle, fail_fast=fail_fast, idle_window=idle_window,
        tolerance=tolerance, tolerance_gib=tolerance_gib, timeout=timeout,
        engine_log=engine_log, job_options=job_opts,
    ))  # fmt: skip
    live = None
    if not replay:
        if not as_json and sys.stdout.isatty():
            from rich.live import Live

            live = Live(console=console(), refresh_per_second=4, transient=True)
            live.start()
        _stop_on_sigterm()
    try:
        session.run(
            (lambda s: live.update(_live_view(s, session.analyzer, session.header)))
            if live else None
        )  # fmt: skip
    finally:
        if live:
            live.stop()
    _finish(session.summary(wall_s=time.monotonic() - started), session.header, as_json,
            fail_on_idle)  # fmt: skip


def _stop_on_sigterm() -> None:
    """SIGTERM (systemd, Kubernetes, `kill`) ends the watch or the exporter as Ctrl-C does:
    the summary is printed and the exit code is the command's own, not 143."""
    import signal

    def stop(_signum, _frame):
        raise KeyboardInterrupt

    import contextlib

    with contextlib.suppress(ValueError):  # not the main thread (an embedding caller)
        signal.signal(signal.SIGTERM, stop)


def _exit_code(summary: dict, fail_on_idle: bool) -> tuple[int, str | None]:
    if not summary["samples"]:
        return EXIT_NO_SAMPLE, "no sample"
    if not summary["cards_seen"]:
        if summary.get("host_only") and not summary.get("plan"):
            return 0, None  # a host without cards: its figures were watched, nothing failed
        return EXIT_NO_SAMPLE, "no sample: no card could be read" + (
            ", so the plan cannot be verified" if summary.get("plan") else ""
        )
    v = summary["verify"]
    if v["status"] == "failed":
        rules = "; ".join(
            f"{f['rule']} on card(s) {', '.join(map(str, f['cards']))}" for f in v["findings"]
        )
        return EXIT_VERIFY, f"verification failed: {rules}"
    if fail_on_idle and summary["idle"]:
        return EXIT_IDLE, "idle card(s): " + ", ".join(
            f"{f['card']} ({f['kind']})" for f in summary["idle"]
        )
    return 0, None


def _finish(s: dict, header: dict, as_json: bool, fail_on_idle: bool) -> None:
    """Print the watch's summary (JSON or the table) and exit with its code."""
    code, why = _exit_code(s, fail_on_idle)
    s["exit_code"] = code
    if as_json:
        print_json(s)
    else:
        _render_summary(s, header)
    if code:
        sys.stderr.write(f"nodeledger: {why} (exit {code})\n")
        exit_with(code)


_gib = functools.partial(gib_text, unknown="-", unit="")  # a table cell: GiB in the header


def _bar(used, total, planned, width: int = 24) -> str:
    if not used or not total:
        return " " * width
    cells = [" "] * width
    n = min(width, round(width * used / total))
    for k in range(n):
        cells[k] = "█"
    if planned:
        k = min(width - 1, int(width * planned / total))
        cells[k] = "┃" if cells[k] == " " else "╋"
    return "".join(cells)


def _live_view(s: dict, an, header):
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    info = {c["index"]: c for c in header["machine"]["cards"]}
    t = Table(title=f"nodeledger watch — {header['backend']}, sample {an.n}", expand=False)
    for col in (
        "card",
        "used / total GiB",
        "used vs plan (┃)",
        "planned",
        "util %",
        "owner",
        "status",
    ):
        t.add_column(col)
    flagged: dict[int, list[str]] = {}
    for f in an.verify()["findings"]:
        for c in f["cards"]:
            flagged.setdefault(c, []).append(f["rule"])
    for f in an.idle(active_only=True):
        flagged.setdefault(f["card"], []).append(f["kind"])
    for c in s.get("cards", []):
        i = c["index"]
        total = c.get("total_bytes") or info.get(i, {}).get("total_bytes")
        pred = an.predicted.get(i)
        procs = c.get("processes") or []
        owner = (f"{procs[0]['pid']} {procs[0].get('name') or ''}".strip()
                 + (f" +{len(procs) - 1}" if len(procs) > 1 else "")) if procs else "-"  # fmt: skip
        status = ", ".join(flagged.get(i, [])) or "ok"
        style = "red" if i in flagged else "green"
        t.add_row(str(i), f"{_gib(c.get('used_bytes'))} / {_gib(total)}",
                  Text(_bar(c.get("used_bytes"), total, pred), style=style), _gib(pred),
                  "-" if c.get("util_pct") is None else f"{c['util_pct']:.0f}", owner,
                  Text(status, style=style))  # fmt: skip
    h = s.get("host") or {}
    line = (f"host: {_gib(h.get('mem_available'))} of {_gib(h.get('mem_total'))} GiB available, "
            f"swap used {_gib((h.get('swap_total') or 0) - (h.get('swap_free') or 0))} GiB")  # fmt: skip
    return Group(t, Text(line))


def _render_summary(s: dict, header: dict) -> None:
    # long: a renderer: the watch summary top to bottom (host, cards, engine log, verify, idle)
    from rich.table import Table

    con = console()
    clock = s.get("clock") or "this host's clock"
    con.print(
        f"watch: {s['samples']} sample{'' if s['samples'] == 1 else 's'} over {s['duration_s']:.{1 if s['duration_s'] < 10 else 0}f} s of {clock}"
        + (f", {s['wall_s']:.1f} s of wall time" if s.get("wall_s") is not None else "")
        + f" ({s['source']})",
        markup=False,
    )
    if s["plan"]:
        con.print(f"plan: {s['plan']}", markup=False)
    for n in s["notes"]:
        con.print(f"note: {n}", markup=False)
    if s.get("host_only"):
        con.print(f"note: {s['host_only']}: the host's figures only", markup=False)
    h = s.get("host") or {}
    if h and h.get("mem_total_bytes") is None:
        con.print("host (last sample): RAM and swap unknown (not read)", markup=False)
    elif h:
        swap = (h.get("swap_total_bytes") or 0) - (h.get("swap_free_bytes") or 0)
        con.print(
            f"host (last sample): {_gib(h.get('mem_available_bytes'))} of "
            f"{_gib(h.get('mem_total_bytes'))} GiB available, swap used {_gib(swap)} GiB",
            markup=False,
        )
    t = Table(
        title=f"Cards ({s.get('peak_rule') or 'sustained peak'}; max = highest single sample)"
    )
    for col in (
        "card",
        "peak GiB",
        "max GiB",
        "last GiB",
        "planned GiB",
        "unsharded GiB",
        "of GiB",
        "util % (mean)",
        "owners",
    ):
        t.add_column(col)
    floors = False
    for c in s["cards"]:
        owners = ", ".join(
            f"{o['pid']} {o['name'] or ''}".strip()
            + ("" if o.get("last_bytes") is None else f" {gib_num(o['last_bytes'])}")
            for o in c["owners"][:3]
        )
        if len(c["owners"]) > 3:
            owners += f" +{len(c['owners']) - 3}"
        last = _gib(c.get("last_bytes"))
        if c.get("last_bytes") is None and c.get("last_pct") is not None:
            last = f"{c['last_pct']:g}%"  # the tool gave a percentage of the card only
        elif c.get("last_bytes") is None and c.get("processes_bytes") is not None:
            last, floors = f">={gib_num(c['processes_bytes'])}", True
        t.add_row(str(c["index"]), _gib(c["peak_bytes"]), _gib(c.get("max_bytes")),
                  last, _gib(c["predicted_bytes"]),
                  _gib(c["unsharded_bytes"]), _gib(c["total_bytes"]),
                  "-" if c["util_mean_pct"] is None else f"{c['util_mean_pct']:.0f}", owners or "-")  # fmt: skip
    if s["cards"]:
        con.print(t)
        con.print(
            f"card: {header.get('backend') or 'the card tool'}'s own index (the smi index; "
            "the index a process sees under CUDA/HIP/ASCEND_RT_VISIBLE_DEVICES can differ: "
            "`nodeledger machine show probe` maps them)",
            markup=False,
        )
        con.print("owners: pid, name and the GiB the card tool gives each process (last sample)"
                  + ("; >=: the card's own figure unknown, its processes' sum is a floor" if floors else ""),
                  markup=False)  # fmt: skip
    el = s.get("engine_log")
    if el:
        pg, pt = el.get("pool_gib") or {}, el.get("pool_tokens") or {}
        fmt = lambda v, f: "unknown" if v is None else format(v, f)  # noqa: E731
        if pg or pt:
            con.print(
                f"engine log {el['file']} ({el.get('engine')} {el.get('version') or 'release not printed'}): "
                f"KV-cache pool {fmt(pg.get('engine'), ',.2f')} GiB / {fmt(pt.get('engine'), ',.0f')} "
                f"tokens per card as the engine printed it; the plan {fmt(pg.get('plan'), ',.2f')} GiB / "
                f"{fmt(pt.get('plan'), ',.0f')} tokens (ledger)",
                markup=False,
            )
        for d in el.get("launch_differences") or []:
            con.print(f"  launch: {d}", markup=False)
        for n in el.get("notes") or []:
            con.print(f"  note: {n}", markup=False)
    v = s["verify"]
    con.print(f"verify: {v['status']}", markup=False)
    for f in v["findings"]:
        con.print(f"  FAIL {f['message']}", markup=False)
    if s["idle"]:
        con.print("idle cards:")
    shown: dict[tuple, list[int]] = {}
    for f in s["idle"]:
        key = (f["kind"], f["likely_cause"], tuple(f["evidence"][1:]), tuple(f["hints"]))
        if key in shown and f["likely_cause"]:  # the same diagnosis as a card above: one line
            shown[key].append(f["card"])
            continue
        shown[key] = []
        span = f"{f['last_unix_s'] - f['first_unix_s']:.0f} s" + ("" if f["active"] else ", over")
        con.print(f"  {f['kind']}: {f['message']} [{span}]", markup=False)
        if f["likely_cause"]:
            con.print(f"    likely cause: {f['likely_cause']}", markup=False)
        for e in f["evidence"][1:]:
            con.print(f"    also: {e}", markup=False)
        for h in f["hints"]:
            con.print(f"    hint: {h}", markup=False)
    for (kind, _c, _e, _h), more in shown.items():
        if more:
            con.print(
                f"  {kind}, same diagnosis: card(s) {', '.join(map(str, more))}", markup=False
            )
    if not s["idle"]:
        con.print("idle cards: none")


# ---------------------------------------------------------------------------------------------
# exporter
# ---------------------------------------------------------------------------------------------


@click.command("exporter")
@click.option(
    "--rules",
    "print_rules",
    is_flag=True,
    help="Print the Prometheus recording and alerting rules over these metrics (YAML) and exit.",
)
@click.option(
    "--dashboard",
    "print_dashboard",
    is_flag=True,
    help="Print a Grafana dashboard (JSON) over these metrics, per host and across hosts, and exit.",
)
@click.option(
    "--lifeboat",
    "lifeboat_cards",
    metavar="CARDS",
    help="Card(s) kept free for triage (e.g. 7): served as nodeledger_lifeboat_card, which the "
    "LifeboatCardTaken alert watches; default: the --plan's lifeboat, else none.",
)
@click.option(
    "--no-vendor-series",
    "no_vendor_series",
    is_flag=True,
    help="Leave out the vendor-named series (DCGM_FI_DEV_*, gpu_*_vram / gpu_gfx_activity, "
    "npu_chip_info_*): use it when dcgm-exporter / device-metrics-exporter / npu-exporter already "
    "runs on the box.",
)
@click.option(
    "--listen",
    "listen",
    default="127.0.0.1:19835",
    show_default=True,
    help="HOST:PORT to serve /metrics on (default loopback only).",
)
@click.option(
    "--expose",
    "expose",
    is_flag=True,
    help="Allow a non-loopback --listen address (metrics name your processes).",
)
@click.option(
    "--allow",
    "allow",
    multiple=True,
    metavar="CIDR",
    help="Serve only clients in this network (repeatable, e.g. 10.0.0.0/8); others are "
    "closed unanswered.  Loopback is not implied.  Default: every client.",
)
@click.option(
    "--tls-cert", "tls_cert", metavar="FILE", help="Serve HTTPS: PEM certificate (chain)."
)
@click.option("--tls-key", "tls_key", metavar="FILE", help="The PEM private key for --tls-cert.")
@click.option(
    "--basic-auth-file",
    "basic_auth_file",
    metavar="FILE",
    help="Require HTTP basic auth: USER:SHA256HEX lines (printf %s PASS | sha256sum).",
)
@click.option(
    "--client-timeout",
    "client_timeout",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds a client has to send its request (and to take the answer); "
    "idle or slow connections are dropped after it.",
)
@click.option(
    "--handler-threads",
    "handler_threads",
    type=int,
    default=8,
    show_default=True,
    help="Threads answering scrapes (the most at once); idle connections hold none.",
)
@click.option(
    "--max-connections",
    "max_connections",
    type=int,
    default=1024,
    show_default=True,
    help="Open connections at most (clamped to the fd limit); past it the oldest idle one "
    "is dropped.",
)
@click.option(
    "--interval",
    "interval",
    type=float,
    default=1.0,
    show_default=True,
    help="Seconds between samples.",
)
@click.option(
    "--duration", "duration", type=float, help="Stop after S seconds (default: until Ctrl-C)."
)
@_sampled_and_verified
@job_options
def exporter(
    listen="127.0.0.1:19835",
    expose=False,
    allow=(),
    tls_cert=None,
    tls_key=None,
    basic_auth_file=None,
    client_timeout=5.0,
    handler_threads=8,
    max_connections=1024,
    interval=1.0,
    backend="auto",
    plan=None,
    model=None,
    job=None,
    cards=None,
    machine=None,
    idle_window=60.0,
    tolerance=0.1,
    tolerance_gib=1.0,
    timeout=5.0,
    duration=None,
    print_rules=False,
    print_dashboard=False,
    lifeboat_cards=None,
    no_vendor_series=False,
    **job_opts,
) -> None:
    """Serve Prometheus metrics (the vendor exporter's names where they overlap, plus
    nodeledger_*): per-card memory used / total / planned and headroom, utilisation,
    per-process memory, host RAM / swap, findings, the lifeboat card.  Samples once per
    --interval whatever the scrape rate.  --rules / --dashboard print the Prometheus rules and
    the Grafana dashboard over these metrics."""
    if print_rules or print_dashboard:
        from nodeledger.fleet import prometheus as fp

        if print_rules and print_dashboard:
            raise InputError("give --rules or --dashboard, not both")
        sys.stdout.write(fp.rules_text() if print_rules else fp.dashboard_text())
        return
    from nodeledger.watch.session import ExporterOptions, open_exporter

    opts = ExporterOptions(
        listen=listen, expose=expose, allow=tuple(allow), tls_cert=tls_cert, tls_key=tls_key,
        basic_auth_file=basic_auth_file, client_timeout=client_timeout,
        handler_threads=handler_threads, max_connections=max_connections, interval=interval,
        backend=backend, plan=plan, model=model, job=job, cards=cards, machine=machine,
        idle_window=idle_window, tolerance=tolerance, tolerance_gib=tolerance_gib,
        timeout=timeout, duration=duration, lifeboat_cards=lifeboat_cards,
        vendor_series=not no_vendor_series, job_options=job_opts,
    )  # fmt: skip
    for name, v in (("--interval", interval), ("--duration", duration),
                    ("--idle-window", idle_window), ("--timeout", timeout),
                    ("--client-timeout", client_timeout), ("--handler-threads", handler_threads),
                    ("--max-connections", max_connections)):  # fmt: skip
        _positive(name, v)
    if client_timeout > 3600:
        raise InputError(f"--client-timeout must be at most 3600 s, got {client_timeout:g}")
    _check_tolerance(tolerance, tolerance_gib)
    run = open_exporter(opts, warn=lambda text: sys.stderr.write(text + "\n"))
    sys.stderr.write(run.start_line + "\n")
    sys.stderr.flush()
    _stop_on_sigterm()
    run.serve()  # until --duration, Ctrl-C or SIGTERM (a service manager stopping it): exit 0
