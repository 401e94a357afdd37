"""Pure parsers of recorded vendor-tool, OS and serving-engine outputs (text in, typed data out)."""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from typing import Any

from nodeledger.errors import InputError
from nodeledger.machine.parsers import amd_smi, engine_log, npu_smi, numa, nvidia_smi, nvidia_topo
from nodeledger.machine.parsers.common import ParseError, strip_launcher_prefix


def _topo(text: str) -> dict[str, Any]:
    t = nvidia_topo.parse(text)
    return {
        "cards": [asdict(c) for c in t.cards],
        "links": [asdict(lk) for lk in t.links],
        "nics": [asdict(n) for n in t.nics],
        "notes": t.notes,
    }


def _npu_topo(text: str) -> dict[str, Any]:
    t = npu_smi.parse_topo(text)
    return {
        "id_kind": t.id_kind,
        "cards": [asdict(c) for c in t.cards],
        "links": [asdict(lk) for lk in t.links],
        "nics": t.nics,
        "notes": t.notes,
    }


def _amd_smi_topo(text: str) -> dict[str, Any]:
    t = amd_smi.parse_amd_smi_topology(text)
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
    return {"cards": [{k: c[k] for k in amd_smi.PARSE_FIELDS} for c in cards]}


def _plain(obj: Any) -> Any:
    return asdict(obj) if is_dataclass(obj) else obj


PARSERS: dict[str, Callable[[str], Any]] = {
    "nvidia-smi-topo": _topo,
    "nvidia-smi-query-csv": _query_csv,
    "nvidia-smi": lambda text: _plain(nvidia_smi.parse_table(text)),
    "nvidia-smi-q-xml": lambda text: _plain(nvidia_smi.parse_xml(text)),
    "nvidia-smi-q": lambda text: _plain(nvidia_smi.parse_q_text(text)),
    "nvidia-smi-csv": nvidia_smi.parse_query_any,
    "rocm-smi": lambda text: _plain(amd_smi.parse_concise(text)),
    "hy-smi": lambda text: _plain(amd_smi.parse_concise(text)),
    "rocm-smi-showtopo": lambda text: _plain(amd_smi.parse_showtopo(text)),
    "rocm-smi-json": lambda text: _rocm_cards(amd_smi.parse_json(text)),
    "rocm-smi-csv": lambda text: _rocm_cards(amd_smi.parse_csv(text)),
    "rocm-smi-all": lambda text: {"cards": amd_smi.parse_all(text)},
    "amd-smi-static": lambda text: {"cards": amd_smi.parse_amd_smi_static(text)},
    "amd-smi-static-json": lambda text: {"cards": amd_smi.parse_amd_smi_static_json(text)},
    "amd-smi-topology": _amd_smi_topo,
    "npu-smi": lambda text: _plain(npu_smi.parse(text)),
    "npu-smi-topo": _npu_topo,
    "numactl": lambda text: _plain(numa.parse_numactl(text)),
    "lscpu": lambda text: _plain(numa.parse_lscpu(text)),
    "vllm-log": engine_log.parse_vllm_log,
    "sglang-log": engine_log.parse_sglang_log,
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
