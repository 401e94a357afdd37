"""Where a model's config.json comes from.

Resolution order for ``MODEL``:
  1. a path to a config.json file, or to a folder holding one (a local checkpoint);
  2. a name in the bundled catalogue (``model/catalogue/*.json``, written from public facts);
  3. a Hub model id found in the local HuggingFace cache (``huggingface_hub``'s cache API,
     never the network);
  4. with ``online=True`` only: the Hub itself (``hf_hub_download`` of config.json).
An id found nowhere raises ModelNotFoundError naming every place that was looked at.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeledger.errors import ConfigError, ModelNotFoundError
from nodeledger.files import check_user_file, loads_json


@dataclass
class ConfigSource:
    config: dict[str, Any]
    where: str  # human description, used in every error and printed as provenance
    folder: Path | None = None  # local checkpoint folder (for safetensors headers), if any
    catalogue_entry: dict[str, Any] | None = None


def parse_config_text(text: str, where: str) -> dict[str, Any]:
    try:
        data = loads_json(text, where, ConfigError)
    except RecursionError:
        raise ConfigError(f"{where}: JSON nested too deeply to be a config.json") from None
    except json.JSONDecodeError as exc:
        hint = " (truncated?)" if exc.pos >= len(text.rstrip()) - 1 else ""
        raise ConfigError(
            f"{where}: not valid JSON{hint}: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a config.json is a JSON object, got {type(data).__name__}")
    return data


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        check_user_file(path, "config.json")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config: {exc}") from None
    return parse_config_text(text, str(path))


# -- bundled catalogue ----------------------------------------------------------------------


def _catalogue_files():
    folder = Path(__file__).resolve().parent / "catalogue"  # package data (pyproject.toml)
    return sorted((p for p in folder.iterdir() if p.name.endswith(".json")), key=lambda p: p.name)


def catalogue() -> list[dict[str, Any]]:
    """All catalogue entries: {"id", "aliases", "source", "config", "notes"}."""
    return [json.loads(p.read_text(encoding="utf-8")) for p in _catalogue_files()]


def _norm(name: str) -> str:
    return name.strip().lower()


def find_in_catalogue(name: str) -> dict[str, Any] | None:
    key = _norm(name)
    for entry in catalogue():
        names = [entry["id"], entry["id"].split("/")[-1], *entry.get("aliases", [])]
        if key in {_norm(n) for n in names}:
            return entry
    return None


# -- HF cache -------------------------------------------------------------------------------


HUB_EXTRA = "pip install 'nodeledger[hub]'"


def hub_installed() -> bool:
    """Whether huggingface_hub (the ``hub`` extra) is installed, without importing it."""
    import importlib.util

    return importlib.util.find_spec("huggingface_hub") is not None


def find_in_hf_cache(repo_id: str) -> Path | None:
    """config.json of ``repo_id`` in the local HF cache (HF_HOME / HF_HUB_CACHE honoured)."""
    if repo_id.count("/") != 1:
        return None
    if not hub_installed():
        return None
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # an invalid repo id shape is "not found", not a crash
        return None
    return Path(found) if isinstance(found, str) else None


def hf_cache_dir() -> str:
    """The local HF Hub cache folder, from this process's environment as huggingface_hub
    decides (``machine.parsers.hf_cache``; ``~`` and ``$VAR`` expanded as huggingface_hub does)."""
    import os

    from nodeledger.machine.parsers.hf_cache import KEYS, hf_hub_cache

    given = {k: os.path.expandvars(os.path.expanduser(os.environ[k]))
             for k in KEYS if os.environ.get(k)}  # fmt: skip
    path, _rule = hf_hub_cache(given, os.path.expanduser("~"))
    return path or "the HF cache"


def resolve_config(ref: str, online: bool = False) -> ConfigSource:
    p = Path(ref).expanduser()
    if p.is_dir():
        cfg = p / "config.json"
        if not cfg.is_file():
            raise ModelNotFoundError(f"{p}: folder has no config.json")
        return ConfigSource(read_config_file(cfg), str(cfg), folder=p)
    if p.is_file():
        return ConfigSource(read_config_file(p), str(p), folder=p.parent)
    entry = find_in_catalogue(ref)
    if entry is not None:
        return ConfigSource(
            dict(entry["config"]),
            f"catalogue {entry['id']} ({entry['source']})",
            catalogue_entry=entry,
        )
    cached = find_in_hf_cache(ref)
    if cached is not None:
        return ConfigSource(
            read_config_file(cached), f"HF cache {ref} ({cached})", folder=cached.parent
        )
    if online:
        return _download(ref)
    looked = [
        "as a file or folder path: not found",
        f"bundled catalogue ({len(catalogue())} models; `nodeledger model list`): no such id",
        f"local HF cache {hf_cache_dir()}: not cached"
        if hub_installed()
        else f"local HF cache: not read (huggingface_hub is not installed: {HUB_EXTRA})",
    ]
    raise ModelNotFoundError(
        f"model {ref!r} not found; looked {'; '.join(looked)}; add --online to fetch its config.json"
    )


HUB_CHECK_SECONDS = 3.0


def _hub_unreachable(timeout: float = HUB_CHECK_SECONDS) -> str | None:
    """Why the Hub (HF_ENDPOINT, default https://huggingface.co) cannot be reached, or None:
    name resolution and a TCP connect to its port, in a daemon thread bounded by ``timeout``
    (getaddrinfo itself can block for tens of seconds without a network), so --online without
    a network is one line in seconds instead of huggingface_hub's retries."""
    import os
    import socket
    import threading
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    result: list[str | None] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result.append(None)
        except OSError as exc:
            result.append(f"{host}:{port}: {exc.strerror or exc}")

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout)
    if not result:
        return f"{host}:{port}: no answer within {timeout:g} s"
    return result[0]


def _download(repo_id: str) -> ConfigSource:
    if not hub_installed():
        raise ModelNotFoundError(
            f"model {repo_id!r}: --online needs huggingface_hub, which is not installed: {HUB_EXTRA}"
        )
    why = _hub_unreachable()
    if why is not None:
        raise ModelNotFoundError(
            f"model {repo_id!r}: --online, but the Hub is not reachable ({why}); "
            "copy its config.json here and pass the path, or set HF_ENDPOINT to a mirror"
        )
    try:
        from huggingface_hub import hf_hub_download

        path = Path(hf_hub_download(repo_id, "config.json"))
    except Exception as exc:  # network, auth, missing repo: one line, exit 2
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelNotFoundError(f"model {repo_id!r}: --online download failed: {first}") from None
    return ConfigSource(read_config_file(path), f"Hub {repo_id} ({path})", folder=path.parent)
