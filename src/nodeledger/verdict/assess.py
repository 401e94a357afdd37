"""The ``fit`` use case: one job of one model on one machine, from the options a user gives to
the report ``nodeledger fit`` prints (``--json`` is :meth:`FitReport.to_json`).

The CLI parses the options and checks which apply together, calls :func:`assess_fit` once and
renders what it returns; every step of the pipeline is here: the job built from its options, the
machine and the model resolved, a serve job resolved to its engine's settings (once), the ledger
and its verdict, what would flip it, the runtime's provenance, the speed section, the layout
search, and the engine's own start-up log set beside the ledger.  Never prints, never exits.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from nodeledger.ledger.build import CardLedger, HostLedger
from nodeledger.schemas import json_schema
from nodeledger.verdict.fit import Verdict

# the version of fit --json's shape (schemas/fit.schema.json): raised when a key changes meaning
# or goes away; a key added keeps it
SCHEMA_VERSION = 2  # 2: cards[].phases -> phases_bytes


@dataclass(frozen=True)
class FitRequest:
    """What ``nodeledger fit`` is asked: ``job_options`` are the job's own options as the CLI
    names them (``tp``, ``engine``, ``concurrency`` ...; ``ledger.jobs.build_job`` reads them)."""

    model: str
    job: str = "serve"  # serve | train | lora | qlora | load
    job_options: dict[str, Any] = field(default_factory=dict)
    machine: str | None = None  # preset, profile file or bundle; None: the reference machine
    online: bool = False  # allow downloading config.json from the Hub
    search: bool = False  # rank the layouts that fit
    lifeboat: int | None = None  # --search: cards kept free
    engine_log: str | None = None  # the engine's start-up log file (vllm / sglang serve jobs)
    # the serving benchmark the speed section replays (serve jobs)
    request_rate: float | None = None
    num_prompts: int | None = None
    dataset: str | None = None
    slo_ttft_p99_s: float | None = None
    slo_tpot_p99_s: float | None = None


@dataclass
class FitReport:
    """The answer, section by section, in the order ``--json`` prints them."""

    model: str  # the catalogue id, or where the config was read
    machine: str
    job: str
    cards: list[dict]  # per card: its line items (bytes), total, capacity
    host: dict  # host RAM: line items, peak, capacity (bytes)
    verdict: dict  # tier, binding resource, reason, headroom, suggestions, flips
    job_options: dict  # every option the ledger used, defaults included
    extras: dict  # the engine's figures (KV pool, max concurrency ...), units in EXTRA_UNITS
    notes: list[str]
    runtime: dict  # where the runtime constants were measured (ledger.runtime.provenance)
    speed: dict | None  # speed.job.job_speed's section
    search: dict | None = None  # --search: the layouts that fit
    engine_check: dict | None = None  # --from-engine-log: the log's figures beside the ledger's
    units: str = "bytes"

    @property
    def exit_tier(self) -> str:
        """The tier the exit code follows: the verdict's, or with ``--search`` the best layout
        found (``--search`` asks which layouts fit; the verdict line still judges the one given)."""
        return self.search["exit_tier"] if self.search else self.verdict["tier"]

    def to_json(self) -> dict[str, Any]:
        """``nodeledger fit --json`` (its shape: :class:`FitJSON`, shipped as a JSON Schema)."""
        out: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION, "model": self.model, "machine": self.machine, "job": self.job, "cards": self.cards,
            "host": self.host, "verdict": self.verdict, "job_options": self.job_options,
            "extras": self.extras, "notes": self.notes, "units": self.units,
            "runtime": self.runtime, "speed": self.speed,
        }  # fmt: skip
        if self.search is not None:
            out["search"] = self.search
        if self.engine_check is not None:
            out["engine_check"] = self.engine_check
        return out


# -- the shape of fit --json, for its JSON Schema (schemas/fit.schema.json) ------------------


@dataclass
class VerdictJSON(Verdict):
    flips: list[str] = field(default_factory=list)  # what would change the tier, and assumptions


@dataclass
class RuntimeJSON:
    vendor: str
    runtime: str
    measured: bool  # the runtime constants were measured on this vendor's runtime
    caveat: str


@dataclass
class FitJSON:
    """``nodeledger fit --json``.  Bytes in ``*_bytes`` keys; ``speed`` is the speed section
    (docs/reference.md "What each number means": seconds in ``*_s``, rates per second), ``extras`` the
    engine's figures (units in the CLI's EXTRA_UNITS)."""

    schema_version: int
    model: str
    machine: str
    job: Literal["serve", "train", "lora", "qlora", "load"]
    cards: list[CardLedger]
    host: HostLedger
    verdict: VerdictJSON
    job_options: dict[str, Any]
    extras: dict[str, Any]
    notes: list[str]
    units: Literal["bytes"]
    runtime: RuntimeJSON
    speed: dict[str, Any] | None
    search: dict[str, Any] | None = None
    engine_check: dict[str, Any] | None = None


def fit_json_schema() -> dict[str, Any]:
    """The JSON Schema of ``fit --json``, generated from :class:`FitJSON` (pydantic)."""
    return json_schema(FitJSON, "nodeledger fit --json")


def check_request(req: FitRequest) -> None:
    """The options that do not go together (one line each, before anything is read)."""
    from nodeledger.errors import InputError
    from nodeledger.ledger.jobs import ENGINE_TRAITS

    if req.lifeboat is not None and not req.search:
        raise InputError("--lifeboat applies to --search")
    bench_given = [n for n, v in (("--request-rate", req.request_rate),
                                  ("--num-prompts", req.num_prompts), ("--dataset", req.dataset),
                                  ("--slo-ttft-p99", req.slo_ttft_p99_s),
                                  ("--slo-tpot-p99", req.slo_tpot_p99_s)) if v is not None]  # fmt: skip
    if bench_given and req.job != "serve":
        raise InputError(f"{bench_given[0]} applies to --job serve")
    engine = req.job_options.get("engine") or "hf"
    if req.engine_log is not None and (
        req.job != "serve" or not ENGINE_TRAITS.get(engine, ENGINE_TRAITS["hf"]).start_log
    ):
        raise InputError(
            "--from-engine-log applies to --job serve --engine vllm or --engine sglang"
        )


def assess_fit(req: FitRequest) -> FitReport:
    """The whole ``fit`` pipeline for one request (see the module's docstring)."""
    check_request(req)
    from nodeledger.ledger.build import resolve_job
    from nodeledger.ledger.jobs import ENGINE_TRAITS, build_job
    from nodeledger.ledger.runtime import provenance
    from nodeledger.machine import resolve_machine
    from nodeledger.model import load_model
    from nodeledger.speed.job import job_speed
    from nodeledger.verdict.fit import fit, flips

    engine = req.job_options.get("engine") or "hf"
    reported = read_engine_log(req.engine_log, engine) if req.engine_log is not None else None
    job_obj = build_job(req.job, _with_log_release(req.job_options, reported))
    profile = resolve_machine(req.machine)
    spec, src = load_model(req.model, online=req.online)
    settings: dict = {}
    if req.job == "serve":
        job_obj, settings = resolve_job(job_obj, profile, spec)
    result = fit(spec, job_obj, profile)
    lg = result.ledger
    verdict = asdict(result.verdict)
    verdict["flips"] = flips(spec, job_obj, profile, result.verdict.tier)
    if settings.get("assumed"):  # a release newer than any read: the verdict line says so
        verdict["flips"].insert(0, settings["assumed"])
    if (
        req.job == "serve"
        and not ENGINE_TRAITS[job_obj.engine].start_log
        and job_obj.concurrency == 1
    ):
        verdict["flips"].append(
            "assumes the hf engine at 1 sequence (--concurrency N|max, or --engine vllm|sglang for a serving engine's pool)"
        )
    bench = None
    if req.job == "serve":
        from nodeledger.speed.serving import BenchOptions

        bench = BenchOptions(request_rate=req.request_rate or float("inf"),
                             num_prompts=req.num_prompts, dataset=req.dataset or "random",
                             slo_ttft_p99_s=req.slo_ttft_p99_s, slo_tpot_p99_s=req.slo_tpot_p99_s,
                             capped_at_rate=req.job_options.get("concurrency") is not None)  # fmt: skip
    report = FitReport(
        model=src.catalogue_entry["id"] if src.catalogue_entry else src.where,
        machine=profile.name,
        job=req.job,
        cards=[asdict(c) for c in lg.cards],
        host=asdict(lg.host),
        verdict=verdict,
        job_options=result.job_options,
        extras=lg.extras,
        notes=lg.notes,
        runtime=provenance(profile.accelerators[0].vendor if profile.accelerators else ""),
        speed=job_speed(spec, job_obj, profile, lg.extras, bench=bench),
    )
    if req.search:
        report.search = _search(spec, job_obj, profile, req.lifeboat)
        # the exit follows the best layout found, not the layout given
        tiers = {x["tier"] for x in report.search["best"]}
        found = "fits" if "fits" in tiers else "tight" if "tight" in tiers else None
        report.search["exit_tier"] = found or report.verdict["tier"]
    if reported is not None:
        from nodeledger.verdict.engine_check import engine_check

        report.engine_check = engine_check(lg, job_obj, reported, spec)
    return report


def _with_log_release(job_options: dict, reported: dict | None) -> dict:
    """The job's options, with the release the engine's log prints where none was given."""
    opts = dict(job_options)
    if reported is not None and reported.get("version") and not opts.get("engine_version"):
        opts["engine_version"] = reported["version"].split("+")[0]
    return opts


def check_engine_log(model: str, job_options: dict, reported: dict, profile) -> dict[str, Any]:
    """A running server's start-up figures (``reported``, as its log's parser read them) beside
    the ledger's for the serve job it runs on ``profile``: ``assess_fit``'s pipeline without its
    speed, search and flips (``watch --engine-log`` calls it at the end of a watch)."""
    from nodeledger.ledger.build import resolve_job
    from nodeledger.ledger.jobs import build_job
    from nodeledger.model import load_model
    from nodeledger.verdict.engine_check import engine_check
    from nodeledger.verdict.fit import fit

    job_obj = build_job("serve", _with_log_release(job_options, reported))
    spec, _ = load_model(model)
    job_obj, _ = resolve_job(job_obj, profile, spec)
    return engine_check(fit(spec, job_obj, profile).ledger, job_obj, reported, spec)


def read_engine_log(path: str, engine: str) -> dict[str, Any]:
    """The engine's figures from its start-up log (bounded read, one line on a bad file)."""
    from nodeledger.files import read_user_text
    from nodeledger.ledger.jobs import ENGINE_NAMES
    from nodeledger.machine.parsers import parse_kind

    name = ENGINE_NAMES.get(engine, engine)
    return parse_kind(f"{engine}-log", read_user_text(path, f"{name} start-up log"))


def _search(spec, job_obj, profile, lifeboat: int | None) -> dict[str, Any]:
    from nodeledger.ledger.jobs import JobError, ServeJob, TrainJob
    from nodeledger.verdict.lifeboat import resolve_lifeboat
    from nodeledger.verdict.search import search_serve, search_train

    lifeboat, lifeboat_note = resolve_lifeboat(len(profile.accelerators), lifeboat)
    if isinstance(job_obj, TrainJob):
        found, tried = search_train(spec, job_obj, profile, lifeboat=lifeboat)
    elif isinstance(job_obj, ServeJob):
        found, tried = search_serve(spec, job_obj, profile, lifeboat=lifeboat)
    else:
        raise JobError("--search applies to serve and train/lora/qlora jobs")
    return {"tried": tried, "lifeboat": lifeboat, "lifeboat_note": lifeboat_note,
            "best": [asdict(x) for x in found]}  # fmt: skip
