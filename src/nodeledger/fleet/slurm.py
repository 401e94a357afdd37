"""Slurm hooks: a task prolog that admits a job only when its ledger keeps the host-RAM rules
and leaves the lifeboat card free, and an epilog that releases what the prolog booked.

Where they run (slurm.conf), both written by ``nodeledger slurm hooks`` (hook_scripts below:
Slurm runs them with no PATH, so they name nodeledger by its absolute path):

- ``TaskProlog=/etc/nodeledger/task-prolog`` (``exec /abs/path/nodeledger slurm prolog --plan
  /etc/nodeledger/plan.toml --state /var/lib/nodeledger/state.sqlite``).  A task prolog runs as
  the job's user with the job's environment, before each task; what it prints as
  ``print <text>`` goes to the task's standard output (Slurm's prolog/epilog guide), so the
  reason of a refusal is in the job's output.  A failing *Prolog* would drain the node; this
  hook never fails the node: it exits 0 and cancels the job it refuses (``scancel``).
- ``Epilog=/etc/nodeledger/epilog`` (``/abs/path/nodeledger slurm epilog --state ...``, exit 0
  whatever happens): releases the job's booking.  A booking whose holder process died is
  purged at the next check anyway.

Rules (the same as `nodeledger run`, placement/reserve.py):

1. The job names its replica of the plan: ``NODELEDGER_REPLICA`` (``place --emit slurm``
   writes it into the sbatch file) — "id#n" or a workload id.  Its workload is planned alone on
   what is left: the free cards (booked cards hold their booking) and host RAM less the host
   peaks of the bookings; the plan's own host-RAM rule then refuses a second ~60 GB load
   while the first runs on a 125 GiB box.
2. Lifeboat (a team's field rule: keep one card free for triage): a job whose cards
   (``SLURM_JOB_GPUS``, else ``CUDA_VISIBLE_DEVICES`` / ``ROCR_VISIBLE_DEVICES`` /
   ``HIP_VISIBLE_DEVICES``) leave fewer than ``lifeboat`` cards free is refused; a job Slurm
   gave no cards to is planned with the lifeboat kept (the plan refuses it when it cannot
   keep one).  The booking holds the cards Slurm chose.  A job without a replica is not the
   plan's: only the lifeboat rule applies (it books nothing: a later check sees it only
   through a live probe's processes).
3. Host RAM now: live MemAvailable minus the host bytes of bookings started within ``settle``
   seconds must cover the replica's host-RAM peak (the ledger's): a load still reading its
   checkpoint has not allocated yet.
4. Once per job: the first task books and writes ``<state>.slurm/<job id>``; later tasks of the
   same job see it and pass.  The job id must be digits (it becomes a file name).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path

from nodeledger.atomic import write_text
from nodeledger.errors import InputError
from nodeledger.placement import reserve as rs
from nodeledger.units import gib_num

_DIGITS = re.compile(r"^[0-9]{1,12}$")
_CARDS = re.compile(r"^[0-9]{1,4}(,[0-9]{1,4}){0,255}$")


@dataclass
class Admission:
    ok: bool
    job: str
    replica: str | None = None
    cards: list[int] = field(default_factory=list)
    reason: str = ""
    notes: list[str] = field(default_factory=list)
    already: bool = False  # a later task of a job already admitted

    def lines(self) -> list[str]:
        """The task prolog's output: ``print`` lines reach the task's stdout."""
        if self.ok:
            if self.already:
                return []
            what = f"{self.replica} on card(s) {','.join(map(str, self.cards))}" if self.replica \
                else "no replica named (NODELEDGER_REPLICA unset): admitted as not the plan's"  # fmt: skip
            return [f"print nodeledger: job {self.job} admitted: {what}"] + [
                f"print nodeledger: note: {n}" for n in self.notes
            ]
        return [f"print nodeledger: job {self.job} refused: {self.reason}"]


def job_id(env: dict) -> str:
    jid = (env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or "").strip()
    if not _DIGITS.match(jid):
        raise InputError(
            "SLURM_JOB_ID is unset or not a job number "
            f"({jid[:40]!r}): run this as Slurm's TaskProlog / Epilog"
        )
    return jid


def job_cards(env: dict) -> list[int] | None:
    """The cards Slurm gave the job (indices as gres.conf numbers them), or None if unknown."""
    for key in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES",
                "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):  # fmt: skip
        v = (env.get(key) or "").strip()
        if v:
            if not _CARDS.match(v):
                raise InputError(f"{key}={v[:60]!r} is not a list of card numbers")
            return [int(x) for x in v.split(",")]
    return None


def _marker_dir(store: rs.Store) -> Path:
    return Path(str(store.path) + ".slurm")


def admit(env: dict, plan_file: str, store: rs.Store, machine: str | None = None,
          lifeboat: int = 1, settle: float = rs.SETTLE_S,
          pid: int | None = None) -> Admission:  # fmt: skip
    """Decide (and book when ok) the job of ``env``; InputError on bad input."""
    jid = job_id(env)
    mark = _marker_dir(store) / jid
    if mark.is_file():
        return Admission(True, jid, already=True)
    cards = job_cards(env)
    target = (env.get("NODELEDGER_REPLICA") or "").strip()
    workloads, specs = rs.load_plan_inputs(plan_file)
    profile, _live = rs.resolve_run_machine(machine)
    live, _dead = store.check()
    notes: list[str] = []
    booked = _booked(profile, live)  # the booked cards as taken, their host RAM as used
    free = [a.index for a in booked.accelerators if not a.processes]
    if target:
        wid = target.rpartition("#")[0] if "#" in target else target
        ws = [w for w in workloads if w.id == wid]
        if not ws:
            raise InputError(
                f"NODELEDGER_REPLICA={target[:80]!r}: no workload {wid[:80]!r} in {plan_file}"
            )
    if cards is not None and len(set(free) - set(cards)) < lifeboat:
        return Admission(False, jid, replica=target or None, cards=cards, reason=(
            f"its card(s) {','.join(map(str, cards))} leave {len(set(free) - set(cards))} "
            f"card(s) free of {len(booked.accelerators)}: keep {lifeboat} free as the "
            f"lifeboat for triage (free now: {','.join(map(str, free)) or 'none'})"))  # fmt: skip
    if not target:  # not one of the plan's jobs: only the lifeboat rule applies
        if cards is None:
            notes.append("the job's cards are unknown (no SLURM_JOB_GPUS): lifeboat not checked")
        _mark(mark, jid, None)
        return Admission(True, jid, cards=cards or [], notes=notes)
    # the plan of this one workload on what is left: free cards, host RAM minus the bookings
    plan = rs.make_plan(booked, ws, specs, lifeboat, set())
    left = [p for p in plan.get("not_placed", []) if target in (p["replica"], p["workload"])]
    placed = [r for r in plan.get("replicas", []) if target in (r["replica"], r["workload"])]
    if left and not placed:  # the plan itself cannot place it now (host RAM, cards)
        p = left[0]
        held = {r.replica: r.host_bytes for r in live}
        why = (p["reason"] if str(p["reason"]).startswith(str(p["binding"]))
               else f"{p['binding']}: {p['reason']}")  # fmt: skip
        if held and p["binding"] == "host RAM" and profile.host.ram_bytes:
            why += (f" left of the host's {gib_num(profile.host.ram_bytes)} GiB once "
                    + ", ".join(f"{k} ({gib_num(v)} GiB host peak)" for k, v in held.items())
                    + " runs")  # fmt: skip
        boats = plan.get("lifeboat") or []
        if p["binding"] == "cards" and boats:
            why += f"; card {','.join(map(str, boats))} kept free as the lifeboat for triage"
        elif p["binding"] == "cards" and lifeboat and len(free) >= 1:
            why += f" once {lifeboat} card is kept free as the lifeboat for triage"
        return Admission(False, jid, replica=target, cards=cards or [],
                         reason=f"the plan does not place {p['replica']} on this host now ({why})")  # fmt: skip
    if cards is not None:  # Slurm chose the cards: the booking holds those
        for r in plan.get("replicas", []):
            if target in (r["replica"], r["workload"]) and len(r["cards"]) == len(cards):
                r["cards"] = sorted(cards)
    d = store.take(plan, target, os.getppid() if pid is None else pid, settle)
    if not d.ok:
        return Admission(False, jid, replica=target, cards=cards or [], reason=d.reason)
    rep = d.replica
    if cards is not None and sorted(cards) != sorted(rep["cards"]):
        notes.append(
            f"Slurm gave card(s) {','.join(map(str, cards))}; the plan books "
            f"{rep['replica']} on {','.join(map(str, rep['cards']))} (gres.conf from "
            "`place --emit slurm` keeps them the same)"
        )
    if d.note:
        notes.append(d.note)
    _mark(mark, jid, rep["replica"])
    return Admission(True, jid, replica=rep["replica"], cards=list(rep["cards"]), notes=notes)


def _booked(profile, live: list) -> object:
    """``profile`` as the planner must see it with the live bookings: each booked card holds
    its booking's process (so it is taken), and host RAM is less the booked replicas' host
    peaks (each replica once) — the planner's own host-RAM rule then refuses a second big
    load while the first runs."""
    from nodeledger.machine.profile import CardProcess

    by_card = {r.card: r for r in live}
    accs = [
        replace(a, processes=[*a.processes, CardProcess(
            pid=by_card[a.index].pid, name=f"nodeledger booking {by_card[a.index].replica}")])
        if a.index in by_card else a
        for a in profile.accelerators
    ]  # fmt: skip
    host_used = sum({r.replica: r.host_bytes for r in live}.values())
    host = profile.host
    if host.ram_bytes is not None and host_used:
        host = replace(host, ram_bytes=max(1, host.ram_bytes - host_used))
    return replace(profile, accelerators=accs, host=host)


def _mark(mark: Path, jid: str, replica: str | None) -> None:
    try:
        mark.parent.mkdir(mode=0o1777, exist_ok=True)
        write_text(mark, f"{replica or ''}\n")
    except OSError as exc:
        raise InputError(f"{mark}: cannot record the admission: {exc.strerror or exc}") from None


def release(env: dict, store: rs.Store) -> str | None:
    """The epilog: forget the job's booking (its replica), if the prolog made one."""
    jid = job_id(env)
    mark = _marker_dir(store) / jid
    try:
        replica = mark.read_text(encoding="utf-8").strip() if mark.is_file() else ""
    except OSError:
        replica = ""
    if replica:
        store.release(replica)
    with contextlib.suppress(OSError):
        mark.unlink(missing_ok=True)
    return replica or None


def cancel(jid: str, timeout: float = 10.0) -> str | None:
    """``scancel JOBID`` (the user may cancel their own job); the problem, or None."""
    try:
        r = subprocess.run(["scancel", jid], capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return "scancel not found"
    except subprocess.TimeoutExpired:
        return f"scancel timed out after {timeout:g} s"
    if r.returncode != 0:
        return f"scancel exit {r.returncode}: {(r.stderr or r.stdout).strip()[:160]}"
    return None


# -- the hook scripts slurm.conf names ----------------------------------------------------------

# Slurm runs prolog and epilog programs "without a search path set ... either specify fully
# qualified path names in the program or set the PATH environment variable" (Slurm's Prolog and
# Epilog Guide, slurm.schedmd.com/prolog_epilog.html): `exec nodeledger ...` there is exit 127,
# and a failing Epilog drains the node.  So the scripts name nodeledger by the absolute path it
# ran from when they were written, and set a PATH for what nodeledger itself runs (scancel).
STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _absolute(option: str, path: str) -> str:
    if not isinstance(path, str) or not os.path.isabs(path):
        raise InputError(
            f"{option} {path!r}: give an absolute path (Slurm runs the hooks from its own "
            "working directory, with no PATH)"
        )
    return path


def hook_scripts(nodeledger: list[str], plan: str, state: str, machine: str | None = None,
                 lifeboat: int = 1, settle: float | None = None,
                 scancel: str | None = None) -> dict[str, str]:  # fmt: skip
    """``{"task-prolog": text, "epilog": text}``: the TaskProlog and Epilog for slurm.conf.
    ``nodeledger`` is the argv that runs nodeledger (its first word an absolute path: the
    running program, or ``python -m nodeledger``); ``scancel`` the absolute path of scancel
    where it was found (its folder goes first on the prolog's PATH).  The TaskProlog execs
    `nodeledger slurm prolog` (its `print` lines reach the job's output); when nodeledger is
    not at that path it prints why and admits the job (exit 0).  The Epilog always exits 0: a
    booking it could not release is purged once its holder process is gone."""
    import shlex

    from nodeledger.verdict.catalogue import CONTROL_RE

    if not nodeledger or not os.path.isabs(nodeledger[0]):
        raise InputError(f"nodeledger's own path {nodeledger[:1]!r} is not absolute")
    _absolute("--plan", plan)
    _absolute("--state", state)
    if machine and ("/" in machine or machine.endswith((".json", ".toml", ".gz", ".tar"))):
        _absolute("--machine", machine)
    words = [*nodeledger, plan, state, machine or "", scancel or ""]
    for w in words:
        if CONTROL_RE.search(w):
            raise InputError(f"refusing to write {w!r} into a hook script: a control character")
    q = shlex.quote
    exe = q(nodeledger[0])
    run = " ".join(q(w) for w in nodeledger)
    path = STD_PATH
    if scancel and os.path.isabs(scancel) and os.path.dirname(scancel) not in STD_PATH.split(":"):
        path = f"{os.path.dirname(scancel)}:{STD_PATH}"
    args = ["slurm", "prolog", "--plan", plan, "--state", state, "--lifeboat", str(lifeboat)]
    if machine:
        args += ["--machine", machine]
    if settle is not None:
        args += ["--settle", f"{settle:g}"]
    prolog = [
        "#!/bin/sh",
        "# Slurm TaskProlog, written by `nodeledger slurm hooks`: in slurm.conf",
        "# TaskProlog=<this file> (mode 0755).  It admits the job only when the plan places its",
        "# replica here now (host RAM, the lifeboat card): the reason goes to the job's output and",
        "# a refused job is scancelled; it never fails the node.",
        "# Slurm runs it with no PATH (Slurm's Prolog and Epilog Guide): nodeledger is named by",
        "# the absolute path it ran from when this file was written; scancel comes from PATH.",
        f'PATH="${{PATH:+$PATH:}}{path}"',
        "export PATH",
        f"if [ ! -x {exe} ]; then",
        f'    echo "print nodeledger:" {exe} "is not on this node: job ${{SLURM_JOB_ID:-?}} '
        'admitted unchecked (write this file again with nodeledger slurm hooks)"',
        "    exit 0",
        "fi",
        f"exec {run} {' '.join(q(a) for a in args)}",
        "",
    ]
    epilog = [
        "#!/bin/sh",
        "# Slurm Epilog, written by `nodeledger slurm hooks`: in slurm.conf Epilog=<this file>",
        "# (mode 0755).  It releases the booking the TaskProlog made for the job.",
        "# Slurm runs it with no PATH (Slurm's Prolog and Epilog Guide): nodeledger is named by",
        "# the absolute path it ran from when this file was written.  A failing Epilog drains the",
        "# node: this one always exits 0 (a booking it cannot release is purged once its holder",
        "# process is gone); what went wrong goes to stderr (slurmd's log).",
        f"if [ ! -x {exe} ]; then",
        f'    echo "nodeledger epilog:" {exe} "is not on this node: the booking of job '
        '${SLURM_JOB_ID:-?} is left (purged once its holder is gone)" >&2',
        "    exit 0",
        "fi",
        f'{run} slurm epilog --state {q(state)} || echo "nodeledger epilog: exit $? for job '
        '${SLURM_JOB_ID:-?}: the booking is left (purged once its holder is gone)" >&2',
        "exit 0",
        "",
    ]
    return {"task-prolog": "\n".join(prolog), "epilog": "\n".join(epilog)}
