"""nccl-tests output (``all_reduce_perf``, ``all_gather_perf``, ...; rccl-tests prints the same)
parsed into rows (pure: text in, rows out), so nodeledger's bus bandwidth compares with
nccl-tests directly.

Reads the text a ``*_perf`` binary prints on stdout.  Both layouts are read from the column
header, not from fixed positions: the current one (``size count type redop root time algbw busbw
#wrong`` x out-of-place / in-place) and the old one (no ``root``, ``error`` instead of ``#wrong``;
all_gather_perf without ``redop``).  Lines that are not rows (``NCCL INFO`` logs interleaved by
the library) are skipped.  The output does not name its collective: it is taken from the file
name when it says (``allreduce``, ``all_gather``, ...), else from the bus factor busbw ÷ algbw and
``redop`` (``--op`` wins).
"""

from __future__ import annotations

import re
from pathlib import PurePath

from nodeledger.errors import InputError

# nccl-tests' bus bandwidth factors, busbw = algbw x factor(n ranks) (its doc/PERFORMANCE.md)
BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}

_NUM = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")
_RANK = re.compile(
    r"#\s+Rank\s+(?P<rank>\d+)\s+(?:Group\s+(?P<group>\d+)\s+)?Pid\s+(?P<pid>\d+)\s+on\s+"
    r"(?P<host>\S+)\s+device\s+(?P<device>\d+)\s+\[(?P<bus>[^\]]*)\]\s+(?P<name>.*?)\s*$"
)
_OPS_IN_NAME = {
    "all_reduce": ("allreduce", "all_reduce", "all-reduce"),
    "all_gather": ("allgather", "all_gather", "all-gather"),
    "reduce_scatter": ("reducescatter", "reduce_scatter", "reduce-scatter"),
    "alltoall": ("alltoall", "all_to_all"),
    "broadcast": ("broadcast",),
    "sendrecv": ("sendrecv",),
}


def _num(tok: str) -> float | None:
    return float(tok) if _NUM.match(tok) else None


def _header_params(line: str) -> dict:
    """`# nThread 1 nGpus 2 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 ...`"""
    out: dict = {}
    body = line.lstrip("#").strip()
    for key, pat in (("nThread", r"nThread\s+(\d+)"), ("nGpus", r"nGpus\s+(\d+)"),
                     ("minBytes", r"minBytes\s+(\d+)"), ("maxBytes", r"maxBytes\s+(\d+)"),
                     ("warmup_iters", r"warmup iters:\s+(\d+)"), ("iters", r"(?<!warmup )(?<!agg )iters:\s+(\d+)"),
                     ("agg_iters", r"agg iters:\s+(\d+)"), ("validation", r"validation:\s+(\d+)"),
                     ("graph", r"graph:\s+(\d+)")):  # fmt: skip
        m = re.search(pat, body)
        if m:
            out[key] = int(m.group(1))
    m = re.search(r"step:\s+(\S+)", body)
    if m:
        out["step"] = m.group(1)
    return out


def parse_nccl_tests(text: str, name: str = "", op: str | None = None) -> dict:
    """Rows and summary of one nccl-tests run (its stdout; ``name``: the file it came from, for
    messages and the collective's name).  Raises InputError when there are no rows."""
    params: dict = {}
    ranks: list[dict] = []
    columns: list[str] | None = None
    rows: list[dict] = []
    avg_busbw = None
    oob = None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("# nThread"):
            params = _header_params(s)
            continue
        m = _RANK.match(s)
        if m:
            ranks.append({
                "rank": int(m["rank"]), "group": None if m["group"] is None else int(m["group"]),
                "pid": int(m["pid"]), "host": m["host"], "device": int(m["device"]),
                "bus_id": m["bus"], "name": m["name"],
            })  # fmt: skip
            continue
        if s.startswith("#") and re.search(r"\bsize\b", s) and "algbw" in s:
            columns = s.lstrip("#").split()
            continue
        m = re.match(r"#\s*Avg bus bandwidth\s*:\s*(\S+)", s)
        if m:
            avg_busbw = _num(m.group(1))
            continue
        m = re.match(r"#\s*Out of bounds values\s*:\s*(\d+)\s*(\S*)", s)
        if m:
            oob = {"count": int(m.group(1)), "status": m.group(2) or None}
            continue
        if s.startswith("#") or columns is None or not s:
            continue
        toks = s.split()
        if len(toks) != len(columns) or _num(toks[0]) is None:
            continue  # NCCL INFO lines, warnings
        row = _row(columns, toks)
        if row is not None:
            rows.append(row)
    if not rows:
        raise InputError(
            f"{name or 'input'}: no nccl-tests result rows found (is it nccl-tests output?)"
        )
    n = len(ranks) or None
    if n is None and params.get("nGpus") and params.get("nThread"):
        n = params["nGpus"] * params["nThread"]  # one process; MPI runs list every rank
    hosts = sorted({r["host"] for r in ranks})
    collective, how = _which(name, op, rows, n)
    best = max(rows, key=lambda r: r["out_of_place"]["busbw"] or 0)
    return {
        "source": name,
        "params": params,
        "ranks": ranks,
        "n": n,
        "hosts": hosts,
        "collective": collective,
        "collective_from": how,
        "columns": columns,
        "rows": rows,
        "avg_busbw": avg_busbw,
        "out_of_bounds": oob,
        "peak": {
            "size_bytes": best["size_bytes"],
            "busbw_gbps": best["out_of_place"]["busbw"],
            "in_place_busbw_gbps": best["in_place"]["busbw"] if best["in_place"] else None,
        },
    }


def _row(columns: list[str], toks: list[str]) -> dict | None:
    """Columns: size count type [redop] [root] time algbw busbw err time algbw busbw err."""
    try:
        t_idx = [i for i, c in enumerate(columns) if c == "time"]
    except ValueError:
        return None
    if not t_idx:
        return None
    head = dict(zip(columns[: t_idx[0]], toks[: t_idx[0]], strict=True))

    def group(i: int) -> dict:
        cols = columns[i : i + 4]
        vals = toks[i : i + 4]
        g = dict(zip(cols, vals, strict=False))
        wrong_key = next((c for c in cols if c in ("#wrong", "error")), None)
        wrong = g.get(wrong_key) if wrong_key else None
        return {
            "time_us": _num(g.get("time", "")),
            "algbw": _num(g.get("algbw", "")),
            "busbw": _num(g.get("busbw", "")),
            "wrong": None if wrong in (None, "N/A") else _num(wrong),
        }

    size = _num(head.get("size", ""))
    count = _num(head.get("count", ""))
    if size is None:
        return None
    root = head.get("root")
    return {
        "size_bytes": int(size),
        "count": None if count is None else int(count),
        "type": head.get("type"),
        "redop": head.get("redop"),
        "root": None if root is None else int(root),
        "out_of_place": group(t_idx[0]),
        "in_place": group(t_idx[1]) if len(t_idx) > 1 else None,
    }


def _which(name: str, op: str | None, rows: list[dict], n: int | None) -> tuple[str | None, str]:
    if op:
        if op not in BUS_FACTOR:
            raise InputError(f"--op {op!r} is not one of {', '.join(BUS_FACTOR)}")
        return op, "given"
    low = PurePath(name).name.lower()
    for key, words in _OPS_IN_NAME.items():
        if any(w in low for w in words):
            return key, "file name"
    big = [r for r in rows if (r["out_of_place"]["algbw"] or 0) > 0.5]
    if not big or not n:
        return None, "unknown: name the collective (op)"
    r = max(big, key=lambda r: r["size_bytes"])
    ratio = r["out_of_place"]["busbw"] / r["out_of_place"]["algbw"]
    reduces = (r["redop"] or "none") != "none"
    matches = [k for k, f in BUS_FACTOR.items() if abs(f(n) - ratio) <= 0.03 * f(n)]
    if reduces:
        matches = [k for k in matches if k in ("all_reduce", "reduce_scatter", "reduce")]
    else:
        matches = [k for k in matches if k not in ("all_reduce", "reduce_scatter", "reduce")]
    if len(matches) == 1:
        return matches[0], f"bus factor {ratio:.3f} with {n} ranks"
    return (
        None,
        f"ambiguous: bus factor {ratio:.3f} with {n} ranks fits {', '.join(matches) or 'nothing'}",
    )


def nearest_row(parsed: dict, size_bytes: int) -> dict | None:
    """The row of a ``parse_nccl_tests`` result whose size is nearest ``size_bytes``."""
    rows = parsed["rows"]
    if not rows:
        return None
    return min(rows, key=lambda r: abs(r["size_bytes"] - size_bytes))
