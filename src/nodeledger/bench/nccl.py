"""nccl-tests output files read and compared with nodeledger's own collectives.  The parser
itself (both column layouts, which collective) is ``nodeledger.machine.parsers.nccl_tests``;
``parse_nccl_tests`` and ``nearest_row`` stay importable from here.
"""

from __future__ import annotations

from pathlib import Path

from nodeledger.errors import InputError
from nodeledger.files import check_user_file
from nodeledger.machine.parsers.nccl_tests import nearest_row, parse_nccl_tests

__all__ = ["compare", "nearest_row", "parse_nccl_tests", "read_nccl_tests"]


def read_nccl_tests(path: str | Path, op: str | None = None) -> dict:
    p = Path(path)
    try:
        check_user_file(p, "nccl-tests output")
        text = p.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise InputError(f"nccl-tests output {str(p)!r} not found") from None
    except OSError as exc:
        raise InputError(f"{p}: cannot read: {exc.strerror or exc}") from None
    return parse_nccl_tests(text, str(p), op)


def compare(parsed: dict, measured: list[dict]) -> list[dict]:
    """nodeledger's collective figures beside the nccl-tests row of the same collective, card
    count and (nearest) size; measured items: {op, n, size_bytes, busbw_gbps, in_place}."""
    out = []
    for m in measured:
        if parsed["collective"] != m["op"]:
            continue
        row = nearest_row(parsed, m["size_bytes"])
        group = row["in_place"] if m.get("in_place") and row["in_place"] else row["out_of_place"]
        ref = group["busbw"]
        ratio = m["busbw_gbps"] / ref if ref else None
        same = parsed["n"] == m["n"] and row["size_bytes"] == m["size_bytes"]
        out.append({
            "op": m["op"], "n": m["n"], "size_bytes": m["size_bytes"],
            "busbw_gbps": m["busbw_gbps"], "nccl_tests_size_bytes": row["size_bytes"],
            "nccl_tests_busbw_gbps": ref, "ratio": ratio,
            "within_5pct": None if ratio is None or not same else abs(ratio - 1) <= 0.05,
            "comparable": same,
            "note": "" if same else (f"nccl-tests ran {parsed['n']} ranks at {row['size_bytes']:,} B; "
                                     f"nodeledger {m['n']} at {m['size_bytes']:,} B"),
        })  # fmt: skip
    return out
