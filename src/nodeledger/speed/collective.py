"""How long one collective takes on this machine (or across identical machines), in nccl-tests'
terms: ``algbw_gbps``, ``busbw_gbps``, ``seconds`` (speed/terms.py (5)).

The large-message bus bandwidth is, in order of trust: a bench-measured figure for the same op
and card count; the weakest link of the card set x the achieved fraction of its kind
([efficiency.busbw_*] in speed/hardware.toml); unknown.  Across machines the ring crosses each
machine boundary, so its bus bandwidth is also bounded by the NICs (figures.network_busbw).
Ring and tree differ in their latency term (2(n-1) vs 2 log2 n hops) and, across exactly two
machines, in bandwidth (the tree crosses the boundary once per direction: TWO_NODE_TREE); the
faster of the two is reported, as NCCL's tuner picks.  A per-hop latency the data does not give
(across machines, xGMI, HCCS) is left out and the result says it is a lower bound.
"""

from __future__ import annotations

from nodeledger.machine.profile import MachineProfile
from nodeledger.speed import figures as F
from nodeledger.speed import terms as T

OPS = ("all_reduce", "all_gather", "reduce_scatter")


TWO_NODE_TREE = (
    "two machines: NCCL's tree all-reduce crosses the boundary once per direction, so bus "
    "bandwidth reaches up to 2(n-1)/n x the NIC rate (sjeaugey, github.com/NVIDIA/nccl/issues/209: "
    "'in the special case of two nodes, the bus BW can get up to 2x the network bandwidth with trees')"
)


def estimate(machine: MachineProfile, op: str, size_bytes: int, cards: list[int] | None = None,
             machines: int = 1, nvls: bool = True) -> dict:  # fmt: skip
    # long: one collective: the limits, ring vs tree, then the result dict with each figure's source
    """One collective of ``size_bytes`` (the buffer for all-reduce, the whole output for
    all-gather / input for reduce-scatter, as nccl-tests counts it) over ``cards`` of each of
    ``machines`` machines."""
    if op not in OPS:
        raise ValueError(f"op {op!r} is not one of {OPS}")
    idx = [a.index for a in machine.accelerators] if cards is None else list(cards)
    ranks = len(idx) * machines
    out: dict = {
        "op": op,
        "size_bytes": size_bytes,
        "cards": idx,
        "machines": machines,
        "ranks": ranks,
        "bus_factor": T.bus_factor(op, ranks),
    }
    if ranks <= 1:
        out.update(algbw_gbps=None, busbw_gbps=None, seconds=0.0, binding=None,
                   reason="one rank: nothing moves")  # fmt: skip
        return out
    inbox, alpha, kind = F.busbw(machine, op, idx, nvls) if len(idx) > 1 else (None, None, "none")
    limits = []
    if inbox is not None:
        limits.append(("card links", inbox))
    tree_net = None
    if machines > 1:
        net, nic = F.network_busbw(machine)
        if machines == 2 and op == "all_reduce" and net.value is not None:
            f = T.bus_factor(op, ranks)
            tree_net = F.Figure(net.value * f, "GB/s", f"{net.source} x {f:.3f}: {TWO_NODE_TREE}")
        limits.append(("network", net))
        out["nic"] = {"gbps": nic.value, "source": nic.source}
    out["limits"] = {name: {"busbw_gbps": f.value, "source": f.source} for name, f in limits}
    unknown = [(n, f) for n, f in limits if f.value is None]
    if unknown:
        name, f = unknown[0]
        out.update(algbw_gbps=None, busbw_gbps=None, seconds=None, binding=name,
                   reason="; ".join(f"{n}: {x.source}" for n, x in unknown))  # fmt: skip
        if any(n == "network" for n, _ in unknown):
            ceil = F.network_busbw_ceiling(machine)
            out["busbw_ceiling_gbps"] = {"value": ceil.value, "source": ceil.source}
        return out
    name, bw = min(limits, key=lambda x: x[1].value)
    # per-hop latency: the in-box link's from the hardware data; across machines, and where the
    # data has none, unknown: the latency term is then left out and the time is a lower bound
    known = alpha is not None and alpha.value is not None and machines == 1
    a = alpha.value if known else 0.0
    ring = T.collective_seconds(op, size_bytes, ranks, bw.value, a, "ring")
    tree = ring
    if op == "all_reduce":
        tree_limits = [(n, tree_net if (n == "network" and tree_net is not None) else f)
                       for n, f in limits]  # fmt: skip
        tree_name, tree_bw = min(tree_limits, key=lambda x: x[1].value)
        tree = T.collective_seconds(op, size_bytes, ranks, tree_bw.value, a, "tree")
        if tree < ring:
            name, bw = tree_name, tree_bw
    secs = min(ring, tree)
    alg = T.algbw_gbps(size_bytes, secs)
    out.update(
        algbw_gbps=alg,
        busbw_gbps=alg * T.bus_factor(op, ranks),
        busbw_large_message_gbps=bw.value,
        seconds=secs,
        ring_seconds=ring,
        tree_seconds=tree,
        algorithm="tree" if tree < ring else "ring",
        latency_per_step_s=a if known else None,
        latency_source=(
            alpha.source
            if known
            else "per-hop latency unknown"
            + (" across machines" if machines > 1 else f" for {kind} links")
            + ": left out, so seconds is a lower bound (busbw an upper bound)"
        ),
        seconds_is_lower_bound=not known,
        link_kind=kind,
        binding=name,
        source=bw.source,
        reason=f"{name}: {bw.value:,.1f} GB/s bus bandwidth ({bw.source})",
    )
    return out
