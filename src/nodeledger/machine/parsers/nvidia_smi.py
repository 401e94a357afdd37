"""Parse the default ``nvidia-smi`` table and ``nvidia-smi -q -x`` XML.

Table: each GPU is a block of 2-3 rows between "+---" separators; row 1 holds index, name
(possibly truncated with "..."), persistence (or the Windows driver model, WDDM/TCC), bus id,
Disp.A and the ECC cell; row 2 holds fan, temperature, power and "used MiB / total MiB";
row 3 (newer drivers) the MIG mode.  Header variants: "Driver Version" / "KMD Version",
"CUDA Version" / "CUDA UMD Version".  The process table lists GPU, GI, CI, PID, type, name and
memory ("N/A" under WDDM).  MIG devices are listed in their own sub-table.
XML (``-q -x``): one <gpu> per card with product_name, fb_memory_usage/total, pci/pci_bus_id,
persistence_mode, mig_mode/current_mig, processes/process_info.
Health, from ``-q`` text and XML (and the table's "Volatile Uncorr. ECC" cell): ECC mode, the
volatile corrected / uncorrected totals (the sum of the SRAM and DRAM counters printed, or the
Single Bit / Double Bit totals of older drivers; unknown if any part is N/A), retired pages
(single + double bit counts, pending) and remapped rows (Ampere+: counts, pending, failure).
Normalised: "enabled"/"disabled", "yes"/"no", integers; "N/A" and absent fields are None.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from nodeledger.machine.parsers.common import ParseError, clean, shorten, to_float, to_int


@dataclass
class SmiCard:
    index: int
    name: str
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    pci_bus_id: str | None
    persistence: str | None  # On / Off / Enabled / Disabled; WDDM/TCC on Windows
    mig: str | None  # Enabled/Disabled/N/A (table row 3, or XML current_mig)
    name_truncated: bool = False
    ecc_mode: str | None = None  # "enabled" / "disabled" (current)
    ecc_corrected_volatile: int | None = None
    ecc_uncorrected_volatile: int | None = None
    retired_pages_single_bit: int | None = None
    retired_pages_double_bit: int | None = None
    retired_pages_pending: str | None = None  # "yes" / "no"
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: str | None = None  # "yes" / "no"
    remapped_rows_failed: str | None = None  # "yes" / "no"


@dataclass
class SmiProcess:
    gpu: int
    pid: int
    type: str
    name: str
    used_bytes: int | None


@dataclass
class SmiInfo:
    driver: str | None
    cuda: str | None
    cards: list[SmiCard]
    processes: list[SmiProcess] = field(default_factory=list)
    mig_devices: int = 0
    notes: list[str] = field(default_factory=list)


_ROW1 = re.compile(
    r"^\|\s+([0-9]{1,12})\s+(.+?)\s+(On|Off|WDDM|TCC)\s+\|\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)"
)
_MEM = re.compile(r"([0-9]{1,12})MiB\s*/\s*([0-9]{1,12})MiB")
_PROC = re.compile(
    r"^\|\s+([0-9]{1,12})\s+(\S+)\s+(\S+)\s+([0-9]{1,12})\s+(C\+G|C|G)\s+(.+?)\s+([0-9]{1,12}MiB|N/A)\s*\|"
)
_ECC_CELL = re.compile(r"\|\s*(\d+|On|Off|N/A)\s*\|\s*$")


def _int(text: str | None) -> int | None:
    return to_int(text or "")


def _mode(text: str | None) -> str | None:
    t = (text or "").strip().lower()
    return t if t in ("enabled", "disabled") else None


def _yes_no(text: str | None) -> str | None:
    t = (text or "").strip().lower()
    return t if t in ("yes", "no") else None


def _ecc_totals(volatile: dict[str, str]) -> tuple[int | None, int | None]:
    """(corrected, uncorrected) volatile totals from one card's volatile ECC counters, keyed by
    name ("SRAM Correctable", "dram_uncorrectable", "Single Bit/Total", "double_bit/total");
    a total is unknown when any of its counters is not a number, or none is printed."""
    parts: dict[str, list[int | None]] = {"c": [], "u": []}
    for key, value in volatile.items():
        k = key.lower().replace("_", " ")
        if k.startswith(("single bit", "double bit")):
            if not k.endswith("total"):
                continue  # per-location counters of older drivers; their Total is the sum
            parts["c" if k.startswith("single") else "u"].append(_int(value))
        elif "uncorrectable" in k:
            parts["u"].append(_int(value))
        elif "correctable" in k:
            parts["c"].append(_int(value))
    out = []
    for key in ("c", "u"):
        vals = parts[key]
        out.append(sum(vals) if vals and all(v is not None for v in vals) else None)  # type: ignore[arg-type]
    return out[0], out[1]


def parse_table(text: str) -> SmiInfo:
    text = clean(text)
    driver = re.search(r"(?:Driver|KMD) Version:\s*([\d.]+)", text)
    cuda = re.search(r"CUDA (?:UMD )?Version:\s*([\d.]+)", text)
    if not driver and "NVIDIA-SMI" not in text:
        raise ParseError("not an nvidia-smi table: no 'NVIDIA-SMI' / 'Driver Version' header")
    lines = text.split("\n")
    cards: list[SmiCard] = []
    section = "gpus"
    for i, line in enumerate(lines):
        if "MIG devices" in line:
            section = "mig"
        elif re.search(r"\bProcesses\b", line):
            section = "procs"
        if section != "gpus":
            continue
        m = _ROW1.match(line)
        if not m:
            continue
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        mem = _MEM.search(nxt)
        third = lines[i + 2] if i + 2 < len(lines) else ""
        mig = None
        mm = re.search(r"\|\s*(Enabled|Disabled|N/A)\s*\|\s*$", third)
        if mm:
            mig = mm.group(1)
        name = m.group(2).strip()
        # "Volatile Uncorr. ECC": a count (ECC on), On (ECC on, MIG: count per instance), Off
        # (ECC off), N/A (no ECC)
        ecc = _ECC_CELL.search(line)
        cell = ecc.group(1) if ecc else None
        cards.append(SmiCard(
            index=int(m.group(1)), name=name,
            memory_total_bytes=int(mem.group(2)) * 2**20 if mem else None,
            memory_used_bytes=int(mem.group(1)) * 2**20 if mem else None,
            pci_bus_id=m.group(4), persistence=m.group(3), mig=mig, name_truncated=name.endswith("..."),
            ecc_mode="disabled" if cell == "Off" else "enabled" if cell and cell != "N/A" else None,
            ecc_uncorrected_volatile=_int(cell),
        ))  # fmt: skip
    if not cards:
        raise ParseError("nvidia-smi table lists no GPU rows (truncated?)")
    procs = []
    mig_devices = 0
    section = "gpus"
    for line in lines:
        if "MIG devices" in line:
            section = "mig"
            continue
        if re.search(r"\bProcesses\b", line):
            section = "procs"
            continue
        if section == "mig" and re.match(r"^\|\s+\d+\s+\d+\s+\d+\s+\d+\s+\|", line):
            mig_devices += 1
        if section == "procs":
            m = _PROC.match(line)
            if m:
                used = m.group(7)
                procs.append(SmiProcess(int(m.group(1)), int(m.group(4)), m.group(5), m.group(6).strip(),
                                        int(used[:-3]) * 2**20 if used.endswith("MiB") else None))  # fmt: skip
    notes = []
    if any(c.name_truncated for c in cards):
        notes.append(
            "GPU names are truncated by the table ('...'): use nvidia-smi -q for the full name"
        )
    if any(c.persistence in ("WDDM", "TCC") for c in cards):
        notes.append(
            "Windows driver model (WDDM/TCC) column instead of persistence mode; per-process memory N/A under WDDM"
        )
    return SmiInfo(driver.group(1) if driver else None, cuda.group(1) if cuda else None, cards, procs,
                   mig_devices, notes)  # fmt: skip


def _mib(text: str | None) -> int | None:
    if not text:
        return None
    m = re.match(r"\s*([0-9]{1,12})\s*MiB", text)
    return int(m.group(1)) * 2**20 if m else None


def _xml_health(g: ET.Element) -> dict:
    volatile: dict[str, str] = {}
    vol = g.find("ecc_errors/volatile")
    for el in vol if vol is not None else []:
        if len(el):  # older drivers: single_bit / double_bit, each with its own total
            for sub in el:
                volatile[f"{el.tag}/{sub.tag}"] = sub.text or ""
        else:
            volatile[el.tag] = el.text or ""
    corrected, uncorrected = _ecc_totals(volatile)
    pending = g.findtext("retired_pages/pending_blacklist")
    if _yes_no(pending) is None:
        pending = g.findtext("retired_pages/pending_retirement")
    return {
        "ecc_mode": _mode(g.findtext("ecc_mode/current_ecc")),
        "ecc_corrected_volatile": corrected,
        "ecc_uncorrected_volatile": uncorrected,
        "retired_pages_single_bit": _int(
            g.findtext("retired_pages/multiple_single_bit_retirement/retired_count")
        ),
        "retired_pages_double_bit": _int(
            g.findtext("retired_pages/double_bit_retirement/retired_count")
        ),
        "retired_pages_pending": _yes_no(pending),
        "remapped_rows_correctable": _int(g.findtext("remapped_rows/remapped_row_corr")),
        "remapped_rows_uncorrectable": _int(g.findtext("remapped_rows/remapped_row_unc")),
        "remapped_rows_pending": _yes_no(g.findtext("remapped_rows/remapped_row_pending")),
        "remapped_rows_failed": _yes_no(g.findtext("remapped_rows/remapped_row_failure")),
    }


def parse_xml(text: str) -> SmiInfo:
    text = clean(text)
    start = text.find("<nvidia_smi_log")
    end = text.rfind("</nvidia_smi_log>")
    doc = text[start : end + len("</nvidia_smi_log>")] if start >= 0 and end > start else text
    try:
        root = ET.fromstring(doc)
    except ET.ParseError as exc:
        raise ParseError(f"not valid nvidia-smi -q -x XML: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"not an nvidia-smi -q -x document (root <{root.tag}>)")
    cards = []
    procs = []
    mig_devices = 0
    for i, g in enumerate(root.findall("gpu")):
        minor = g.findtext("minor_number")
        index = int(minor) if to_int(minor, hi=2**20) is not None else i
        cards.append(SmiCard(
            index=index, name=(g.findtext("product_name") or "").strip(),
            memory_total_bytes=_mib(g.findtext("fb_memory_usage/total")),
            memory_used_bytes=_mib(g.findtext("fb_memory_usage/used")),
            pci_bus_id=(g.findtext("pci/pci_bus_id") or g.get("id") or "").strip() or None,
            persistence=(g.findtext("persistence_mode") or "").strip() or None,
            mig=(g.findtext("mig_mode/current_mig") or "").strip() or None,
            **_xml_health(g),
        ))  # fmt: skip
        mig_devices += len(g.findall("mig_devices/mig_device"))
        for p in g.findall("processes/process_info"):
            pid = (p.findtext("pid") or "").strip()
            if to_int(pid) is not None:
                procs.append(SmiProcess(index, int(pid), (p.findtext("type") or "").strip(),
                                        (p.findtext("process_name") or "").strip(), _mib(p.findtext("used_memory"))))  # fmt: skip
    if not cards:
        raise ParseError("nvidia-smi -q -x lists no <gpu>")
    return SmiInfo(
        root.findtext("driver_version"), root.findtext("cuda_version"), cards, procs, mig_devices
    )


def _tree(lines: list[str]) -> list[tuple[int, str, str | None]]:
    """(indent, key, value or None for a section header) per meaningful line."""
    out = []
    for ln in lines:
        if not ln.strip() or ln.lstrip().startswith("="):
            continue
        indent = len(ln) - len(ln.lstrip(" "))
        if " : " in ln or ln.rstrip().endswith(" :"):
            k, v = ln.split(":", 1) if " : " not in ln else ln.split(" : ", 1)
            out.append((indent, k.strip(), v.strip()))
        else:
            out.append((indent, ln.strip(), None))
    return out


def parse_q_text(text: str) -> SmiInfo:
    """``nvidia-smi -q`` (``-a``) text: indented "Key : Value" sections, one per GPU
    ("GPU 00000000:68:00.0")."""
    text = clean(text)
    driver = re.search(r"^Driver Version\s*:\s*(\S+)", text, flags=re.M)
    cuda = re.search(r"^CUDA Version\s*:\s*(\S+)", text, flags=re.M)
    if "Attached GPUs" not in text and not driver:
        raise ParseError("not an nvidia-smi -q output: no 'Attached GPUs' / 'Driver Version'")
    blocks = re.split(
        r"^(GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$", text, flags=re.M
    )
    cards = []
    procs: list[SmiProcess] = []
    for i in range(1, len(blocks) - 1, 2):
        bus = blocks[i].split()[1]
        path: list[tuple[int, str]] = []
        fields: dict[str, str] = {}
        tree = _tree(blocks[i + 1].split("\n"))
        for indent, key, value in tree:
            while path and path[-1][0] >= indent:
                path.pop()
            if value is None:
                path.append((indent, key))
            else:
                fields["/".join([p[1] for p in path] + [key])] = value
        procs.extend(_q_processes(tree, len(cards)))
        volatile = {
            k.removeprefix("ECC Errors/Volatile/"): v
            for k, v in fields.items()
            if k.startswith("ECC Errors/Volatile/")
        }
        corrected, uncorrected = _ecc_totals(volatile)
        pending = fields.get(
            "Retired Pages/Pending Page Blacklist", fields.get("Retired Pages/Pending")
        )
        # nvidia-smi -q lists GPUs in index order; "Minor Number" is /dev/nvidiaN, not the index
        cards.append(SmiCard(
            index=len(cards),
            name=fields.get("Product Name", ""),
            memory_total_bytes=_mib(fields.get("FB Memory Usage/Total")),
            memory_used_bytes=_mib(fields.get("FB Memory Usage/Used")),
            pci_bus_id=fields.get("PCI/Bus Id", bus),
            persistence=fields.get("Persistence Mode"),
            mig=fields.get("MIG Mode/Current"),
            ecc_mode=_mode(fields.get("ECC Mode/Current")),
            ecc_corrected_volatile=corrected, ecc_uncorrected_volatile=uncorrected,
            retired_pages_single_bit=_int(fields.get("Retired Pages/Single Bit ECC")),
            retired_pages_double_bit=_int(fields.get("Retired Pages/Double Bit ECC")),
            retired_pages_pending=_yes_no(pending),
            remapped_rows_correctable=_int(fields.get("Remapped Rows/Correctable Error")),
            remapped_rows_uncorrectable=_int(fields.get("Remapped Rows/Uncorrectable Error")),
            remapped_rows_pending=_yes_no(fields.get("Remapped Rows/Pending")),
            remapped_rows_failed=_yes_no(fields.get("Remapped Rows/Remapping Failure Occurred")),
        ))  # fmt: skip
    if not cards:
        raise ParseError("nvidia-smi -q lists no 'GPU <bus id>' section (truncated?)")
    notes = []
    attached = re.search(r"^Attached GPUs\s*:\s*([0-9]{1,12})", text, flags=re.M)
    if attached and int(attached.group(1)) != len(cards):
        notes.append(
            f"'Attached GPUs: {attached.group(1)}' but {len(cards)} GPU sections (truncated?)"
        )
    return SmiInfo(
        driver.group(1) if driver else None,
        cuda.group(1) if cuda else None,
        cards,
        processes=procs,
        notes=notes,
    )


def _q_processes(tree: list[tuple[int, str, str | None]], gpu: int) -> list[SmiProcess]:
    """The "Processes" section of one GPU in ``-q`` text: "Process ID : N" opens an entry whose
    Type, Name and Used GPU Memory follow ("Processes : None" when there is none)."""
    start = next(
        (k for k, (_, key, v) in enumerate(tree) if key == "Processes" and v is None), None
    )
    if start is None:
        return []
    base = tree[start][0]
    found: list[dict[str, str]] = []
    for indent, key, value in tree[start + 1 :]:
        if indent <= base:
            break
        if key == "Process ID":
            found.append({"pid": value or ""})
        elif found and key in ("Type", "Name", "Used GPU Memory"):
            found[-1][key] = value or ""
    return [
        SmiProcess(
            gpu, int(p["pid"]), p.get("Type", ""), p.get("Name", ""), _mib(p.get("Used GPU Memory"))
        )
        for p in found
        if to_int(p["pid"]) is not None
    ]


def parse_compute_apps(text: str) -> list[dict]:
    """``nvidia-smi --query-compute-apps=gpu_bus_id,pid,process_name,used_memory
    --format=csv,noheader,nounits`` (or any ``--format=csv`` output whose header names
    pid; gpu_bus_id None where not asked) -> [{"gpu_bus_id", "pid", "process_name", "used_bytes"}]; "[N/A]" /
    "[Not Supported]" become None.  No process: empty output (or "No running processes found").
    nvidia-smi does not quote: in the default layout a name keeps its commas (split at the first
    two and the last comma)."""
    import csv as _csv
    import io as _io

    text = clean(text).strip()
    if not text or text.lower().startswith("no running"):
        return []
    lines = [ln for ln in text.split("\n") if ln.strip()]
    head = [c.strip() for c in lines[0].split(",")]
    records: list[dict[str, str]] = []
    if "pid" in head:  # --format=csv with its header row: columns by name
        cols = [re.sub(r"\s*\[.*\]$", "", c) for c in head]
        cols = ["used_memory" if c == "used_gpu_memory" else c for c in cols]
        try:
            rows = list(_csv.reader(_io.StringIO("\n".join(lines[1:])), skipinitialspace=True))
        except _csv.Error as exc:
            raise ParseError(f"compute-apps CSV not understood ({exc})") from None
        for n, rec in enumerate(rows, 2):
            if len(rec) != len(cols):
                raise ParseError(
                    f"compute-apps row {n} has {len(rec)} fields for {len(cols)} columns"
                )
            records.append(dict(zip(cols, (x.strip() for x in rec), strict=True)))
    else:
        for n, ln in enumerate(lines, 1):
            parts = ln.split(",", 2)
            if len(parts) < 3 or "," not in parts[2]:
                raise ParseError(f"compute-apps row {n} has fewer than 4 fields")
            name, used = parts[2].rsplit(",", 1)
            records.append({"gpu_bus_id": parts[0].strip(), "pid": parts[1].strip(),
                            "process_name": name.strip(), "used_memory": used.strip()})  # fmt: skip
    out = []
    for n, d in enumerate(records, 1):
        if to_int(d["pid"]) is None:
            raise ParseError(f"compute-apps row {n} has no numeric pid ({d['pid'][:20]!r})")
        m = re.fullmatch(r"([0-9]{1,12})\s*(MiB)?", d.get("used_memory", ""))
        name = d.get("process_name", "")
        out.append({"gpu_bus_id": d.get("gpu_bus_id") or None, "pid": int(d["pid"]),
                    "process_name": name if name and not name.startswith("[") else None,
                    "used_bytes": int(m.group(1)) * 2**20 if m else None})  # fmt: skip
    return out


_QUERY_CELL = re.compile(r"(-?[0-9.]{1,40})\s*(MiB|W|MHz|%)?")


def parse_query_any(text: str) -> dict:
    """Any ``nvidia-smi --query-gpu=... / --query-compute-apps=... --format=csv`` output with its
    header row: columns (name, unit) and rows as dicts; "[N/A]" and friends become None,
    "123 MiB" becomes 123 in a column whose unit is MiB."""
    import csv as _csv
    import io as _io

    text = clean(text).strip()
    try:
        rows = list(_csv.reader(_io.StringIO(text), skipinitialspace=True))
    except _csv.Error as exc:
        raise ParseError(f"nvidia-smi CSV not understood ({exc})") from None
    if not rows or len(rows) < 2:
        raise ParseError("nvidia-smi CSV needs a header row and at least one data row")
    cols = []
    for h in rows[0]:
        m = re.match(r"\s*([^\[]+?)\s*(?:\[(.+)\])?\s*$", h)
        if not m or not m.group(1):
            raise ParseError(f"nvidia-smi CSV header cell {h!r} is not a field name")
        cols.append((m.group(1), m.group(2)))
    out = []
    notes: list[str] = []
    for n, rec in enumerate(rows[1:], 2):
        if not rec:
            continue
        if len(rec) != len(cols):
            raise ParseError(
                f"nvidia-smi CSV row {n} has {len(rec)} fields for {len(cols)} columns"
            )
        row: dict = {}
        for (name, unit), raw in zip(cols, rec, strict=True):
            v = raw.strip()
            if v.startswith("[") or v in ("N/A", ""):
                row[name] = None
                continue
            m = _QUERY_CELL.fullmatch(v)  # compiled once: a cell of 20,000 rows x 20 columns
            num = to_float(m.group(1), lo=-1e15) if m and (unit or m.group(2)) else None
            if num is None and m and (unit or m.group(2)):
                row[name] = None  # a number column whose cell is not a finite number ("1e400")
                notes.append(f"nvidia-smi CSV row {n} {name} {shorten(v)} not a number; unknown")
                continue
            row[name] = v if num is None else num
            if isinstance(row[name], float) and row[name].is_integer():
                row[name] = int(row[name])
        out.append(row)
    result: dict = {"columns": [{"name": c, "unit": u} for c, u in cols], "rows": out}
    if notes:
        result["notes"] = notes
    return result
