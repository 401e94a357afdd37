"""Workload catalogues (TOML): the work a machine is asked to carry.

Each ``[[workloads]]`` entry names a model, a job kind and `nodeledger fit`'s options in snake_case
(``tp``, ``context``, ``shard`` ...), plus the report's own keys (see ``workloads/default.toml``).
"""

from __future__ import annotations

import difflib
import re
import sys
from dataclasses import dataclass, field, fields, make_dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, get_args

from nodeledger.errors import InputError
from nodeledger.files import check_user_file, loads_toml
from nodeledger.ledger.jobs import JOB_OPTION_NAMES, JOB_OPTIONS, JobOption, build_job
from nodeledger.validation import Check, errors, validate

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

Expect = Literal["can", "tight", "cannot"]
JobKind = Literal["serve", "train", "lora", "qlora", "load"]
EXPECT = get_args(Expect)
JOB_KINDS = get_args(JobKind)
# a workload id becomes file names (``<id>.sbatch``), Slurm job names, Pod names and labels and
# replica names ``<id>#<n>``: ASCII letters, digits, '.', '_', '-'; not starting with '.' or '-'
ID_MAX = 64
ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*", re.ASCII)
ID_RULE = (
    f"letters, digits, '.', '_', '-', not starting with '.' or '-', at most {ID_MAX} characters"
)
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def valid_id(wid: str) -> bool:
    """Is ``wid`` a usable workload id (``ID_RULE``)?"""
    return len(wid) <= ID_MAX and ID_RE.fullmatch(wid) is not None


def _no_control(where: str, wid: str, key: str, text: str) -> None:
    """Free text (a title, a claim, an argv element) must hold no control character: it is
    printed into comment lines and scripts, where a newline starts a new line."""
    bad = CONTROL_RE.search(text)
    if bad:
        raise InputError(
            f"{where}: workload {wid!r}: {key} {text!r} holds the control character "
            f"{bad.group()!r}; use one line of plain text"
        )


# -- the file as written: its types, validated by pydantic (``validate``), and its JSON Schema ----

Text = Annotated[str, Check(strict=True)]
Count = Annotated[int, Check(strict=True, ge=1)]
Rate = Annotated[float, Check(strict=True, gt=0, lt=1e12)]  # an integer is a float here
_OPTION_TYPES = {
    int: Annotated[int, Check(strict=True)],
    float: Annotated[float, Check(strict=True)],
    bool: Annotated[bool, Check(strict=True)],
    str: Text,
}


@dataclass(kw_only=True)
class _WorkloadKeys:
    """A ``[[workloads]]`` table's own keys (the report's and the planner's)."""

    __pydantic_config__: ClassVar[dict[str, str]] = {"extra": "forbid"}
    id: Annotated[str, Check(strict=True, pattern=rf"^{ID_RE.pattern}$", max_length=ID_MAX)]
    model: Annotated[str, Check(strict=True, min_length=1)]
    job: JobKind
    title: Text | None = None
    expect: Expect | None = None
    machines: Count = 1
    beside: list[Text] = field(default_factory=list)
    peak_sequences: Count | None = None  # serve
    peak_requests_per_s: Rate | None = None  # serve
    peak_output_tokens_per_s: Rate | None = None  # serve
    slo_ttft_p99_s: Rate | None = None  # serve
    slo_tpot_p99_s: Rate | None = None  # serve
    claim: Text | None = None
    priority: Annotated[int, Check(strict=True)] = 0
    command: Annotated[list[Text], Check(min_length=1)] | None = None


OWN_KEYS = frozenset(f.name for f in fields(_WorkloadKeys))


def _option_type(o: JobOption) -> Any:
    if o.name == "concurrency":  # an integer, or "max"
        return Count | Text
    return _OPTION_TYPES[o.type]


# a table also takes every job option (ledger.jobs.JOB_OPTIONS, `fit`'s options in snake_case)
WorkloadEntry = make_dataclass(
    "WorkloadEntry",
    [(o.name, _option_type(o) | None, field(default=None)) for o in JOB_OPTIONS],
    bases=(_WorkloadKeys,),
    kw_only=True,
)


@dataclass(kw_only=True)
class CatalogueFile:
    """A workload catalogue (or a plan file) as written: ``[[workloads]]`` tables."""

    __pydantic_config__: ClassVar[dict[str, str]] = {"extra": "forbid"}
    workloads: Annotated[list[WorkloadEntry], Check(min_length=1)]  # type: ignore[valid-type]


def catalogue_json_schema() -> dict[str, Any]:
    """The JSON Schema of a workload catalogue, for editors (TOML files: taplo / Even Better
    TOML's ``#:schema`` directive); shipped as ``schemas/catalogue.schema.json``."""
    from nodeledger.schemas import json_schema

    schema = json_schema(CatalogueFile, "nodeledger workload catalogue ([[workloads]] tables)")
    props = schema["$defs"]["WorkloadEntry"]["properties"]
    jobs = {
        "all": "serve, train, lora, qlora",
        "train": "train, lora, qlora",
        "lora": "lora, qlora",
    }
    for o in JOB_OPTIONS:  # the help `fit --help` prints, for the editor's tooltip
        kinds = jobs.get(o.group, o.group)
        props[o.name]["description"] = f"{o.help} (`fit {o.cli_flag}`; job = {kinds})"
    return schema


def _type_error(where: str, items: list, exc: ValueError) -> InputError:
    """One line for the first wrong value: the workload (by id where it has one), the key."""
    found = errors(exc)
    first = found[0]
    loc = list(first["loc"])
    at = where
    if len(loc) >= 2 and loc[0] == "workloads" and isinstance(loc[1], int):
        raw = items[loc[1]] if loc[1] < len(items) else None
        wid = raw.get("id") if isinstance(raw, dict) else None
        at += f": workload {wid!r}" if isinstance(wid, str) else f": workloads entry {loc[1] + 1}"
        loc = loc[2:]
    # the key, and an element's position in a list; pydantic adds a union member's type after
    key = "".join([str(loc[0]), *(f"[{p}]" for p in loc[1:2] if isinstance(p, int))]) if loc else ""
    value = first.get("input")
    shown = f" {value!r}" if isinstance(value, (str, int, float)) and key else ""
    # a union's members each add an error at the same key: count the other keys only
    others = {tuple(e["loc"][:3]) for e in found} - {tuple(first["loc"][:3])}
    more = f" (and {len(others)} more)" if others else ""
    return InputError(f"{at}: {key or 'entry'}{shown}: {first['msg']}{more}")


@dataclass(frozen=True)
class Workload:
    id: str
    title: str
    model: str
    kind: str
    options: dict = field(default_factory=dict)
    expect: str | None = None
    machines: int = 1
    beside: tuple[str, ...] = ()
    peak_sequences: int | None = None
    peak_requests_per_s: float | None = None  # serving: requests/s at peak (input/output lengths)
    peak_output_tokens_per_s: float | None = None  # serving: output tokens/s at peak
    # serving: the service levels a peak must be met within (seconds; TTFT and TPOT p99): the
    # capacity that counts is the highest request rate a replica sustains within them
    slo_ttft_p99_s: float | None = None
    slo_tpot_p99_s: float | None = None
    claim: str | None = None  # a field claim to check against the ledger (printed beside it)
    priority: int = 0  # placement: higher is placed first
    command: tuple[str, ...] | None = None  # placement: the argv `nodeledger run` starts

    def job(self):
        """The job object (ServeJob / TrainJob / LoadJob); InputError names the workload."""
        opts = dict(self.options)
        if "concurrency" in opts and not isinstance(opts["concurrency"], str):
            opts["concurrency"] = str(opts["concurrency"])
        try:
            return build_job(self.kind, opts)
        except InputError as exc:
            raise InputError(f"workload {self.id!r}: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise InputError(
                f"workload {self.id!r}: an option has the wrong type ({exc})"
            ) from None


def default_catalogue_text() -> str:
    # package data (pyproject.toml), read beside the module
    return (Path(__file__).resolve().parent / "workloads" / "default.toml").read_text(
        encoding="utf-8"
    )


def parse_catalogue(text: str, where: str, trusted: bool = False) -> list[Workload]:
    """The workloads of a catalogue's ``text`` (``where`` names it in errors).  Types and bounds
    are ``CatalogueFile``'s, checked by pydantic unless ``trusted`` (the bundled default, which
    ``tests/test_catalogue.py`` validates): the cold start of ``report`` never imports it.  Then
    what a type cannot say: ids usable as names, serve-only keys, control characters, ``beside``
    naming a workload of the file, each job's options as ``fit`` takes them."""
    # long: the ids and unknown keys first (their own messages), the types, then each workload
    try:
        data = loads_toml(text, where)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{where}: not valid TOML ({exc})") from None
    extra = sorted(set(data) - {"workloads"})
    if extra:
        raise InputError(f"{where}: unknown top-level key(s) {extra}; expected [[workloads]]")
    items = data.get("workloads")
    if not isinstance(items, list) or not items:
        raise InputError(f"{where}: no [[workloads]] entries")
    tables: list[dict] = []
    for n, raw in enumerate(items, 1):
        if not isinstance(raw, dict):
            raise InputError(f"{where}: workloads entry {n} is not a table")
        wid = raw.get("id")
        if not isinstance(wid, str) or not wid.strip():
            raise InputError(f"{where}: workloads entry {n} has no id (a non-empty string)")
        if not valid_id(wid):
            raise InputError(
                f"{where}: workloads entry {n}: id {wid!r} is refused ({ID_RULE}): "
                "it becomes file names and script lines"
            )
        table = {k.replace("-", "_"): v for k, v in raw.items()}
        _unknown_keys(text, where, wid, {k: v for k, v in table.items() if k not in OWN_KEYS})
        tables.append(table)
    if not trusted:
        try:
            validate(CatalogueFile, {"workloads": tables})
        except ValueError as exc:
            raise _type_error(where, tables, exc) from None
    out = [_workload(where, raw) for raw in tables]
    ids = [w.id for w in out]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise InputError(f"{where}: workload ids repeat: {dupes}")
    for w in out:
        for b in w.beside:
            if b not in ids or b == w.id:
                raise InputError(f"{where}: workload {w.id!r}: beside names unknown workload {b!r}")
    return out


# serving figures: a peak rate and the service levels (floats), then the peak sequences
RATES = ("peak_requests_per_s", "peak_output_tokens_per_s", "slo_ttft_p99_s", "slo_tpot_p99_s")
SERVE_ONLY = ("peak_sequences", *RATES)


def _workload(where: str, raw: dict) -> Workload:
    """One table (its types checked) as a Workload, with the checks a type cannot make."""
    wid = raw["id"]
    for key in SERVE_ONLY:
        if raw.get(key) is not None and raw["job"] != "serve":
            raise InputError(f"{where}: workload {wid!r}: {key} applies to serve jobs")
    cmd = raw.get("command")
    for c in cmd or ():
        _no_control(where, wid, "command element", c)
    title = raw.get("title", wid)
    claim = raw.get("claim")
    _no_control(where, wid, "title", title)
    if claim is not None:
        _no_control(where, wid, "claim", claim)
    rates = {k: float(raw[k]) for k in RATES if raw.get(k) is not None}
    w = Workload(
        id=wid,
        title=title,
        model=raw["model"],
        kind=raw["job"],
        options={k: v for k, v in raw.items() if k not in OWN_KEYS},
        expect=raw.get("expect"),
        machines=raw.get("machines", 1),
        beside=tuple(raw.get("beside", ())),
        peak_sequences=raw.get("peak_sequences"),
        claim=claim,
        **rates,
        priority=raw.get("priority", 0),
        command=tuple(cmd) if cmd else None,
    )
    try:
        w.job()  # the options as `fit` takes them, with the workload's name in the message
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    return w


def _line_of(text: str, wid: str, key: str) -> int | None:
    """The line of ``key = ...`` in the [[workloads]] entry whose id is ``wid`` (1-based)."""
    lines = text.splitlines()
    start = next(
        (
            i
            for i, ln in enumerate(lines)
            if re.match(rf"\s*id\s*=\s*['\"]{re.escape(wid)}['\"]", ln)
        ),
        None,
    )
    if start is None:
        return None
    begin = max((i for i in range(start + 1) if lines[i].strip().startswith("[[")), default=0)
    for i in range(begin, len(lines)):
        if i > start and lines[i].strip().startswith("[["):
            break
        if re.match(rf"\s*{re.escape(key)}\s*=", lines[i]):
            return i + 1
    return None


def _unknown_keys(text: str, where: str, wid: str, opts: dict) -> None:
    """A key that is neither a workload key nor a job option is a typo: one line with the file,
    the line and the closest known key ("did you mean replicas?")."""
    known = set(OWN_KEYS) | set(JOB_OPTION_NAMES)
    for key in opts:
        if key in known:
            continue
        near = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
        line = _line_of(text, wid, key) or _line_of(text, wid, key.replace("_", "-"))
        at = f"{where}:{line}" if line else where
        hint = f"; did you mean {near[0]}?" if near else ""
        raise InputError(f"{at}: workload {wid!r}: unknown key {key!r}{hint}")


def load_catalogue(ref: str | None) -> tuple[list[Workload], str]:
    """None: the bundled default; "FILE": that catalogue; "+FILE": the default plus FILE."""
    if ref is None:
        default = parse_catalogue(default_catalogue_text(), "default catalogue", trusted=True)
        return default, "default catalogue"
    append = ref.startswith("+")
    path = Path(ref[1:] if append else ref)
    try:
        check_user_file(path, "workload catalogue")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"workload catalogue {str(path)!r} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"workload catalogue {str(path)!r} unreadable: {exc}") from None
    own = parse_catalogue(text, str(path))
    if not append:
        return own, str(path)
    base = parse_catalogue(default_catalogue_text(), "default catalogue", trusted=True)
    merged = base + own
    ids = [w.id for w in merged]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise InputError(f"{path}: workload ids already in the default catalogue: {dupes}")
    return merged, f"default catalogue + {path}"


def load_specs(workloads: list[Workload]) -> dict:
    """Model spec of each workload's model (loaded once per model); an unknown model names the
    workload that asked for it."""
    from nodeledger.errors import NodeledgerError
    from nodeledger.model import load_model

    specs: dict = {}
    for w in workloads:
        if w.model not in specs:
            try:
                specs[w.model] = load_model(w.model)[0]
            except NodeledgerError as exc:
                raise InputError(f"workload {w.id!r}: {exc}") from None
    return specs
