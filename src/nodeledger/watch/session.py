"""The watch's use cases below the CLI: what a watch verifies (its expectations from a plan or a
job, on the machine the ledger is made for), the host sampler beside a card backend, and the
running engine's start-up log set beside the plan at the end of a watch.  The CLI parses the
options, calls these, runs the watch and renders; nothing here prints or exits."""

from __future__ import annotations

from pathlib import Path

from nodeledger.errors import InputError
from nodeledger.machine.parsers.common import card_indices
from nodeledger.machine.resolve import machine_with_intro


def ledger_machine(machine: str | None, header_profile: str | None, live_real: bool):
    """(profile, name to record) for the ledger."""
    from nodeledger.machine import list_presets, resolve_machine

    if machine is not None:
        return resolve_machine(machine), machine
    if header_profile and header_profile in list_presets():
        return resolve_machine(header_profile), header_profile
    if live_real:
        profile, _ = machine_with_intro(None)
        return profile, None
    return resolve_machine(None), None


def expectations(plan, model, job, job_opts, cards, machine, header, live_real):
    """Expectations from --plan / --job, else a recording's own, else None: (expect, the
    profile's name to record, the profile the plan was made on or None)."""
    given = sorted(k for k, v in job_opts.items() if v is not None)
    if plan and job:
        raise InputError("give --plan or --job, not both")
    if given and not job:
        names = ", ".join("--" + k.replace("_", "-") for k in given)
        raise InputError(f"{names} describe a job: give --job (and --model)")
    if model and not job:
        raise InputError("--model needs --job")
    if cards is not None and not job:
        raise InputError("--cards applies to --job")
    if not plan and not job:
        return (header or {}).get("plan"), None, None
    from nodeledger.watch import expect as ex

    prof_name = ((header or {}).get("machine") or {}).get("profile")
    profile, name = ledger_machine(machine, prof_name, live_real)
    if plan:
        return ex.from_plan(plan, profile), name, profile
    if not model:
        raise InputError("--job needs --model MODEL")
    from nodeledger.ledger.jobs import build_job
    from nodeledger.model import load_model

    job_obj = build_job(job, job_opts)
    spec, _ = load_model(model)
    return ex.from_job(model, spec, job_obj, profile, card_indices(cards)), name, profile


def host_sampler(b):
    """The backend's own host figures (a fake scenario plays them), else this machine's."""
    host = getattr(b, "host", None)
    if host is None:
        from nodeledger.watch.host import HostSampler

        host = HostSampler()
    return host


def engine_log_checker(path, model, job, job_opts, machine, tolerance):
    """Check the options now (one line, exit 2, before anything is watched) and return the
    function that reads the log at the end of the watch and sets its KV pool beside the
    plan's: (summary, finding or None) for the watch's cards, on the profile the watch's plan
    was made on."""
    engine = job_opts.get("engine") or "hf"
    from nodeledger.ledger.jobs import ENGINE_NAMES, ENGINE_TRAITS

    traits = ENGINE_TRAITS.get(engine, ENGINE_TRAITS["hf"])
    if job != "serve" or not traits.start_log or not model:
        raise InputError("--engine-log applies to --job serve --engine vllm|sglang with --model")
    from nodeledger.files import read_log_ends

    what = ENGINE_NAMES.get(engine, engine) + " server log"
    if path != "-" and not Path(path).exists():
        raise InputError(f"--engine-log {path}: no such file")
    if path == "-":
        raise InputError(
            "--engine-log reads a file (the log the server writes), not standard input"
        )
    read_log_ends(path, what)  # readable now: a bad path is refused before the watch starts

    def check(cards: list[int], profile=None):
        from nodeledger.errors import NodeledgerError
        from nodeledger.machine import resolve_machine
        from nodeledger.machine.parsers import parse_kind
        from nodeledger.verdict.assess import check_engine_log
        from nodeledger.watch.engine_log import kv_pool_finding, kv_pool_summary

        try:  # what the watch collected is kept whatever the log holds by now
            text, cut = read_log_ends(path, what)
            reported = parse_kind(f"{engine}-log", text)
        except NodeledgerError as exc:
            return {"file": path, "notes": [f"the engine log could not be used: {exc}"]}, None
        profile = profile or resolve_machine(machine)  # the watch's own plan's machine
        chk = check_engine_log(model, job_opts, reported, profile)
        summary = kv_pool_summary(chk, path, cut)
        if reported.get("version") and not job_opts.get("engine_version"):
            summary["notes"].append(
                f"the plan follows release {reported['version']}, which the log prints"
            )
        return summary, kv_pool_finding(chk, cards, tolerance)

    return check
