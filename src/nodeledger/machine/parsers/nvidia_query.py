"""``nvidia-smi --query-gpu=... --format=csv`` rows (pure): the card and health fields the NVIDIA
probe asks for (QUERY, or QUERY_BASE on an older driver that refuses a health field) and the
``--query-compute-apps`` fields (APPS).  Memory in MiB as printed; nvidia-smi's "[N/A]" /
"[Not Supported]" are None.

The watch's nvidia-smi backend asks two short queries (``--format=csv,noheader,nounits``):
DESCRIBE_QUERY once (:func:`parse_describe_query`) and GPU_QUERY per sample
(:func:`parse_gpu_query`); these give bytes (MiB x 2**20)."""

from __future__ import annotations

import csv
import io
import re

from nodeledger.errors import InputError
from nodeledger.machine.parsers.common import MAX_CARD_BYTES, shorten, to_float, to_int
from nodeledger.units import MiB

QUERY_BASE = "index,name,memory.total,pci.bus_id,mig.mode.current"
HEALTH_FIELDS = (
    "memory.used,persistence_mode,ecc.mode.current,ecc.errors.corrected.volatile.total,"
    "ecc.errors.uncorrected.volatile.total,retired_pages.single_bit_ecc.count,"
    "retired_pages.double_bit.count,retired_pages.pending,remapped_rows.pending,"
    "remapped_rows.failure"
)
QUERY = f"{QUERY_BASE},{HEALTH_FIELDS}"
APPS = "gpu_bus_id,pid,process_name,used_memory"
GPU_QUERY = "index,memory.used,memory.total,utilization.gpu"  # watch, per sample
DESCRIBE_QUERY = "index,name,uuid,pci.bus_id,memory.total"  # watch, once
# row key -> (profile field, nvidia-smi field for its source)
HEALTH = {
    "persistence": ("persistence_mode", "persistence_mode"),
    "ecc_mode": ("ecc_mode", "ecc.mode.current"),
    "ecc_corrected": ("ecc_errors_corrected", "ecc.errors.corrected.volatile.total"),
    "ecc_uncorrected": ("ecc_errors_uncorrected", "ecc.errors.uncorrected.volatile.total"),
    "retired_pending": ("retired_pages_pending", "retired_pages.pending"),
    "remapped_pending": ("remapped_rows_pending", "remapped_rows.pending"),
    "remapped_failed": ("remapped_rows_failed", "remapped_rows.failure"),
}


def _na(v: str) -> bool:
    """nvidia-smi's unknowns: "[N/A]", "[Not Supported]", "[Unknown Error]", "N/A", empty."""
    return not v or v.startswith("[") or v == "N/A"


def _row(d: dict[str, str], n: int, notes: list[str]) -> dict | None:
    idx = d.get("index", "")
    if to_int(idx, hi=2**20) is None:
        notes.append(
            f"nvidia-smi --query-gpu: row {n} skipped, index {shorten(idx)} is not a card index"
        )
        return None

    def mib(key: str) -> int | None:
        v = d.get(key, "")
        m = re.fullmatch(r"([0-9]{1,12})\s*(MiB)?", v)
        if m and int(m.group(1)) <= MAX_CARD_BYTES // 2**20:
            return int(m.group(1))
        if v:
            notes.append(f"nvidia-smi --query-gpu: card {idx} {key} {shorten(v)} not MiB; unknown")
        return None

    def word(key: str, allowed: tuple[str, ...]) -> str | None:
        v = d.get(key, "").strip().lower()
        return v if v in allowed else None

    def count(key: str) -> int | None:
        v = d.get(key, "").strip()
        c = to_int(v)
        if c is None and v:
            notes.append(
                f"nvidia-smi --query-gpu: card {idx} {key} {shorten(v)} not a count; unknown"
            )
        return c

    return {
        "index": int(idx),
        "name": d.get("name") or None,
        "memory_mib": mib("memory.total"),
        "pci_bus_id": d.get("pci.bus_id") or None,
        "mig": d.get("mig.mode.current") or None,
        "memory_used_mib": mib("memory.used"),
        "persistence": word("persistence_mode", ("enabled", "disabled")),
        "ecc_mode": word("ecc.mode.current", ("enabled", "disabled")),
        "ecc_corrected": count("ecc.errors.corrected.volatile.total"),
        "ecc_uncorrected": count("ecc.errors.uncorrected.volatile.total"),
        "retired_sbe": count("retired_pages.single_bit_ecc.count"),
        "retired_dbe": count("retired_pages.double_bit.count"),
        "retired_pending": word("retired_pages.pending", ("yes", "no")),
        "remapped_pending": word("remapped_rows.pending", ("yes", "no")),
        "remapped_failed": word("remapped_rows.failure", ("yes", "no")),
    }


def parse_query_csv(text: str, notes: list[str] | None = None) -> list[dict]:
    """``nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits`` (or QUERY_BASE, or any
    ``--format=csv`` output with a header naming these fields) -> rows: index, name,
    memory_mib, pci_bus_id, mig, memory_used_mib, persistence, ecc_mode, ecc_corrected,
    ecc_uncorrected, retired_sbe, retired_dbe, retired_pending, remapped_pending, remapped_failed
    (memory in MiB); nvidia-smi's "[N/A]" / "[Not Supported]" are None.  A field that does not
    parse is None, a row without a card index skipped, each with a line in ``notes``."""
    notes = [] if notes is None else notes
    rows = []
    try:
        reader = list(csv.reader(io.StringIO(text.strip())))
    except csv.Error as exc:
        raise InputError(f"nvidia-smi query output is not CSV ({exc})") from None
    cols = None
    if reader and reader[0] and not reader[0][0].strip().isdecimal():
        cols = [c.strip().split(" [")[0] for c in reader[0]]  # a header row (format=csv)
        reader = reader[1:]
    full, base = QUERY.split(","), QUERY_BASE.split(",")
    for n, rec in enumerate(reader, 1):
        if not rec:
            continue
        vals = [x.strip() for x in rec]
        if cols:
            names = cols
        elif len(vals) == len(full):
            names = full
        elif 4 <= len(vals) <= len(base):
            names = base
        else:
            raise InputError(
                f"nvidia-smi query row {n} has {len(vals)} fields, expected {len(base)} or {len(full)}"
            )
        d = {k: ("" if _na(v) else v) for k, v in zip(names, vals, strict=False)}
        skipped = len(notes)
        row = _row(d, n, notes)
        if row is not None:
            rows.append(row)
        elif not rows and n == len(reader):  # no row at all names a card: not this output
            raise InputError(f"no nvidia-smi query row has a card index ({notes[skipped]})")
    return rows


def _float(v: str) -> float | None:
    return to_float(v, hi=float(MAX_CARD_BYTES))  # "[N/A]", "[Not Supported]" -> None


def parse_gpu_query(text: str) -> list[dict]:
    """``--query-gpu=index,memory.used,memory.total,utilization.gpu --format=csv,noheader,nounits``
    -> [{index, used_bytes, total_bytes, util_pct}] (MiB -> bytes; "[N/A]" -> None)."""
    out = []
    for n, line in enumerate(text.strip().splitlines(), 1):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4 or to_int(parts[0], hi=2**20) is None:
            raise InputError(f"nvidia-smi --query-gpu row {n} not understood: {line[:80]!r}")
        used, total, util = (_float(p) for p in parts[1:])
        out.append({"index": int(parts[0]),
                    "used_bytes": None if used is None else int(used * MiB),
                    "total_bytes": None if total is None else int(total * MiB), "util_pct": util})  # fmt: skip
    return out


def parse_describe_query(text: str) -> list[dict]:
    """``--query-gpu=index,name,uuid,pci.bus_id,memory.total --format=csv,noheader,nounits`` ->
    [{index, name, uuid, pci_bus_id, total_bytes}] (MiB -> bytes; empty uuid / bus id -> None);
    a row without five fields and a numeric index is skipped."""
    cards = []
    for line in text.strip().splitlines():
        p = [x.strip() for x in line.split(",")]
        if len(p) != 5 or to_int(p[0], hi=2**20) is None:
            continue
        total = _float(p[4])
        cards.append({"index": int(p[0]), "name": p[1], "uuid": p[2] or None,
                      "pci_bus_id": p[3] or None,
                      "total_bytes": None if total is None else int(total * MiB)})  # fmt: skip
    return cards
