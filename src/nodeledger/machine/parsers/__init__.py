"""Pure parsers of recorded vendor-tool, OS and serving-engine outputs (text in, typed data out).

Each parser module is imported when its kind is first parsed, not with the package: importing
one light module of it (nccl_tests' bus factors, proc, common) does not pay for compiling every
other parser's patterns."""

from __future__ import annotations

import csv
import importlib
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from typing import Any

from nodeledger.errors import InputError
from nodeledger.machine.parsers.common import ParseError, strip_launcher_prefix


def _mod(name: str):
    return importlib.import_module(f"nodeledger.machine.parsers.{name}")


def _lazy(module: str, fn: str, post: Callable[[Any], Any] | None = None) -> Callable[[str], Any]:
    """``module.fn(text)``, the module imported on the first call; ``post`` shapes the result."""

    def run(text: str) -> Any:
        out = getattr(_mod(module), fn)(text)
        return post(out) if post is not None else out

    return run


def _topo(text: str) -> dict[str, Any]:
    t = _mod("nvidia_topo").parse(text)
    return {
        "cards": [asdict(c) for c in t.cards],
        "links": [asdict(lk) for lk in t.links],
        "nics": [asdict(n) for n in t.nics],
        "notes": t.notes,
    }


def _npu_topo(text: str) -> dict[str, Any]:
    t = _mod("npu_smi").parse_topo(text)
    return {
        "id_kind": t.id_kind,
        "cards": [asdict(c) for c in t.cards],
        "links": [asdict(lk) for lk in t.links],
        "nics": t.nics,
        "notes": t.notes,
    }


def _amd_smi_topo(text: str) -> dict[str, Any]:
    t = _mod("amd_smi").parse_amd_smi_topology(text)
    return {
        "cards": [{"index": i, "pci_bus_id": bdf} for i, bdf in enumerate(t.devices)],
        "links": t.links,
        "nics": [],
        "notes": t.notes,
    }


def _query_csv(text: str) -> dict[str, Any]:
    from nodeledger.machine.parsers.nvidia_query import parse_query_csv

    notes: list[str] = []
    cards = parse_query_csv(text, notes)
    if not cards:
        raise ParseError(
            "no card rows: expected nvidia-smi --query-gpu=... --format=csv output "
            "(one line per card)" + (f"; {notes[0]}" if notes else "")
        )
    return {"cards": cards, "notes": notes} if notes else {"cards": cards}


def _rocm_cards(cards: list[dict]) -> dict[str, Any]:
    """rocm-smi --json / --csv cards as `nodeledger parse` shows them (amd_smi.PARSE_FIELDS)."""
    fields = _mod("amd_smi").PARSE_FIELDS
    return {"cards": [{k: c[k] for k in fields} for c in cards]}


def _plain(obj: Any) -> Any:
    return asdict(obj) if is_dataclass(obj) else obj


PARSERS: dict[str, Callable[[str], Any]] = {
    "nvidia-smi-topo": _topo,
    "nvidia-smi-query-csv": _query_csv,
    "nvidia-smi": _lazy("nvidia_smi", "parse_table", _plain),
    "nvidia-smi-q-xml": _lazy("nvidia_smi", "parse_xml", _plain),
    "nvidia-smi-q": _lazy("nvidia_smi", "parse_q_text", _plain),
    "nvidia-smi-csv": _lazy("nvidia_smi", "parse_query_any"),
    "rocm-smi": _lazy("amd_smi", "parse_concise", _plain),
    "hy-smi": _lazy("amd_smi", "parse_concise", _plain),
    "rocm-smi-showtopo": _lazy("amd_smi", "parse_showtopo", _plain),
    "rocm-smi-json": _lazy("amd_smi", "parse_json", _rocm_cards),
    "rocm-smi-csv": _lazy("amd_smi", "parse_csv", _rocm_cards),
    "rocm-smi-all": _lazy("amd_smi", "parse_all", lambda cards: {"cards": cards}),
    "rocm-smi-pids": _lazy("amd_smi", "parse_rocm_pids_table"),
    "hy-smi-pids": _lazy("amd_smi", "parse_rocm_pids_table"),
    "amd-smi-static": _lazy("amd_smi", "parse_amd_smi_static", lambda cards: {"cards": cards}),
    "amd-smi-static-json": _lazy(
        "amd_smi", "parse_amd_smi_static_json", lambda cards: {"cards": cards}
    ),
    "amd-smi-topology": _amd_smi_topo,
    "amd-smi-monitor": _lazy("amd_smi_live", "parse_amd_smi_monitor"),
    "amd-smi-process": _lazy("amd_smi_live", "parse_amd_smi_process"),
    "amd-smi-metric": _lazy("amd_smi_live", "parse_amd_smi_metric"),
    "npu-smi": _lazy("npu_smi", "parse", _plain),
    "npu-smi-topo": _npu_topo,
    "numactl": _lazy("numa", "parse_numactl", _plain),
    "lscpu": _lazy("numa", "parse_lscpu", _plain),
    "vllm-log": _lazy("engine_log", "parse_vllm_log"),
    "sglang-log": _lazy("engine_log", "parse_sglang_log"),
}


def parse_kind(kind: str, text: str) -> Any:
    """``kind``'s parse of ``text``; only ParseError / InputError leave it (the parsers refuse bad
    input themselves; a failure they did not foresee is reported as a refusal here, never as an
    internal error: tests/test_fuzz_parsers.py and benchmarks/fuzz.py look for those)."""
    fn = PARSERS.get(kind)
    if fn is None:
        raise ParseError(
            f"unknown output kind {kind!r}; parsers available: {', '.join(sorted(PARSERS))}"
        )
    text, launcher = strip_launcher_prefix(text)
    try:
        data = fn(text)
        if launcher and isinstance(data, dict):
            data.setdefault("notes", []).append(launcher)
        return data
    except InputError:
        raise
    except (ArithmeticError, LookupError, ValueError, TypeError, AttributeError,
            RecursionError, csv.Error) as exc:  # fmt: skip
        raise ParseError(
            f"{kind} output not understood ({type(exc).__name__}: {str(exc)[:120]})"
        ) from None


__all__ = ["PARSERS", "ParseError", "parse_kind"]
