"""``nodeledger golive``: the pre-production checklist of one machine, as one report.

Steps, each ``pass`` / ``fail`` / ``unavailable`` with its evidence:

1. **doctor clean** — ``nodeledger doctor``'s checks (``doctor.run_checks``): pass when doctor
   would exit 0 (ok / info / unknown / skip), fail on any warning or error.  Unavailable when the
   machine is a preset or profile file (no live state to check).
2. **card settings** — per card from the probe: persistence mode on (NVIDIA), ECC on where the
   card reports it, no uncorrected ECC error, no page retirement or row remap pending, no failed
   remap, not split by MIG / compute partitions (the plan places whole cards).  Clocks are not in
   the probe profile and are listed as not confirmed.  Unavailable with no card or no card state.
3. **bench figures ok** — ``nodeledger bench --quick`` on this host (or a recorded
   ``bench --json`` via ``--bench-json``): fail on any ``low`` or ``bad`` figure; ``unknown`` and
   ``unavailable`` figures (no torch, no card) do not fail the step.
4. **plan fits with its lifeboat** — ``placement.planner.plan(machine, workloads, specs,
   lifeboat=1)``: every replica placed and one card kept free.  Unavailable without ``--plan``
   or on a machine without cards.
5. **recovery drill** — start a canary process on the lifeboat card (``CUDA_VISIBLE_DEVICES`` /
   ``HIP_VISIBLE_DEVICES`` / ``ASCEND_RT_VISIBLE_DEVICES`` = the card; 512 MiB of host memory
   touched, 1 GiB on the card when torch sees it), reserve the card for it in ``nodeledger
   run``'s state file, kill it on purpose (SIGKILL), and confirm:
   - host memory back: no process of the canary (nor a child of it) is left — the kernel frees a
     dead process's private memory — with MemAvailable before / while / after as corroboration
     (back within max(128 MiB, 25 %) of before, or up by half the canary's VmRSS; MemAvailable
     is machine-wide, so other processes move it and it alone never fails the step);
   - card memory back: nvidia-smi memory.used of the card within 64 MiB of before, polled for
     up to 10 s (the driver cleans up after the process);
   - the reservation clears: the state file's next check deletes the dead holder's row.
   Without cards the canary is host-only and the card parts say so.  The lifeboat is the plan's;
   without a plan the highest-numbered card no process holds.

Exit code: 0 when no step fails (unavailable allowed), 1 when any step fails; 2 bad input.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from nodeledger.errors import InputError, NodeledgerError
from nodeledger.files import check_user_file
from nodeledger.machine.parsers.proc import pid_stat, pid_status
from nodeledger.machine.probe.runner import Runner
from nodeledger.machine.vendors import all_specs as all_vendor_specs
from nodeledger.machine.vendors import spec as vendor_spec
from nodeledger.schemas import json_schema
from nodeledger.units import GiB, MiB, gib_num, gib_text

STATUSES = ("pass", "fail", "unavailable")
CANARY_HOST_BYTES = 512 * MiB
CANARY_CARD_BYTES = 1 * GiB
CANARY_LIFE_S = 120.0  # the canary leaves by itself if nobody kills it
READY_TIMEOUT_S = 90.0  # torch import + context creation
BACK_TIMEOUT_S = 10.0  # card memory: the driver cleans up after the process
HOST_BACK_S = 2.0  # host memory: freed by the kernel before wait() returns
CARD_SLACK = 64 * MiB

CANARY = r"""
import json, os, sys, time
n, card_n, life = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
buf = bytearray(n)
for i in range(0, n, 4096):
    buf[i] = 1
card, note = 0, ""
if card_n:
    try:
        import torch
        if torch.cuda.is_available() and torch.cuda.device_count() > 0:
            x = torch.empty(card_n, dtype=torch.uint8, device="cuda:0")
            x.fill_(1)
            torch.cuda.synchronize()
            card = card_n
        else:
            note = "torch sees no card (CUDA_VISIBLE_DEVICES=%s)" % os.environ.get("CUDA_VISIBLE_DEVICES")
    except ImportError:
        note = "needs torch to hold card memory (pip install 'nodeledger[bench]')"
    except Exception as e:
        note = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:200])
print(json.dumps({"host_bytes": n, "card_bytes": card, "card_note": note}), flush=True)
time.sleep(life)
"""


# ``golive --json``: the machine-readable contract (issue 31), its JSON Schema generated from
# these types and shipped as nodeledger/schemas/golive.schema.json
SCHEMA_VERSION = 1


class StepJSON(TypedDict):
    id: Literal["doctor", "cards", "bench", "plan", "drill"]
    title: str
    status: Literal["pass", "fail", "unavailable"]
    summary: str
    evidence: list[str]
    details: dict[str, Any]  # per step: findings, figures (bytes in *_bytes keys), the card


class GoLiveJSON(TypedDict):
    schema_version: int
    machine: str
    origin: str
    plan: str | None
    steps: list[StepJSON]
    counts: dict[str, int]  # steps per status
    allowed_unavailable: list[str]
    exit_code: int
    verdict: str
    bench: dict[str, Any] | None  # the recorded `bench --json` it judged, if one was given


def golive_json_schema() -> dict[str, Any]:
    """The JSON Schema of ``golive --json``, generated from :class:`GoLiveJSON`."""
    return json_schema(GoLiveJSON, "nodeledger golive --json")


def step(sid: str, title: str, status: str, summary: str, evidence: list[str] | None = None,
         **details) -> dict:  # fmt: skip
    if status not in STATUSES:
        raise ValueError(f"status {status!r} not one of {STATUSES}")
    return {"id": sid, "title": title, "status": status, "summary": summary,
            "evidence": list(evidence or []), "details": details}  # fmt: skip


_gib = functools.partial(gib_text, decimals=2)


# ---------------------------------------------------------------------------------------
# 1. doctor
# ---------------------------------------------------------------------------------------


def doctor_step(state, datasets: tuple[str, ...] = ()) -> dict:
    title = "doctor clean"
    if not state.live:
        return step("doctor", title, "unavailable",
                    f"no live state to check ({state.origin}): run on the machine itself or --machine BUNDLE")  # fmt: skip
    from nodeledger.doctor import exit_code, run_checks

    findings = run_checks(state, datasets)
    code = exit_code(findings)
    loud = [f for f in findings if f.severity in ("warning", "error")]
    ev = [
        f"{f.severity}: {f.id}: {f.message}" + (f" (fix: {f.fix})" if f.fix else "") for f in loud
    ]
    quiet = {
        s: sum(1 for f in findings if f.severity == s) for s in ("ok", "info", "unknown", "skip")
    }
    ev.append("other checks: " + ", ".join(f"{n} {s}" for s, n in quiet.items() if n))
    if code == 0:
        return step("doctor", title, "pass", f"{len(findings)} checks, no warning or error", ev,
                    findings=[f.to_json() for f in findings])  # fmt: skip
    return step("doctor", title, "fail",
                f"{len(loud)} of {len(findings)} checks warn or err (doctor exit {code})", ev,
                findings=[f.to_json() for f in findings])  # fmt: skip


# ---------------------------------------------------------------------------------------
# 2. card settings
# ---------------------------------------------------------------------------------------

_STATE_FIELDS = ("persistence_mode", "ecc_mode", "ecc_errors_corrected", "ecc_errors_uncorrected",
                 "retired_pages", "retired_pages_pending", "remapped_rows_pending",
                 "remapped_rows_failed", "partition", "memory_used_bytes")  # fmt: skip


def partition_split(p: str | None) -> bool:
    """MIG enabled (as the probe writes it: "MIG enabled" / "MIG Enabled"), or an AMD compute
    partition other than SPX (one partition)."""
    t = (p or "").strip().lower()
    if "mig" in t:
        return re.match(r"^mig\s*:?\s*enabled", t) is not None
    return any(x in (p or "").upper().split(", ")[-1] for x in ("CPX", "DPX", "QPX", "TPX"))


def card_problems(a) -> tuple[list[str], list[str]]:
    """(failures, notes) of one card's settings (pure)."""
    bad, notes = [], []
    nv = vendor_spec(a.vendor).nvidia_settings  # persistence mode is NVIDIA's driver setting
    if nv and a.persistence_mode == "disabled":
        bad.append("persistence mode off (sudo nvidia-smi -pm 1)")
    if a.ecc_mode == "disabled":
        bad.append("ECC off (memory errors go undetected; nvidia-smi -e 1, then reset)")
    if a.ecc_errors_uncorrected:
        bad.append(f"{a.ecc_errors_uncorrected} uncorrected ECC errors since the driver loaded")
    if a.retired_pages_pending == "yes":
        bad.append("a page retirement waits for a reset")
    if a.remapped_rows_pending == "yes":
        bad.append("a row remap waits for a reset")
    if a.remapped_rows_failed == "yes":
        bad.append("a row remap failed (the card needs service)")
    if partition_split(a.partition):
        bad.append(f"split by partitions ({a.partition}): the plan places whole cards")
    if a.ecc_errors_corrected:
        notes.append(f"{a.ecc_errors_corrected} corrected ECC errors")
    if a.retired_pages:
        notes.append(f"{a.retired_pages} retired pages")
    if nv and a.persistence_mode is None:
        notes.append("persistence mode not reported")
    if a.processes:
        notes.append("held by " + ", ".join(f"pid {p.pid} ({p.name or '?'})" for p in a.processes))
    return bad, notes


def card_settings_step(profile, live: bool) -> dict:
    title = "per-card settings"
    cards = profile.accelerators
    if not cards:
        return step("cards", title, "unavailable", "no accelerator on this machine")
    if (
        not any(getattr(a, k) is not None for a in cards for k in _STATE_FIELDS if k != "partition")
        and not live
    ):
        return step("cards", title, "unavailable",
                    f"{profile.name} carries no card state (a preset or profile file): probe the machine or --machine BUNDLE")  # fmt: skip
    rows, ev, failed = [], [], []
    for a in cards:
        bad, notes = card_problems(a)
        rows.append({
            "card": a.index, "product": a.product, "persistence": a.persistence_mode,
            "ecc": a.ecc_mode, "ecc_corrected": a.ecc_errors_corrected,
            "ecc_uncorrected": a.ecc_errors_uncorrected, "retired_pages": a.retired_pages,
            "retired_pending": a.retired_pages_pending, "remap_pending": a.remapped_rows_pending,
            "remap_failed": a.remapped_rows_failed, "partition": a.partition,
            "used_bytes": a.memory_used_bytes, "failures": bad, "notes": notes,
        })  # fmt: skip
        line = (f"card {a.index} {a.product}: persistence {a.persistence_mode or 'unknown'}, "
                f"ECC {a.ecc_mode or 'unknown'} (uncorrected {_v(a.ecc_errors_uncorrected)}, corrected "
                f"{_v(a.ecc_errors_corrected)}), retired pending {a.retired_pages_pending or 'unknown'}, "
                f"remap pending/failed {a.remapped_rows_pending or 'unknown'}/{a.remapped_rows_failed or 'unknown'}, "
                f"partition {a.partition or 'unknown'}")  # fmt: skip
        if bad:
            line += " — FAIL: " + "; ".join(bad)
            failed.append(a.index)
        if notes:
            line += " — note: " + "; ".join(notes)
        ev.append(line)
    ev.append("clocks: not confirmed (not in the probe profile; nvidia-smi -q -d CLOCK by hand)")
    if failed:
        return step(
            "cards", title, "fail", f"cards {','.join(map(str, failed))} not ready", ev, cards=rows
        )
    return step("cards", title, "pass", f"{len(cards)} cards: persistence, ECC, errors and partitions as required", ev, cards=rows)  # fmt: skip


def _v(x) -> str:
    return "unknown" if x is None else str(x)


# ---------------------------------------------------------------------------------------
# 3. bench
# ---------------------------------------------------------------------------------------


def bench_step(rep: dict, origin: str) -> dict:
    title = "bench figures ok"
    figs = rep["figures"]
    c = {
        v: sum(1 for f in figs if f["verdict"] == v)
        for v in ("ok", "low", "bad", "unknown", "unavailable")
    }
    worse = [f for f in figs if f["verdict"] in ("low", "bad")]
    ev = [f"{origin}: " + ", ".join(f"{n} {v}" for v, n in c.items() if n)]
    for f in worse:
        ev.append(
            f"{f['verdict']}: {f['subject']} {f['metric']} = {_val(f)} (expected {f['expected']}; {f['source']})"
        )
    for f in figs:
        if f["verdict"] == "unavailable":
            ev.append(f"unavailable: {f['subject']} {f['metric']}: {f['evidence']}")
    if worse:
        return step(
            "bench", title, "fail", f"{len(worse)} figure(s) below their class", ev, counts=c
        )
    return step("bench", title, "pass",
                f"{c['ok']} figure(s) ok" + (f", {c['unavailable']} unavailable" if c["unavailable"] else ""),
                ev, counts=c)  # fmt: skip


def _val(f: dict) -> str:
    v = f["value"]
    return "unknown" if v is None else f"{v:,.3g} {f['unit']}".strip()


def load_bench_json(path: str) -> dict:
    try:
        check_user_file(path, "bench JSON")
        rep = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"--bench-json {path!r} not found") from None
    except (OSError, ValueError) as exc:
        raise InputError(
            f"--bench-json {path!r}: not a `nodeledger bench --json` output ({exc})"
        ) from None
    if (
        not isinstance(rep, dict)
        or not isinstance(rep.get("figures"), list)
        or not all(isinstance(f, dict) and "verdict" in f for f in rep["figures"])
    ):
        raise InputError(
            f"--bench-json {path!r}: no figures list (not a `nodeledger bench --json` output)"
        )
    return rep


# ---------------------------------------------------------------------------------------
# 4. plan
# ---------------------------------------------------------------------------------------


def plan_step(profile, plan_file: str | None, inputs=None) -> tuple[dict, dict | None]:
    """``inputs``: the plan's (workloads, specs) already loaded (run_golive reads the plan
    first, so a bad plan is an input error before any step runs)."""
    title = "plan fits with its lifeboat"
    if plan_file is None:
        return step("plan", title, "unavailable", "no --plan given"), None
    if not Path(plan_file).is_file():
        raise InputError(f"--plan {plan_file!r} not found")
    from nodeledger.placement.planner import plan
    from nodeledger.placement.reserve import load_plan_inputs

    ws, specs = inputs if inputs is not None else load_plan_inputs(plan_file)
    if not profile.accelerators:
        return step("plan", title, "unavailable",
                    f"{profile.name} has no accelerator: --machine PRESET|FILE|BUNDLE names the production machine"), None  # fmt: skip
    try:
        res = plan(profile, ws, specs, lifeboat=1)
    except InputError as exc:
        return step("plan", title, "fail", str(exc)), None
    ev = [f"{r['replica']} on cards {','.join(map(str, r['cards']))} ({r['links']}; "
          f"{gib_num(r['card_bytes'])} GiB per card, {gib_num(r['host_bytes'])} GiB host)" for r in res["replicas"]]  # fmt: skip
    for x in res["not_placed"]:
        ev.append(
            f"NOT PLACED {x['replica']} ({x['cards']} card(s)): {x['binding']} — {x['reason']}"
        )
    if res["lifeboat"]:
        ev.append(
            f"lifeboat: card {','.join(map(str, res['lifeboat']))} — {res['lifeboat_reason']}"
        )
    ev += [f"note: {n}" for n in res["notes"]]
    ok = not res["not_placed"] and len(res["lifeboat"]) == 1
    if ok:
        summary = f"{len(res['replicas'])} replica(s) placed, card {res['lifeboat'][0]} kept as the lifeboat"
    elif not res["lifeboat"]:
        summary = "no card left as the lifeboat"
    else:
        summary = f"{len(res['not_placed'])} replica(s) do not fit beside the lifeboat"
    return step("plan", title, "pass" if ok else "fail", summary, ev,
                lifeboat=res["lifeboat"], free_after=res["free_after"]), res  # fmt: skip


# ---------------------------------------------------------------------------------------
# 5. recovery drill
# ---------------------------------------------------------------------------------------


def _runner(runner: Runner | None, timeout: float = 5.0) -> Runner:
    """``runner``, else a fresh live one (fresh per call: a drill polls, records must not pile up)."""
    return runner if runner is not None else Runner(timeout=timeout, live=True)


def card_used_bytes(index: int, timeout: float = 5.0,
                    runner: Runner | None = None) -> tuple[int | None, str]:  # fmt: skip
    """Memory in use on card ``index`` (nvidia-smi memory.used, MiB x 2^20), or None and why;
    nvidia-smi is run through ``runner`` (default: a live Runner with ``timeout``)."""
    r = _runner(runner, timeout)
    if r.which("nvidia-smi") is None:
        return None, "nvidia-smi not on PATH (card memory is read with nvidia-smi)"
    res = r.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                 "-i", str(index)])  # fmt: skip
    if res.returncode is None:  # not run, or killed when hung
        return None, f"nvidia-smi failed: {res.problem}"
    try:
        return int(float(res.stdout.strip().splitlines()[0])) * MiB, "nvidia-smi memory.used"
    except (ValueError, IndexError):
        return None, f"nvidia-smi said {(res.stdout or res.stderr).strip()[:120]!r}"


def _rss(pid: int, runner: Runner | None = None) -> int | None:
    """VmRSS of ``pid`` (/proc/PID/status), or None."""
    return pid_status(_runner(runner).read(f"/proc/{pid}/status")).rss_bytes


def descendants(pid: int, runner: Runner | None = None) -> list[int]:
    """Every live descendant of ``pid`` (children by /proc/*/stat's ppid, recursively), read
    through ``runner`` (default: a live Runner)."""
    r = _runner(runner)
    parent: dict[int, int] = {}
    for path in r.glob("/proc/[0-9]*/stat"):
        st = pid_stat(r.read(path))
        child = path.split("/")[2]
        if st is not None and st.ppid is not None and child.isdigit():
            parent[int(child)] = st.ppid
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def _avail(runner: Runner | None = None) -> int | None:
    from nodeledger.placement.reserve import host_memory

    return (host_memory() if runner is None else host_memory(runner))[0]


def drill_step(profile, lifeboat: int | None, *, state_path: str | None = None,
               host_bytes: int = CANARY_HOST_BYTES, card_bytes: int = CANARY_CARD_BYTES,
               ready_timeout: float = READY_TIMEOUT_S, back_timeout: float = BACK_TIMEOUT_S,
               used_fn: Callable[[int], tuple[int | None, str]] = card_used_bytes,
               runner: Runner | None = None) -> dict:  # fmt: skip
    """Start the canary on ``lifeboat`` (None: host-only), kill it, confirm the recovery.
    ``runner``: where /proc is read (the canary's VmRSS, its children, MemAvailable, the
    reservation's holder); None: the live host."""
    title = "recovery drill"
    checks: list[dict] = []

    def sub(name: str, status: str, evidence: str) -> None:
        checks.append({"check": name, "status": status, "evidence": evidence})

    card = lifeboat
    env = dict(os.environ)
    if card is not None:
        for vs in all_vendor_specs():  # every vendor's variable: the card is the one named
            env[vs.launch_visible] = str(card)
            env.update(vs.launch_env)
    where = f"lifeboat card {card}" if card is not None else "the host (no card on this machine)"
    used0, used_src = used_fn(card) if card is not None else (None, "no card")
    avail0 = _avail(runner)
    argv = [sys.executable, "-c", CANARY, str(host_bytes), str(card_bytes if card is not None else 0),
            str(CANARY_LIFE_S)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL)  # fmt: skip
    store, reserved, target = None, False, f"golive-canary-{proc.pid}"
    try:
        store, reserved = _drill_reserve(profile, card, state_path, runner, proc.pid, target,
                                         host_bytes, sub)  # fmt: skip
        ready = _ready_line(proc, ready_timeout)
        rss = _rss(proc.pid, runner) if ready is not None else None
        if ready is None:
            err = _tail(proc)
            sub(
                "start the canary",
                "fail",
                f"no ready line within {ready_timeout:g} s{': ' + err if err else ''}",
            )
        else:
            sub("start the canary", "pass",
                f"pid {proc.pid} on {where}: {ready['host_bytes'] / MiB:,.0f} MiB host memory touched "
                f"(VmRSS {_gib(rss)})" + (f", {ready['card_bytes'] / MiB:,.0f} MiB on the card" if ready["card_bytes"] else ""))  # fmt: skip
        avail1 = _avail(runner)
        used1 = used_fn(card)[0] if card is not None else None
        from nodeledger.placement.reserve import pid_start_time as _start

        kids = [(p, _start(p, runner)) for p in descendants(proc.pid, runner)]
        # kill it on purpose
        os.kill(proc.pid, signal.SIGKILL)
        rc = proc.wait(timeout=10)
        sub("kill it on purpose", "pass" if rc == -signal.SIGKILL else "fail",
            f"SIGKILL sent; exit status {rc}")  # fmt: skip
        _drill_host_back(kids, rss, host_bytes, avail0, avail1, back_timeout, runner, sub)
        _drill_card_back(card, ready, used0, used1, used_src, used_fn, back_timeout, sub)
        _drill_reservation_cleared(card, reserved, store, proc.pid, sub)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.kill()
            with contextlib.suppress(Exception):
                proc.wait(timeout=5)
        if store is not None:
            with contextlib.suppress(Exception):
                store.drop_pid(proc.pid)
            store.close()
    statuses = {c["status"] for c in checks}
    status = "fail" if "fail" in statuses else "pass"
    fails = [c["check"] for c in checks if c["status"] == "fail"]
    summary = f"canary on {where}: " + (
        "killed and recovered" if status == "pass" else "failed: " + ", ".join(fails)
    )
    n_un = sum(1 for c in checks if c["status"] == "unavailable")
    if n_un:
        summary += f" ({n_un} part(s) unavailable)"
    ev = [f"{c['status']}: {c['check']}: {c['evidence']}" for c in checks]
    return step("drill", title, status, summary, ev, checks=checks, card=card)


def _drill_reserve(profile, card: int | None, state_path: str | None, runner: Runner | None,
                   pid: int, target: str, host_bytes: int, sub):  # fmt: skip
    """Reserve the lifeboat card for the canary, as `nodeledger run` would: (store, reserved)."""
    store, reserved = None, False
    if card is not None:
        try:
            from nodeledger.placement.reserve import Store

            store = Store(state_path, runner=runner)
            fake = {"machine": profile.name, "not_placed": [], "replicas": [
                {"replica": target, "workload": target, "cards": [card], "host_bytes": host_bytes}]}  # fmt: skip
            d = store.take(fake, target, pid, settle=0.0)
            if d.ok:
                reserved = True
                sub(
                    "reserve the lifeboat",
                    "pass",
                    f"card {card} reserved for pid {pid} in {store.path}",
                )
            else:
                sub("reserve the lifeboat", "fail", f"refused: {d.reason}")
        except ImportError as exc:
            sub("reserve the lifeboat", "unavailable", f"reservations library missing ({exc})")
        except NodeledgerError as exc:
            sub("reserve the lifeboat", "fail", str(exc))
        except BaseException:  # the caller's finally never sees this store: close it here
            if store is not None:
                with contextlib.suppress(Exception):
                    store.drop_pid(pid)
                store.close()
            raise
    else:
        sub("reserve the lifeboat", "unavailable", "no card to reserve on this machine")
    return store, reserved


def _drill_host_back(kids: list, rss: int | None, host_bytes: int, avail0: int | None,
                     avail1: int | None, back_timeout: float, runner: Runner | None, sub) -> None:  # fmt: skip
    """Host memory back after the kill."""
    # host memory back: every process of the canary gone (the kernel frees a dead
    # process's private memory), corroborated by MemAvailable (which others move too)
    from nodeledger.placement.reserve import alive

    left = [p for p, st in kids if alive(p, st, runner)]
    tol = max(128 * MiB, host_bytes // 4)
    held = rss or host_bytes

    def back(a: int | None) -> bool:
        if a is None or avail0 is None:
            return False
        return a >= avail0 - tol or (avail1 is not None and a - avail1 >= held // 2)

    avail2 = _poll(lambda: _avail(runner), back, min(back_timeout, HOST_BACK_S))
    mem = f"MemAvailable {_gib(avail0)} before, {_gib(avail1)} while it ran, {_gib(avail2)} after"
    if left:
        sub("host memory back", "fail",
            f"process(es) {', '.join(map(str, left))} of the canary still alive after the kill; {mem}")  # fmt: skip
    elif back(avail2):
        sub("host memory back", "pass",
            f"no process of the canary left (its {held / MiB:,.0f} MiB VmRSS freed); {mem}: "
            f"back within {tol / MiB:,.0f} MiB of before, or up by half of it since it ran")  # fmt: skip
    else:
        sub("host memory back", "pass",
            f"no process of the canary left (its {held / MiB:,.0f} MiB VmRSS freed by the kernel at exit); "
            f"{mem}: not back within {tol / MiB:,.0f} MiB — other processes allocated meanwhile "
            "(MemAvailable is machine-wide)")  # fmt: skip


def _drill_card_back(card: int | None, ready: dict | None, used0: int | None, used1: int | None,
                     used_src: str, used_fn, back_timeout: float, sub) -> None:  # fmt: skip
    """The card's memory back to where it was before the canary."""
    # card memory back
    if card is None:
        sub("card memory back", "unavailable", "no card: host-only canary")
    elif ready is not None and not ready["card_bytes"]:
        sub(
            "card memory back",
            "unavailable",
            f"the canary held no card memory: {ready['card_note']}",
        )
    elif used0 is None:
        sub("card memory back", "unavailable", f"card memory unreadable: {used_src}")
    else:
        used2 = _poll(
            lambda: used_fn(card)[0],
            lambda u: u is not None and u <= used0 + CARD_SLACK,
            back_timeout,
        )
        ok = used2 is not None and used2 <= used0 + CARD_SLACK
        sub("card memory back", "pass" if ok else "fail",
            f"card {card} memory in use {_gib(used0)} before, {_gib(used1)} while it ran, "
            f"{_gib(used2)} after ({used_src})")  # fmt: skip


def _drill_reservation_cleared(card: int | None, reserved: bool, store, pid: int, sub) -> None:
    """The dead canary's reservation is gone at the next check."""
    # reservation cleared
    if reserved and store is not None:
        live, purged = store.check()
        gone = not any(r.pid == pid for r in live)
        sub("reservation cleared", "pass" if gone else "fail",
            (f"the canary's reservation of card {card} was deleted at the next check (dead holder)"
             if gone and any(r.pid == pid for r in purged) else
             "no reservation of the canary left" if gone else
             f"card {card} still reserved for dead pid {pid}"))  # fmt: skip
    elif card is not None:
        sub("reservation cleared", "unavailable", "the card was not reserved (see above)")
    else:
        sub("reservation cleared", "unavailable", "no card to reserve on this machine")


def _ready_line(proc: subprocess.Popen, timeout: float) -> dict | None:
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                return None
            line = proc.stdout.readline()
            if not line:
                return None
            with contextlib.suppress(ValueError):
                return json.loads(line)
    finally:
        sel.close()
    return None


def _tail(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        return ""
    with contextlib.suppress(Exception):
        err = proc.stderr.read() or ""
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        return lines[-1][:200] if lines else f"exited {proc.returncode}"
    return ""


def _poll(get, good, timeout: float):
    deadline = time.monotonic() + timeout
    v = get()
    while not good(v) and time.monotonic() < deadline:
        time.sleep(0.2)
        v = get()
    return v


# ---------------------------------------------------------------------------------------
# the checklist
# ---------------------------------------------------------------------------------------


STEP_IDS = ("doctor", "cards", "bench", "plan", "drill")


def run_golive(*, plan_file: str | None = None, machine: str | None = None,
               dataset: str | None = None, bench_json: str | None = None,
               state_path: str | None = None, bench_kwargs: dict | None = None,
               drill_kwargs: dict | None = None, timeout: float = 5.0,
               progress: Callable[[str], None] | None = None,
               allow_unavailable: tuple[str, ...] = ()) -> dict:  # fmt: skip
    # long: the checklist's steps in order (doctor, card settings, bench, plan, drill), then the summary dict
    """Every step in order; returns the report.  ``exit_code`` 0 when no step fails and every
    step ran whole, 1 otherwise: a step that is unavailable here (no card, no --plan, no
    torch) or ran in part blocks going live unless ``allow_unavailable`` names it."""
    say = progress or (lambda _m: None)
    unknown = sorted(set(allow_unavailable) - set(STEP_IDS))
    if unknown:
        raise InputError(
            f"--allow-unavailable {', '.join(unknown)}: not a step; the steps are {', '.join(STEP_IDS)}"
        )
    from nodeledger.doctor import load_state

    if plan_file is not None and not Path(plan_file).is_file():
        raise InputError(f"--plan {plan_file!r} not found")
    plan_inputs = None
    if plan_file is not None:  # a bad plan is bad input, even where the plan step cannot run
        from nodeledger.placement.reserve import load_plan_inputs

        plan_inputs = load_plan_inputs(plan_file)
    if dataset is not None and not Path(dataset).exists():
        raise InputError(f"--dataset {dataset!r} not found")
    bench_rep = load_bench_json(bench_json) if bench_json else None
    say("probing the machine")
    state = load_state(machine=machine, timeout=timeout)
    profile = state.profile
    steps = []
    say("doctor")
    steps.append(doctor_step(state, (dataset,) if dataset else ()))
    steps.append(card_settings_step(profile, state.live))
    if bench_rep is not None:
        steps.append(bench_step(bench_rep, f"recorded bench {bench_json}"))
    else:
        from nodeledger.bench.suite import run_bench

        say("bench --quick")
        kw = dict(bench_kwargs or {})
        live_profile = profile if machine is None else None  # the bench measures this host
        rep = run_bench(quick=True, dataset=Path(dataset) if dataset else None,
                        profile=live_profile, progress=say, **kw)  # fmt: skip
        bench_rep = rep
        steps.append(bench_step(rep, f"bench --quick on this host ({rep['seconds']:g} s)"))
    say("plan")
    pstep, pres = plan_step(profile, plan_file, plan_inputs)
    steps.append(pstep)
    if pres and pres["lifeboat"]:
        boat = pres["lifeboat"][0]
    elif profile.accelerators:
        boat = (
            max(a.index for a in profile.accelerators if not a.processes)
            if any(not a.processes for a in profile.accelerators)
            else None
        )
    else:
        boat = None
    say("recovery drill")
    steps.append(drill_step(profile, boat, state_path=state_path, **(drill_kwargs or {})))
    fails = [s["id"] for s in steps if s["status"] == "fail"]
    allowed = set(allow_unavailable or ())
    missing = [s["id"] for s in steps if s["status"] == "unavailable" and s["id"] not in allowed]
    partial = [s["id"] for s in steps if s["status"] == "pass" and "unavailable" in s["summary"]
               and s["id"] not in allowed]  # fmt: skip
    blockers = (
        fails + [f"{i} unavailable" for i in missing] + [f"{i} partly unavailable" for i in partial]
    )
    return {
        "schema_version": SCHEMA_VERSION,
        "machine": profile.name,
        "origin": state.origin,
        "plan": plan_file,
        "steps": steps,
        "counts": {s: sum(1 for x in steps if x["status"] == s) for s in STATUSES},
        "allowed_unavailable": sorted(allowed),
        "exit_code": 1 if blockers else 0,
        "verdict": "go live"
        if not blockers
        else "not ready: "
        + ", ".join(blockers)
        + ("" if fails else " (--allow-unavailable STEP accepts a step that cannot run here)"),
        "bench": bench_rep,
    }
