"""Parse AMD ROCm and Hygon DCU tool outputs: rocm-smi (concise table, --showtopo,
--showtoponuma, --json, --csv) and hy-smi (Hygon's concise table).

Concise tables: a header row starting with the device column ("Device", "GPU", "HCU" on DTK
rocm-smi, "DCU" on hy-smi) followed by one row per card (newer rocm-smi prints the card name on
a second line under "Name (20 chars)").  Topology: "Weight / Hops / Link Type between ..."
matrices with GPUn / GPU[n] / HCU[n] labels (XGMI, PCIE; "0"/"None" on the diagonal) and
"Numa Node" lines.  JSON: rocm-smi prints every value as a string, keyed by "cardN".
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field

from nodeledger.machine.parsers.common import ParseError, clean

AMD_LINK_KIND = {"XGMI": "xgmi", "PCIE": "pcie"}


@dataclass
class AmdCard:
    index: int
    name: str | None
    vram_used_pct: float | None
    power_cap_w: float | None
    partitions: str | None = None


@dataclass
class AmdConcise:
    device_label: str  # Device / GPU / HCU / DCU as the tool prints it
    cards: list[AmdCard]
    notes: list[str] = field(default_factory=list)


def _num(text: str | None) -> float | None:
    if not text:
        return None
    m = re.match(r"([\d.]+)", text)
    return float(m.group(1)) if m else None


def parse_concise(text: str) -> AmdConcise:
    text = clean(text)
    lines = text.split("\n")
    hi = next((i for i, ln in enumerate(lines) if re.match(r"^(Device|GPU|HCU|DCU)\s", ln)), None)
    if hi is None:
        raise ParseError("not a rocm-smi / hy-smi concise table: no Device/GPU/HCU/DCU header row")
    header = lines[hi].split()
    label = header[0]
    cards: list[AmdCard] = []
    pending_name: AmdCard | None = None
    for ln in lines[hi + 1 :]:
        if ln.startswith("====") or "End of" in ln:
            if cards:
                break
            continue
        m = re.match(r"^(\d+)\s+(.*)$", ln)
        if m:
            rest = m.group(2)
            pct = re.findall(r"([\d.]+)%", rest)
            watts = re.findall(r"([\d.]+)W", rest)
            tokens = ln.split()
            if len(tokens) == len(header) and "VRAM%" in header:
                # simple tables align one token per column: read VRAM% by position ("N/A" stays None)
                v = tokens[header.index("VRAM%")]
                pct = [v.rstrip("%"), "0"] if v.endswith("%") else []
            part = re.search(r"\b(NPS\d|N/A)\s*,\s*(\w+)", rest)
            card = AmdCard(
                index=int(m.group(1)), name=None,
                vram_used_pct=float(pct[-2]) if len(pct) >= 2 else None,
                power_cap_w=float(watts[-1]) if watts else None,
                partitions=f"{part.group(1)}, {part.group(2)}" if part else None,
            )  # fmt: skip
            cards.append(card)
            pending_name = card
        elif pending_name is not None and ln.strip() and not ln.startswith(" " * 40):
            pending_name.name = ln.strip()
            pending_name = None
    if not cards:
        raise ParseError("concise table lists no cards (truncated?)")
    notes = ["card memory size is not in the concise table (use --showmeminfo vram / --json)"]
    if label in ("HCU", "DCU"):
        notes.append(f"{label} labels: Hygon DCU (DTK tools)")
    return AmdConcise(label, cards, notes)


@dataclass
class AmdTopology:
    cards: list[int]
    links: list[dict]  # {a, b, label, kind, weight, hops}
    numa: dict[int, int]
    notes: list[str] = field(default_factory=list)


def _matrices(text: str) -> dict[str, dict[tuple[int, int], str]]:
    out: dict[str, dict[tuple[int, int], str]] = {}
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.search(r"(Link accessible|Weight|Hops|Link Type) between", lines[i])
        if not m:
            i += 1
            continue
        name = m.group(1)
        j = i + 1
        while j < len(lines) and not re.search(r"(GPU|HCU|DCU)\[?\d", lines[j]):
            j += 1
        if j >= len(lines):
            break
        cols = [int(x) for x in re.findall(r"(?:GPU|HCU|DCU)\[?(\d+)\]?", lines[j])]
        mat: dict[tuple[int, int], str] = {}
        k = j + 1
        while k < len(lines):
            rm = re.match(r"^\s*(?:GPU|HCU|DCU)\[?(\d+)\]?\s+(.*)$", lines[k])
            if not rm:
                break
            vals = rm.group(2).split()
            for c, v in zip(cols, vals, strict=False):
                mat[(int(rm.group(1)), c)] = v
            k += 1
        out[name] = mat
        i = k
    return out


def parse_showtopo(text: str) -> AmdTopology:
    text = clean(text)
    mats = _matrices(text)
    numa = {
        int(g): int(n)
        for g, n in re.findall(
            r"(?:GPU|HCU|DCU)\[(\d+)\]\s*:\s*(?:\(Topology\)\s*)?Numa Node:\s*(\d+)", text
        )
    }
    if not mats and not numa:
        raise ParseError(
            "not a rocm-smi --showtopo / --showtoponuma output: no matrices or Numa Node lines"
        )
    cards = sorted({a for m in mats.values() for a, _ in m} | set(numa))
    types = mats.get("Link Type", {})
    links = []
    for a in cards:
        for b in cards:
            if b <= a:
                continue
            label = types.get((a, b))
            weight = mats.get("Weight", {}).get((a, b))
            hops = mats.get("Hops", {}).get((a, b))
            links.append({
                "a": a, "b": b, "label": label, "kind": AMD_LINK_KIND.get((label or "").upper(), "unknown"),
                "weight": int(weight) if weight and weight.isdigit() else None,
                "hops": int(hops) if hops and hops.isdigit() else None,
            })  # fmt: skip
    notes = []
    if not types:
        notes.append("no Link Type matrix: link kinds unknown")
    if any(lk["kind"] == "pcie" for lk in links):
        notes.append(
            "PCIE links: rocm-smi does not say which PCIe level (switch, host bridge, socket); hops and weight are kept"
        )
    return AmdTopology(cards, links, numa, notes)


def parse_json(text: str) -> list[dict]:
    """rocm-smi --json: {"card0": {field: "string"...}, ...} -> [{index, name, vram_total_bytes, ...}]."""
    text = clean(text)
    start = text.find("{")
    try:
        data = json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError as exc:
        raise ParseError(f"rocm-smi --json output is not valid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ParseError("rocm-smi --json output is not an object")
    cards = []
    for key, fields in data.items():
        m = re.fullmatch(r"card(\d+)", key)
        if not m or not isinstance(fields, dict):
            continue
        cards.append(_card_fields(int(m.group(1)), fields))
    if not cards:
        raise ParseError("rocm-smi --json lists no cardN entries")
    return cards


def _card_fields(index: int, fields: dict) -> dict:
    total = next((v for k, v in fields.items() if "VRAM Total Memory" in k), None)
    used = next((v for k, v in fields.items() if "VRAM Total Used Memory" in k), None)
    name = fields.get("Card Series") or fields.get("Card series") or fields.get("Card Model")
    return {
        "index": index,
        "name": name,
        "vram_total_bytes": int(total) if isinstance(total, str) and total.isdigit() else None,
        "vram_used_bytes": int(used) if isinstance(used, str) and used.isdigit() else None,
        "gpu_use_pct": _num(fields.get("GPU use (%)")),
        "fields": len(fields),
    }


def parse_csv(text: str) -> list[dict]:
    text = clean(text)
    lines = [ln for ln in text.split("\n") if ln.strip()]
    start = next((i for i, ln in enumerate(lines) if ln.startswith("device,")), None)
    if start is None:
        raise ParseError("not a rocm-smi --csv output: no 'device,' header")
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    cards = []
    for r in rows:
        m = re.fullmatch(r"card(\d+)", (r.get("device") or "").strip())
        if m:
            cards.append(
                _card_fields(int(m.group(1)), {k: (v or "").strip() for k, v in r.items()})
            )
    if not cards:
        raise ParseError("rocm-smi --csv lists no cardN rows")
    return cards


def parse_all(text: str) -> list[dict]:
    """``rocm-smi -a`` (``--showallinfo``): "GPU[n]<tabs>: Key: value" lines -> per card the
    fields nodeledger uses (series, model, SKU, PCI bus, memory partition, max power), plus the
    count of all fields seen."""
    text = clean(text)
    cards: dict[int, dict[str, str]] = {}
    for g, key, value in re.findall(
        r"^(?:GPU|HCU|DCU)\[(\d+)\]\s*:\s*([^:\n]+?):\s*(.*)$", text, flags=re.M
    ):
        cards.setdefault(int(g), {}).setdefault(key.strip(), value.strip())
    if not cards:
        raise ParseError("not a rocm-smi -a output: no 'GPU[n] : key: value' lines")
    out = []
    for i in sorted(cards):
        f = cards[i]
        out.append({
            "index": i,
            "name": f.get("Card series") or f.get("Card Series"),
            "model": f.get("Card model") or f.get("Card Model"),
            "sku": f.get("Card SKU"),
            "pci_bus": f.get("PCI Bus"),
            "memory_partition": f.get("Memory Partition"),
            "max_power_w": _num(f.get("Max Graphics Package Power (W)")),
            "fields": len(f),
        })  # fmt: skip
    return out


def parse_amd_smi_static(text: str) -> list[dict]:
    """``amd-smi static``: "GPU: n" then indented SECTION: / KEY: value lines."""
    text = clean(text)
    blocks = re.split(r"^GPU:\s*(\d+)\s*$", text, flags=re.M)
    out = []
    for i in range(1, len(blocks) - 1, 2):
        section, fields = "", {}
        for line in blocks[i + 1].split("\n"):
            m = re.match(r"^(\s*)([A-Z0-9_ ]+):\s*(.*)$", line)
            if not m:
                continue
            if not m.group(3):
                section = m.group(2).strip()
            else:
                fields[f"{section}/{m.group(2).strip()}"] = m.group(3).strip()
        size = fields.get("VRAM/SIZE")
        mm = re.match(r"(\d+)\s*MB", size or "")
        out.append({
            "index": int(blocks[i]),
            "name": fields.get("ASIC/MARKET_NAME"),
            "pci_bus": fields.get("BUS/BDF"),
            "slot": fields.get("BUS/SLOT_TYPE"),
            "pcie": fields.get("BUS/PCIE_INTERFACE_VERSION"),
            "vram_total_bytes": int(mm.group(1)) * 2**20 if mm else None,
            "fields": len(fields),
        })  # fmt: skip
    if not out:
        raise ParseError("not an amd-smi static output: no 'GPU: n' sections")
    return out
