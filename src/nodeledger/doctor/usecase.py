"""The ``doctor`` use cases: the read-only checks of a machine (or a bundle) and the pre-flight
of one job against it.  The CLI parses, calls :func:`run_doctor` once and renders the answer
(``doctor --json`` prints its ``to_json()``).  Never prints, never exits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from nodeledger.document import Check, Checklist
from nodeledger.errors import NodeledgerError
from nodeledger.units import gib_text

# the version of doctor --json's shapes (DoctorChecksJSON, PreflightJSON); raised when a key
# changes meaning or goes away
SCHEMA_VERSION = 1
SEVERITY_STYLE = {"ok": "green", "skip": "grey50", "unknown": "grey50", "info": "cyan",
                  "warning": "dark_orange", "error": "red"}  # fmt: skip


def _value(v: Any) -> str:
    """A seen value; a byte count as GiB beside it."""
    if isinstance(v, int) and not isinstance(v, bool) and v >= 2**20:
        return f"{gib_text(v, 2)} ({v:,} B)"
    return str(v)


@dataclass(frozen=True)
class DoctorRequest:
    model: str | None = None  # a MODEL: the pre-flight of its job
    job: str | None = None  # serve | train | lora | qlora | load (default serve with a MODEL)
    job_options: dict[str, Any] = field(default_factory=dict)  # fit's options, None = not given
    from_bundle: str | None = None
    machine: str | None = None  # pre-flight: a preset, profile or bundle; checks: a bundle
    datasets: tuple[str, ...] = ()
    timeout: float = 5.0
    lifeboat: int | None = None
    online: bool = False

    @property
    def is_preflight(self) -> bool:
        return self.model is not None or self.job is not None


@dataclass
class ChecksAnswer:
    """The checks of one machine: each finding with its evidence and printed fix."""

    state: Any  # doctor.MachineState
    findings: list  # [doctor.Finding]
    worst: str
    exit_code: int

    def checklist(self) -> Checklist:
        """The checks as a document section: each finding, what was seen, the fixes to run."""
        checks = [
            Check(f.id, f.severity, f.message,
                  [f"seen: {e.what} = {_value(e.value)} ({e.source})" for e in f.evidence],
                  f.fix if f.fix and f.severity in ("info", "warning", "error") else None)
            for f in self.findings
        ]  # fmt: skip
        return Checklist("Checks (read-only; fixes are printed, never run)",
                         ("check", "severity", "finding / evidence"), checks, SEVERITY_STYLE,
                         inline=True, fixes_note=" (run them yourself, after reading them):")  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        """``doctor --json`` (its shape: :class:`DoctorChecksJSON`, shipped as a JSON Schema)."""
        return {"schema_version": SCHEMA_VERSION, "origin": self.state.origin,
                "machine": self.state.profile.name,
                "checks": [f.to_json() for f in self.findings], "worst": self.worst,
                "exit_code": self.exit_code, "notes": self.state.notes}  # fmt: skip


@dataclass
class PreflightAnswer:
    """One job's go / wait / no-go on a machine."""

    name: str  # the model, as the catalogue or the path names it
    job: str
    state: Any  # doctor.MachineState
    result: Any  # doctor.Preflight

    def to_json(self) -> dict[str, Any]:
        """``doctor MODEL --job ... --json`` (its shape: :class:`PreflightJSON`)."""
        return {"schema_version": SCHEMA_VERSION, "model": self.name, "job": self.job,
                "machine": self.state.profile.name, **self.result.to_json()}  # fmt: skip


def check_request(req: DoctorRequest) -> None:
    """The option sets that do not go together (one line each, before anything is read)."""
    if not req.timeout > 0:
        raise NodeledgerError(f"--timeout must be > 0, got {req.timeout}")
    if not req.is_preflight:
        given = sorted(k for k, v in req.job_options.items() if v is not None)
        if given:
            names = ", ".join("--" + k.replace("_", "-") for k in given)
            raise NodeledgerError(f"{names} applies to a pre-flight: add --job and a MODEL")
        if req.lifeboat is not None:
            raise NodeledgerError("--lifeboat applies to a pre-flight: add --job and a MODEL")
        if req.machine and not (req.machine.endswith((".tar.gz", ".tgz"))):
            raise NodeledgerError(
                "--machine applies to --job: a preset or profile has no live state to check "
                "(use --from BUNDLE for another machine)"
            )
        return
    if req.model is None:
        raise NodeledgerError("doctor --job needs a MODEL (argument or --model)")
    if req.datasets:
        raise NodeledgerError("--dataset applies to the checks (doctor without --job)")
    if req.lifeboat is not None and req.lifeboat < 0:
        raise NodeledgerError(f"--lifeboat must be >= 0, got {req.lifeboat}")


def run_doctor(req: DoctorRequest) -> ChecksAnswer | PreflightAnswer:
    """The checks (no MODEL, no --job) or the pre-flight of the job."""
    from nodeledger.doctor import exit_code, load_state, preflight, run_checks, worst

    check_request(req)
    if not req.is_preflight:
        state = load_state(req.from_bundle, req.machine, req.timeout)
        findings = run_checks(state, req.datasets)
        return ChecksAnswer(state, findings, worst(findings), exit_code(findings))
    from nodeledger.ledger.jobs import build_job
    from nodeledger.model import load_model

    job = req.job or "serve"
    job_obj = build_job(job, req.job_options)
    state = load_state(req.from_bundle, req.machine, req.timeout, fallback_preset=True)
    spec, src = load_model(req.model, online=req.online)
    res = preflight(spec, job_obj, state, req.lifeboat)
    name = src.catalogue_entry["id"] if src.catalogue_entry else src.where
    return PreflightAnswer(name, job, state, res)


# -- the shapes of doctor --json (the shipped JSON Schemas are generated from them) -----------


@dataclass
class EvidenceJSON:
    what: str
    value: Any  # a count, a byte figure (int), a setting's text
    source: str  # the file or tool field it was read from


@dataclass
class FindingJSON:
    id: str
    title: str
    severity: Literal["ok", "skip", "unknown", "info", "warning", "error"]
    message: str
    evidence: list[EvidenceJSON]
    fix: str | None  # a command for a person to run; doctor never runs it


@dataclass
class DoctorChecksJSON:
    """``nodeledger doctor --json``: the read-only checks of a machine or a bundle."""

    schema_version: int
    origin: str
    machine: str
    checks: list[FindingJSON]
    worst: Literal["ok", "skip", "unknown", "info", "warning", "error"]
    exit_code: int
    notes: list[str]


@dataclass
class ReasonJSON:
    level: Literal["ok", "info", "warning", "wait", "no-go"]
    topic: str
    text: str


@dataclass
class PreflightJSON:
    """``nodeledger doctor MODEL --job ... --json``: one job's go / wait / no-go.  Bytes in
    ``*_bytes`` keys."""

    schema_version: int
    model: str
    job: Literal["serve", "train", "lora", "qlora", "load"]
    machine: str
    verdict: Literal["go", "wait", "no-go"]
    reasons: list[ReasonJSON]
    cards: dict[str, Any]  # needed, total, free, busy, chosen, lifeboat, lifeboat_wanted
    binding: list[str]  # the numactl / visible-devices lines for the chosen cards
    host: dict[str, Any]  # job_peak_bytes, page_cache_bytes, ram_bytes, free_bytes, ...
    fit: dict[str, Any]  # the ledger's tier, binding, reason, suggestions, job options
    origin: str
    notes: list[str]
    exit_code: int
    units: Literal["bytes"]


def doctor_json_schemas() -> dict[str, dict[str, Any]]:
    """The JSON Schemas of ``doctor --json`` (checks) and of its pre-flight, from the types."""
    from nodeledger.schemas import json_schema

    return {"doctor": json_schema(DoctorChecksJSON, "nodeledger doctor --json"),
            "doctor-preflight": json_schema(PreflightJSON,
                                            "nodeledger doctor MODEL --job ... --json")}  # fmt: skip
