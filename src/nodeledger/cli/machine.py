"""`nodeledger machine list|show|probe`, `bundle` and `parse`: what the box is."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import click

from nodeledger.cli.common import (
    MAX_ROWS,
    UNKNOWN,
    console,
    escape,
    gib,
    num,
    print_json,
    ranges,
    short,
)
from nodeledger.cli.options import json_option, tool_timeout_option
from nodeledger.files import read_user_text


@click.group(
    "machine", help="What the box is: bundled presets and profile files.", no_args_is_help=True
)
def machine() -> None:
    pass


@machine.command("list")
@json_option
def machine_list(as_json=False) -> None:
    """List the bundled machine presets."""
    from nodeledger.report.machines import list_machines, machine_list_json

    if as_json:
        print_json(machine_list_json())
        return
    rows = list_machines()
    from rich.table import Table

    t = Table(title="Bundled machine presets (figures and their sources: machine show NAME)")
    for col in ("preset", "cards", "card memory total", "host RAM"):
        t.add_column(col, no_wrap=col == "preset")
    for r in rows:
        name = r["name"] + (" (default)" if r["default"] else "")
        t.add_row(
            name,
            f"{r['accelerators']} x {r['product']}",
            gib(r["card_memory_total_bytes"]),
            gib(r["host_ram_bytes"]),
        )
    console().print(t)


@machine.command("probe")
@json_option
@click.option("--save", "save", help="Write the profile to FILE (.toml or .json).")
@tool_timeout_option
@click.option("--from", "from_bundle", help="Replay a support bundle instead of probing live.")
def machine_probe(as_json=False, save=None, timeout=5.0, from_bundle=None) -> None:
    """Probe this machine (Linux /proc and /sys, nvidia-smi): cards, links, NUMA, RAM, NICs, mounts."""
    from nodeledger.report.machines import probe_profile, profile_json

    profile = probe_profile(timeout, from_bundle, save)
    if as_json:
        print_json(profile_json(profile))
        return
    _render_machine(profile)


@machine.command("show")
@click.argument(
    "machine",
    required=False,
    help="Preset name or profile file (.toml/.json); default: the reference machine.",
)
@json_option
@click.option("--save", "save", help="Also write the profile to FILE (.toml or .json).")
def machine_show(machine=None, as_json=False, save=None) -> None:
    """Show a machine profile: cards, links, host, network, storage — each figure with its source."""
    from nodeledger.report.machines import show_machine

    view = show_machine(machine, save)
    if as_json:
        print_json(view.to_json())
        return
    profile, figures, ident = view.profile, view.figures, view.identity
    _render_machine(profile, figures)
    _render_identity(ident)


def _render_identity(ident: dict) -> None:
    from rich.table import Table

    if not ident["rows"]:
        return
    con = console()
    name = ident["index_name"] or "runtime index"
    t = Table(
        title=f"Device identity (smi index = what the vendor tool prints; {name} = what a process here sees)"
    )
    for c in ("smi index", f"{name} (this env)", "PCI bus", "/dev node (minor)", "NUMA", "uuid"):
        t.add_column(c)
    for r in ident["rows"]:
        ri = (
            "not visible"
            if not r["visible"]
            else ("unknown" if r["runtime_index"] is None else str(r["runtime_index"]))
        )
        dev = "unknown" if r["dev_node"] is None else f"{r['dev_node']} ({r['dev_minor']})"
        t.add_row(str(r["smi_index"]), ri, r["pci_bus_id"] or "unknown", dev,
                  "unknown" if r["numa_node"] is None else str(r["numa_node"]), r["uuid"] or "unknown")  # fmt: skip
    con.print(t)
    for n in ident["notes"]:
        con.print(f"  note: {n}", markup=False, highlight=False)


def _group_cards(cards):
    """[(indices, card)] with cards equal in every field but the index grouped together."""
    groups: list[tuple[list[int], Any, dict]] = []
    for a in cards:
        key = {**dataclasses.asdict(a), "index": None}
        for indices, _, k in groups:
            if k == key:
                indices.append(a.index)
                break
        else:
            groups.append(([a.index], a, key))
    return [(i, a) for i, a, _ in groups]


def _render_machine(p, figures: dict | None = None) -> None:
    # long: a renderer: one profile top to bottom (cards, links, collectives, host, NICs, mounts)
    from rich.table import Table

    con = console()
    con.print(f"[bold]{escape(p.name)}[/bold] — {escape(p.description)}")
    if not p.accelerators:
        con.print("Accelerators: none found (host-only profile)")
    t = Table(title="Accelerators (identical cards share a row)")
    cols = ("cards", "vendor", "product", "memory", "mem bandwidth", "bf16 dense", "fp8 dense",
            "int8 dense", "NUMA", "PCI bus", "partition")  # fmt: skip
    for c in cols:
        t.add_column(c)
    figures = figures or {}
    sheets: dict[str, list[int]] = {}  # datasheet source -> the cards it fills

    def fig(a, field: str, unit: str) -> str:
        f = figures.get(a.index, {}).get(field)
        if getattr(a, field) is not None or f is None or f["value"] is None:
            return num(getattr(a, field), unit)
        sheets.setdefault(f["source"], []).append(a.index)
        return num(f["value"], unit) + " (datasheet)"

    for indices, a in _group_cards(p.accelerators) if p.accelerators else []:
        t.add_row(
            ranges(indices), a.vendor.value, a.product, gib(a.memory_bytes),
            fig(a, "memory_bandwidth_gbps", "GB/s"), fig(a, "bf16_dense_tflops", "TFLOPS"),
            fig(a, "fp8_dense_tflops", "TFLOPS"), fig(a, "int8_dense_tops", "TOPS"),
            num(a.numa_node), a.pci_bus_id or UNKNOWN, a.partition or UNKNOWN,
        )  # fmt: skip
    if p.accelerators:
        con.print(t)
    for src in sheets:
        con.print(f"  datasheet: {src}", markup=False)
    for a in p.accelerators:
        measured = [(k, getattr(a, k)) for k in ("host_to_card_gbps", "card_to_host_gbps",
                    "host_to_card_pageable_gbps") if getattr(a, k, None) is not None]  # fmt: skip
        if measured:
            con.print(f"  card {a.index}: " + ", ".join(f"{k} {v:,.1f} GB/s" for k, v in measured)
                      + f" — {a.sources.get(measured[0][0], '')}", markup=False)  # fmt: skip
    total = p.total_accelerator_memory_bytes()
    con.print(f"Card memory total: {gib(total)}" + (f" ({total:,} B)" if total else ""))
    d = p.interconnect.default
    con.print(
        f"Card-to-card links (default for every pair): {d.kind.value}"
        + (f" x{d.lanes}" if d.lanes else "")
        + f", label {d.label or UNKNOWN}, {num(d.bandwidth_gbps, 'GB/s per direction')}"
        + (f" — source: {d.source}" if d.source else "")
    )
    if p.interconnect.pairs:
        lt = Table(title="Link pairs differing from the default")
        for c in ("a", "b", "kind", "label", "GB/s per direction", "source"):
            lt.add_column(c)
        for lp in p.interconnect.pairs:
            lt.add_row(
                str(lp.a),
                str(lp.b),
                lp.kind.value + (f" x{lp.lanes}" if lp.lanes else ""),
                lp.label or UNKNOWN,
                num(lp.bandwidth_gbps),
                lp.source or "",
            )
        con.print(lt)
    for cf in p.interconnect.collectives:
        con.print(f"Collective {cf.op} over cards {ranges(cf.cards)} at {cf.size_bytes:,} B: busbw "
                  f"{num(cf.busbw_gbps, 'GB/s')}, algbw {num(cf.algbw_gbps, 'GB/s')}"
                  + (f" — {cf.source}" if cf.source else ""), markup=False)  # fmt: skip
    h = p.host
    con.print(
        f"Host: {num(h.sockets)} sockets, {num(h.cores)} cores, {num(h.threads)} threads, "
        f"{len(h.numa_nodes) or UNKNOWN} NUMA nodes, RAM {gib(h.ram_bytes)}, swap {gib(h.swap_bytes)}, "
        f"THP {h.thp_enabled or UNKNOWN} (defrag {h.thp_defrag or UNKNOWN}), numa_balancing "
        f"{num(h.numa_balancing)}, swappiness {num(h.swappiness)}"
        + (f", swap in use {gib(h.swap_used_bytes)}" if h.swap_used_bytes is not None else "")
        + (f", available now {gib(h.available_bytes)}" if h.available_bytes is not None else "")
    )
    if h.numa_nodes and all(n.cpus is None and n.memory_bytes is None for n in h.numa_nodes):
        con.print(
            f"  NUMA nodes {ranges([n.id for n in h.numa_nodes])}: CPU lists and memory unknown"
        )
    else:
        for n in h.numa_nodes:
            con.print(f"  NUMA {n.id}: CPUs {n.cpus or UNKNOWN}, memory {gib(n.memory_bytes)}")
    for nic in p.network.nics:
        con.print(
            f"NIC {nic.name}: {nic.kind}, {num(nic.speed_gbit, 'Gbit/s')}"
            + (f" — source: {nic.source}" if nic.source else "")
        )
    if not p.network.nics:
        con.print("Network: unknown (no NICs listed)")
    for m in p.storage.mounts:
        con.print(
            f"Mount {m.path}: {m.kind}, {m.filesystem or 'filesystem unknown'}, {gib(m.size_bytes)}"
            + (
                f", sequential read {m.sequential_read_gbps:,.2f} GB/s"
                if m.sequential_read_gbps
                else ""
            )
            + (
                f", 4 KiB read {m.random_read_latency_ms:,.2f} ms"
                if m.random_read_latency_ms
                else ""
            ),
            markup=False,
        )
    if not p.storage.mounts:
        con.print("Storage: unknown (no mounts listed)")
    sources: dict[str, str] = {}
    for a in p.accelerators:
        for k, v in a.sources.items():
            sources.setdefault(f"accelerator {k}", v)
    for k, v in h.sources.items():
        sources[f"host {k}"] = v
    if sources:
        con.print("[bold]Sources[/bold]")
        for k, v in sources.items():
            con.print(f"  {k}: {v}", markup=False)
    for note in p.notes:
        con.print(f"  note: {note}", markup=False)


@click.command("bundle")
@click.option(
    "-o",
    "--output",
    "output",
    default="nodeledger-bundle.tar.gz",
    show_default=True,
    help="Archive to write (.tar.gz).",
)
@click.option(
    "--watch-samples",
    "watch_samples",
    type=click.IntRange(0, 3600),
    default=0,
    show_default=True,
    help="Also take N watch samples (the card tool's per-card and per-process views, the host's "
    "/proc files): `nodeledger watch --from FILE` replays them elsewhere.",
)
@click.option(
    "--watch-interval",
    "watch_interval",
    type=click.FloatRange(0.01, 3600),
    default=1.0,
    show_default=True,
    help="Seconds between those samples.",
)
@click.option(
    "--backend",
    "backend",
    default="auto",
    show_default=True,
    help="Card tool for the watch samples: auto | nvidia-smi | amd-smi | rocm-smi | hy-smi | "
    "npu-smi (the libraries' answers, NVML and amdsmi, are not replayable).",
)
@tool_timeout_option
def bundle_cmd(output="nodeledger-bundle.tar.gz", timeout=5.0, watch_samples=0,
               watch_interval=1.0, backend="auto") -> None:  # fmt: skip
    """Collect every raw output of a probe (commands, /proc and /sys files) into one archive;
    `nodeledger machine probe --from FILE` rebuilds the profile from it elsewhere, and with
    --watch-samples `nodeledger watch --from FILE` replays the samples."""
    from nodeledger.watch.from_bundle import collect_bundle

    line = collect_bundle(output, timeout, watch_samples, watch_interval, backend)
    sys.stdout.write(line + "\n")


@click.command("parse")
@click.argument(
    "kind",
    help="nvidia-smi-topo | nvidia-smi | nvidia-smi-q | nvidia-smi-q-xml | nvidia-smi-csv | nvidia-smi-query-csv | rocm-smi | rocm-smi-showtopo | rocm-smi-json | rocm-smi-csv | rocm-smi-all | rocm-smi-pids | amd-smi-static | amd-smi-static-json | amd-smi-topology | amd-smi-monitor | amd-smi-process | amd-smi-metric | hy-smi | hy-smi-pids | npu-smi | npu-smi-topo | numactl | lscpu | vllm-log | sglang-log",
)
@click.argument("file", help="A recorded output ('-' for standard input).")
@json_option
def parse_cmd(kind, file, as_json=False) -> None:
    """Explain one recorded tool output (parsed field by field)."""
    from nodeledger.report.machines import parse_output

    data = parse_output(kind, read_user_text(file, "recorded tool output"))
    if as_json:
        print_json(data)
        return
    _render_parsed(kind, data)


def _capped(data: Any, path: str, cut: list[tuple[str, int]]) -> Any:
    """``data`` with every list cut to its first MAX_ROWS items; ``cut`` collects (where, how
    many were left out).  Drawing is the slow part (rich: milliseconds and tens of KB per
    row), so a 20,000-row recording draws 50 rows and says so."""
    if isinstance(data, dict):
        return {k: _capped(v, f"{path}.{k}" if path else str(k), cut) for k, v in data.items()}
    if isinstance(data, list):
        if len(data) > MAX_ROWS:
            cut.append((path or "(top level)", len(data)))
        return [_capped(v, f"{path}[{n}]", cut) for n, v in enumerate(data[:MAX_ROWS])]
    return data


def _render_parsed(kind: str, data: dict[str, Any]) -> None:
    from rich.table import Table

    con = console()
    cut: list[tuple[str, int]] = []
    data = _capped(data, "", cut)  # notes are lists too: the first MAX_ROWS, then a count
    if kind == "nvidia-smi-topo":
        t = Table(title="Cards (nvidia-smi topo -m)")
        for c in ("GPU", "CPU affinity", "NUMA node", "GPU NUMA ID"):
            t.add_column(c)
        for c in data["cards"]:
            t.add_row(
                str(c["index"]),
                short(c["cpu_affinity"]),
                num(c["numa_node"]),
                short(c["gpu_numa_id"] or "-"),
            )
        con.print(t)
        idx = [c["index"] for c in data["cards"]]
        m = Table(title="Card-to-card links: vendor label (normalised kind)")
        m.add_column("")
        for i in idx:
            m.add_column(f"GPU{i}")
        lab = {
            (lk["a"], lk["b"]): short(f"{lk['label']} ({lk['kind']})", 40) for lk in data["links"]
        }
        for a in idx:
            m.add_row(
                f"GPU{a}",
                *["X" if a == b else lab.get((a, b)) or lab.get((b, a), "?") for b in idx],
            )
        con.print(m)
        for n in data["nics"]:
            near = short(", ".join(f"GPU{g}:{v}" for g, v in n["links"].items()), 400)
            con.print(
                f"NIC {short(n['name'], 40)} ({short(n['device'] or 'device unknown', 40)}, "
                f"{short(n['kind'], 20)}): {near}",
                markup=False,
            )
    else:
        con.print_json(json.dumps(data))
    for note in data.get("notes", []):
        con.print(f"note: {short(note, 400)}", markup=False)
    for where, n in cut:
        con.print(
            f"… {where}: {n - MAX_ROWS:,} of {n:,} items not drawn (the first {MAX_ROWS} are); "
            "`--json` prints them all",
            markup=False,
            highlight=False,
        )
