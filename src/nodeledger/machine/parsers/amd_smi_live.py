"""Parsers of `amd-smi monitor` and `amd-smi process` (text and --csv): what a running AMD box
shows per card and per process.  Pure functions: text in, dicts out.

Units: amd-smi prints memory as "2.8 GB" / "202.0 MB" / "0.0 B" and means binary units (its
--csv of the same processes gives bytes: 7,889,485,824 B = 7.35 GiB printed "7.3 GB"; an MI300X
shows "191.7 GB" of VRAM, its 192 GiB); figures here are bytes, the text forms rounded as
printed.  Power in W, temperatures in °C, clocks in MHz, utilisation in %.  "N/A" is None.
"""

from __future__ import annotations

import csv
import functools
import io
import re

from nodeledger.machine.parsers.common import ParseError, finite, shorten, size_to_bytes


def _refusing(what: str):
    """A parser whose malformed cells (a number it cannot read, a missing PID) are one
    ParseError naming the command, never another exception."""

    def wrap(fn):
        @functools.wraps(fn)
        def run(text: str) -> dict:
            try:
                return fn(text)
            except ParseError:
                raise
            except (
                ValueError,
                ArithmeticError,  # a number past float's range ("9" x 400 -> inf)
                KeyError,
                IndexError,
                TypeError,
                AttributeError,
                RecursionError,
                csv.Error,  # a CSV field over the csv module's limit
            ) as exc:
                raise ParseError(f"{what} output not understood: {exc}") from None

        return run

    return wrap


_NS = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9}
# monitor column -> (field, kind); both the short (amd-smi 25+) and long (24.x) headers
_MONITOR = {
    "POWER": ("power_w", "W"),
    "GPU_T": ("gpu_temp_c", "C"), "GPU_TEMP": ("gpu_temp_c", "C"),
    "MEM_T": ("mem_temp_c", "C"), "MEM_TEMP": ("mem_temp_c", "C"),
    "GFX_CLK": ("gfx_clock_mhz", "MHz"), "GFX_CLOCK": ("gfx_clock_mhz", "MHz"),
    "MEM_CLK": ("mem_clock_mhz", "MHz"), "MEM_CLOCK": ("mem_clock_mhz", "MHz"),
    "GFX%": ("gfx_util_pct", "%"), "GFX_UTIL": ("gfx_util_pct", "%"),
    "MEM%": ("mem_util_pct", "%"), "MEM_UTIL": ("mem_util_pct", "%"),
    "ENC%": ("enc_util_pct", "%"), "ENC_UTIL": ("enc_util_pct", "%"),
    "DEC%": ("dec_util_pct", "%"), "DEC_UTIL": ("dec_util_pct", "%"),
    "VRAM_USAGE": ("vram", "used/total"),
    "GTT_USAGE": ("gtt", "used/total"),
    "VRAM_USED": ("vram_used_bytes", "bytes"), "VRAM_TOTAL": ("vram_total_bytes", "bytes"),
    "XCP": ("xcp", "index"),
    "SINGLE_ECC": ("ecc_single", "count"), "DOUBLE_ECC": ("ecc_double", "count"),
    "PCIE_REPLAY": ("pcie_replay", "count"),
    "ENC_CLOCK": ("enc_clock_mhz", "MHz"), "DEC_CLOCK": ("dec_clock_mhz", "MHz"),
}  # fmt: skip
_PROC_FIELDS = {"GTT_MEM": "gtt_bytes", "CPU_MEM": "cpu_bytes", "VRAM_MEM": "vram_bytes",
                "MEM_USAGE": "mem_usage_bytes", "GFX": "gfx_ns", "ENC": "enc_ns"}  # fmt: skip


MAX_BYTES = 2**60


def _plausible(v: float, what: str) -> float:
    """``v`` when it is a finite, non-negative figure below 1e15 (common.finite: no card figure
    in W, °C, MHz, %, ns or MiB reaches it); else ValueError (a cell that is not a reading: the
    caller makes it unknown, or refuses the output)."""
    f = finite(v)
    if f is None:
        raise ValueError(f"{what} {v!r} is not a possible figure")
    return f


def _sized(value: float, unit: str, otherwise):
    """``value`` in bytes when ``unit`` is a byte unit size_to_bytes knows ("2.8 GB", "196592
    MB": binary, as amd-smi means them), else ``otherwise``."""
    if not unit.upper().endswith("B"):
        return otherwise
    try:
        return size_to_bytes(value, unit)
    except ParseError:
        return otherwise


def _bytes(text: str) -> int | None:
    """ "2.8 GB" -> bytes (binary units, as amd-smi means them); "N/A" -> None."""
    t = text.strip()
    if not t or t.upper() == "N/A":
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?I?B)", t, re.IGNORECASE)
    if not m:
        if re.fullmatch(r"[0-9]{1,18}", t):
            return int(t)
        raise ValueError(f"not a memory size: {t!r}")
    n = size_to_bytes(_plausible(float(m.group(1)), "memory size"), m.group(2))
    if n > MAX_BYTES:
        raise ValueError(f"memory size {t!r} is larger than any memory")
    return n


def _ns(text: str) -> int | None:
    t = text.strip()
    if not t or t.upper() == "N/A":
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ns|us|ms|s)?", t)
    if not m:
        raise ValueError(f"not a duration: {t!r}")
    return round(_plausible(float(m.group(1)), "duration") * _NS[m.group(2) or "ns"])


def _number(text: str, unit: str) -> float | int | None:
    t = text.strip()
    if not t or t.upper() == "N/A":
        return None
    m = re.fullmatch(r"(-?\d+(?:\.\d+)?)\s*(W|°C|C|MHz|GHz|%)?", t)
    if not m:
        raise ValueError(f"not a {unit} figure: {t!r}")
    v = _plausible(float(m.group(1)) * (1000 if m.group(2) == "GHz" else 1), unit)
    return int(v) if v.is_integer() else v


def _cells(line: str) -> list[str]:
    """Columns of an amd-smi table row: runs of two or more spaces separate them ("305 W"
    keeps its one space)."""
    return [c for c in re.split(r"\s{2,}", line.strip()) if c]


def _table_rows(lines: list[str]) -> tuple[list[str], list[list[str]], int]:
    """(header, rows, next line index) of the table starting at lines[0]."""
    header = _cells(lines[0])
    rows, k = [], 1
    while k < len(lines) and lines[k].strip() and re.match(r"\s*[0-9]+\s", lines[k]):
        rows.append(_cells(lines[k]))
        k += 1
    return header, rows, k


@_refusing("amd-smi monitor")
def parse_amd_smi_monitor(text: str) -> dict:
    """`amd-smi monitor` (optionally with its PROCESS INFO table, `amd-smi monitor -q`):
    {"cards": [{index, power_w, gpu_temp_c, ..., vram_used_bytes, vram_total_bytes, other}],
     "processes": [{card, pid, name, vram_bytes, ...}], "notes": [...]}"""
    lines = text.splitlines()
    notes = [ln.strip() for ln in lines if ln.strip().startswith("WARNING")]
    start = next((i for i, ln in enumerate(lines) if re.match(r"\s*GPU\s{2,}\S", ln)), None)
    if start is None:
        raise ParseError("no `amd-smi monitor` header row (GPU  POWER  ...) found")
    header, rows, k = _table_rows(lines[start:])
    cards = []
    for cells in rows:
        if len(cells) != len(header):
            raise ParseError(
                f"amd-smi monitor row {cells!r}: {len(cells)} cells under {len(header)} columns"
            )
        if not re.fullmatch(r"[0-9]{1,6}", cells[0]):
            raise ParseError(f"amd-smi monitor row: GPU {shorten(cells[0])} is not a card index")
        card: dict = {"index": int(cells[0])}
        other = {}
        for name, value in zip(header[1:], cells[1:], strict=True):
            field, unit = _MONITOR.get(name.upper(), (None, None))
            if field is None:
                other[name] = None if value.upper() == "N/A" else value
                continue
            try:
                card.update(_monitor_cell(field, unit, name, value))
            except (ValueError, ArithmeticError):
                # one unreadable cell ("NaN MHz") is that figure unknown, not the table: the
                # card and its other columns are kept
                blank = (f"{field}_used_bytes", f"{field}_total_bytes") if unit == "used/total" \
                    else (field,)  # fmt: skip
                card.update(dict.fromkeys(blank))
                notes.append(
                    f"amd-smi monitor card {card['index']} {name} {shorten(value)} not a "
                    "number; unknown"
                )
        if other:
            card["other"] = other
        cards.append(card)
    if not cards:
        raise ParseError("amd-smi monitor: a header row and no card rows")
    procs: list[dict] = []
    rest = lines[start + k :]
    p0 = next(
        (i for i, ln in enumerate(rest) if ln.strip().upper().startswith("PROCESS INFO")), None
    )
    if p0 is not None:
        h = next((i for i in range(p0 + 1, len(rest)) if re.match(r"\s*GPU\s{2,}", rest[i])), None)
        if h is not None:
            ph, prows, _ = _table_rows(rest[h:])
            for cells in prows:
                if len(cells) != len(ph):
                    raise ParseError(
                        f"amd-smi process row {cells!r}: {len(cells)} cells under {len(ph)} columns"
                    )
                procs.append(_proc_from(dict(zip([x.upper() for x in ph], cells, strict=True))))
    out = {"cards": cards, "processes": procs}
    if notes:
        out["notes"] = notes
    return out


def _monitor_cell(field: str, unit: str, name: str, value: str) -> dict:
    """The figure(s) of one known `amd-smi monitor` cell; ValueError when it is not one."""
    if unit == "used/total":  # "3.0/191.7 GB"
        m = re.fullmatch(
            r"(\d+(?:\.\d+)?)/(\d+(?:\.\d+)?)\s*([KMGT]?I?B)", value.strip(), re.IGNORECASE
        )
        used = _bytes(f"{m.group(1)} {m.group(3)}") if m else None
        total = _bytes(f"{m.group(2)} {m.group(3)}") if m else None
        return {f"{field}_used_bytes": used, f"{field}_total_bytes": total}
    if unit == "bytes":
        return {field: _bytes(value)}
    if unit in ("index", "count"):
        if value.upper() != "N/A" and not re.fullmatch(r"[0-9]{1,15}", value):
            raise ValueError(f"{name} {value!r} is not a count")
        return {field: None if value.upper() == "N/A" else int(value)}
    return {field: _number(value, unit)}


def _proc_from(f: dict) -> dict:
    """One process from amd-smi's field names (upper case)."""
    name = f.get("NAME")
    for key in ("GPU", "PID"):
        if not re.fullmatch(r"\s*[0-9]{1,12}\s*", f[key]):
            raise ValueError(f"{key} {f[key][:40]!r} is not a card index or pid")
    p = {"card": int(f["GPU"]), "pid": int(f["PID"]),
         "name": None if name in (None, "N/A") else name}  # fmt: skip
    for key, field in _PROC_FIELDS.items():
        if key in f:
            p[field] = _ns(f[key]) if field.endswith("_ns") else _bytes(f[key])
    return p


@_refusing("amd-smi process")
def parse_amd_smi_process(text: str) -> dict:
    """`amd-smi process` (its nested text) or `amd-smi process --csv`:
    {"processes": [{card, pid, name, vram_bytes, gtt_bytes, cpu_bytes, mem_usage_bytes, gfx_ns,
    enc_ns}], "cards_without_processes": [...]}.  Text figures are rounded as printed; --csv
    gives bytes."""
    body = [ln for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("WARNING")]
    if body and body[0].lstrip()[:1] in "[{":
        return _process_json("\n".join(body))
    if body and body[0].strip().lower().startswith("gpu,"):
        rows = list(csv.DictReader(io.StringIO("\n".join(body))))
        procs = [_proc_from({k.strip().upper(): (v or "").strip() for k, v in r.items() if k})
                 for r in rows]  # fmt: skip
        if not procs:
            raise ParseError("amd-smi process --csv: a header and no process rows")
        return {"processes": procs, "cards_without_processes": []}
    procs: list[dict] = []
    idle: list[int] = []
    gpu: int | None = None
    cur: dict | None = None
    for ln in body:
        m = re.match(r"\s*GPU:\s*(\d+)\s*$", ln)
        if m:
            if cur:
                procs.append(_proc_from(cur))
            cur, gpu = None, int(m.group(1))
            continue
        key, sep, value = ln.strip().partition(":")
        if not sep:
            continue
        key, value = key.strip().upper(), value.strip()
        if key == "PROCESS_INFO":
            if cur:
                procs.append(_proc_from(cur))
            cur = None
            if value:  # "No running processes detected"
                if gpu is not None:
                    idle.append(gpu)
            else:
                if gpu is None:
                    raise ParseError("amd-smi process: PROCESS_INFO before any GPU: line")
                cur = {"GPU": str(gpu)}
            continue
        if cur is not None and value and key in ("NAME", "PID", *_PROC_FIELDS):
            cur[key] = value
    if cur:
        procs.append(_proc_from(cur))
    if not procs and not idle:
        raise ParseError("no `amd-smi process` block (GPU: N / PROCESS_INFO:) found")
    for p in procs:
        if p.get("pid") is None:
            raise ParseError(f"amd-smi process: a process on GPU {p['card']} without a PID")
    return {"processes": procs, "cards_without_processes": sorted(set(idle))}


def _value(v, what: str) -> int | None:
    """amd-smi JSON's {"value": N, "unit": "B"|"MB"|"ns"|...} (or a bare number, or "N/A")."""
    if isinstance(v, dict):
        val, unit = v.get("value"), str(v.get("unit") or "")
    else:
        val, unit = v, ""
    if val is None or (isinstance(val, str) and val.strip().upper() == "N/A"):
        return None
    if isinstance(val, bool) or not isinstance(val, (int, float)):
        raise ValueError(f"{what}: not a number: {val!r}")
    _plausible(val, what)
    if unit in _NS:
        return round(val * _NS[unit])
    return _sized(val, unit or "B", round(val))


def _process_json(text: str) -> dict:
    """`amd-smi process --json`: [{"gpu": N, "process_list": [{"process_info": {name, pid,
    memory_usage: {gtt_mem, cpu_mem, vram_mem}, mem_usage, usage: {gfx, enc}}}]}] (values as
    {"value", "unit"}); a "process_info" that is a string ("No running processes detected")
    marks a card without processes."""
    import json

    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"amd-smi process --json: not JSON ({exc})") from None
    if isinstance(data, dict):
        data = data.get("gpu_data") or data.get("process") or [data]
    if not isinstance(data, list):
        raise ParseError("amd-smi process --json: expected a list of GPUs")
    procs, idle = [], []
    for g in data:
        if not isinstance(g, dict) or "gpu" not in g:
            raise ParseError('amd-smi process --json: a GPU entry without "gpu"')
        card = int(g["gpu"])
        plist = g.get("process_list") or []
        if not isinstance(plist, list):
            raise ParseError(f"amd-smi process --json: GPU {card}: process_list is not a list")
        found = False
        for entry in plist:
            info = entry.get("process_info") if isinstance(entry, dict) else None
            if not isinstance(info, dict):
                continue
            mu = info.get("memory_usage") or {}
            us = info.get("usage") or {}
            name = info.get("name")
            procs.append({
                "card": card, "pid": int(info["pid"]),
                "name": None if name in (None, "N/A") else str(name),
                "gtt_bytes": _value(mu.get("gtt_mem"), "gtt_mem"),
                "cpu_bytes": _value(mu.get("cpu_mem"), "cpu_mem"),
                "vram_bytes": _value(mu.get("vram_mem"), "vram_mem"),
                "mem_usage_bytes": _value(info.get("mem_usage"), "mem_usage"),
                "gfx_ns": _value(us.get("gfx"), "gfx"), "enc_ns": _value(us.get("enc"), "enc"),
            })  # fmt: skip
            found = True
        if not found:
            idle.append(card)
    return {"processes": procs, "cards_without_processes": sorted(set(idle))}


# -- amd-smi metric ----------------------------------------------------------------------------

MAX_METRIC_JSON = 64 * 2**20  # characters of `amd-smi metric --json` read (8 GPUs: ~200 KB)
# (section, key) of `amd-smi metric` -> (field, unit the field is in)
_METRIC = {
    ("usage", "gfx_activity"): ("gfx_activity_pct", "%"),
    ("usage", "umc_activity"): ("umc_activity_pct", "%"),
    ("power", "socket_power"): ("socket_power_w", "W"),
    ("mem_usage", "total_vram"): ("vram_total_bytes", "B"),
    ("mem_usage", "used_vram"): ("vram_used_bytes", "B"),
    ("temperature", "edge"): ("edge_temp_c", "C"),
    ("temperature", "hotspot"): ("hotspot_temp_c", "C"),
    ("temperature", "mem"): ("mem_temp_c", "C"),
}
_METRIC_UNITS = {"%": "%", "W": "W", "C": "C", "°C": "C", "MB": "B", "B": "B", "KB": "B",
                 "GB": "B"}  # fmt: skip


def _metric_value(v, field_unit: str):
    """A `{"value": v, "unit": u}` (JSON, ROCm 6.1+), a bare number (older JSON) or a text
    cell "42 %" / "196592 MB" -> the field's unit; "N/A" and unknown units -> None.  amd-smi's
    MB is MiB: its code divides bytes by 1024*1024 (amdsmi_commands.py, mem_usage)."""
    unit = None
    if isinstance(v, dict):
        v, unit = v.get("value"), v.get("unit")
    if isinstance(v, str):
        m = re.fullmatch(r"\s*(-?[0-9]+(?:\.[0-9]+)?)\s*([A-Za-z°%]*)\s*", v)
        if m is None:
            return None
        v, unit = float(m.group(1)), m.group(2) or unit
    if isinstance(v, bool) or not isinstance(v, (int, float)) or finite(v) is None:
        return None  # not a finite figure in [0, 1e15] (common.finite)
    if field_unit == "B":
        return _sized(v, str(unit or "MB"), None)
    if unit is not None and _METRIC_UNITS.get(str(unit)) not in (field_unit, None):
        return None
    return int(v) if float(v).is_integer() else float(v)


@_refusing("amd-smi metric")
def parse_amd_smi_metric(text: str) -> dict:
    """``amd-smi metric [--json]`` -> {"cards": [{index, gfx_activity_pct, umc_activity_pct,
    socket_power_w, vram_total_bytes, vram_used_bytes, edge/hotspot/mem_temp_c[, timestamp]}],
    "notes"}: the fields a watch uses, each None where the card prints N/A (or the section was
    not asked: ``-p`` prints power only).  JSON: a list of per-GPU objects (ROCm 6.x) or
    ``{"gpu_data": [...]}`` (amd-smi 26.x); text: "GPU: n" blocks of "SECTION:" and
    "KEY: value unit" lines."""
    import json

    body = text.strip()
    notes: list[str] = []
    if body.startswith(("[", "{")):
        if len(body) > MAX_METRIC_JSON:
            raise ParseError(f"amd-smi metric --json output is over {MAX_METRIC_JSON:,} characters")
        data = json.loads(body)
        if isinstance(data, dict):
            data = data.get("gpu_data")
        if not isinstance(data, list):
            raise ParseError(
                "amd-smi metric --json: neither a list of GPUs nor {'gpu_data': [...]}"
            )
        gpus = [(g.get("gpu"), g) for g in data if isinstance(g, dict)]
    else:
        gpus = []
        cur: dict | None = None
        section = None
        for line in text.splitlines():
            m = re.match(r"^GPU:\s*([0-9]{1,6})\s*$", line)
            if m:
                cur = {}
                gpus.append((int(m.group(1)), cur))
                continue
            if cur is None or not line.strip():
                continue
            indent = len(line) - len(line.lstrip())
            key, _, value = line.strip().partition(":")
            if indent <= 4 and not value.strip():
                section = key.strip().lower()
                cur.setdefault(section, {})
            elif section is not None and indent <= 8 and value.strip():
                cur[section][key.strip().lower()] = value.strip()
        if "[output truncated]" in text:
            notes.append("the output says it was truncated: GPUs after the last block unread")
    if not gpus:
        raise ParseError("not an amd-smi metric output: no 'GPU: n' block or JSON GPU list")
    cards = []
    for idx, g in gpus:
        if isinstance(idx, bool) or not isinstance(idx, int) or not 0 <= idx < 2**20:
            raise ParseError(f"amd-smi metric: GPU index {str(idx)[:40]!r} is not a card index")
        card: dict = {"index": idx}
        for (sec, key), (fld, unit) in _METRIC.items():
            s = g.get(sec)
            card[fld] = _metric_value(s.get(key), unit) if isinstance(s, dict) else None
        if isinstance(g.get("timestamp"), int):
            card["timestamp"] = g["timestamp"]
        cards.append(card)
    return {"cards": cards, "notes": notes}
