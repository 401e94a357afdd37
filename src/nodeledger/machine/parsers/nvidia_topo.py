"""Parse ``nvidia-smi topo -m`` / ``topo -mp`` text (all driver generations seen in the wild).

Variants handled: tab- or space-aligned columns; ANSI underline escapes around the header;
CRLF line ends; NIC rows named NICn (with a "NIC Legend" mapping to mlx5_*) or named directly
(mlx5_0); optional "CPU Affinity", "NUMA Affinity" and "GPU NUMA ID" columns; empty affinity
cells; "SOC" (the pre-2017 name of SYS).  The legend (nvidia-smi's own text) defines the labels:
X self, SYS across NUMA nodes (SMP interconnect), NODE across host bridges within a NUMA node,
PHB through a host bridge, PXB multiple PCIe bridges, PIX at most one bridge, NV# # bonded
NVLinks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nodeledger.machine.parsers.common import ParseError, clean, to_int

LABEL_KIND = {"SYS": "sys", "SOC": "sys", "NODE": "node", "PHB": "phb", "PXB": "pxb", "PIX": "pix"}
AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


def normalise_label(label: str) -> tuple[str, int | None]:
    """(kind, lanes) of one matrix cell: "NV18" -> ("nvlink", 18), "SYS" -> ("sys", None)."""
    lab = label.strip().upper()
    m = re.fullmatch(r"NV([0-9]{1,12})", lab)
    if m:
        return "nvlink", int(m.group(1))
    if lab == "X":
        return "self", None
    return LABEL_KIND.get(lab, "unknown"), None


@dataclass
class TopoCard:
    index: int
    name: str
    cpu_affinity: str | None
    numa_node: int | None
    numa_affinity: str | None  # as printed ("0", "0-1", "N/A")
    gpu_numa_id: str | None


@dataclass
class TopoLink:
    a: int
    b: int
    label: str
    kind: str
    lanes: int | None


@dataclass
class TopoNic:
    name: str  # as the matrix names it (NIC0 or mlx5_0)
    device: str | None  # from the NIC legend (mlx5_0), or the name itself
    kind: str  # "rdma" for mlx*/bnxt_re/irdma devices (InfiniBand or RoCE: topo cannot tell)
    links: dict[int, str] = field(default_factory=dict)  # GPU index -> label


@dataclass
class Topology:
    cards: list[TopoCard]
    links: list[TopoLink]
    nics: list[TopoNic]
    notes: list[str] = field(default_factory=list)

    def label(self, a: int, b: int) -> str | None:
        for link in self.links:
            if {link.a, link.b} == {a, b}:
                return link.label
        return None


def _split(line: str, tabbed: bool) -> list[str]:
    if tabbed:
        return line.split("\t")
    return line.split()


def _header_columns(line: str, tabbed: bool) -> list[str]:
    if tabbed:
        return [c.strip() for c in line.split("\t")[1:]]
    # space aligned: device names never contain spaces, the affinity headers do
    text = line.strip()
    cols: list[str] = []
    for name in AFFINITY_COLUMNS:
        text = text.replace(name, name.replace(" ", "\x00"))
    for tok in text.split():
        cols.append(tok.replace("\x00", " "))
    return cols


def parse(text: str) -> Topology:
    # long: one parse of the matrix: header, rows, cards and links, NIC rows, then the legend notes
    text = clean(text)
    lines = text.split("\n")
    header_i = next(
        (
            i
            for i, ln in enumerate(lines)
            if re.search(r"\bGPU0\b", ln) and "X" not in ln.replace("\t", " ").split()
        ),
        None,
    )
    if header_i is None:
        raise ParseError("not an nvidia-smi topo -m output: no header row naming GPU0")
    header = lines[header_i]
    tabbed = "\t" in header
    cols = _header_columns(header, tabbed)
    device_cols = [c for c in cols if c and c not in AFFINITY_COLUMNS]
    extra_cols = [c for c in cols if c in AFFINITY_COLUMNS]
    gpus = [c for c in device_cols if re.fullmatch(r"GPU[0-9]{1,7}", c)]
    if not gpus:
        raise ParseError("topo header lists no GPU columns")
    rows: dict[str, list[str]] = {}
    for ln in lines[header_i + 1 :]:
        if not ln.strip():
            if rows:
                break
            continue
        cells = _split(ln, tabbed)
        name = cells[0].strip()
        if name.startswith("Legend"):
            break
        rows[name] = [c.strip() for c in cells[1:]]
    notes: list[str] = []
    cards: list[TopoCard] = []
    links: list[TopoLink] = []
    n_dev = len(device_cols)
    for gi, g in enumerate(gpus):
        cells = rows.get(g)
        if cells is None or len(cells) < n_dev:
            raise ParseError(
                f"topo row {g} is missing or truncated ({0 if cells is None else len(cells)} of {n_dev} cells)"
            )
        extras = dict(zip(extra_cols, cells[n_dev:], strict=False))
        cpu = extras.get("CPU Affinity") or None
        numa_txt = extras.get("NUMA Affinity") or None
        numa = to_int(numa_txt, hi=2**20) if numa_txt else None
        gnid = extras.get("GPU NUMA ID") or None
        index = int(g[3:])
        cards.append(TopoCard(index, g, cpu, numa, numa_txt, gnid))
        for gj, other in enumerate(gpus):
            if gj <= gi:
                continue
            label = cells[device_cols.index(other)]
            kind, lanes = normalise_label(label)
            links.append(TopoLink(index, int(other[3:]), label, kind, lanes))
    legend = dict(re.findall(r"^\s*(NIC\d+):\s*(\S+)\s*$", text, flags=re.M))
    nics: list[TopoNic] = []
    for c in device_cols:
        if c in gpus:
            continue
        device = legend.get(c, c if not c.startswith("NIC") else None)
        kind = (
            "rdma"
            if device and device.startswith(("mlx", "ibp", "bnxt_re", "irdma"))
            else "unknown"
        )
        cells = rows.get(c, [])
        nic_links = {}
        for g in gpus:
            k = device_cols.index(g)
            if k < len(cells) and cells[k]:
                nic_links[int(g[3:])] = cells[k]
        nics.append(TopoNic(c, device, kind, nic_links))
    if any(n.device is None for n in nics):
        notes.append("NIC rows without a NIC Legend: device names unknown")
    if nics:
        notes.append(
            "NIC kind 'rdma': an RDMA device (InfiniBand or RoCE); topo does not show the link "
            "layer (the live probe reads /sys/class/infiniband/*/ports/*/link_layer)"
        )
    legend_text = text.split("Legend:", 1)[1] if "Legend:" in text else ""
    if legend_text and "NV#" not in legend_text and not any(lk.kind == "nvlink" for lk in links):
        notes.append(
            "legend has no NV# entry: output of `topo -mp` (PCIe paths only, NVLinks not shown)"
        )
    return Topology(cards, links, nics, notes)
