"""Load and save machine profiles (TOML or JSON) and find the bundled presets.

TOML has no null, so an unknown value is written as the string ``"unknown"``; JSON uses
``null``.  Both load back to the same profile (round-trip equality is tested).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from nodeledger import atomic
from nodeledger.errors import ProfileError
from nodeledger.files import check_user_file, loads_json, loads_toml
from nodeledger.machine.profile import (
    UNKNOWN,
    MachineProfile,
    construct_trusted,
    errors,
    to_json,
    validate,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_PRESET = "k100-ai-8x64g"
_PRESET_DIR = Path(__file__).resolve().parent / "presets"  # package data (pyproject.toml)


def _preset_dir() -> Path:
    return _PRESET_DIR


def list_presets() -> list[str]:
    """Names of the bundled presets, sorted."""
    return sorted(
        p.name[: -len(".toml")] for p in _preset_dir().iterdir() if p.name.endswith(".toml")
    )


def _validation_line(exc: ValueError, where: str) -> str:
    found = errors(exc)
    first = found[0]
    loc = ".".join(str(part) for part in first["loc"]) or "(top level)"
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return f"{where}: field {loc}: {first['msg']}{more}"


def parse_profile(text: str, fmt: str, where: str) -> MachineProfile:
    """Parse profile text in ``fmt`` ("toml" or "json"); ``where`` names it in errors."""
    try:
        if fmt == "toml":
            data = loads_toml(text, where, ProfileError)
        else:
            data = loads_json(text, where, ProfileError)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ProfileError(f"{where}: not valid {fmt.upper()}: {exc}") from None
    except RecursionError:
        raise ProfileError(f"{where}: nested too deeply to be a machine profile") from None
    if not isinstance(data, dict):
        raise ProfileError(
            f"{where}: a machine profile is a table/object, got {type(data).__name__}"
        )
    try:
        return validate(MachineProfile, data)
    except ValueError as exc:
        raise ProfileError(_validation_line(exc, where)) from None


def load_profile(path: str | Path) -> MachineProfile:
    """Load a profile file; the format follows the suffix (.json, else TOML)."""
    p = Path(path)
    try:
        check_user_file(p, "machine profile")
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"{p}: cannot read machine profile: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ProfileError(f"{p}: not a text file (not UTF-8): not a machine profile") from None
    return parse_profile(text, "json" if p.suffix.lower() == ".json" else "toml", str(p))


def load_preset(name: str) -> MachineProfile:
    """A bundled preset.  Presets are package data that the test suite validates (and compares
    with this result), so they are built without running the validator (``construct_trusted``);
    ``parse_profile`` validates every other profile."""
    res = _preset_dir() / f"{name}.toml"
    if not res.is_file():
        raise ProfileError(
            f"unknown machine preset {name!r}; bundled presets: {', '.join(list_presets())}"
        )
    return construct_trusted(MachineProfile, tomllib.loads(res.read_text(encoding="utf-8")))


def _none_to_unknown(value: Any) -> Any:
    if value is None:
        return UNKNOWN
    if isinstance(value, dict):
        return {k: _none_to_unknown(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_none_to_unknown(v) for v in value]
    return value


def dump_profile(profile: MachineProfile, fmt: str = "toml") -> str:
    data = to_json(profile)
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    import tomli_w

    return tomli_w.dumps(_none_to_unknown(data))


def check_save_path(path: str | Path) -> Path:
    """The --save path, refused (ProfileError) before any work when it cannot be a profile
    nodeledger reads back: no name, or a suffix other than .toml / .json."""
    if not str(path).strip():
        raise ProfileError("--save needs a file name")
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".json", ".toml"):
        raise ProfileError(
            f"--save {p}: a machine profile is written as .toml or .json, not "
            f"{suffix or 'a name without a suffix'} (nodeledger reads those two back)"
        )
    return p


def save_profile(profile: MachineProfile, path: str | Path) -> None:
    p = check_save_path(path)
    text = dump_profile(profile, "json" if p.suffix.lower() == ".json" else "toml")
    try:
        atomic.write_text(p, text)  # an interrupted save leaves the old file, never half
    except OSError as exc:
        raise ProfileError(f"{p}: cannot write machine profile: {exc.strerror or exc}") from None
