"""Workload catalogues (TOML): the work a machine is asked to carry.

Each ``[[workloads]]`` entry names a model, a job kind and `nodeledger fit`'s options in snake_case
(``tp``, ``context``, ``shard`` ...), plus the report's own keys (see ``workloads/default.toml``).
"""

from __future__ import annotations

import difflib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from nodeledger.errors import InputError
from nodeledger.files import check_user_file, loads_toml
from nodeledger.ledger.jobs import JOB_OPTION_NAMES, build_job

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

OWN_KEYS = {"id", "title", "model", "job", "expect", "machines", "beside", "peak_sequences", "claim",
            "priority", "command", "peak_requests_per_s", "peak_output_tokens_per_s",
            "slo_ttft_p99_s", "slo_tpot_p99_s"}  # fmt: skip
EXPECT = ("can", "tight", "cannot")
JOB_KINDS = ("serve", "train", "lora", "qlora", "load")
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


def parse_catalogue(text: str, where: str) -> list[Workload]:
    # long: validation: one check per workload key, each with its own message, then the ids across
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
    out: list[Workload] = []
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
        for key in ("model", "job"):
            if not isinstance(raw.get(key), str) or not raw[key].strip():
                raise InputError(f'{where}: workload {wid!r} needs {key} = "..."')
        if raw["job"] not in JOB_KINDS:
            raise InputError(
                f"{where}: workload {wid!r}: job {raw['job']!r} is not one of {', '.join(JOB_KINDS)}"
            )
        expect = raw.get("expect")
        if expect is not None and expect not in EXPECT:
            raise InputError(f"{where}: workload {wid!r}: expect must be one of {EXPECT}")
        machines = raw.get("machines", 1)
        if not isinstance(machines, int) or isinstance(machines, bool) or machines < 1:
            raise InputError(f"{where}: workload {wid!r}: machines must be an integer >= 1")
        beside = raw.get("beside", [])
        if not isinstance(beside, list) or not all(isinstance(b, str) for b in beside):
            raise InputError(f"{where}: workload {wid!r}: beside must be a list of workload ids")
        peak = raw.get("peak_sequences")
        if peak is not None and (not isinstance(peak, int) or isinstance(peak, bool) or peak < 1):
            raise InputError(f"{where}: workload {wid!r}: peak_sequences must be an integer >= 1")
        if peak is not None and raw["job"] != "serve":
            raise InputError(f"{where}: workload {wid!r}: peak_sequences applies to serve jobs")
        rates = {}
        for key in ("peak_requests_per_s", "peak_output_tokens_per_s", "slo_ttft_p99_s",
                    "slo_tpot_p99_s"):  # fmt: skip
            v = raw.get(key)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1e12:
                raise InputError(f"{where}: workload {wid!r}: {key} must be a positive number")
            if raw["job"] != "serve":
                raise InputError(f"{where}: workload {wid!r}: {key} applies to serve jobs")
            rates[key] = float(v)
        prio = raw.get("priority", 0)
        if not isinstance(prio, int) or isinstance(prio, bool):
            raise InputError(f"{where}: workload {wid!r}: priority must be an integer")
        cmd = raw.get("command")
        if cmd is not None and (
            not isinstance(cmd, list) or not cmd or not all(isinstance(c, str) for c in cmd)
        ):
            raise InputError(
                f"{where}: workload {wid!r}: command must be a list of strings (argv, no shell)"
            )
        for c in cmd or ():
            _no_control(where, wid, "command element", c)
        title = str(raw.get("title", wid))
        claim = str(raw["claim"]) if raw.get("claim") is not None else None
        _no_control(where, wid, "title", title)
        if claim is not None:
            _no_control(where, wid, "claim", claim)
        opts = {k.replace("-", "_"): v for k, v in raw.items() if k not in OWN_KEYS}
        _unknown_keys(text, where, wid, opts)
        w = Workload(
            id=wid,
            title=title,
            model=raw["model"],
            kind=raw["job"],
            options=opts,
            expect=expect,
            machines=machines,
            beside=tuple(beside),
            peak_sequences=peak,
            claim=claim,
            **rates,
            priority=prio,
            command=tuple(cmd) if cmd else None,
        )
        w.job()  # validate the options now, with the workload's name in the message
        out.append(w)
    ids = [w.id for w in out]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise InputError(f"{where}: workload ids repeat: {dupes}")
    for w in out:
        for b in w.beside:
            if b not in ids or b == w.id:
                raise InputError(f"{where}: workload {w.id!r}: beside names unknown workload {b!r}")
    return out


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
        return parse_catalogue(default_catalogue_text(), "default catalogue"), "default catalogue"
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
    base = parse_catalogue(default_catalogue_text(), "default catalogue")
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
