"""The machine's time figures, each a ``Figure`` (value, unit, source), in this order of trust:

1. measured (a profile field whose source says "measured", e.g. written by
   ``bench --save-profile``);
2. the machine profile's own figure (a preset's datasheet value, a probe's vendor-tool field);
3. nodeledger's hardware data by product name (``speed/hardware.toml``);
4. unknown, with the reason and the ``bench`` part that would measure it.

A bound (``*_floor`` / ``*_ceiling``) is what the data files guarantee when the figure itself is
unknown: the verdicts use it only where it still decides, and say so.
"""

from __future__ import annotations

from nodeledger.machine.profile import MachineProfile
from nodeledger.machine.vendors import spec as vendor_spec
from nodeledger.speed import hardware as H
from nodeledger.speed.hardware import Figure
from nodeledger.units import GiB

PCIE_KINDS = ("pix", "pxb", "phb", "node", "sys", "pcie", "unknown")
BUSBW_EFFICIENCY = {  # link kind -> [efficiency.*] of nccl-tests busbw vs the link rate
    "nvlink": "busbw_nvswitch",
    "xgmi": "busbw_xgmi",
    "hccs": "busbw_xgmi",
    **{k: "busbw_pcie" for k in PCIE_KINDS},
}
BENCH_HINT = {
    "peak": "card peak: not measured by bench; put bf16_dense_tflops in a profile file",
    "hbm": "card memory bandwidth: not measured by bench; put memory_bandwidth_gbps in a profile",
    "link": "`nodeledger bench` (card <-> card copies, collectives) measures it; "
    "`--save-profile FILE` keeps it for --machine FILE",
    "nic": "the NIC speed: `nodeledger machine probe` reads it from /sys/class/net/<if>/speed",
    "disk": "`nodeledger bench` (disk part) measures it; `--save-profile` keeps it",
}


def _cards(machine: MachineProfile, cards: list[int] | None):
    accs = machine.accelerators
    if cards is None:
        return list(accs)
    by = {a.index: a for a in accs}
    return [by[c] for c in cards if c in by]


def _card_value(a, field: str, data_key: str, unit: str) -> Figure:
    v = getattr(a, field)
    if v is not None:
        return Figure(float(v), unit, a.sources.get(field) or f"machine profile ({a.product})")
    f = H.card_figure(a.product, data_key, unit)
    return f


def _slowest(figs: list[Figure], unit: str, what: str) -> Figure:
    if not figs:
        return Figure(None, unit, f"no card: {what} unknown")
    unknown = [f for f in figs if f.value is None]
    if unknown:
        return unknown[0]
    return min(figs, key=lambda f: f.value)


CARD_FIELDS = (("memory_bandwidth_gbps", "memory_bandwidth_gbps", "GB/s"),
               ("bf16_dense_tflops", "bf16_dense_tflops", "TFLOPS"),
               ("fp8_dense_tflops", "fp8_dense_tflops", "TFLOPS"),
               ("int8_dense_tops", "int8_dense_tops", "TOPS"))  # fmt: skip


def card_figures(machine: MachineProfile) -> dict[int, dict[str, Figure]]:
    """Per card, its bandwidth and peak figures as the speed model reads them: the profile's
    own value (a measurement, a preset) with its source, else the hardware data's for the
    product (a datasheet, named), else unknown with the reason."""
    return {a.index: {f: _card_value(a, f, key, unit) for f, key, unit in CARD_FIELDS}
            for a in machine.accelerators}  # fmt: skip


def card_peak(machine: MachineProfile, cards: list[int] | None = None) -> Figure:
    """Dense bf16 TFLOPS of the slowest card of the set."""
    figs = [_card_value(a, "bf16_dense_tflops", "bf16_dense_tflops", "TFLOPS")
            for a in _cards(machine, cards)]  # fmt: skip
    return _slowest(figs, "TFLOPS", "card peak")


def card_peak_fp8(machine: MachineProfile, cards: list[int] | None = None) -> Figure:
    """Dense fp8 TFLOPS of the slowest card of the set (unknown where the card has no FP8 mode)."""
    figs = [_card_value(a, "fp8_dense_tflops", "fp8_dense_tflops", "TFLOPS")
            for a in _cards(machine, cards)]  # fmt: skip
    return _slowest(figs, "TFLOPS", "card fp8 peak")


def card_hbm(machine: MachineProfile, cards: list[int] | None = None) -> Figure:
    """Card memory bandwidth (GB/s) of the slowest card of the set."""
    figs = [_card_value(a, "memory_bandwidth_gbps", "memory_bandwidth_gbps", "GB/s")
            for a in _cards(machine, cards)]  # fmt: skip
    return _slowest(figs, "GB/s", "card memory bandwidth")


def _card_class(a) -> str:
    c = H.card(a.product)
    if c and c.get("class"):
        return c["class"]
    return vendor_spec(a.vendor).default_card_class


def card_peak_floor(machine: MachineProfile) -> Figure:
    """A lower bound on the card peak when it is unknown: the slowest data-file card of the same
    class with at least this card's memory."""
    accs = machine.accelerators
    if not accs:
        return Figure(None, "TFLOPS", "no card")
    a = accs[0]
    mem = None if a.memory_bytes is None else round(a.memory_bytes / GiB)
    f = H.class_floor("bf16_dense_tflops", _card_class(a), mem)
    return Figure(f.value, "TFLOPS", f.source)


def card_peak_ceiling(machine: MachineProfile) -> Figure:
    """An upper bound on the card peak when it is unknown: the fastest data-file card."""
    vals = [(H._num(c.get("bf16_dense_tflops")), c["id"]) for c in H.cards()]
    vals = [v for v in vals if v[0] is not None]
    if not vals:
        return Figure(None, "TFLOPS", "no card figure in the data")
    v, cid = max(vals)
    return Figure(v, "TFLOPS", f"fastest card in nodeledger's hardware data ({cid})")


def _host_link(a) -> Figure:
    """The card's own PCIe link rate per direction, from the data file's host_link id."""
    c = H.card(a.product)
    lid = c.get("host_link") if c else None
    lk = H.link(lid) if lid else None
    per = H._num(lk.get("per_link_gbps")) if lk else None
    if per is None:
        return Figure(None, "GB/s", f"{a.product}: host link rate not in the hardware data")
    return Figure(per, "GB/s", f"{lid}: {lk.get('source', '')}")


def _card_link(machine: MachineProfile, index: int) -> tuple[str | None, dict | None, float | None]:
    """(link id, its data entry, GB/s per link per direction) of a card's own fabric."""
    by = {x.index: x for x in machine.accelerators}
    c = H.card(by[index].product) if index in by else None
    lid = (c or {}).get("card_link")
    data = H.link(lid) if lid else None
    return lid, data, (H._num(data.get("per_link_gbps")) if data else None)


def pair_link(machine: MachineProfile, a: int, b: int) -> tuple[Figure, str]:
    """(per-direction GB/s, link kind) of the path between cards a and b."""
    lk = machine.link(a, b)
    kind = lk.kind.value
    label = lk.label or kind
    if lk.bandwidth_gbps is not None:
        src = lk.source or "machine profile"
        return Figure(float(lk.bandwidth_gbps), "GB/s", f"{label} cards {a}-{b}: {src}"), kind
    if kind == "nvlink" and lk.lanes:
        lid, data, per = _card_link(machine, a)
        if per is not None:
            return Figure(lk.lanes * per, "GB/s",
                          f"{label}: {lk.lanes} links x {per:g} GB/s ({lid}: {data.get('source', '')})"), kind  # fmt: skip
    if kind in MESH_KINDS:
        lid, data, per = _card_link(machine, a)
        if per is not None:
            return Figure(per, "GB/s", f"{label}: one {lid} link per pair, {per:g} GB/s "
                          f"({data.get('source', '')})"), kind  # fmt: skip
    if kind in PCIE_KINDS:
        by = {x.index: x for x in machine.accelerators}
        rates = [_host_link(by[c]) for c in (a, b) if c in by]
        if rates and all(r.value is not None for r in rates):
            r = min(rates, key=lambda f: f.value)
            return Figure(r.value, "GB/s", f"{label} (PCIe path): the slower card's link, {r.source}"), kind  # fmt: skip
    return Figure(None, "GB/s", f"{label} between cards {a} and {b}: bandwidth unknown"), kind


def weakest_link(machine: MachineProfile, cards: list[int]) -> tuple[Figure, str]:
    """The slowest pair link among ``cards`` (a ring is as fast as its slowest hop); unknown if
    any pair is unknown."""
    worst: tuple[Figure, str] | None = None
    for i, a in enumerate(cards):
        for b in cards[i + 1 :]:
            f, kind = pair_link(machine, a, b)
            if f.value is None:
                return f, kind
            if worst is None or f.value < worst[0].value:
                worst = (f, kind)
    if worst is None:
        return Figure(None, "GB/s", "one card: no link"), "none"
    return worst


def measured_collective(machine: MachineProfile, op: str, cards: list[int],
                        other_ops: bool = True) -> Figure | None:  # fmt: skip
    """A bench-measured bus bandwidth for ``op`` over the same number of cards (largest size);
    else, with ``other_ops``, one measured for another collective over them: bus bandwidth is
    comparable across collectives by its definition (nccl-tests doc/PERFORMANCE.md)."""
    same = [
        c
        for c in getattr(machine.interconnect, "collectives", []) or []
        if len(c.cards) == len(cards) and c.busbw_gbps is not None
    ]
    found = [c for c in same if c.op == op] or (same if other_ops else [])
    if not found:
        return None
    best = max(found, key=lambda c: c.size_bytes)
    note = (
        ""
        if best.op == op
        else f"; measured for {best.op}, bus bandwidth compares across collectives"
    )
    return Figure(float(best.busbw_gbps), "GB/s",
                  f"{best.source or 'measured'} ({best.op}, {len(best.cards)} cards, "
                  f"{best.size_bytes / 2**20:,.0f} MiB{note})")  # fmt: skip


MESH_KINDS = ("xgmi", "hccs")  # all-pairs point-to-point fabrics: a ring uses n - 1 links per card
NVLS_MIN_RANKS = (
    6  # NCCL picks NVLink SHARP from 5 (H200) / 6 (B200) GPUs: [efficiency.busbw_nvswitch]
)
NVLS_LINKS = ("nvlink4", "nvlink5")  # Hopper and later NVSwitch generations


def _nvls(machine: MachineProfile, cards: list[int], kind: str) -> bool:
    """NVLink SHARP (in-switch reduction): Hopper+ NVSwitch boxes, every pair at the full link
    count of the card (18 NVLink4 / NVLink5 links = an NVSwitch, not a bridge)."""
    if kind != "nvlink" or len(cards) < NVLS_MIN_RANKS:
        return False
    by = {a.index: a for a in machine.accelerators}
    c = H.card(by[cards[0]].product) if cards[0] in by else None
    if not c or c.get("card_link") not in NVLS_LINKS or c.get("card_link_scope") == "bridge":
        return False
    full = c.get("card_link_count")
    return all((machine.link(a, b).lanes or 0) >= (full or 99)
               for i, a in enumerate(cards) for b in cards[i + 1:])  # fmt: skip


def busbw(machine: MachineProfile, op: str, cards: list[int],
          nvls: bool = True) -> tuple[Figure, Figure, str]:  # fmt: skip
    """(large-message bus bandwidth, latency per step in seconds, link kind) over ``cards``.

    Ring over the weakest pair link x the achieved fraction of its kind; on an all-pairs mesh
    (xGMI, HCCS) RCCL / HCCL run rings over every link at once, so the rate is the pair link x
    (n - 1) ([efficiency.busbw_xgmi] note); all-reduce on a Hopper+ NVSwitch box with at least
    NVLS_MIN_RANKS cards uses NVLink SHARP ([efficiency.busbw_nvswitch] value_nvls) unless
    ``nvls`` is False (NCCL_NVLS_ENABLE=0)."""
    link, kind = weakest_link(machine, cards)
    by = {a.index: a for a in machine.accelerators}
    own = H.card(by[cards[0]].product) if cards and cards[0] in by else None
    alpha = link_latency(kind, (own or {}).get("card_link") if kind not in PCIE_KINDS else
                         (own or {}).get("host_link"))  # fmt: skip
    # NVLS lifts all-reduce alone: on such a box a measured all-reduce does not stand for others
    m = measured_collective(machine, op, cards, other_ops=not _nvls(machine, cards, kind))
    if m is not None:
        return m, alpha, kind
    if link.value is None:
        return Figure(None, "GB/s", link.source), alpha, kind
    eff = H.efficiency(BUSBW_EFFICIENCY.get(kind, "busbw_pcie"))
    if eff.value is None:
        return Figure(None, "GB/s", eff.source), alpha, kind
    rate, how = link.value, f"{link.value:,.1f} GB/s link"
    if kind in MESH_KINDS and len(cards) > 2:
        rate = link.value * (len(cards) - 1)
        how = f"{link.value:,.1f} GB/s per pair link x {len(cards) - 1} links (all-pairs mesh)"
    frac, what = eff.value, "achieved bus bandwidth"
    if op == "all_reduce" and nvls and _nvls(machine, cards, kind):
        v = H._num(H.data().get("efficiency", {}).get("busbw_nvswitch", {}).get("value_nvls"))
        if v is not None:
            frac, what = v, "with NVLink SHARP (NVLS)"
    return (
        Figure(rate * frac, "GB/s", f"{how} x {frac:g} {what} ({link.source}; efficiency: {eff.source})"),
        alpha, kind,
    )  # fmt: skip


def link_latency(kind: str, link_id: str | None = None) -> Figure:
    """Per-hop latency of a collective step over this kind of link (seconds): the card's own link
    (``link_id``) if the hardware data states its latency, else the first link of the kind that
    does."""
    own = H.link(link_id) if link_id else None
    us = H._num(own.get("latency_us")) if own else None
    if us is not None:
        return Figure(us * 1e-6, "s", f"{link_id} latency {us:g} us ({own.get('source', '')})")
    for lk in H.data().get("links", []):
        if lk.get("kind") == kind or (kind in PCIE_KINDS and lk.get("kind") == "pcie"):
            us = H._num(lk.get("latency_us"))
            if us is not None:
                return Figure(
                    us * 1e-6, "s", f"{lk['id']} latency {us:g} us ({lk.get('source', '')})"
                )
    return Figure(None, "s", f"{kind}: per-hop latency not in the hardware data")


def nic(machine: MachineProfile) -> tuple[Figure, str]:
    """(GB/s per machine over the NICs a cross-machine job uses, kind): RDMA ports if any,
    else Ethernet; all ports of that kind together."""
    nics = machine.network.nics
    rdma = [n for n in nics if n.kind in ("infiniband", "roce", "rdma")]
    use = rdma or [n for n in nics if n.kind in ("ethernet", "unknown")]
    if not use:
        return Figure(None, "GB/s", "no NIC in the profile"), "none"
    names = ", ".join(n.name for n in use)
    kind = "rdma" if rdma else ("ethernet" if all(n.kind == "ethernet" for n in use) else "unknown")
    if any(n.speed_gbit is None for n in use):
        return Figure(None, "GB/s", f"{len(use)} NIC(s) ({names}), speed unknown"), kind
    total = sum(n.speed_gbit for n in use)
    src = use[0].source or "machine profile"
    return Figure(total / 8, "GB/s", f"{len(use)} x {use[0].kind} ({names}), {total:g} Gbit/s "
                  f"in all ({src})"), kind  # fmt: skip


def network_busbw(machine: MachineProfile) -> tuple[Figure, Figure]:
    """(bus bandwidth a collective across machines reaches, the NIC figure it rests on).

    A ring across machines crosses each machine boundary once per ring; NCCL runs one ring per
    NIC, so the boundary carries the machine's whole NIC rate: busbw <= NIC GB/s per machine x
    the achieved fraction of the transport (RDMA: [efficiency.busbw_network]; plain Ethernet:
    NCCL's socket transport, [efficiency.busbw_socket])."""
    f, kind = nic(machine)
    if kind == "unknown" and f.value is not None:
        return Figure(None, "GB/s", f"{f.source}; its kind (RDMA or plain Ethernet) is unknown, "
                      "and NCCL's transport differs by 2x between them"), f  # fmt: skip
    eff = H.efficiency("busbw_network" if kind == "rdma" else "busbw_socket")
    if f.value is None or eff.value is None:
        return Figure(None, "GB/s", f.source if f.value is None else eff.source), f
    return Figure(f.value * eff.value, "GB/s",
                  f"{f.value:,.2f} GB/s of NIC x {eff.value:g} ({eff.source})"), f  # fmt: skip


def network_busbw_ceiling(machine: MachineProfile) -> Figure:
    """When the NIC speed is unknown: the most a transport of this kind has been measured to
    carry ([nic_bounds]); for a plain Ethernet port, NCCL's socket transport ceiling."""
    f, kind = nic(machine)
    if kind not in ("rdma", "ethernet"):
        return Figure(None, "GB/s", f"{f.source}: no transport ceiling applies (NIC kind unknown)")
    key = "rdma_busbw_ceiling_gbps" if kind == "rdma" else "socket_busbw_ceiling_gbps"
    b = H.data().get("nic_bounds", {})
    v = H._num(b.get(key))
    return Figure(v, "GB/s", b.get(f"{key}_source", f"[nic_bounds] {key} not in the data"))


def typical_read(kind: str) -> Figure:
    """Sequential read GB/s typical of a mount kind (the hardware data's first disk of it)."""
    for d in H.disks():
        if d.get("kind") == kind:
            v = H._num(d.get("sequential_read_gbps"))
            if v is not None:
                return Figure(v, "GB/s", f"typical {kind} ({d.get('source', '')})")
    return Figure(None, "GB/s", f"{kind}: no figure; {BENCH_HINT['disk']}")


def read_rate(mount) -> Figure:
    """Sequential read GB/s of one mount: what bench measured there, else typical of its kind."""
    if mount.sequential_read_gbps is not None:
        src = (mount.sources or {}).get("sequential_read_gbps", "measured")
        return Figure(float(mount.sequential_read_gbps), "GB/s", src)
    return typical_read(mount.kind)


def mount_read(machine: MachineProfile, path_kind: str) -> Figure:
    """Sequential read GB/s of a mount kind: a bench-measured mount of that kind, else the data
    file's typical figure for the kind."""
    for m in machine.storage.mounts:
        if m.kind == path_kind and m.sequential_read_gbps is not None:
            f = read_rate(m)
            return Figure(f.value, f.unit, f"{m.path}: {f.source}")
    return typical_read(path_kind)


def host_to_card(machine: MachineProfile, cards: list[int] | None = None) -> Figure:
    """Pinned host -> card copy GB/s of the slowest card: measured, else its PCIe link x the
    achievable fraction of the data file."""
    accs = _cards(machine, cards)
    if not accs:
        return Figure(None, "GB/s", "no card")
    figs = []
    for a in accs:
        v = getattr(a, "host_to_card_gbps", None)
        if v is not None:
            figs.append(Figure(float(v), "GB/s", a.sources.get("host_to_card_gbps", "measured")))
            continue
        r = _host_link(a)
        c = H.card(a.product)
        lk = H.link(c.get("host_link")) if c else None
        frac = H._num(lk.get("achievable_fraction")) if lk else None
        if r.value is None or frac is None:
            figs.append(Figure(None, "GB/s", r.source))
        else:
            figs.append(Figure(r.value * frac, "GB/s", f"{r.source}, x {frac:g} achievable"))
    return _slowest(figs, "GB/s", "host -> card copy")


def serve_inputs(machine: MachineProfile, cards: list[int], fp8: bool = False, tp: int = 1,
                 machines: int = 1) -> dict:  # fmt: skip
    """The figures a serving estimate rests on, each with its source.  ``cards``: the replica's
    cards on one machine; its TP group is the first ``tp`` (a TP group larger than the machine
    spans ``machines`` over their NICs).  ``fp8``: fp8 weights run fp8 GEMMs (W8A8, as vLLM and
    TensorRT-LLM do on cards with FP8 tensor cores): compute at the card's fp8 peak where it has
    one."""
    per_machine = len(machine.accelerators)
    if tp > 1 and machines > 1 and tp > per_machine:
        bw, _ = network_busbw(machine)
        alpha, kind = Figure(None, "s", "per-hop latency across machines unknown"), "network"
    elif tp > 1:
        bw, alpha, kind = busbw(machine, "all_reduce", cards[:tp])
    else:
        bw, alpha, kind = None, None, "none"
    peak = card_peak(machine, cards)
    compute = peak
    if fp8:
        f8 = card_peak_fp8(machine, cards)
        if f8.value is not None:
            compute = f8
    return {
        "card_bf16_tflops": peak,
        "compute_tflops": compute,
        "card_memory_gbps": card_hbm(machine, cards),
        "hbm_efficiency": H.efficiency("hbm_read"),
        "prefill_efficiency": H.efficiency("mfu_prefill"),
        "decode_compute_efficiency": H.efficiency("mfu_prefill"),
        "tp_busbw_gbps": bw,
        "tp_latency_s": alpha,
        "link_kind": kind,
    }


# -- link physics the bench judges with (one copy: bench/judge.py reads these) ---------------

PCIE_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}  # GT/s per lane -> generation
PCIE_ACHIEVABLE = (
    0.8  # where the data file has no measured fraction: TLP/DLLP overhead, 256 B payload
)


def pcie_encoding(gts: float) -> float:
    """Line-code efficiency: 8b/10b (Gen1-2), 128b/130b (Gen3-5, and unknown rates), FLIT
    242/256 (Gen6)."""
    gen = PCIE_GEN.get(float(gts), 3)
    if gen <= 2:
        return 8 / 10
    return 242 / 256 if gen >= 6 else 128 / 130


def pcie_raw_gbps(gts: float, width: int) -> float:
    """Raw data rate per direction in GB/s (1e9) after line encoding (the PCI-SIG base
    specification's per-lane rate x the lanes, as hardware.toml's pcie links give it)."""
    return gts * width * pcie_encoding(gts) / 8


def pcie_achievable(gts: float) -> tuple[float, str]:
    """The fraction of the raw rate a copy reaches on this generation: the hardware data's
    measured ``achievable_fraction`` for its x16 link (nvbandwidth on H200: 0.88 at Gen5; RTX
    4090 P2P: 0.78 at Gen4), else the protocol overhead bound 0.8, said so."""
    gen = PCIE_GEN.get(float(gts))
    lk = H.link(f"pcie{gen}x16") if gen else None
    frac = H._num(lk.get("achievable_fraction")) if lk else None
    if frac:
        return frac, f"pcie{gen}x16 achievable {frac:g} ({lk.get('source', '')[:160]})"
    return PCIE_ACHIEVABLE, (f"{PCIE_ACHIEVABLE:g} x raw (packet overhead at 256 B payload; no "
                             f"measured fraction for Gen{gen or '?'} in the hardware data)")  # fmt: skip


def nvlink_per_link(product: str | None) -> tuple[float, str]:
    """GB/s per NVLink link per direction of a card: its card_link entry in the hardware data
    (nvlink4: 25, nvlink5: 50), else NVLink 2-4's 25."""
    c = H.card(product) or {}
    lk = H.link(c.get("card_link") or "") or {}
    per = H._num(lk.get("per_link_gbps")) if lk.get("kind") == "nvlink" else None
    if per:
        return (
            per,
            f"{c.get('card_link')}: {per:g} GB/s per link per direction ({lk.get('source', '')[:120]})",
        )
    base = H.link("nvlink4") or {}
    return H._num(base.get("per_link_gbps")) or 25.0, (
        f"nvlink4: {H._num(base.get('per_link_gbps')) or 25.0:g} GB/s per link per direction "
        f"(the card's own fabric is not in the hardware data; {base.get('source', '')[:100]})"
    )
