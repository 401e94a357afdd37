"""Parse AMD ROCm and Hygon DCU tool outputs: rocm-smi (concise table, --showtopo,
--showtoponuma, --json, --csv, -a, --showpids --showpidgpus), hy-smi (Hygon's concise table; its
--json as rocm-smi's) and amd-smi, rocm-smi's successor from ROCm 6 (`static` text and `--json`,
`topology` text).

Concise tables: a header row starting with the device column ("Device", "GPU", "HCU" on DTK
rocm-smi, "DCU" on hy-smi) followed by one row per card (newer rocm-smi prints the card name on
a second line under "Name (20 chars)").  Topology: "Weight / Hops / Link Type between ..."
matrices with GPUn / GPU[n] / HCU[n] labels (XGMI, PCIE; "0"/"None" on the diagonal) and
"Numa Node" lines.  JSON: rocm-smi prints every value as a string, keyed by "cardN"; one
parser (:func:`parse_json`) serves the probe (card memory), `nodeledger parse` and, through
:func:`parse_rocm_json`, the watch (used / total VRAM, use %, bus).
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field

from nodeledger.machine.parsers.common import (
    MAX_CARD_BYTES,
    ParseError,
    clean,
    finite,
    shorten,
    to_float,
    to_int,
)

AMD_LINK_KIND = {"XGMI": "xgmi", "PCIE": "pcie"}


@dataclass
class AmdCard:
    index: int
    name: str | None
    vram_used_pct: float | None
    power_cap_w: float | None
    partitions: str | None = None
    util_pct: float | None = None  # the GPU% / HCU% / DCU% column: compute busy


@dataclass
class AmdConcise:
    device_label: str  # Device / GPU / HCU / DCU as the tool prints it
    cards: list[AmdCard]
    notes: list[str] = field(default_factory=list)


def _num(text: str | None) -> float | None:
    """The leading number of a cell ("87%", "600.0W" -> 87.0, 600.0); None if none, or not a
    finite number in range."""
    if not isinstance(text, str) or not text:
        return None
    m = re.match(r"([0-9.]{1,40})", text.strip())
    return to_float(m.group(1)) if m else None


def parse_concise(text: str) -> AmdConcise:
    text = clean(text)
    lines = text.split("\n")
    hi = next((i for i, ln in enumerate(lines) if re.match(r"^(Device|GPU|HCU|DCU)\s", ln)), None)
    if hi is None:
        raise ParseError("not a rocm-smi / hy-smi concise table: no Device/GPU/HCU/DCU header row")
    header = lines[hi].split()
    label = header[0]
    tool = "hy-smi" if label == "DCU" else "rocm-smi"
    cards: list[AmdCard] = []
    pending_name: AmdCard | None = None
    bad: list[str] = []
    for ln in lines[hi + 1 :]:
        if ln.startswith("====") or "End of" in ln:
            if cards:
                break
            continue
        if len(ln) > 2000:
            bad.append(f"{tool}: a {len(ln)}-character row skipped (not a card row)")
            continue
        m = re.match(r"^([0-9]+)\s+(.*)$", ln)
        if m:
            index = to_int(m.group(1), hi=2**20)
            if index is None:
                bad.append(f"{tool}: card row with index {shorten(m.group(1))} skipped")
                continue
            rest = m.group(2)
            pct = re.findall(r"([0-9.]+)%", rest)
            watts = re.findall(r"([0-9.]+)W", rest)
            tokens = ln.split()
            if len(tokens) == len(header) and "VRAM%" in header:
                # simple tables align one token per column: read VRAM% by position ("N/A" stays None)
                v = tokens[header.index("VRAM%")]
                pct = [v.rstrip("%"), "0"] if v.endswith("%") else []
            util_col = next((h for h in ("GPU%", "DCU%", "HCU%") if h in header), None)
            util = None
            if len(tokens) == len(header) and util_col:
                u = tokens[header.index(util_col)]
                util = to_float(u.rstrip("%"), hi=100.0) if u.endswith("%") else None
            elif len(pct) >= 2 and util_col:
                util = to_float(pct[-1], hi=100.0)  # the last percentage of a row is busy%
            vram = None
            if len(pct) >= 2:
                vram = to_float(pct[-2], hi=100.0)
                if vram is None:
                    bad.append(
                        f"{tool}: card {index} VRAM% {shorten(pct[-2] + '%')} not a percentage; unknown"
                    )
            cap = None
            if watts:
                cap = to_float(watts[-1], hi=1e6)
                if cap is None:
                    bad.append(
                        f"{tool}: card {index} power cap {shorten(watts[-1] + 'W')} not a number of watts; unknown"
                    )
            part = re.search(r"\b(NPS[0-9]|N/A)\s*,\s*(\w+)", rest)
            card = AmdCard(
                index=index, name=None, vram_used_pct=vram, power_cap_w=cap,
                partitions=f"{part.group(1)}, {part.group(2)}" if part else None,
                util_pct=util,
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
    return AmdConcise(label, cards, notes + bad)


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
        cols = [int(x) for x in re.findall(r"(?:GPU|HCU|DCU)\[?([0-9]{1,7})\]?", lines[j])]
        mat: dict[tuple[int, int], str] = {}
        k = j + 1
        while k < len(lines):
            rm = re.match(r"^\s*(?:GPU|HCU|DCU)\[?([0-9]{1,7})\]?\s+(.*)$", lines[k])
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
            r"(?:GPU|HCU|DCU)\[([0-9]{1,7})\]\s*:\s*(?:\(Topology\)\s*)?Numa Node:\s*([0-9]{1,7})\b",
            text,
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
                "weight": to_int(weight),
                "hops": to_int(hops),
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
    """rocm-smi / hy-smi ``--json`` (``--showmeminfo vram``, ``--showuse``, ``--showmemuse``,
    ``--showbus``, in any mix): {"card0": {field: "string"...}, ...} -> one dict per cardN
    entry, in the output's order, with the fields of :func:`_card_fields`."""
    text = clean(text)
    start = text.find("{")
    try:
        data = json.loads(text[start:]) if start >= 0 else None
    except RecursionError:
        raise ParseError("rocm-smi --json output nests too deeply") from None
    except json.JSONDecodeError as exc:
        raise ParseError(f"rocm-smi --json output is not valid JSON: {exc.msg}") from None
    except ValueError as exc:  # a number too long for int() (sys.get_int_max_str_digits)
        raise ParseError(f"rocm-smi --json output is not usable JSON: {str(exc)[:80]}") from None
    if not isinstance(data, dict):
        raise ParseError("rocm-smi --json output is not an object")
    cards = []
    for key, fields in data.items():
        m = re.fullmatch(r"card([0-9]{1,7})", key)
        if not m or not isinstance(fields, dict):
            continue
        cards.append(_card_fields(int(m.group(1)), fields))
    if not cards:
        raise ParseError("rocm-smi --json lists no cardN entries")
    return cards


# the fields `nodeledger parse rocm-smi-json / rocm-smi-csv` shows (the others serve the watch)
PARSE_FIELDS = ("index", "name", "vram_total_bytes", "vram_used_bytes", "gpu_use_pct", "fields")
_USE = re.compile(r"^(GPU|DCU|HCU) use \(%\)$")


def _count(v) -> int | None:
    """A byte count: rocm-smi's digit string (a plain non-negative number read too)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v if 0 <= v <= MAX_CARD_BYTES else None
    return to_int(v, hi=MAX_CARD_BYTES) if isinstance(v, str) else None


def _float(v) -> float | None:
    return to_float(v if isinstance(v, str) else None, hi=100.0)  # "N/A" -> None


def _card_fields(index: int, fields: dict) -> dict:
    """One card's fields (a --json object or a --csv row): index; name ("Card Series", else
    "Card series", else "Card Model"); vram_total_bytes / vram_used_bytes ("VRAM Total Memory
    (B)" / "VRAM Total Used Memory (B)"); gpu_use_pct ("GPU use (%)", its leading number);
    util_pct (the "GPU / DCU / HCU use (%)" the tool prints, a plain number, else None);
    pci_bus ("PCI Bus", --showbus); fields (how many the card has)."""
    total = next((v for k, v in fields.items() if "VRAM Total Memory" in k), None)
    used = next((v for k, v in fields.items() if "VRAM Total Used Memory" in k), None)
    util = next((v for k, v in fields.items() if _USE.match(k)), None)
    name = fields.get("Card Series") or fields.get("Card series") or fields.get("Card Model")
    return {
        "index": index,
        "name": name,
        "vram_total_bytes": _count(total),
        "vram_used_bytes": _count(used),
        "gpu_use_pct": _num(fields.get("GPU use (%)")),
        "util_pct": None if util is None else _float(util),
        "pci_bus": fields.get("PCI Bus"),
        "fields": len(fields),
    }


def parse_rocm_json(text: str) -> list[dict]:
    """``rocm-smi/hy-smi --showuse --showmemuse --showmeminfo vram --showbus --json`` as the watch
    samples it: :func:`parse_json`'s cards sorted by index, as [{index, used_bytes, total_bytes,
    util_pct, pci_bus_id, name}]."""
    return [{"index": c["index"], "used_bytes": c["vram_used_bytes"],
             "total_bytes": c["vram_total_bytes"], "util_pct": c["util_pct"],
             "pci_bus_id": c["pci_bus"], "name": c["name"]}
            for c in sorted(parse_json(text), key=lambda c: c["index"])]  # fmt: skip


_KFD = re.compile(
    r"^([0-9]{1,10})\s+(.+?)\s+([0-9]{1,6})\s+([0-9]{1,16}|UNKNOWN|N/A)\s+\S+\s+\S+\s*$"
)
_KFD_HEAD = re.compile(r"^PID\s+PROCESS NAME\s+(GPU\(s\)|GPU)\s+VRAM USED", re.M)
_PIDGPU = re.compile(
    r"PID ([0-9]{1,10}) is using ([0-9]{1,6}) DRM device\(s\):?\s*\n?\s*([0-9 ,]*)"
)


def parse_rocm_pids_table(text: str) -> dict:
    """``rocm-smi --showpids [--showpidgpus]`` (also ``--showpids=details``; Hygon's DTK
    rocm-smi / hy-smi share the layout): the "KFD process information" rows and the "PID n is
    using k DRM device(s):" lists -> {"processes": [{pid, name, gpus, vram_bytes, cards}],
    "notes"}.

    1. ``GPU(s)`` is the *number* of cards the process opened, not an index (rocm_smi_lib#166;
       rocm-systems#4405 shows ``--showpids=details`` printing the same count in its ``GPU``
       column as of ROCm 6.4.2): the cards come only from the ``--showpidgpus`` lists, else
       they are unknown (None).
    2. ``VRAM USED`` is bytes, the process's total over its cards; ``UNKNOWN`` (a process
       without access to every card, rocm_smi_lib#166 / legacy-rocm-build#3002) is None.
    3. ``--showpids=details`` prints one row per (process, card): the rows are kept, each with
       its own VRAM.
    4. MI300 lists processes that only opened /dev/kfd with 0 B (legacy-rocm-build#4411): they
       are kept, with 0 B; a watch sees 0 B owners as no memory held."""
    text = clean(text)
    head = _KFD_HEAD.search(text)
    if head is None:
        if "No KFD PIDs currently running" in text:
            return {"processes": [], "notes": ["no KFD process is running"]}
        raise ParseError(
            "not a rocm-smi --showpids output: no 'PID  PROCESS NAME  GPU(s)  VRAM USED' header"
        )
    details = head.group(1) == "GPU"
    rows = []
    for line in text[head.end() :].splitlines()[1:]:
        if line.startswith("=") or not line.strip():
            if rows:
                break
            continue
        m = _KFD.match(line.strip())
        if m is None:
            continue
        vram = m.group(4)
        rows.append({"pid": int(m.group(1)), "name": m.group(2).strip(),
                     "gpus": int(m.group(3)),
                     "vram_bytes": int(vram) if vram.isdigit() else None, "cards": None})  # fmt: skip
    lists = {}
    for m in _PIDGPU.finditer(text):
        lists[int(m.group(1))] = [int(x) for x in re.findall(r"[0-9]{1,7}", m.group(3))]
    for r in rows:
        r["cards"] = lists.get(r["pid"])
    notes = []
    if details:
        notes.append(
            "--showpids=details: one row per process and card; the GPU column is the count of "
            "cards the process opened (as --showpids' GPU(s)), not the card's index"
        )
    if rows and not lists:
        notes.append(
            "no --showpidgpus lists: which cards each process uses is unknown (GPU(s) counts them)"
        )
    if any(r["vram_bytes"] is None for r in rows):
        notes.append("VRAM USED UNKNOWN for some processes: unknown, not 0")
    return {"processes": rows, "notes": notes}


def parse_rocm_pids(text: str) -> dict[int, list[dict]]:
    """:func:`parse_rocm_pids_table` by card, as the watch samples it -> {card index: [{pid,
    name, used_bytes}]}: a process on several cards is listed on each, its VRAM (a total over
    its cards) unknown there; a process whose cards are not listed is left out (its card is
    unknown)."""
    out: dict[int, list[dict]] = {}
    for p in parse_rocm_pids_table(text)["processes"]:
        cards = p["cards"] or []
        for c in cards:
            out.setdefault(c, []).append({"pid": p["pid"], "name": p["name"],
                                          "used_bytes": p["vram_bytes"] if len(cards) == 1 else None})  # fmt: skip
    return out


def parse_csv(text: str) -> list[dict]:
    text = clean(text)
    lines = [ln for ln in text.split("\n") if ln.strip()]
    start = next((i for i, ln in enumerate(lines) if ln.startswith("device,")), None)
    if start is None:
        raise ParseError("not a rocm-smi --csv output: no 'device,' header")
    try:
        rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    except csv.Error as exc:
        raise ParseError(f"rocm-smi --csv output is not CSV: {exc}") from None
    cards = []
    for r in rows:
        m = re.fullmatch(r"card([0-9]{1,7})", (r.get("device") or "").strip())
        if m:
            fields = {
                k: v.strip() for k, v in r.items() if isinstance(k, str) and isinstance(v, str)
            }
            cards.append(_card_fields(int(m.group(1)), fields))
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
        r"^(?:GPU|HCU|DCU)\[([0-9]{1,7})\]\s*:\s*([^:\n]+?):\s*(.*)$", text, flags=re.M
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
    """``amd-smi static`` (text): "GPU: n" blocks of indented "KEY: value" lines under section
    lines ("ASIC:", "BUS:", "VRAM:", "NUMA:", ...; nested ones such as CACHE_INFO/CACHE_0 are
    kept with their full path).  Other top-level blocks (newer amd-smi also lists "NIC: n" and
    "CPU: n") end a GPU block and are ignored."""
    text = clean(text)
    out = []
    fields: dict[str, str] | None = None
    index = -1
    stack: list[tuple[int, str]] = []
    for line in [*text.split("\n"), "END: 0"]:
        top = re.match(r"^(\S[^:]*):\s*(\S*)\s*$", line)
        if top:
            if fields is not None:
                out.append(_static_card(index, fields))
                fields = None
            if top.group(1) == "GPU" and to_int(top.group(2), hi=2**20) is not None:
                fields, index, stack = {}, int(top.group(2)), []
            continue
        if fields is None:
            continue
        m = re.match(r"^(\s+)([A-Z0-9_ ]+):\s*(.*?)\s*$", line)
        if not m:
            continue
        indent, key, value = len(m.group(1).expandtabs()), m.group(2).strip(), m.group(3)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if not value:
            stack.append((indent, key))
        else:
            fields.setdefault("/".join([k for _, k in stack] + [key]), value)
    if not out:
        raise ParseError("not an amd-smi static output: no 'GPU: n' sections")
    return out


def _na(value):
    """amd-smi's "N/A" (and empty strings) -> None."""
    if value is None or (isinstance(value, str) and value.strip() in ("", "N/A")):
        return None
    return value


def _static_card(index: int, f: dict[str, str]) -> dict:
    size = _na(f.get("VRAM/SIZE"))
    numa = _na(f.get("NUMA/NODE"))
    return {
        "index": index,
        "name": _na(f.get("ASIC/MARKET_NAME")),
        "pci_bus": _na(f.get("BUS/BDF")),
        "slot": _na(f.get("BUS/SLOT_TYPE")),
        "pcie": _na(f.get("BUS/PCIE_INTERFACE_VERSION")),
        "vram_total_bytes": _size_bytes(size),
        "numa_node": to_int(numa, hi=2**20) if isinstance(numa, str) else None,
        "partition": _partition(f.get("PARTITION/MEMORY_PARTITION"), f.get("PARTITION/ACCELERATOR_PARTITION")),
        "fields": len(f),
    }  # fmt: skip


def _size_bytes(size) -> int | None:
    """amd-smi sizes: {"value": 196592, "unit": "MB"} (JSON) or "196592 MB" (text); amd-smi's
    MB are MiB (196592 MB = the 206141652992 B rocm-smi prints for an MI300X)."""
    if isinstance(size, dict):
        value, unit = size.get("value"), size.get("unit")
    elif isinstance(size, str):
        m = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?i?B)\s*", size)
        value, unit = (m.group(1), m.group(2)) if m else (None, None)
    else:
        return None
    v = finite(value) if isinstance(value, (int, float)) else to_float(value)
    if v is None:
        return None
    mult = {"B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}.get(
        str(unit).replace("i", "")
    )
    if mult is None or v <= 0 or v * mult > MAX_CARD_BYTES:
        return None
    return round(v * mult)


def _partition(memory, accelerator) -> str | None:
    """ "NPS1, SPX" as rocm-smi prints it; None when amd-smi says N/A."""
    memory, accelerator = _na(memory), _na(accelerator)
    if memory is None and accelerator is None:
        return None
    return f"{memory or 'N/A'}, {accelerator or 'N/A'}"


def _first_json(text: str, what: str):
    text = clean(text)
    starts = [i for i in (text.find("["), text.find("{")) if i >= 0]
    if not starts:
        raise ParseError(f"{what} output holds no JSON")
    try:
        data, _ = json.JSONDecoder().raw_decode(text[min(starts) :])
    except RecursionError:
        raise ParseError(f"{what} output nests too deeply") from None
    except json.JSONDecodeError as exc:
        raise ParseError(f"{what} output is not valid JSON: {exc.msg}") from None
    except ValueError as exc:  # a number too long for int() (sys.get_int_max_str_digits)
        raise ParseError(f"{what} output is not usable JSON: {str(exc)[:80]}") from None
    return data


def parse_amd_smi_static_json(text: str) -> list[dict]:
    """``amd-smi static --json``: a list of per-GPU objects (ROCm 6.x) or ``{"gpu_data": [...]}``
    (ROCm 7); keys asic.market_name, bus.bdf, vram.size {value, unit}, numa.node, partition.*.
    Returns the same fields as :func:`parse_amd_smi_static`."""
    data = _first_json(text, "amd-smi static --json")
    gpus = data.get("gpu_data") if isinstance(data, dict) else data
    if not isinstance(gpus, list):
        raise ParseError("amd-smi static --json: neither a list nor an object with gpu_data")
    out = []
    for n, g in enumerate(gpus):
        if (
            not isinstance(g, dict)
            or isinstance(g.get("gpu"), bool)
            or not isinstance(g.get("gpu"), int)
            or not 0 <= g["gpu"] <= 2**20
        ):
            raise ParseError(f"amd-smi static --json entry {n} has no integer 'gpu' index")
        asic, bus, vram, numa, part = (g.get(k) if isinstance(g.get(k), dict) else {}
                                       for k in ("asic", "bus", "vram", "numa", "partition"))  # fmt: skip
        node = numa.get("node")
        out.append({
            "index": g["gpu"],
            "name": _na(asic.get("market_name")),
            "pci_bus": _na(bus.get("bdf")),
            "slot": _na(bus.get("slot_type")),
            "pcie": _na(bus.get("pcie_interface_version")),
            "vram_total_bytes": _size_bytes(vram.get("size")),
            "numa_node": node if isinstance(node, int) and not isinstance(node, bool) and 0 <= node <= 2**20 else None,
            "partition": _partition(part.get("memory_partition"), part.get("accelerator_partition")),
            "fields": len(g),
        })  # fmt: skip
    if not out:
        raise ParseError("amd-smi static --json lists no GPU")
    return out


_BDF = re.compile(r"[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")


@dataclass
class AmdSmiTopology:
    devices: list[str]  # column labels as printed (BDFs), in amd-smi's GPU order
    links: list[dict]  # {a, b, a_bdf, b_bdf, label, kind, weight, hops, access}
    notes: list[str] = field(default_factory=list)


def parse_amd_smi_topology(text: str) -> AmdSmiTopology:
    """``amd-smi topology`` (text): "<NAME> TABLE:" blocks (ACCESS, WEIGHT, HOPS, LINK TYPE,
    NUMA BW, CACHE COHERANCY, ATOMICS, DMA, BI-DIRECTIONAL), each a header row of device BDFs and
    one row per device; the diagonal is SELF / 0 / N/A.  ``a``/``b`` are positions in the header,
    which amd-smi prints in GPU-ID order; ``a_bdf``/``b_bdf`` name the devices."""
    text = clean(text)
    lines = text.split("\n")
    tables: dict[str, dict[tuple[str, str], str]] = {}
    devices: list[str] = []
    i = 0
    while i < len(lines):
        m = re.match(r"^\s*([A-Z][A-Z -]*?)\s+TABLE:\s*$", lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        cols = lines[j].split() if j < len(lines) else []
        if not cols or not all(_BDF.match(c) for c in cols):
            raise ParseError(
                f"amd-smi topology {m.group(1)} TABLE has no header row of device BDFs"
            )
        if devices and cols != devices:
            raise ParseError(
                f"amd-smi topology {m.group(1)} TABLE lists other devices than the first"
            )
        devices = cols
        mat: dict[tuple[str, str], str] = {}
        k = j + 1
        while k < len(lines):
            toks = lines[k].split()
            if not toks or not _BDF.match(toks[0]):
                break
            for c, v in zip(cols, toks[1:], strict=False):
                mat[(toks[0], c)] = v
            k += 1
        tables[m.group(1)] = mat
        i = k
    if not tables:
        raise ParseError("not an amd-smi topology output: no '... TABLE:' blocks")
    types, weights, hops, access = (
        tables.get(t, {}) for t in ("LINK TYPE", "WEIGHT", "HOPS", "ACCESS")
    )
    links = []
    for ai, a in enumerate(devices):
        for bi in range(ai + 1, len(devices)):
            b = devices[bi]
            label = types.get((a, b))
            w, h = weights.get((a, b)), hops.get((a, b))
            links.append({
                "a": ai, "b": bi, "a_bdf": a, "b_bdf": b, "label": label,
                "kind": AMD_LINK_KIND.get((label or "").upper(), "unknown"),
                "weight": to_int(w),
                "hops": to_int(h),
                "access": access.get((a, b)),
            })  # fmt: skip
    notes = []
    if not types:
        notes.append("no LINK TYPE TABLE: link kinds unknown")
    missing = [lk for lk in links if lk["label"] is None and types]
    if missing:
        notes.append(f"LINK TYPE TABLE is missing {len(missing)} cells (truncated?)")
    if any(lk["kind"] == "pcie" for lk in links):
        notes.append(
            "PCIE links: amd-smi does not say which PCIe level (switch, host bridge, socket); hops and weight are kept"
        )
    off = [f"{lk['a_bdf']}-{lk['b_bdf']}" for lk in links if lk["access"] == "DISABLED"]
    if off:
        notes.append(
            f"peer access DISABLED between {', '.join(off)} (no direct peer-to-peer access)"
        )
    return AmdSmiTopology(devices, links, notes)
