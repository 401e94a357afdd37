"""AMD ROCm, Hygon DCU and Huawei Ascend backends through their smi tools (text parsers shared
with `nodeledger parse`).  Each is optional: absent, failing or garbled tools become notes."""

from __future__ import annotations

from pydantic import ValidationError

from nodeledger.errors import InputError
from nodeledger.machine.parsers import amd_smi, npu_smi
from nodeledger.machine.probe.runner import Runner
from nodeledger.machine.profile import Accelerator, Interconnect, Link, LinkKind, LinkPair


def _amd_like(r: Runner, tool: str, vendor: str, notes: list[str]):
    res = r.run([tool])
    if not res.ok:
        if not res.problem.startswith("absent"):
            notes.append(f"{tool}: {res.problem}")
        return None
    try:
        concise = amd_smi.parse_concise(res.stdout)
    except InputError as exc:
        notes.append(f"{tool} output not understood ({exc}); its cards are unknown")
        return None
    if concise.device_label in ("HCU", "DCU"):
        vendor = "hygon"  # DTK's rocm-smi and hy-smi label Hygon DCUs HCU / DCU
    mem: dict[int, int] = {}
    j = r.run([tool, "--showmeminfo", "vram", "--json"])
    if j.ok:
        try:
            for c in amd_smi.parse_json(j.stdout):
                if c["vram_total_bytes"]:
                    mem[c["index"]] = c["vram_total_bytes"]
        except InputError as exc:
            notes.append(
                f"{tool} --showmeminfo vram --json not understood ({exc}); card memory unknown"
            )
    else:
        notes.append(f"{tool} --showmeminfo vram --json: {j.problem}; card memory unknown")
    cards = []
    for c in concise.cards:
        try:
            cards.append(Accelerator(
                index=c.index, vendor=vendor, product=c.name or ("Hygon DCU" if vendor == "hygon" else "AMD GPU"),
                memory_bytes=mem.get(c.index) or None, partition=c.partitions,
                sources={"memory_bytes": f"{tool} --showmeminfo vram --json"} if mem.get(c.index) else {},
            ))  # fmt: skip
        except ValidationError as exc:
            notes.append(f"{tool}: card {c.index} skipped ({exc.errors()[0]['msg']})")
    t = r.run([tool, "--showtopo"])
    inter = None
    if t.ok:
        try:
            topo = amd_smi.parse_showtopo(t.stdout)
            for card in cards:
                if card.index in topo.numa:
                    card.numa_node = topo.numa[card.index]
            inter = Interconnect(default=Link(), pairs=[
                LinkPair(a=lk["a"], b=lk["b"], kind=LinkKind(lk["kind"]), label=lk["label"],
                         source=f"{tool} --showtopo (weight {lk['weight']}, hops {lk['hops']})")
                for lk in topo.links
            ])  # fmt: skip
        except ValidationError as exc:
            notes.append(f"{tool} --showtopo: links dropped ({exc.errors()[0]['msg']})")
        except InputError as exc:
            notes.append(f"{tool} --showtopo not understood ({exc}); links unknown")
    else:
        notes.append(f"{tool} --showtopo: {t.problem}; links unknown")
    return cards, inter


def probe_amd(r: Runner, notes: list[str]):
    """hy-smi first (Hygon DTK), then rocm-smi (AMD ROCm; DTK's rocm-smi prints HCU labels)."""
    for tool in ("hy-smi", "rocm-smi"):
        if r.which(tool) is None:
            continue
        out = _amd_like(r, tool, "hygon" if tool == "hy-smi" else "amd", notes)
        if out is not None:
            return out
    return None


def probe_ascend(r: Runner, notes: list[str]):
    if r.which("npu-smi") is None:
        return None
    res = r.run(["npu-smi", "info"])
    if not res.ok:
        notes.append(f"npu-smi info: {res.problem}")
        return None
    try:
        info = npu_smi.parse(res.stdout)
    except InputError as exc:
        notes.append(f"npu-smi info not understood ({exc}); NPUs unknown")
        return None
    cards = [
        Accelerator(
            index=i, vendor="huawei", product=f"Ascend {c.name}", memory_bytes=c.hbm_total_bytes or None,
            pci_bus_id=c.bus_id,
            sources={"memory_bytes": "npu-smi info HBM-Usage total (MB)", "product": "npu-smi info Name"}
            if c.hbm_total_bytes else {"product": "npu-smi info Name"},
        )
        for i, c in enumerate(info.chips)
    ]  # fmt: skip
    if any(c.hbm_total_bytes == 0 for c in info.chips):
        notes.append("npu-smi reports HBM total 0 for some chips: their memory is unknown")
    notes.extend(info.notes)
    notes.append("Ascend links: HCCS topology (npu-smi info -t topo) not read yet; links unknown")
    return cards, None
