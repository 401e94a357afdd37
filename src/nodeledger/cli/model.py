"""`nodeledger model list|show`: what a job runs."""

from __future__ import annotations

from typing import Any

import click

from nodeledger.cli.common import (
    console,
    escape,
    gib,
    print_json,
)
from nodeledger.cli.options import json_option, online_option
from nodeledger.units import gib_num


@click.group(
    "model", help="What a job runs: model specs from HF config.json.", no_args_is_help=True
)
def model() -> None:
    pass


@model.command("list")
@json_option
def model_list(as_json=False) -> None:
    """List the bundled model catalogue and the supported families."""
    from nodeledger.report.machines import model_catalogue

    answer = model_catalogue()
    entries = answer["catalogue"]
    if as_json:
        print_json(answer)
        return
    from rich.table import Table

    t = Table(title="Bundled model catalogue (architecture fields from public facts)")
    t.add_column("id")
    t.add_column("aliases")
    t.add_column("source")
    for e in entries:
        t.add_row(e["id"], ", ".join(e["aliases"]), e["source"])
    con = console()
    con.print(t)
    con.print("Supported families (model_type): " + ", ".join(answer["families"]))


@model.command("show")
@click.argument(
    "model",
    help="config.json path, checkpoint folder, catalogue name, or Hub id in the local HF cache.",
)
@click.option(
    "--dtype", "dtype", help="Weight scheme to detail: bf16 fp16 fp32 fp8 int8 int4 nf4 mxfp4."
)
@online_option
@json_option
def model_show(model, dtype=None, online=False, as_json=False) -> None:
    """Parameters (total, active, by part), weight bytes per dtype, KV cache bytes per token."""
    from nodeledger.report.machines import describe_model

    summary = describe_model(model, dtype=dtype, online=online)
    if as_json:
        print_json(summary)
        return
    _render_model(summary)


def _render_model(s: dict[str, Any]) -> None:
    # long: a renderer: the model summary top to bottom (architecture, params, weights, KV)
    from rich.table import Table

    con = console()
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
        w.add_row(name, f"{n:,}", f"{gib_num(n, 2)}")
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
