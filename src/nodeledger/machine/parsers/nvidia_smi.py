"""Parse the default ``nvidia-smi`` table and ``nvidia-smi -q -x`` XML.

Table: each GPU is a block of 2-3 rows between "+---" separators; row 1 holds index, name
(possibly truncated with "..."), persistence (or the Windows driver model, WDDM/TCC), bus id,
Disp.A and the ECC cell; row 2 holds fan, temperature, power and "used MiB / total MiB";
row 3 (newer drivers) the MIG mode.  Header variants: "Driver Version" / "KMD Version",
"CUDA Version" / "CUDA UMD Version".  The process table lists GPU, GI, CI, PID, type, name and
memory ("N/A" under WDDM).  MIG devices are listed in their own sub-table.
XML (``-q -x``): one <gpu> per card with product_name, fb_memory_usage/total, pci/pci_bus_id,
persistence_mode, mig_mode/current_mig, processes/process_info.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from nodeledger.machine.parsers.common import ParseError, clean


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
    r"^\|\s+(\d+)\s+(.+?)\s+(On|Off|WDDM|TCC)\s+\|\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)"
)
_MEM = re.compile(r"(\d+)MiB\s*/\s*(\d+)MiB")
_PROC = re.compile(r"^\|\s+(\d+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(C\+G|C|G)\s+(.+?)\s+(\d+MiB|N/A)\s*\|")


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
        cards.append(SmiCard(
            index=int(m.group(1)), name=name,
            memory_total_bytes=int(mem.group(2)) * 2**20 if mem else None,
            memory_used_bytes=int(mem.group(1)) * 2**20 if mem else None,
            pci_bus_id=m.group(4), persistence=m.group(3), mig=mig, name_truncated=name.endswith("..."),
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
    m = re.match(r"\s*(\d+)\s*MiB", text)
    return int(m.group(1)) * 2**20 if m else None


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
        index = int(minor) if minor and minor.isdigit() else i
        cards.append(SmiCard(
            index=index, name=(g.findtext("product_name") or "").strip(),
            memory_total_bytes=_mib(g.findtext("fb_memory_usage/total")),
            memory_used_bytes=_mib(g.findtext("fb_memory_usage/used")),
            pci_bus_id=(g.findtext("pci/pci_bus_id") or g.get("id") or "").strip() or None,
            persistence=(g.findtext("persistence_mode") or "").strip() or None,
            mig=(g.findtext("mig_mode/current_mig") or "").strip() or None,
        ))  # fmt: skip
        mig_devices += len(g.findall("mig_devices/mig_device"))
        for p in g.findall("processes/process_info"):
            pid = (p.findtext("pid") or "").strip()
            if pid.isdigit():
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
    for i in range(1, len(blocks) - 1, 2):
        bus = blocks[i].split()[1]
        path: list[tuple[int, str]] = []
        fields: dict[str, str] = {}
        for indent, key, value in _tree(blocks[i + 1].split("\n")):
            while path and path[-1][0] >= indent:
                path.pop()
            if value is None:
                path.append((indent, key))
            else:
                fields["/".join([p[1] for p in path] + [key])] = value
        # nvidia-smi -q lists GPUs in index order; "Minor Number" is /dev/nvidiaN, not the index
        cards.append(SmiCard(
            index=len(cards),
            name=fields.get("Product Name", ""),
            memory_total_bytes=_mib(fields.get("FB Memory Usage/Total")),
            memory_used_bytes=_mib(fields.get("FB Memory Usage/Used")),
            pci_bus_id=fields.get("PCI/Bus Id", bus),
            persistence=fields.get("Persistence Mode"),
            mig=fields.get("MIG Mode/Current"),
        ))  # fmt: skip
    if not cards:
        raise ParseError("nvidia-smi -q lists no 'GPU <bus id>' section (truncated?)")
    notes = []
    attached = re.search(r"^Attached GPUs\s*:\s*(\d+)", text, flags=re.M)
    if attached and int(attached.group(1)) != len(cards):
        notes.append(
            f"'Attached GPUs: {attached.group(1)}' but {len(cards)} GPU sections (truncated?)"
        )
    return SmiInfo(
        driver.group(1) if driver else None, cuda.group(1) if cuda else None, cards, notes=notes
    )


def parse_query_any(text: str) -> dict:
    """Any ``nvidia-smi --query-gpu=... / --query-compute-apps=... --format=csv`` output with its
    header row: columns (name, unit) and rows as dicts; "[N/A]" and friends become None,
    "123 MiB" becomes 123 in a column whose unit is MiB."""
    import csv as _csv
    import io as _io

    text = clean(text).strip()
    rows = list(_csv.reader(_io.StringIO(text), skipinitialspace=True))
    if not rows or len(rows) < 2:
        raise ParseError("nvidia-smi CSV needs a header row and at least one data row")
    cols = []
    for h in rows[0]:
        m = re.match(r"\s*([^\[]+?)\s*(?:\[(.+)\])?\s*$", h)
        if not m or not m.group(1):
            raise ParseError(f"nvidia-smi CSV header cell {h!r} is not a field name")
        cols.append((m.group(1), m.group(2)))
    out = []
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
            m = re.fullmatch(r"(-?[\d.]+)\s*(MiB|W|MHz|%)?", v)
            row[name] = float(m.group(1)) if m and (unit or m.group(2)) else v
            if isinstance(row[name], float) and row[name].is_integer():
                row[name] = int(row[name])
        out.append(row)
    return {"columns": [{"name": c, "unit": u} for c, u in cols], "rows": out}
