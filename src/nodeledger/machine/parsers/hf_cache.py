"""Where huggingface_hub keeps its Hub cache, decided from an environment mapping (pure).

Reads no file and not ``os.environ``: the caller passes the environment (the live process's,
or the /proc/self/environ a support bundle recorded) and the home directory to expand ``~``
with, so every command names the same folder for the same variables.
"""

from __future__ import annotations

from pathlib import Path

KEYS = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")
DEFAULT = "~/.cache/huggingface/hub"  # the rule name when no variable decided


def hf_hub_cache(env: dict[str, str], home: str | None) -> tuple[str | None, str]:
    """The Hub cache folder as huggingface_hub resolves it from the variables in ``env``:
    HF_HUB_CACHE (or the older HUGGINGFACE_HUB_CACHE), else HF_HOME/hub, else
    XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.  An empty variable counts as
    unset.  A leading ``~`` is replaced by ``home``.

    Returns (path, rule): ``rule`` names what decided — "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE", "HF_HOME/hub", "XDG_CACHE_HOME/huggingface/hub" or ``DEFAULT``;
    the path is None when it needs ``home`` and ``home`` is None."""

    def expand(p: str) -> str | None:
        if p.startswith("~"):
            return None if home is None else home + p[1:]
        return p

    for key in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(key):
            return expand(env[key]), key
    if env.get("HF_HOME"):
        base = expand(env["HF_HOME"])
        return (str(Path(base) / "hub") if base else None), "HF_HOME/hub"
    if env.get("XDG_CACHE_HOME"):
        base = expand(env["XDG_CACHE_HOME"])
        return (
            str(Path(base) / "huggingface/hub") if base else None
        ), "XDG_CACHE_HOME/huggingface/hub"
    if home:
        return str(Path(home) / ".cache/huggingface/hub"), DEFAULT
    return None, DEFAULT
