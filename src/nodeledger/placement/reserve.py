"""Reservations: which replica of a plan holds which cards right now, and starting one safely.

``nodeledger run`` plans (``planner.plan``), picks a replica, reserves its cards in a small SQLite
file and then execs the command in its own process, so the pid it recorded is the command's pid.

- **State file**: ``--state FILE``, else ``$NODELEDGER_STATE``, else
  ``$XDG_STATE_HOME/nodeledger/reservations.sqlite`` (``~/.local/state/...``).  One row per
  reserved card: card index, machine name, replica, pid, the pid's start time (``/proc/PID/stat``
  field 22, to tell a reused pid), wall-clock start, the replica's host bytes.  The card is the
  primary key: one state file is one host, and a card is never booked twice, whatever plan or
  machine name asked for it.  A missing file is created with its schema in one step (built beside
  it, then hard-linked into place); an existing file that is empty or not a nodeledger state
  database is refused (exit 2), never taken as an empty state.
- **Locking**: every check-and-book is one ``BEGIN IMMEDIATE`` transaction (the write lock is taken
  before anything is read) with a busy timeout, so concurrent starts serialise and never
  double-book.
- **Dead holders**: at every check a reservation whose pid is gone (``os.kill(pid, 0)`` raises
  ProcessLookupError), a zombie, or a pid now owned by a younger process, is deleted: a crash or
  a ``kill -9`` frees the cards at the next check.  ``PermissionError`` means alive (another
  user's process).
- **Host RAM**: live ``MemAvailable`` minus the host bytes of reservations started within the last
  ``settle`` seconds (their loads may not have allocated yet) must be >= the replica's host bytes
  (its host-RAM peak from the ledger) — so two 60 GB loads never start together.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from typing_extensions import TypedDict

from nodeledger.errors import InputError, NodeledgerError
from nodeledger.machine.parsers.proc import meminfo, pid_stat
from nodeledger.machine.probe.runner import Runner
from nodeledger.units import gib_text

EXIT_REFUSED = 4
POLL_S = 1.0  # --wait: seconds between checks
SETTLE_S = 120.0  # default --settle
BUSY_TIMEOUT_S = 30.0  # SQLite busy timeout: how long a start waits for another's transaction
SCHEMA = """CREATE TABLE IF NOT EXISTS reservations (
    card INTEGER PRIMARY KEY,
    machine TEXT NOT NULL,
    replica TEXT NOT NULL,
    pid INTEGER NOT NULL,
    pid_start INTEGER,
    started REAL NOT NULL,
    host_bytes INTEGER NOT NULL
)"""
SQLITE_MAGIC = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite 3 database file
COLUMNS = ("card", "machine", "replica", "pid", "pid_start", "started", "host_bytes")


class StateError(InputError):
    """The state file is corrupt, unreadable or unwritable (exit 2, naming the file)."""


class Refused(NodeledgerError):
    """The replica cannot start now: its cards are reserved or host RAM is short (exit 4)."""

    exit_code = EXIT_REFUSED


@dataclass(frozen=True)
class Reservation:
    card: int
    machine: str
    replica: str
    pid: int
    pid_start: int | None
    started: float
    host_bytes: int

    def age(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.started)

    def as_dict(self, now: float | None = None) -> ReservationJSON:
        """The reservation as ``run --list --json`` prints it, units in the key names."""
        return {"card": self.card, "machine": self.machine, "replica": self.replica,
                "pid": self.pid, "pid_start_ticks": self.pid_start,
                "started_unix_s": self.started, "host_bytes": self.host_bytes,
                "age_s": round(self.age(now), 1)}  # fmt: skip


RUN_SCHEMA_VERSION = 1


class ReservationJSON(TypedDict):
    card: int
    machine: str
    replica: str
    pid: int
    pid_start_ticks: int | None  # /proc/PID/stat starttime (clock ticks since boot): pid reuse
    started_unix_s: float
    host_bytes: int  # host RAM the replica's plan counts
    age_s: float


class RunListJSON(TypedDict):
    """``run --list --json``: the live reservations, and the dead ones this check deleted."""

    schema_version: int
    state: str
    reservations: list[ReservationJSON]
    deleted_dead: list[ReservationJSON]


class RunReleaseJSON(TypedDict):
    """``run --release REPLICA --json``."""

    schema_version: int
    state: str
    released: list[ReservationJSON]
    still_running_pids: list[int]  # the process is never touched: its cards may still be in use
    deleted_dead: list[ReservationJSON]


def run_json_schemas() -> dict[str, dict]:
    from nodeledger.schemas import json_schema

    return {"run-list": json_schema(RunListJSON, "nodeledger run --list --json"),
            "run-release": json_schema(RunReleaseJSON, "nodeledger run --release REPLICA --json")}  # fmt: skip


def default_state_path() -> Path:
    env = os.environ.get("NODELEDGER_STATE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "nodeledger" / "reservations.sqlite"


# ---------------------------------------------------------------------------------------
# processes
# ---------------------------------------------------------------------------------------


def _live_runner(runner: Runner | None = None) -> Runner:
    """``runner``, else a fresh live one (a fresh one per call: its records do not pile up in a
    long-running process)."""
    return runner if runner is not None else Runner(live=True)


def _proc_stat(pid: int, runner: Runner | None = None) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) from /proc/PID/stat, or None."""
    st = pid_stat(_live_runner(runner).read(f"/proc/{pid}/stat"))
    if st is None or st.state is None or st.starttime is None:
        return None
    return st.state, st.starttime


def pid_start_time(pid: int, runner: Runner | None = None) -> int | None:
    st = _proc_stat(pid, runner)
    return st[1] if st else None


def alive(pid: int, pid_start: int | None = None, runner: Runner | None = None) -> bool:
    """Is the process that made a reservation still there?  Gone, zombie or pid reused: no."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    except OSError:
        return True  # cannot tell: keep the reservation (never double-book)
    st = _proc_stat(pid, runner)
    if st is None:
        return True
    state, start = st
    if state in ("Z", "X"):
        return False  # exited, not reaped yet: its memory and cards are free
    return pid_start is None or start == pid_start


# ---------------------------------------------------------------------------------------
# host RAM
# ---------------------------------------------------------------------------------------


def proc_root() -> Path:
    """Root under which /proc/meminfo is read: ``$NODELEDGER_PROC_ROOT`` (a fake tree in tests)."""
    return Path(os.environ.get("NODELEDGER_PROC_ROOT") or "/")


def host_memory(runner: Runner | None = None) -> tuple[int | None, int | None, str]:
    """(MemAvailable, MemTotal, where) from /proc/meminfo, live (default: a Runner rooted at
    ``proc_root()``); None where unreadable."""
    r = runner if runner is not None else Runner(root=proc_root())
    where = str(r.root / "proc" / "meminfo")
    text = r.read("/proc/meminfo")
    if text is None:
        return None, None, f"{where} unreadable ({r.problems.get('/proc/meminfo')})"
    mem = meminfo(text)
    return mem.get("MemAvailable"), mem.get("MemTotal"), where


gib = functools.partial(gib_text, decimals=2)


# ---------------------------------------------------------------------------------------
# the state file
# ---------------------------------------------------------------------------------------


class Store:
    """The reservations of one host, in one SQLite file."""

    def __init__(self, path: str | Path | None = None, busy_timeout: float = BUSY_TIMEOUT_S,
                 runner: Runner | None = None):  # fmt: skip
        """``runner``: where /proc is read (holders' /proc/PID/stat, /proc/meminfo); None: live."""
        if path is not None and not str(path).strip():
            raise StateError("--state: empty path")
        self.path = Path(path) if path is not None else default_state_path()
        self.busy_timeout = busy_timeout
        self.runner = runner
        self._db: sqlite3.Connection | None = None

    def _fail(self, what: str) -> StateError:
        return StateError(f"state file {str(self.path)!r}: {what}")

    def _connect(self) -> sqlite3.Connection:
        if self._db is not None:
            return self._db
        if self.path.is_dir():
            raise self._fail("is a directory")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._fail(f"cannot create its folder ({exc.strerror or exc})") from None
        fresh = False
        if not self.path.exists():
            fresh = self._create()
        if not fresh:
            self._check_header()
        try:
            db = sqlite3.connect(str(self.path), timeout=self.busy_timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise self._fail(f"cannot open ({exc})") from None
        self._db = db
        try:
            with self.transaction() as cur:
                if fresh:  # created in place (no hard links here): the schema comes now
                    cur.execute(SCHEMA)
                cols = tuple(r[1] for r in cur.execute("PRAGMA table_info(reservations)"))
                if not cols:
                    raise self._fail(
                        "not a nodeledger state file (an SQLite database without a reservations "
                        "table); move it away to start afresh"
                    )
                if set(cols) != set(COLUMNS):
                    raise self._fail(
                        f"not a nodeledger state file (table reservations has columns {list(cols)})"
                    )
        except BaseException:
            self.close()
            raise
        return db

    def _create(self) -> bool:
        """Create the state file with its schema in one step: built beside it under a temporary
        name, then hard-linked into place (a file that appeared meanwhile is kept), so no other
        start ever sees it empty.  True: no hard links on this file system, the caller creates it
        in place (the former way)."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{os.urandom(4).hex()}.new")
        try:
            db = sqlite3.connect(str(tmp), isolation_level=None)
            try:
                db.execute(SCHEMA)
            finally:
                db.close()
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                pass  # another start created it first: use that one
            except OSError:
                return True
        except sqlite3.Error as exc:
            raise self._fail(f"cannot create ({_sqlite_why(exc)})") from None
        except OSError as exc:
            raise self._fail(f"cannot create ({exc.strerror or exc})") from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return False

    def _check_header(self) -> None:
        """An existing file must be an SQLite database: an empty file is refused, never taken
        as an empty state (truncating the file would forget live reservations)."""
        try:
            with open(self.path, "rb") as fh:
                head = fh.read(len(SQLITE_MAGIC))
        except OSError as exc:
            raise self._fail(f"cannot read ({exc.strerror or exc})") from None
        if not head:
            raise self._fail("is empty, not a nodeledger state file; remove it to start afresh")
        if head != SQLITE_MAGIC:
            raise self._fail(
                "corrupt, not a nodeledger state file (not an SQLite database); "
                "move it away to start afresh"
            )

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        """One BEGIN IMMEDIATE transaction: the write lock first, then read, decide, write."""
        db = self._connect() if self._db is None else self._db
        try:
            cur = db.cursor()
            cur.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._fail(_sqlite_why(exc)) from None
        try:
            yield cur
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise self._fail(_sqlite_why(exc)) from None
            raise
        try:
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise self._fail(_sqlite_why(exc)) from None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # -- inside a transaction ----------------------------------------------------------

    def _rows(self, cur: sqlite3.Cursor) -> list[Reservation]:
        try:
            got = cur.execute(f"SELECT {', '.join(COLUMNS)} FROM reservations ORDER BY card")
            return [Reservation(*row) for row in got.fetchall()]
        except (sqlite3.Error, TypeError) as exc:
            raise self._fail(_sqlite_why(exc)) from None

    def _purge(self, cur: sqlite3.Cursor) -> tuple[list[Reservation], list[Reservation]]:
        """Delete the reservations of dead processes; (live rows, deleted rows)."""
        rows = self._rows(cur)
        verdict: dict[tuple[int, int | None], bool] = {}
        live, dead = [], []
        for r in rows:
            key = (r.pid, r.pid_start)
            if key not in verdict:
                verdict[key] = alive(r.pid, r.pid_start, self.runner)
            (live if verdict[key] else dead).append(r)
        for r in dead:
            try:
                cur.execute("DELETE FROM reservations WHERE card = ? AND pid = ?", (r.card, r.pid))
            except sqlite3.Error as exc:
                raise self._fail(_sqlite_why(exc)) from None
        return live, dead

    # -- public ------------------------------------------------------------------------

    def check(self) -> tuple[list[Reservation], list[Reservation]]:
        """(live reservations, reservations of dead processes just deleted)."""
        with self.transaction() as cur:
            return self._purge(cur)

    def release(self, replica: str) -> tuple[list[Reservation], list[Reservation]]:
        """Forget a replica's reservation (the process is not touched); (released, purged)."""
        with self.transaction() as cur:
            live, dead = self._purge(cur)
            mine = [r for r in live if r.replica == replica]
            if not mine:
                names = sorted({r.replica for r in live})
                raise InputError(
                    f"--release {replica!r}: no reservation of that replica in {self.path} "
                    f"(reserved: {', '.join(names) if names else 'none'})"
                )
            try:
                cur.execute("DELETE FROM reservations WHERE replica = ?", (replica,))
            except sqlite3.Error as exc:
                raise self._fail(_sqlite_why(exc)) from None
            return mine, dead

    def drop_pid(self, pid: int) -> None:
        """Delete the reservations of ``pid`` (its command could not be started)."""
        with self.transaction() as cur:
            cur.execute("DELETE FROM reservations WHERE pid = ?", (pid,))

    def take(self, plan: dict, target: str, pid: int, settle: float, now: float | None = None):
        """Check and book in one transaction.  Returns a Decision; books only when it is ok."""
        with self.transaction() as cur:
            live, dead = self._purge(cur)
            now = time.time() if now is None else now
            d = decide(plan, target, live, settle, now, runner=self.runner)
            if d.ok:
                start = pid_start_time(pid, self.runner)
                try:
                    cur.executemany(
                        "INSERT INTO reservations (card, machine, replica, pid, pid_start, "
                        "started, host_bytes) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [
                            (c, plan["machine"], d.replica["replica"], pid, start, now,
                             int(d.replica["host_bytes"] or 0))
                            for c in d.replica["cards"]
                        ],
                    )  # fmt: skip
                except sqlite3.IntegrityError as exc:  # pragma: no cover - decide() saw the rows
                    raise self._fail(f"a card is booked twice ({exc})") from None
                except sqlite3.Error as exc:
                    raise self._fail(_sqlite_why(exc)) from None
            d.purged = dead
            return d


def _sqlite_why(exc: Exception) -> str:
    text = str(exc)
    if "not a database" in text or "malformed" in text:
        return f"corrupt, not a nodeledger state file ({text}); move it away to start afresh"
    if "readonly" in text or "unable to open" in text or "disk I/O" in text:
        return f"cannot write ({text})"
    return text


# ---------------------------------------------------------------------------------------
# deciding
# ---------------------------------------------------------------------------------------


@dataclass
class Decision:
    ok: bool
    replica: dict | None = None
    reason: str = ""
    final: bool = False  # waiting cannot help (the replica can never fit host RAM)
    note: str | None = None
    purged: list[Reservation] | None = None


def _holder(r: Reservation, now: float) -> str:
    return f"{r.replica} (pid {r.pid}, started {r.age(now):,.0f} s ago)"


def _n(replica: str) -> int:
    tail = replica.rpartition("#")[2]
    return int(tail) if tail.isdigit() else 0


def find_replicas(plan: dict, target: str) -> list[dict]:
    """The plan's replicas ``target`` names: one for "id#n", all of a workload's for "id".
    InputError when it names none (with the plan's reason when the planner did not place it)."""
    reps = plan.get("replicas", [])
    exact = [r for r in reps if r["replica"] == target]
    if exact:
        return exact
    mine = sorted((r for r in reps if r["workload"] == target), key=lambda r: _n(r["replica"]))
    if mine:
        return mine
    left = [p for p in plan.get("not_placed", []) if target in (p["replica"], p["workload"])]
    if left:
        p = left[0]
        raise InputError(
            f"{target}: the plan does not place {p['replica']} ({p['binding']}: {p['reason']})"
        )
    names = [r["replica"] for r in reps] + [p["replica"] for p in plan.get("not_placed", [])]
    raise InputError(
        f"{target!r} is no replica or workload of the plan "
        f"(replicas: {', '.join(names) if names else 'none'})"
    )


def decide(plan: dict, target: str, live: list[Reservation], settle: float, now: float,
           runner: Runner | None = None) -> Decision:  # fmt: skip
    """May ``target`` start now, given the live reservations?  Cards first, then host RAM
    (/proc/meminfo through ``runner``; None: ``host_memory()``'s default)."""
    candidates = find_replicas(plan, target)
    by_card = {r.card: r for r in live}
    running = {r.replica for r in live}
    chosen, blocked = None, []
    for rep in candidates:
        if rep["replica"] in running:
            cards = sorted(r.card for r in live if r.replica == rep["replica"])
            h = next(r for r in live if r.replica == rep["replica"])
            blocked.append(f"{rep['replica']} already runs on card(s) {','.join(map(str, cards))} "
                           f"(pid {h.pid}, started {h.age(now):,.0f} s ago)")  # fmt: skip
            continue
        taken = [c for c in rep["cards"] if c in by_card]
        if taken:
            holders = {by_card[c].replica: by_card[c] for c in taken}
            blocked.append(
                f"{rep['replica']}: card(s) {','.join(map(str, taken))} reserved by "
                + ", ".join(_holder(h, now) for h in holders.values())
            )
            continue
        chosen = rep
        break
    if chosen is None:
        return Decision(False, reason="; ".join(blocked))
    need = int(chosen["host_bytes"] or 0)
    available, total, where = host_memory() if runner is None else host_memory(runner)
    if available is None:
        return Decision(True, chosen, note=f"host RAM not checked: MemAvailable not in {where}")
    if total is not None and need > total:
        return Decision(False, chosen, final=True, reason=(
            f"{chosen['replica']} needs {gib(need)} of host RAM (its host peak), more than the "
            f"{gib(total)} this host has (MemTotal, {where})"))  # fmt: skip
    settling = {}
    for r in live:
        if now - r.started < settle:
            settling[(r.replica, r.pid)] = r
    pending = sum(r.host_bytes for r in settling.values())
    left = available - pending
    if left >= need:
        return Decision(True, chosen)
    detail = ", ".join(f"{r.replica} {gib(r.host_bytes)} ({r.age(now):,.0f} s ago)"
                       for r in settling.values())  # fmt: skip
    return Decision(False, chosen, reason=(
        f"host RAM short for {chosen['replica']}: it needs {gib(need)} (its host peak); "
        f"MemAvailable {gib(available)} - {gib(pending)} of reservations started in the last "
        f"{settle:g} s (settling{': ' + detail if detail else ''}) = {gib(left)}"))  # fmt: skip


# ---------------------------------------------------------------------------------------
# planning and starting
# ---------------------------------------------------------------------------------------


def resolve_run_machine(ref: str | None):
    """(profile, live): --machine as given; none: probe this host.  A host whose probe
    finds no accelerator is refused (Refused, exit 4): `run` books cards on this host and
    starts the command there, so it never falls back to the reference machine as `report`
    does; --machine names a profile to book on instead (to rehearse a plan elsewhere)."""
    from nodeledger.machine import resolve_or_reference

    r = resolve_or_reference(ref)
    if r.reference:
        raise Refused(
            "no accelerator found on this host (live probe): run books this host's cards and "
            "starts the command here, so there is nothing to book; --machine PRESET|FILE|BUNDLE "
            "plans and books on that profile instead"
        )
    return r.profile, r.live


def load_plan_inputs(plan_file: str):
    """(workloads, specs) of a plan file (a workload catalogue, see verdict/catalogue.py)."""
    from nodeledger.verdict.catalogue import load_catalogue, load_specs

    ws, _ = load_catalogue(plan_file)
    return ws, load_specs(ws)


def make_plan(profile, workloads, specs, lifeboat: int | None, reserved_cards: set[int]) -> dict:
    """planner.plan on ``profile``, with the processes on cards we reserved not counted as
    foreign (a live probe sees our own running replicas; the plan must not move them)."""
    from nodeledger.placement.planner import plan

    if reserved_cards and any(a.processes for a in profile.accelerators):
        accs = [
            replace(a, processes=[]) if a.index in reserved_cards else a
            for a in profile.accelerators
        ]
        profile = replace(profile, accelerators=accs)
    return plan(profile, workloads, specs, lifeboat=lifeboat)


def reserve(
    store: Store,
    get_plan: Callable[[set[int]], dict],
    target: str,
    *,
    pid: int,
    wait: bool = False,
    timeout: float | None = None,
    settle: float = SETTLE_S,
    poll: float = POLL_S,
    say: Callable[[str], None] | None = None,
) -> Decision:
    """Book ``target``'s cards for ``pid``; Refused (exit 4) when it cannot start now, or, with
    ``wait``, not within ``timeout`` seconds (None: no limit), checking every ``poll`` s."""
    t0 = time.monotonic()
    last = None
    while True:
        live, _ = store.check()
        plan = get_plan({r.card for r in live})
        d = store.take(plan, target, pid, settle)
        if d.ok:
            return d
        if d.final or not wait:
            raise Refused(d.reason)
        waited = time.monotonic() - t0
        if timeout is not None and waited >= timeout:
            raise Refused(f"{d.reason} (waited {waited:,.1f} s, --timeout {timeout:g})")
        if say is not None and d.reason != last:
            say(f"waiting: {d.reason}")
        last = d.reason
        time.sleep(poll if timeout is None else min(poll, timeout - waited))


def command_line(replica: dict, cmd: list[str], which=None) -> tuple[list[str], str | None]:
    """(argv, note): the command under ``numactl`` with the replica's NUMA binding when it has
    one and numactl is on PATH; else the command alone and a note saying so."""
    import shutil

    which = which or shutil.which
    node, cpus = replica.get("numa_node"), replica.get("cpus")
    if node is None:
        return list(cmd), None
    bind = [f"--physcpubind={cpus}"] if cpus else [f"--cpunodebind={node}"]
    bind.append(f"--membind={node}")
    if which("numactl") is None:
        return list(cmd), (
            f"numactl not on PATH: {replica['replica']} starts without its NUMA binding "
            f"({' '.join(bind)})"
        )
    return ["numactl", *bind, "--", *cmd], None


def replica_env(replica: dict, base: dict | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update({k: str(v) for k, v in (replica.get("env") or {}).items()})
    env["NODELEDGER_REPLICA"] = replica["replica"]
    return env


@dataclass
class Booking:
    """A replica booked for this process (``book``): the command to exec with its environment,
    and the lines to say first."""

    replica: dict
    argv: list[str]
    env: dict[str, str]
    notes: list[str]  # the booking's and the NUMA binding's notes
    started: str  # "run <replica> on card(s) ... as pid ... (...; state ...)"
    store: Store  # closed; ``drop_pid`` reopens it when the exec fails


def book(state: str | None, plan_file: str, target: str, cmd: list[str], *, pid: int,
         machine: str | None = None, lifeboat: int | None = None, wait: bool = False,
         timeout: float | None = None, settle: float = SETTLE_S,
         say: Callable[[str], None] | None = None) -> Booking:  # fmt: skip
    """``nodeledger run``'s use case: plan ``plan_file`` on the machine (a live probe is taken
    again at every check), find ``target``, book its cards for ``pid`` and make its command line
    (``cmd``, else the workload's ``command``).  Refused (exit 4) when it cannot start (now, or
    within ``timeout`` with ``wait``); InputError for a bad state file, plan or replica."""
    store = Store(state)
    try:
        store.check()  # a bad state file is reported before any planning
        workloads, specs = load_plan_inputs(plan_file)
        profile, live = resolve_run_machine(machine)
        cached: dict = {}

        def get_plan(reserved: set[int]) -> dict:
            if live or "plan" not in cached:
                prof = resolve_run_machine(machine)[0] if live and cached else profile
                cached["plan"] = make_plan(prof, workloads, specs, lifeboat, reserved)
            return cached["plan"]

        reps = find_replicas(get_plan({r.card for r in store.check()[0]}), target)
        if not cmd:  # unknown / unplaced replica: InputError above, before any wait
            w = next((w for w in workloads if w.id == reps[0]["workload"]), None)
            if w is None or not w.command:
                raise InputError(
                    f"no command for {target}: give it after -- or set `command` of workload "
                    f"{reps[0]['workload']!r} in {plan_file}"
                )
            cmd = list(w.command)
        d = reserve(store, get_plan, target, pid=pid, wait=wait, timeout=timeout,
                    settle=settle, say=say)  # fmt: skip
    finally:
        store.close()
    rep = d.replica
    argv, bind_note = command_line(rep, cmd)
    shown = " ".join(f"{k}={v}" for k, v in sorted((rep.get("env") or {}).items()))
    started = (f"run {rep['replica']} on card(s) {','.join(map(str, rep['cards']))} as pid {pid} "
               f"({shown}; state {store.path})")  # fmt: skip
    notes = [line for line in (d.note, bind_note) if line]
    return Booking(rep, argv, replica_env(rep), notes, started, store)
