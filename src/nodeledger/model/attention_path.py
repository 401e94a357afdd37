"""Which attention path transformers takes for a model family, as transformers itself decides it.

transformers picks the attention implementation per model class: a class whose
``_supports_sdpa`` is False (gpt-oss's attention sinks, BLOOM's ALiBi, Gemma-2's soft-capping)
runs its eager attention whatever ``attn_implementation`` asks, and holds the full score matrix.
The flag is read from the installed transformers' modeling file for the family (its source
text, never imported: importing transformers costs seconds and pulls in torch); without
transformers installed, from nodeledger's table for the transformers release it was read from.
Every answer carries where it came from.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

# read from transformers 5.24.0 (modeling_<family>.py, _supports_sdpa = False): used when
# transformers is not installed, or its file for the family cannot be read
TABLE_RELEASE = "5.24.0"
EAGER_ONLY = {"gemma2", "bloom", "gpt_oss"}
MAX_FILE = 4 * 2**20  # a modeling file is ~20-200 KiB; never read more than this
_FLAG = re.compile(r"^\s*_supports_sdpa(?:\s*:\s*bool)?\s*=\s*(True|False)\b", re.M)
_VERSION = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.M)
_FAMILY = re.compile(r"^[a-z0-9_]+$")
_BASE = re.compile(r"^class \w+PreTrainedModel\(", re.M)


@dataclass(frozen=True)
class AttentionPath:
    sdpa: bool  # transformers has an SDPA path for this family
    source: str


def _read(path: Path) -> str | None:
    try:
        if not path.is_file() or path.stat().st_size > MAX_FILE:
            return None
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


@lru_cache(maxsize=1)
def _transformers_dir() -> Path | None:
    try:
        spec = importlib.util.find_spec("transformers")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent


@lru_cache(maxsize=64)
def attention_path(family: str) -> AttentionPath:
    """Whether transformers has an SDPA path for ``family`` (the config's model_type)."""
    table = AttentionPath(
        family not in EAGER_ONLY,
        f"nodeledger's table of transformers {TABLE_RELEASE} "
        + ("(_supports_sdpa = False)" if family in EAGER_ONLY else "(SDPA supported)"),
    )
    root = _transformers_dir()
    if root is None or not _FAMILY.match(family):
        return table
    text = _read(root / "models" / family / f"modeling_{family}.py")
    if text is None:
        return table
    version = _VERSION.search(_read(root / "__init__.py") or "")
    release = version.group(1) if version else "unknown release"
    # the family's *PreTrainedModel class states the flag (its models inherit it); without one
    # it inherits PreTrainedModel's (modeling_utils.py: `_supports_sdpa: bool = False` in 5.x)
    base = _BASE.search(text)
    body = text[base.end() :] if base else ""
    body = body[: body.find("\nclass ")] if "\nclass " in body else body
    flag = _FLAG.search(body)
    if flag is None:
        inherited = _FLAG.search(_read(root / "modeling_utils.py") or "")
        sdpa = inherited is not None and inherited.group(1) == "True"
    else:
        sdpa = flag.group(1) == "True"
    how = "_supports_sdpa = False" if not sdpa else "SDPA supported"
    return AttentionPath(
        sdpa, f"installed transformers {release}, models/{family}/modeling_{family}.py ({how})"
    )
