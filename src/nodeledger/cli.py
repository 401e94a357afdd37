"""The command line: thin.  Parses options, calls the library, renders, maps errors to exit codes.

Exit codes: 0 ok; 2 bad input (one line on stderr naming the problem, never a traceback).
Heavy imports stay inside the commands so ``nodeledger model show`` starts fast.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from nodeledger import __version__
from nodeledger.errors import NodeledgerError

app = typer.Typer(
    name="nodeledger",
    help="Capacity accounting for one multi-accelerator server: what fits, what is tight, "
    "what cannot run, and which part of the machine binds.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
machine_app = typer.Typer(
    help="What the box is: bundled presets and profile files.", no_args_is_help=True
)
model_app = typer.Typer(
    help="What a job runs: model specs from HF config.json.", no_args_is_help=True
)
app.add_typer(machine_app, name="machine")
app.add_typer(model_app, name="model")

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
UNKNOWN = "unknown"


def _console(**kwargs):
    """The one Console of the CLI.  Text from profiles, tools, logs and paths may hold brackets:
    known fields are escaped where printed, and anything that still does not parse as markup
    (e.g. a path "/tmp/[/x]" that rich reads as a closing tag) prints as plain text instead of
    failing."""
    from rich.console import Console
    from rich.errors import MarkupError

    class SafeConsole(Console):
        def render_str(self, text, *args, **kw):
            try:
                return super().render_str(text, *args, **kw)
            except MarkupError:
                kw["markup"] = False
                return super().render_str(text, *args, **kw)

    return SafeConsole(**kwargs)


def escape(text: str) -> str:
    """User- and tool-supplied text for a markup string: '[nvidia]' stays '[nvidia]' (rich would
    take it for a style tag and drop it)."""
    from rich.markup import escape as _escape

    return _escape(text)


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def gib(n: int | None) -> str:
    """Bytes as GiB (2**30) with the exact byte count; None -> unknown."""
    if n is None:
        return UNKNOWN
    return f"{n / 2**30:,.2f} GiB"


def _num(value: Any, unit: str = "") -> str:
    if value is None:
        return UNKNOWN
    if isinstance(value, float):
        text = f"{value:,.1f}".rstrip("0").rstrip(".")
    else:
        text = f"{value:,}" if isinstance(value, int) else str(value)
    return f"{text} {unit}".rstrip()


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"nodeledger {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    pass


# ---------------------------------------------------------------------------------------
# machine
# ---------------------------------------------------------------------------------------


@machine_app.command("list")
def machine_list(as_json: JsonOpt = False) -> None:
    """List the bundled machine presets."""
    from nodeledger.machine import DEFAULT_PRESET, list_presets, resolve_machine

    rows = []
    for name in list_presets():
        p = resolve_machine(name)
        rows.append(
            {
                "name": name,
                "default": name == DEFAULT_PRESET,
                "accelerators": len(p.accelerators),
                "product": ", ".join(sorted({a.product for a in p.accelerators})),
                "card_memory_total_bytes": p.total_accelerator_memory_bytes(),
                "host_ram_bytes": p.host.ram_bytes,
                "description": p.description,
            }
        )
    if as_json:
        _print_json(rows)
        return
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
    _console().print(t)


@machine_app.command("probe")
def machine_probe(
    as_json: JsonOpt = False,
    save: Annotated[
        str | None, typer.Option("--save", help="Write the profile to FILE (.toml or .json).")
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds each vendor tool may run.")
    ] = 5.0,
    from_bundle: Annotated[
        str | None, typer.Option("--from", help="Replay a support bundle instead of probing live.")
    ] = None,
) -> None:
    """Probe this machine (Linux /proc and /sys, nvidia-smi): cards, links, NUMA, RAM, NICs, mounts."""
    from nodeledger.machine import save_profile
    from nodeledger.machine.probe import Runner, probe_machine

    if not timeout > 0:
        raise NodeledgerError(f"--timeout must be > 0, got {timeout}")
    if from_bundle:
        from nodeledger.machine.probe.bundle import load_bundle

        profile = probe_machine(load_bundle(from_bundle))
    else:
        profile = probe_machine(Runner(timeout=timeout, live=True))
    if save is not None:
        save_profile(profile, save)
    if as_json:
        _print_json(profile.model_dump(mode="json"))
        return
    _render_machine(profile)


@machine_app.command("show")
def machine_show(
    machine: Annotated[
        str | None,
        typer.Argument(
            help="Preset name or profile file (.toml/.json); default: the reference machine."
        ),
    ] = None,
    as_json: JsonOpt = False,
    save: Annotated[
        str | None, typer.Option("--save", help="Also write the profile to FILE (.toml or .json).")
    ] = None,
) -> None:
    """Show a machine profile: cards, links, host, network, storage — each figure with its source."""
    from nodeledger.machine import resolve_machine, save_profile

    profile = resolve_machine(machine)
    if save is not None:
        save_profile(profile, save)
    if as_json:
        _print_json(profile.model_dump(mode="json"))
        return
    _render_machine(profile)


def _group_cards(cards):
    """[(indices, card)] with cards equal in every field but the index grouped together."""
    groups: list[tuple[list[int], Any, dict]] = []
    for a in cards:
        key = a.model_dump(exclude={"index"})
        for indices, _, k in groups:
            if k == key:
                indices.append(a.index)
                break
        else:
            groups.append(([a.index], a, key))
    return [(i, a) for i, a, _ in groups]


def _ranges(indices) -> str:
    """[0,1,2,3,5] -> "0-3,5"."""
    from nodeledger.machine.parsers.numa import compress_cpus

    return compress_cpus(sorted(indices))


def _render_machine(p) -> None:
    from rich.table import Table

    con = _console()
    con.print(f"[bold]{escape(p.name)}[/bold] — {escape(p.description)}")
    if not p.accelerators:
        con.print("Accelerators: none found (host-only profile)")
    t = Table(title="Accelerators (identical cards share a row)")
    cols = ("cards", "vendor", "product", "memory", "mem bandwidth", "bf16 dense", "fp8 dense",
            "int8 dense", "NUMA", "PCI bus", "partition")  # fmt: skip
    for c in cols:
        t.add_column(c)
    for indices, a in _group_cards(p.accelerators) if p.accelerators else []:
        t.add_row(
            _ranges(indices), a.vendor.value, a.product, gib(a.memory_bytes),
            _num(a.memory_bandwidth_gbps, "GB/s"), _num(a.bf16_dense_tflops, "TFLOPS"),
            _num(a.fp8_dense_tflops, "TFLOPS"), _num(a.int8_dense_tops, "TOPS"),
            _num(a.numa_node), a.pci_bus_id or UNKNOWN, a.partition or UNKNOWN,
        )  # fmt: skip
    if p.accelerators:
        con.print(t)
    total = p.total_accelerator_memory_bytes()
    con.print(f"Card memory total: {gib(total)}" + (f" ({total:,} B)" if total else ""))
    d = p.interconnect.default
    con.print(
        f"Card-to-card links (default for every pair): {d.kind.value}"
        + (f" x{d.lanes}" if d.lanes else "")
        + f", label {d.label or UNKNOWN}, {_num(d.bandwidth_gbps, 'GB/s per direction')}"
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
                _num(lp.bandwidth_gbps),
                lp.source or "",
            )
        con.print(lt)
    h = p.host
    con.print(
        f"Host: {_num(h.sockets)} sockets, {_num(h.cores)} cores, {_num(h.threads)} threads, "
        f"{len(h.numa_nodes) or UNKNOWN} NUMA nodes, RAM {gib(h.ram_bytes)}, swap {gib(h.swap_bytes)}, "
        f"THP {h.thp_enabled or UNKNOWN} (defrag {h.thp_defrag or UNKNOWN}), numa_balancing "
        f"{_num(h.numa_balancing)}, swappiness {_num(h.swappiness)}"
        + (f", swap in use {gib(h.swap_used_bytes)}" if h.swap_used_bytes is not None else "")
        + (f", available now {gib(h.available_bytes)}" if h.available_bytes is not None else "")
    )
    if h.numa_nodes and all(n.cpus is None and n.memory_bytes is None for n in h.numa_nodes):
        con.print(
            f"  NUMA nodes {_ranges([n.id for n in h.numa_nodes])}: CPU lists and memory unknown"
        )
    else:
        for n in h.numa_nodes:
            con.print(f"  NUMA {n.id}: CPUs {n.cpus or UNKNOWN}, memory {gib(n.memory_bytes)}")
    for nic in p.network.nics:
        con.print(
            f"NIC {nic.name}: {nic.kind}, {_num(nic.speed_gbit, 'Gbit/s')}"
            + (f" — source: {nic.source}" if nic.source else "")
        )
    if not p.network.nics:
        con.print("Network: unknown (no NICs listed)")
    for m in p.storage.mounts:
        con.print(
            f"Mount {m.path}: {m.kind}, {m.filesystem or 'filesystem unknown'}, {gib(m.size_bytes)}"
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


@app.command("bundle")
def bundle_cmd(
    output: Annotated[
        str, typer.Option("-o", "--output", help="Archive to write (.tar.gz).")
    ] = "nodeledger-bundle.tar.gz",
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds each vendor tool may run.")
    ] = 5.0,
) -> None:
    """Collect every raw output of a probe (commands, /proc and /sys files) into one archive;
    `nodeledger machine probe --from FILE` rebuilds the profile from it elsewhere."""
    from nodeledger.machine.probe import Runner
    from nodeledger.machine.probe.bundle import write_bundle
    from nodeledger.machine.probe.probe import probe_with_facts

    if not timeout > 0:
        raise NodeledgerError(f"--timeout must be > 0, got {timeout}")
    r = Runner(timeout=timeout)  # NVML answers are not replayable: bundles hold tool outputs only
    profile, _ = probe_with_facts(r)  # the facts too: `doctor --from BUNDLE` replays them
    path = write_bundle(r, output, {"probed_profile_name": profile.name})
    sys.stdout.write(
        f"wrote {path} ({path.stat().st_size:,} B): {len(r.log)} commands, {len(r.files)} files read; "
        f"{len(profile.accelerators)} cards, {len(profile.notes)} notes\n"
    )


@app.command("parse")
def parse_cmd(
    kind: Annotated[
        str,
        typer.Argument(
            help="nvidia-smi-topo | nvidia-smi | nvidia-smi-q | nvidia-smi-q-xml | nvidia-smi-csv | "
            "nvidia-smi-query-csv | rocm-smi | rocm-smi-showtopo | rocm-smi-json | rocm-smi-csv | "
            "rocm-smi-all | amd-smi-static | amd-smi-static-json | amd-smi-topology | hy-smi | "
            "npu-smi | npu-smi-topo | numactl | lscpu"
        ),
    ],
    file: Annotated[str, typer.Argument(help="A recorded output ('-' for standard input).")],
    as_json: JsonOpt = False,
) -> None:
    """Explain one recorded tool output (parsed field by field)."""
    from nodeledger.machine.parsers import parse_kind

    try:
        if file == "-":
            text = sys.stdin.read()
        else:
            with open(file, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
    except OSError as exc:
        raise NodeledgerError(f"{file}: cannot read: {exc.strerror or exc}") from None
    data = parse_kind(kind, text)
    if as_json:
        _print_json(data)
        return
    _render_parsed(kind, data)


def _render_parsed(kind: str, data: dict[str, Any]) -> None:
    from rich.table import Table

    con = _console()
    if kind == "nvidia-smi-topo":
        t = Table(title="Cards (nvidia-smi topo -m)")
        for c in ("GPU", "CPU affinity", "NUMA node", "GPU NUMA ID"):
            t.add_column(c)
        for c in data["cards"]:
            t.add_row(
                str(c["index"]),
                c["cpu_affinity"] or UNKNOWN,
                _num(c["numa_node"]),
                c["gpu_numa_id"] or "-",
            )
        con.print(t)
        idx = [c["index"] for c in data["cards"]]
        m = Table(title="Card-to-card links: vendor label (normalised kind)")
        m.add_column("")
        for i in idx:
            m.add_column(f"GPU{i}")
        lab = {(lk["a"], lk["b"]): f"{lk['label']} ({lk['kind']})" for lk in data["links"]}
        for a in idx:
            m.add_row(
                f"GPU{a}",
                *["X" if a == b else lab.get((a, b)) or lab.get((b, a), "?") for b in idx],
            )
        con.print(m)
        for n in data["nics"]:
            near = ", ".join(f"GPU{g}:{v}" for g, v in n["links"].items())
            con.print(f"NIC {n['name']} ({n['device'] or 'device unknown'}, {n['kind']}): {near}")
    else:
        con.print_json(json.dumps(data))
    for note in data.get("notes", []):
        con.print(f"note: {note}", markup=False)


# ---------------------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------------------


@model_app.command("list")
def model_list(as_json: JsonOpt = False) -> None:
    """List the bundled model catalogue and the supported families."""
    from nodeledger.model import catalogue, supported_families

    entries = [
        {"id": e["id"], "aliases": e.get("aliases", []), "source": e["source"]} for e in catalogue()
    ]
    if as_json:
        _print_json({"catalogue": entries, "families": supported_families()})
        return
    from rich.table import Table

    t = Table(title="Bundled model catalogue (architecture fields from public facts)")
    t.add_column("id")
    t.add_column("aliases")
    t.add_column("source")
    for e in entries:
        t.add_row(e["id"], ", ".join(e["aliases"]), e["source"])
    con = _console()
    con.print(t)
    con.print("Supported families (model_type): " + ", ".join(supported_families()))


@model_app.command("show")
def model_show(
    model: Annotated[
        str,
        typer.Argument(
            help="config.json path, checkpoint folder, catalogue name, or Hub id in the local HF cache."
        ),
    ],
    dtype: Annotated[
        str | None,
        typer.Option(
            "--dtype", help="Weight scheme to detail: bf16 fp16 fp32 fp8 int8 int4 nf4 mxfp4."
        ),
    ] = None,
    online: Annotated[
        bool, typer.Option("--online", help="Allow downloading config.json from the Hub.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Parameters (total, active, by part), weight bytes per dtype, KV cache bytes per token."""
    from nodeledger.model import load_model
    from nodeledger.report.model_summary import model_summary

    spec, src = load_model(model, online=online)
    summary = model_summary(spec, src, dtype=dtype)
    if as_json:
        _print_json(summary)
        return
    _render_model(summary)


def _render_model(s: dict[str, Any]) -> None:
    from rich.table import Table

    con = _console()
    arch = s["architecture"]
    con.print(
        f"[bold]{escape(s['model'])}[/bold]  family {escape(s['family'])}  (config: {escape(s['source'])})"
    )
    layers = ", ".join(f"{v} {k}" for k, v in arch["attention_layers"].items())
    line = (
        f"  {arch['num_layers']} layers ({layers}), hidden {arch['hidden_size']}, "
        f"{arch['num_attention_heads']} heads, vocab {arch['vocab_size']:,}, "
        f"embeddings {'tied' if arch['tied_embeddings'] else 'untied'}"
    )
    if arch["moe"]:
        m = arch["moe"]
        line += f"; MoE {m['num_experts']} experts, top-{m['top_k']}, {m['moe_layers']} MoE layers"
    con.print(line)
    p = s["params"]
    t = Table(title="Parameters (count; source: config.json, transformers module tree)")
    t.add_column("part")
    t.add_column("parameters", justify="right")
    t.add_column("share", justify="right")
    for part, n in p["by_part"].items():
        if n:
            t.add_row(part, f"{n:,}", f"{100 * n / p['total']:.1f} %")
    t.add_row("[bold]total[/bold]", f"[bold]{p['total']:,}[/bold]", "100 %")
    t.add_row("active per token", f"{p['active']:,}", f"{100 * p['active'] / p['total']:.1f} %")
    ane = p["active_non_embedding"]
    t.add_row("active, input embeddings excluded", f"{ane:,}", f"{100 * ane / p['total']:.1f} %")
    con.print(t)
    con.print(f"  {p['active_convention']}")
    w = Table(title="Weight bytes by scheme (computed per tensor; layout per scheme below)")
    w.add_column("scheme")
    w.add_column("bytes", justify="right")
    w.add_column("GiB", justify="right")
    for name, n in s["weight_bytes"].items():
        w.add_row(name, f"{n:,}", f"{n / 2**30:,.2f}")
    con.print(w)
    con.print("Layouts (what each scheme stores per tensor):")
    for name, text in s["weight_bytes_layouts"].items():
        con.print(f"  {name}: {text}")
    cfgw = s["weight_bytes_config"]
    con.print(
        f"As the config declares it: {cfgw['scheme']} = {cfgw['bytes']:,} B "
        f"({gib(cfgw['bytes'])}) — {cfgw['source']}"
    )
    if "weight_bytes_selected" in s:
        sel = s["weight_bytes_selected"]
        parts = ", ".join(f"{k} {gib(v)}" for k, v in sel["by_part"].items() if v)
        con.print(
            f"--dtype {sel['scheme']}: {sel['bytes']:,} B ({gib(sel['bytes'])}); by part: {parts}"
        )
    ck = s["checkpoint"]
    if ck:
        diff = ck["total_bytes"] - ck["config_derived_bytes"]
        con.print(
            f"Checkpoint on disk ({ck['source']}, {len(ck['files'])} files, {ck['tensor_count']} tensors): "
            f"{ck['total_bytes']:,} B ({gib(ck['total_bytes'])}); config-derived {ck['config_derived_bytes']:,} B; "
            f"difference {diff:+,} B"
        )
        con.print(
            "  by dtype: " + ", ".join(f"{k} {v:,} B" for k, v in ck["bytes_by_dtype"].items())
        )
    kv = s["kv"]
    con.print(
        f"KV cache ({kv['dtype']}): {kv['bytes_per_token']:,} B per token "
        f"({kv['bytes_per_token'] / 2**10:,.1f} KiB; fp8 cache {kv['bytes_per_token_fp8']:,} B)"
    )
    if kv["sliding_window"]:
        con.print(
            f"  beyond the {kv['sliding_window']:,}-token sliding window: "
            f"{kv['bytes_per_token_beyond_window']:,} B per token (full-attention layers only)"
        )
    if kv["linear_state_bytes_per_sequence"]:
        con.print(
            f"  linear-attention state: {kv['linear_state_bytes_per_sequence']:,} B per sequence "
            "(recurrent state fp32, conv state bf16), independent of context length"
        )
    con.print(f"  formula: {kv['source']}")
    for note in s["notes"]:
        con.print(f"note: {note}", markup=False)


# ---------------------------------------------------------------------------------------
# fit: the memory ledger of one job
# ---------------------------------------------------------------------------------------


@app.command("fit")
def fit_cmd(
    model: Annotated[
        str,
        typer.Argument(
            help="config.json path, checkpoint folder, catalogue name or cached Hub id."
        ),
    ],
    job: Annotated[
        str, typer.Option("--job", help="serve | train | lora | qlora | load")
    ] = "serve",
    machine: Annotated[
        str | None,
        typer.Option("--machine", help="Preset or profile file; default: reference machine."),
    ] = None,
    tp: Annotated[
        int | None, typer.Option("--tp", help="Tensor-parallel cards per replica.")
    ] = None,
    pp: Annotated[int | None, typer.Option("--pp", help="Pipeline stages per replica.")] = None,
    dp: Annotated[int | None, typer.Option("--dp", help="Data-parallel ranks (training).")] = None,
    replicas: Annotated[
        int | None, typer.Option("--replicas", help="Serving replicas (e.g. 8 x TP1).")
    ] = None,
    dtype: Annotated[
        str | None,
        typer.Option(
            "--dtype", help="Weight scheme for serve/load: bf16 fp16 fp32 fp8 int8 int4 nf4 mxfp4."
        ),
    ] = None,
    kv_dtype: Annotated[
        str | None, typer.Option("--kv-dtype", help="KV cache dtype: bf16 fp16 fp32 fp8.")
    ] = None,
    context: Annotated[
        int | None, typer.Option("--context", help="Tokens per sequence (prompt + generated).")
    ] = None,
    concurrency: Annotated[
        str | None, typer.Option("--concurrency", help="Concurrent sequences, or 'max'.")
    ] = None,
    new_tokens: Annotated[
        int | None,
        typer.Option("--new-tokens", help="hf engine: tokens generated after the prompt."),
    ] = None,
    engine: Annotated[str | None, typer.Option("--engine", help="hf | vllm")] = None,
    gpu_memory_utilization: Annotated[
        float | None,
        typer.Option("--gpu-memory-utilization", help="vLLM budget fraction (default 0.9)."),
    ] = None,
    max_num_batched_tokens: Annotated[
        int | None,
        typer.Option("--max-num-batched-tokens", help="vLLM tokens per step (default 8192)."),
    ] = None,
    micro_batch: Annotated[
        int | None, typer.Option("--micro-batch", help="Sequences per micro-batch per rank.")
    ] = None,
    seq: Annotated[int | None, typer.Option("--seq", help="Training sequence length.")] = None,
    grad_accum: Annotated[
        int | None, typer.Option("--grad-accum", help="Gradient accumulation steps.")
    ] = None,
    precision: Annotated[
        str | None,
        typer.Option("--precision", help="bf16 (pure) | mixed (fp32 master + bf16 autocast)."),
    ] = None,
    optimizer: Annotated[
        str | None, typer.Option("--optimizer", help="adamw | adamw8bit | sgd | adafactor")
    ] = None,
    optimizer_impl: Annotated[
        str | None, typer.Option("--optimizer-impl", help="foreach | fused | forloop")
    ] = None,
    attention: Annotated[
        str | None,
        typer.Option("--attention", help="sdpa (flash path) | eager | math (SDPA fallback)"),
    ] = None,
    checkpointing: Annotated[
        str | None, typer.Option("--checkpointing", help="none | selective | full")
    ] = None,
    shard: Annotated[
        str | None,
        typer.Option(
            "--shard", help="none | zero1 | zero2 | zero3 | fsdp | fsdp_grad_op | fsdp_hybrid"
        ),
    ] = None,
    offload: Annotated[
        str | None, typer.Option("--offload", help="none | optimizer | params")
    ] = None,
    workers: Annotated[
        int | None, typer.Option("--workers", help="DataLoader workers per rank.")
    ] = None,
    prefetch: Annotated[
        int | None, typer.Option("--prefetch", help="DataLoader prefetch_factor.")
    ] = None,
    rank: Annotated[int | None, typer.Option("--rank", help="LoRA rank.")] = None,
    lora_targets: Annotated[
        str | None,
        typer.Option("--lora-targets", help="Comma-separated module names (default q,k,v,o_proj)."),
    ] = None,
    load_format: Annotated[
        str | None, typer.Option("--format", help="load: safetensors | bin")
    ] = None,
    load_strategy: Annotated[
        str | None, typer.Option("--load-strategy", help="load: every_rank | rank0 | meta")
    ] = None,
    ranks: Annotated[
        int | None, typer.Option("--ranks", help="load: processes on this host that load.")
    ] = None,
    search: Annotated[
        bool, typer.Option("--search", help="Also search the layouts that fit; print the best few.")
    ] = False,
    lifeboat: Annotated[
        int, typer.Option("--lifeboat", help="Cards --search keeps free for triage (default 1).")
    ] = 1,
    online: Annotated[
        bool, typer.Option("--online", help="Allow downloading config.json from the Hub.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Account every byte of one job on each card and in host RAM; say whether it fits."""
    opts = {
        k: v
        for k, v in locals().items()
        if k not in ("model", "job", "machine", "online", "as_json", "search", "lifeboat")
    }
    if lifeboat != 1 and not search:
        raise NodeledgerError("--lifeboat applies to --search")
    from nodeledger.ledger.jobs import build_job
    from nodeledger.machine import resolve_machine
    from nodeledger.model import load_model
    from nodeledger.verdict.fit import fit

    job_obj = build_job(job, opts)
    profile = resolve_machine(machine)
    spec, src = load_model(model, online=online)
    result = fit(spec, job_obj, profile)
    data = _fit_json(result, src, profile, job)
    if search:
        data["search"] = _search(spec, job_obj, profile, lifeboat)
    if as_json:
        _print_json(data)
        return
    _render_fit(data)


def _search(spec, job_obj, profile, lifeboat: int) -> dict[str, Any]:
    from dataclasses import asdict

    from nodeledger.ledger.jobs import JobError, ServeJob, TrainJob
    from nodeledger.verdict.search import search_serve, search_train

    if lifeboat < 0 or lifeboat >= len(profile.accelerators):
        raise JobError(
            f"--lifeboat {lifeboat} must leave at least one of {len(profile.accelerators)} cards"
        )
    if isinstance(job_obj, TrainJob):
        found, tried = search_train(spec, job_obj, profile, lifeboat=lifeboat)
    elif isinstance(job_obj, ServeJob):
        found, tried = search_serve(spec, job_obj, profile, lifeboat=lifeboat)
    else:
        raise JobError("--search applies to serve and train/lora/qlora jobs")
    return {"tried": tried, "lifeboat": lifeboat, "best": [asdict(x) for x in found]}


def _fit_json(result, src, profile, job_kind: str) -> dict[str, Any]:
    from dataclasses import asdict

    lg, v = result.ledger, result.verdict
    return {
        "model": src.catalogue_entry["id"] if src.catalogue_entry else src.where,
        "machine": profile.name,
        "job": job_kind,
        "cards": [asdict(c) for c in lg.cards],
        "host": asdict(lg.host),
        "verdict": asdict(v),
        "job_options": result.job_options,
        "extras": lg.extras,
        "notes": lg.notes,
        "units": "bytes",
    }


EXTRA_UNITS = {
    "kv_pool_bytes": (
        "B",
        "vLLM budget (gpu_memory_utilization x card memory) minus weights, activation peak and non-torch",
    ),
    "kv_pool_tokens": ("tokens", "KV pool / KV bytes per token per card"),
    "kv_bytes_per_token_per_card": (
        "B per token",
        "kv_bytes_per_sequence(block) / block / KV split",
    ),
    "max_concurrency": (
        "sequences",
        "KV pool / (context rounded up to whole blocks), capped by max_num_seqs",
    ),
    "max_context_at_concurrency": ("tokens per sequence", "KV pool tokens / concurrency"),
    "kv_shortfall": ("", "vLLM KV pool"),
}


def _render_fit(d: dict[str, Any]) -> None:
    from rich.table import Table

    con = _console()
    v = d["verdict"]
    colour = {"fits": "green", "tight": "yellow", "cannot": "red"}.get(v["tier"], "white")
    con.print(
        f"[bold]{escape(d['model'])}[/bold] --job {d['job']} on {escape(d['machine'])}: "
        f"[bold {colour}]{v['tier'].upper()}[/bold {colour}] — binding: {v['binding']}; {escape(v['reason'])}"
    )
    basis = ", ".join(f"{k}={v}" for k, v in d.get("job_options", {}).items())
    if basis:
        con.print(f"  job: {basis}")
    for c in d["cards"]:
        t = Table(title=f"Per card (cards {_ranges(c['cards'])}; peak in: {c['peak_phase']})")
        t.add_column("item")
        t.add_column("GiB", justify="right")
        t.add_column("in torch peak")
        t.add_column("formula / source")
        for it in c["items"]:
            t.add_row(
                it["name"],
                f"{it['bytes'] / 2**30:,.2f}",
                "yes" if it["torch"] else "no",
                it["source"],
            )
        con.print(t)
        phases = ", ".join(f"{k} {val / 2**30:,.2f} GiB" for k, val in c["phases"].items())
        con.print(
            f"  torch_peak_bytes {c['torch_peak_bytes']:,} B ({gib(c['torch_peak_bytes'])}; phases: {phases})"
        )
        con.print(
            f"  total_bytes {c['total_bytes']:,} B ({gib(c['total_bytes'])}) of {gib(c['capacity_bytes'])} per card"
        )
    h = d["host"]
    t = Table(title="Host RAM")
    t.add_column("item")
    t.add_column("GiB", justify="right")
    t.add_column("formula / source")
    for it in h["items"]:
        t.add_row(it["name"], f"{it['bytes'] / 2**30:,.2f}", it["source"])
    con.print(t)
    con.print(
        f"  host peak {gib(h['peak_bytes'])} held by the job's processes"
        + (
            f" + {gib(h['reclaimable_bytes'])} evictable page cache"
            if h["reclaimable_bytes"]
            else ""
        )
        + f", of {gib(h['capacity_bytes'])}"
    )
    for r in v["resources"]:
        pct = "unknown" if r["headroom_pct"] is None else f"{r['headroom_pct']} %"
        head = (
            "unknown" if r["headroom_bytes"] is None else f"{r['headroom_bytes'] / 2**30:,.2f} GiB"
        )
        con.print(f"  {r['resource']}: {r['tier']}, headroom {head} ({pct})")
    for k, val in d["extras"].items():
        if k == "largest":
            mc, mx = val["max_concurrency_at_context"], val["max_context_at_concurrency"]
            con.print(
                f"  largest that fits ({val['criterion']}): {_num(mc)} sequences of "
                f"{val['context']:,} tokens; at {val['concurrency']:,} sequences, up to {_num(mx)} "
                "tokens each"
                + (f" (the model's max_position_embeddings: {val['max_position_embeddings']:,})"
                   if val.get("max_position_embeddings") else "")
            )  # fmt: skip
        elif k in EXTRA_UNITS and val is not None:
            unit, src = EXTRA_UNITS[k]
            con.print(f"  {k.replace('_', ' ')}: {_num(val, unit)} — {src}")
        elif val is not None:
            con.print(f"  {k}: {val}")
    for s in v["suggestions"]:
        con.print(f"  would fit: {s['change']} — {s['reason']}")
    for n in d["notes"]:
        con.print(f"  note: {n}", markup=False)
    if "search" in d:
        sr = d["search"]
        st = Table(
            title=f"Layouts that fit ({sr['tried']:,} tried, {sr['lifeboat']} lifeboat card(s) kept free)"
        )
        for col in ("options", "tier", "per card", "host", "what you get"):
            st.add_column(col)
        for x in sr["best"]:
            st.add_row(
                x["options"],
                x["tier"],
                gib(x["peak_card_bytes"]),
                gib(x["host_bytes"]),
                x["detail"],
            )
        con.print(st)
        if not sr["best"]:
            con.print(
                f"  no layout fits on this machine with {sr['lifeboat']} lifeboat card(s) kept free"
                + (
                    " (try --lifeboat 0 to see what the whole box could do)"
                    if sr["lifeboat"]
                    else ""
                )
            )


# ---------------------------------------------------------------------------------------
# report (the main job; the capacity verdicts arrive with the ledger and report issues)
# ---------------------------------------------------------------------------------------


FORMATS = ("terminal", "md", "json", "html")


def _report_machine(machine: str | None) -> tuple[Any, list[str]]:
    """--machine as given; none: probe this host, or the reference machine without cards."""
    from nodeledger.machine import resolve_machine
    from nodeledger.machine.io import DEFAULT_PRESET
    from nodeledger.machine.probe import probe_machine

    if machine is not None:
        return resolve_machine(machine), [f"machine: {machine}"]
    probed = probe_machine()
    if probed.accelerators:
        return probed, [f"machine: live probe of this host ({len(probed.accelerators)} cards)"]
    return resolve_machine(None), [
        f"No accelerator found on this host (live probe): reporting on the bundled reference "
        f"machine {DEFAULT_PRESET} (MISSION.md). Use --machine PRESET|FILE|BUNDLE for another."
    ]


def _catalogue(workloads: str | None):
    from nodeledger.verdict.catalogue import load_catalogue, load_specs

    ws, src = load_catalogue(workloads)
    return ws, load_specs(ws), src


def _pick_format(fmt: str | None, out: Path | None) -> str:
    if fmt is None:
        suffix = out.suffix.lower().lstrip(".") if out else ""
        known = {"md": "md", "markdown": "md", "json": "json", "html": "html", "htm": "html",
                 "txt": "terminal", "": "terminal"}  # fmt: skip
        if suffix not in known:
            raise NodeledgerError(
                f"-o {out}: no format for the suffix .{suffix}; pass --format "
                "terminal|md|json|html (or use .txt .md .json .html)"
            )
        fmt = known[suffix]
    if fmt not in FORMATS:
        raise NodeledgerError(f"--format {fmt!r} is not one of {', '.join(FORMATS)}")
    return fmt


def _write(text: str, out: Path | None) -> None:
    if out is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise NodeledgerError(f"-o {out}: cannot write ({exc.strerror or exc})") from None
    sys.stderr.write(f"wrote {out} ({len(text.encode()):,} bytes)\n")


FormatOpt = Annotated[
    str | None,
    typer.Option("--format", "-f", help="terminal | md | json | html (default: from -o's suffix)."),
]
OutOpt = Annotated[Path | None, typer.Option("-o", "--output", help="Write to this file.")]
WorkloadsOpt = Annotated[
    str | None,
    typer.Option(
        "--workloads",
        help="Workload catalogue (TOML); '+FILE' adds FILE to the bundled default catalogue.",
    ),
]


@app.command("report")
def report(
    machine: Annotated[
        str | None,
        typer.Option(
            "--machine",
            help="Preset, profile file or bundle (.tar.gz); default: probe this host, or the "
            "bundled reference machine when it has no accelerator.",
        ),
    ] = None,
    workloads: WorkloadsOpt = None,
    fmt: FormatOpt = None,
    output: OutOpt = None,
    lifeboat: Annotated[
        int, typer.Option("--lifeboat", help="Cards kept free for triage (default 1).")
    ] = 1,
    as_json: JsonOpt = False,
) -> None:
    """Capacity report: can / tight / cannot for each workload, what binds, serving capacity
    with the lifeboat card, big loads at once, links and network, and the scale-out verdict."""
    from nodeledger.report import render
    from nodeledger.report.capacity import capacity_report

    fmt = "json" if as_json else _pick_format(fmt, output)
    profile, intro = _report_machine(machine)
    ws, specs, src = _catalogue(workloads)
    intro.append(f"workloads: {src} ({len(ws)})")
    rep = capacity_report(profile, ws, specs, lifeboat)
    if fmt == "json":
        _write(json.dumps({"intro": intro, **rep}, indent=2, default=str), output)
    elif fmt == "md":
        _write(render.markdown(rep, intro), output)
    elif fmt == "html":
        _write(render.html(rep, profile, intro), output)
    else:
        _render_report(rep, intro, output)


TIER_STYLE = {"can": "green", "tight": "dark_orange", "cannot": "red", "unknown": "grey50"}


def _terminal_out(output: Path | None):
    """(file handle or None, console) for the terminal format: -o FILE gets plain text."""
    if output is None:
        return None, _console()

    try:
        fh = output.open("w", encoding="utf-8")
    except OSError as exc:
        raise NodeledgerError(f"-o {output}: cannot write ({exc.strerror or exc})") from None
    return fh, _console(file=fh, width=140, no_color=True)


def _render_report(rep: dict, intro: list[str], output: Path | None) -> None:
    from rich.table import Table

    from nodeledger.report import render

    fh, con = _terminal_out(output)
    try:
        for line in intro:
            con.print(line, markup=False, highlight=False)
        con.print(render.headline(rep), markup=False)
        t = Table(title="Workloads", show_lines=False)
        for col in (
            "workload",
            "tier",
            "binds",
            "reason (numbers; `nodeledger fit` shows every item)",
            "MISSION.md",
        ):
            t.add_column(col)
        for r in rep["workloads"]:
            tier = r["tier_name"]
            t.add_row(
                escape(r["id"]),
                f"[{TIER_STYLE[tier]}]{tier}[/]",
                r["binding"] or "",
                r["reason"] + (f"\n{r['lifeboat']}" if r.get("lifeboat") else ""),
                render._expect(r),
            )
        con.print(t)
        for r in rep["workloads"]:
            if r.get("claim") and r.get("model_state"):
                con.print(
                    f"{r['id']}: claim: {r['claim']}.\n  ledger: {render.state_line(r['model_state'])}",
                    markup=False,
                )
        b = Table(title="Bottleneck ranking (workloads each resource binds)")
        for col in ("resource", "cannot", "tight", "worst used/capacity", "unknown"):
            b.add_column(col)
        for x in rep["bottlenecks"]:
            ratio = "" if x["worst_ratio"] is None else f"{x['worst_ratio']:.0%}"
            b.add_row(x["resource"], str(x["cannot"]), str(x["tight"]), ratio, str(x["unknown"]))
        con.print(b)
        s = rep["serving"]
        con.print(f"Serving capacity (lifeboat: {s['lifeboat']} of {s['cards']} cards kept free):")
        for line in render.serving_lines(rep):
            con.print(f"  {line}", markup=False)
        con.print("Host RAM, big loads at once:")
        for h in rep["host_loads"]:
            con.print(f"  {h['model']}: {h['max_concurrent']} at once (hard limit), "
                      f"{h['max_without_tight']} without entering tight; {h['reason']}", markup=False)  # fmt: skip
        con.print("Links and network:")
        for lk in rep["links"]:
            con.print(f"  {lk['id']} ({lk['basis']}): {lk['reason']}", markup=False)
        so = rep["scale_out"]
        con.print(f"Scale-out verdict: {so['verdict']}", markup=False)
        for i, c in enumerate(so["criteria"], 1):
            con.print(
                f"  {i}. {c['criterion']}: {'holds' if c['holds'] else 'does not hold'}",
                markup=False,
            )
            for e in c["evidence"]:
                con.print(f"     - {e}", markup=False)
    finally:
        if fh is not None:
            fh.close()
            sys.stderr.write(f"wrote {output}\n")


@app.command("compare")
def compare_cmd(
    machines: Annotated[
        list[str], typer.Argument(help="Two or more presets, profile files or bundles.")
    ],
    workloads: WorkloadsOpt = None,
    price: Annotated[
        list[str] | None,
        typer.Option("--price", help="MACHINE=AMOUNT (any currency), repeatable."),
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option("--format", "-f", help="terminal | md | json (default: from -o's suffix)."),
    ] = None,
    output: OutOpt = None,
    lifeboat: Annotated[
        int, typer.Option("--lifeboat", help="Cards kept free for triage (default 1).")
    ] = 1,
    as_json: JsonOpt = False,
) -> None:
    """Which machine runs which workloads in which tier, serving capacity, cost per workload."""

    from nodeledger.machine import resolve_machine
    from nodeledger.report.compare import compare, parse_prices

    if len(machines) < 2:
        raise NodeledgerError("compare needs at least two machines")
    if len(set(machines)) != len(machines):
        raise NodeledgerError(f"compare: a machine is named twice: {machines}")
    fmt = "json" if as_json else _pick_format(fmt, output)
    if fmt == "html":
        raise NodeledgerError(
            "compare writes terminal, md or json; use `report --format html` per machine"
        )
    profiles = [(m, resolve_machine(m)) for m in machines]
    prices = parse_prices(price or [], machines)
    ws, specs, src = _catalogue(workloads)
    res = compare(profiles, ws, specs, prices, lifeboat)
    if fmt == "json":
        _write(json.dumps({"workloads_source": src, **res}, indent=2, default=str), output)
        return
    lines = _compare_md(res, src)
    if fmt == "md":
        _write("\n".join(lines), output)
        return
    fh, con = _terminal_out(output)
    try:
        _render_compare(con, res, src, machines)
    finally:
        if fh is not None:
            fh.close()
            sys.stderr.write(f"wrote {output}\n")


def _binding_note(cell: dict) -> str:
    """What binds a compare cell that is not "can", as " (resource)" after its tier."""
    return f" ({cell['binding']})" if cell["tier"] != "can" and cell["binding"] else ""


def _render_compare(con, res: dict, src: str, machines: list[str]) -> None:
    from rich.table import Table

    t = Table(title=f"Workloads ({src})")
    t.add_column("workload")
    for m in machines:
        t.add_column(m)
    for row in res["workloads"]:
        cells = []
        for m in machines:
            c = row["machines"][m]
            cells.append(f"[{TIER_STYLE[c['tier']]}]{c['tier']}[/]{_binding_note(c)}")
        t.add_row(row["id"], *cells)
    con.print(t)
    s = Table(title="Per machine")
    for col in (
        "machine",
        "cards",
        "card memory",
        "can / tight / cannot / unknown",
        "first bottleneck",
        "price",
        "price per runnable workload",
    ):
        s.add_column(col)
    for m in res["machines"]:
        c = m["counts"]
        s.add_row(m["machine"], str(m["cards"]), _num(m["card_memory_bytes"] and m["card_memory_bytes"] / 2**30, "GiB"),
                  f"{c['can']} / {c['tight']} / {c['cannot']} / {c['unknown']}", m["bottleneck"] or "none",
                  _num(m["price"]), _num(m["price_per_runnable_workload"]))  # fmt: skip
    con.print(s)
    sv = Table(title="Serving capacity on the business cards (sequences at the workload's context)")
    sv.add_column("workload")
    for m in machines:
        sv.add_column(m)
    ids = [w for w in res["machines"][0]["serving_sequences"]]
    for wid in ids:
        sv.add_row(wid, *[_num(m["serving_sequences"].get(wid)) + (
            f" ({m['price_per_sequence'][wid]:,.0f}/seq)" if m["price_per_sequence"].get(wid) else "")
            for m in res["machines"]])  # fmt: skip
    con.print(sv)
    for m in res["machines"]:
        con.print(f"{m['machine']}: {m['scale_out']}", markup=False)


def _compare_md(res: dict, src: str) -> list[str]:
    names = [m["machine"] for m in res["machines"]]
    L = [f"# Machine comparison ({src})", "", "| workload | " + " | ".join(names) + " |",
         "|---|" + "---|" * len(names)]  # fmt: skip
    for row in res["workloads"]:
        cells = [row["machines"][n]["tier"] + _binding_note(row["machines"][n]) for n in names]
        L.append(f"| {row['id']} | " + " | ".join(cells) + " |")
    L += ["", "| machine | cards | can / tight / cannot / unknown | first bottleneck | price | price per runnable workload |", "|---|---|---|---|---|---|"]  # fmt: skip
    for m in res["machines"]:
        c = m["counts"]
        L.append(f"| {m['machine']} | {m['cards']} | {c['can']} / {c['tight']} / {c['cannot']} / {c['unknown']} | "
                 f"{m['bottleneck'] or 'none'} | {_num(m['price'])} | {_num(m['price_per_runnable_workload'])} |")  # fmt: skip
    L += ["", "Serving capacity (sequences on the business cards):", ""]
    for m in res["machines"]:
        L.append(
            f"- {m['machine']}: "
            + ", ".join(f"{k} {_num(v)}" for k, v in m["serving_sequences"].items())
        )
    L.append("")
    return L


# commands whose rendering lives in their own CLI-layer modules (cli_*.py): they print and map
# errors exactly as this file does, and are registered here
def _register_more() -> None:
    from nodeledger import cli_bench, cli_doctor, cli_oom, cli_place, cli_run, cli_watch

    for mod in (cli_bench, cli_doctor, cli_oom, cli_place, cli_run, cli_watch):
        mod.register(app)


_register_more()


def main(argv: list[str] | None = None) -> int:
    try:
        app(args=argv, prog_name="nodeledger", standalone_mode=True)
    except NodeledgerError as exc:
        sys.stderr.write(f"nodeledger: error: {exc}\n")
        return exc.exit_code
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except KeyboardInterrupt:
        sys.stderr.write("nodeledger: interrupted\n")
        return 130
    except Exception as exc:  # a bug, not bad input: one line, and the traceback on request
        if os.environ.get("NODELEDGER_DEBUG"):
            raise
        sys.stderr.write(
            f"nodeledger: internal error: {type(exc).__name__}: {exc} "
            "(a bug; set NODELEDGER_DEBUG=1 for the traceback and please report it)\n"
        )
        return 70
    return 0
