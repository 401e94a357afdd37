"""CLI layer of `nodeledger run` (rendering only; the work is in placement/reserve.py).

Exit codes: 0 ok (``--list`` / ``--release``; a start replaces this process with the command,
whose exit code is then the command's own); 2 bad input, a state file that is corrupt or
unwritable, a command that cannot be started (one line); 4 refused: the replica's cards are
reserved by a live process or host RAM is short (with ``--wait``: still so at ``--timeout``).
"""

from __future__ import annotations

import json
import os
import sys
import time

import click

from nodeledger.cli.common import (
    console,
)
from nodeledger.errors import InputError
from nodeledger.units import gib_num

HELP = (
    "Start one replica of a plan on its cards, with its environment and NUMA binding.\n\n"
    "Plans PLAN.toml (a workload catalogue) with the placement planner, reserves REPLICA's cards "
    "in a state file and execs the command (after --; else the workload's `command` in the plan) "
    "as `numactl --physcpubind=CPUS --membind=NODE -- CMD` with the replica's *_VISIBLE_DEVICES. "
    'REPLICA is "id#n", or a workload id: its first replica whose cards are free.\n\n'
    "Refused (exit 4) while its cards are reserved by a live process, or while live MemAvailable "
    "minus the host bytes of reservations started in the last --settle seconds is below the "
    "replica's host peak; --wait checks again every second. Reservations of dead processes are "
    "deleted at every check. --list shows the reservations, --release REPLICA forgets one."
)


def _err(line: str) -> None:
    sys.stderr.write(f"nodeledger: {line}\n")
    sys.stderr.flush()


@click.command("run", help=HELP)
@click.argument(
    "args",
    nargs=-1,
    help='"id#n" or a workload id, then the command after -- (argv, no shell).',
    metavar="REPLICA [-- CMD...]",
)
@click.option("--plan", "plan", help="The plan: a workload catalogue TOML.")
@click.option(
    "--machine",
    "machine",
    help="Preset, profile file or bundle; default: probe this host, or the bundled reference machine when it has no accelerator.",
)
@click.option("--wait", "wait", is_flag=True, help="Wait (checking every 1 s) instead of refusing.")
@click.option(
    "--timeout", "timeout", type=float, help="With --wait: give up (exit 4) after S seconds."
)
@click.option(
    "--state",
    "state",
    help="Reservations file (SQLite); default $NODELEDGER_STATE or ~/.local/state/nodeledger/reservations.sqlite.",
)
@click.option(
    "--lifeboat",
    "lifeboat",
    type=int,
    default=None,
    help="Cards kept free by the plan [default: 1; 0 on a one-card machine].",
)
@click.option(
    "--settle",
    "settle",
    type=float,
    default=120.0,
    show_default=True,
    help="Seconds a new start's host bytes count against MemAvailable (its load may not have allocated yet).",
)
@click.option(
    "--list", "list_", is_flag=True, help="Show the live reservations (dead ones are deleted)."
)
@click.option(
    "--release",
    "release",
    help="Forget REPLICA's reservation (manual cleanup; the process is not touched).",
)
@click.option("--json", "as_json", is_flag=True, help="JSON (with --list / --release).")
def run_cmd(
    args=None,
    plan=None,
    machine=None,
    wait=False,
    timeout=None,
    state=None,
    lifeboat=None,
    settle=120.0,
    list_=False,
    release=None,
    as_json=False,
) -> None:
    from nodeledger.placement import reserve as rs

    args = list(args or [])
    if list_ or release is not None:
        if list_ and release is not None:
            raise InputError("--list and --release: give one")
        extra = [
            name
            for name, given in (
                ("REPLICA/CMD", bool(args)), ("--plan", plan is not None),
                ("--machine", machine is not None), ("--wait", wait),
                ("--timeout", timeout is not None),
            )
            if given
        ]  # fmt: skip
        if extra:
            raise InputError(
                f"{'--list' if list_ else '--release'} takes only --state and --json, "
                f"not {', '.join(extra)}"
            )
        store = rs.Store(state)
        if list_:
            _list(store, as_json)
        else:
            _release(store, release, as_json)
        return
    if as_json:
        raise InputError("--json applies to --list and --release (a start execs the command)")
    if plan is None:
        raise InputError("run needs --plan PLAN.toml (a workload catalogue), or --list / --release")
    if not args:
        raise InputError('run needs a REPLICA ("id#n" or a workload id) after the options')
    if timeout is not None and not wait:
        raise InputError("--timeout applies to --wait")
    if timeout is not None and not timeout > 0:
        raise InputError(f"--timeout must be > 0, got {timeout:g}")
    if not settle >= 0:
        raise InputError(f"--settle must be >= 0 seconds, got {settle:g}")
    pid = os.getpid()  # exec keeps it: the reservation names the command's own process
    try:
        b = rs.book(state, plan, args[0], args[1:], pid=pid, machine=machine, lifeboat=lifeboat,
                    wait=wait, timeout=timeout, settle=settle, say=_err)  # fmt: skip
    except rs.Refused as exc:
        _err(f"refused: {exc}")
        raise click.exceptions.Exit(rs.EXIT_REFUSED) from None
    for line in [*b.notes, b.started]:
        _err(line)
    sys.stdout.flush()
    try:
        os.execvpe(b.argv[0], b.argv, b.env)
    except OSError as exc:
        b.store.drop_pid(pid)
        b.store.close()
        raise InputError(f"cannot start {b.argv[0]!r}: {exc.strerror or exc}") from None


def _list(store, as_json: bool) -> None:
    from nodeledger.placement import reserve as rs

    live, dead = store.check()
    store.close()
    now = time.time()
    if as_json:
        sys.stdout.write(json.dumps({
            "schema_version": rs.RUN_SCHEMA_VERSION, "state": str(store.path),
            "reservations": [r.as_dict(now) for r in live],
            "deleted_dead": [r.as_dict(now) for r in dead],
        }, indent=2) + "\n")  # fmt: skip
        return
    for r in dead:
        print(f"deleted: {r.replica} card {r.card} (pid {r.pid} is gone)")
    if not live:
        print(f"no reservations in {store.path}")
        return
    from rich.table import Table

    t = Table(title=f"Reservations ({store.path})")
    for col in ("card", "replica", "pid", "started", "host RAM", "machine"):
        t.add_column(col)
    for r in live:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.started))
        t.add_row(str(r.card), r.replica, str(r.pid), f"{started} ({r.age(now):,.0f} s ago)",
                  f"{gib_num(r.host_bytes, 2)} GiB", r.machine)  # fmt: skip

    console().print(t)


def _release(store, replica: str, as_json: bool) -> None:
    from nodeledger.placement import reserve as rs
    from nodeledger.placement.reserve import alive

    gone, dead = store.release(replica)
    store.close()
    pids = sorted({r.pid for r in gone})
    still = [p for p in pids if alive(p)]
    if as_json:
        sys.stdout.write(json.dumps({
            "schema_version": rs.RUN_SCHEMA_VERSION,
            "state": str(store.path), "released": [r.as_dict() for r in gone],
            "still_running_pids": still, "deleted_dead": [r.as_dict() for r in dead],
        }, indent=2) + "\n")  # fmt: skip
        return
    cards = ",".join(str(r.card) for r in gone)
    print(f"released {replica}: card(s) {cards} (pid {', '.join(map(str, pids))})")
    if still:
        _err(f"pid {', '.join(map(str, still))} still runs: its card(s) may still be in use")
