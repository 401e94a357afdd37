"""CLI layer of `nodeledger bench` (rendering only; the work is in nodeledger.bench).

Exit codes: 0 (it reports; figures judged low / bad do not change the exit code, and card parts
without torch or cards are "unavailable", not failures); 2 bad input (one line on stderr).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nodeledger.bench.judge import figure_text
from nodeledger.cli.common import (
    card_indices,
    console,
    num,
    pci_card_order,
    print_json,
    progress_lines,
)
from nodeledger.cli.options import json_option

VERDICT_STYLE = {"ok": "green", "low": "dark_orange", "bad": "red", "unknown": "grey50",
                 "unavailable": "grey50"}  # fmt: skip


@click.command("bench")
@click.option(
    "--cards",
    "cards",
    help="Card indices (nvidia-smi order), e.g. 0,1,2,3 or 0-3; default: every card torch sees.",
)
@click.option(
    "--quick",
    "quick",
    is_flag=True,
    help="Bounded run (disk 128 MiB; copies 64 MiB x 5; collectives 256 MiB x 10): <= 60 s on an 8-card box.",
)
@click.option(
    "--dataset",
    "dataset",
    type=click.Path(path_type=Path),
    help="Dataset folder to read (default: the working directory).",
)
@click.option(
    "--cache",
    "cache",
    type=click.Path(path_type=Path),
    help="Model cache folder (default: HF_HUB_CACHE / HF_HOME/hub / ~/.cache/huggingface/hub).",
)
@click.option(
    "--compare-nccl",
    "compare_nccl",
    help="nccl-tests output (all_reduce_perf / all_gather_perf) to put beside nodeledger's bus bandwidth.",
)
@click.option(
    "--nccl-op",
    "nccl_op",
    help="The collective of --compare-nccl when its file name does not say (all_reduce, all_gather, ...).",
)
@click.option("--no-cards", "no_cards", is_flag=True, help="Disk only: skip the card parts.")
@click.option(
    "--save-profile",
    "save_to",
    metavar="FILE",
    help="Also write this host's probed machine profile with the measured figures put in "
    "(host<->card copy GB/s per card, peer GB/s per card pair, collective algbw / busbw, "
    "mount sequential read GB/s and QD1 4 KiB latency, NIC link rate), each with source "
    '"measured by bench, YYYY-MM-DD"; TOML, or JSON for a .json name. `--machine FILE` then '
    "uses them.",
)
@click.option(
    "--kernels",
    "kernels",
    is_flag=True,
    help="Also measure each card kind's kernel table (GEMM over M per model shape in bf16 / fp8, causal and decode attention, device copies, eager launch time) through PyTorch: the table the speed model reads; --save-profile keeps it (and, where the card has no datasheet, its measured GEMM and copy plateaus as its peak and bandwidth). About a minute per card kind with --quick.",
)
@json_option
def bench(
    cards=None,
    quick=False,
    dataset=None,
    cache=None,
    compare_nccl=None,
    nccl_op=None,
    no_cards=False,
    save_to=None,
    kernels=False,
    as_json=False,
) -> None:
    """Measure the disks (no torch needed) and, with torch, the cards: host<->card copies (pinned /
    pageable, NUMA-local / remote), card<->card copies, all-reduce / all-gather bus bandwidth,
    allocatable memory.  Each figure judged ok / low / bad against its class and the topology."""
    pci_card_order()
    from nodeledger.bench.usecase import measure

    run = measure(cards=card_indices(cards), quick=quick, dataset=dataset, cache=cache,
                  compare_nccl=compare_nccl, nccl_op=nccl_op, no_cards=no_cards, save_to=save_to,
                  kernels=kernels, progress=progress_lines())  # fmt: skip
    if as_json:
        print_json(run.to_json())
    else:
        render_bench(run.report)
    line = run.save_profile()  # the report is out first: a failed write loses no measurement
    if line is not None and as_json:
        sys.stderr.write(f"nodeledger: {line}\n")
    elif line is not None:
        console().print(line, markup=False, highlight=False)


# ---------------------------------------------------------------------------------------
# bench rendering
# ---------------------------------------------------------------------------------------


def _sources(figs: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in figs:
        if f["source"] and f["source"] not in out:
            out[f["source"]] = len(out) + 1
    return out


def render_bench(rep: dict, con=None) -> None:
    # long: a renderer: the bench report top to bottom (disk, cards, kernels, figures, sources)
    from rich.table import Table

    con = con or console()
    con.print(f"bench on {rep['machine']} ({'quick' if rep['quick'] else 'full'}; {rep['seconds']:g} s)",
              markup=False, highlight=False)  # fmt: skip
    con.print(
        f"sizes: disk {rep['sizes']['disk']}; cards {rep['sizes']['cards']}",
        markup=False,
        highlight=False,
    )
    for sec in rep["disk"]:
        line = f"{sec['label']}: {sec['tested_in']}"
        if sec["how"]:
            line += f" ({sec['how']})"
        line += (f" — mount {sec['mount'] or 'unknown'} ({sec['filesystem'] or 'unknown fs'}), "
                 f"kind {sec['kind']} [{sec['kind_source']}]")  # fmt: skip
        con.print(line, markup=False, highlight=False)
        if sec["status"] == "unavailable":
            con.print(f"  unavailable: {sec['reason']}", markup=False, highlight=False)
        elif sec.get("shared_with"):
            con.print(
                f"  same filesystem as the {sec['shared_with']}: measured once",
                markup=False,
                highlight=False,
            )
        else:
            con.print(f"  page cache {sec['page_cache']}; test file written at {sec['write_mbps']:,.0f} MB/s (not judged)",
                      markup=False, highlight=False)  # fmt: skip
    c = rep["cards"] or {}
    con.print(f"cards: {c.get('backend') or 'no backend'}"
              + (f" — {c['reason']}" if c.get("status") == "unavailable" else ""), markup=False, highlight=False)  # fmt: skip
    for product, k in (c.get("kernels") or {}).items():
        if product == "_skipped":
            for line in k:
                con.print(f"kernels: skipped {line}", markup=False, highlight=False)
            continue
        kinds = {}
        for r in k["rows"]:
            kinds[r["part"]] = kinds.get(r["part"], 0) + 1
        launch = next((r["s"] for r in k["rows"] if r["part"] == "launch"), None)
        con.print(
            f"kernels on card {k['card']} ({product}, {k['seconds']:g} s): "
            + ", ".join(f"{n} {p}" for p, n in kinds.items() if p != "meta")
            + f"; best bf16 GEMM {num(k.get('bf16_tflops'), 'TFLOP/s')}, device copy "
            f"{num(k.get('memory_gbps'), 'GB/s read + write')}"
            + ("" if launch is None else f", eager launch {launch * 1e6:,.1f} us")
            + " (the speed model's table with --save-profile)",
            markup=False, highlight=False,
        )  # fmt: skip
        for n in k.get("notes", []):
            con.print(f"  note: {n}", markup=False, highlight=False)
    figs = rep["figures"]
    peer = [f for f in figs if f["part"] == "peer" and f["verdict"] != "unavailable"]
    shown = [
        f
        for f in figs
        if f["verdict"] != "unavailable"
        and (f["part"] != "peer" or f["verdict"] != "ok")
        and not f["evidence"].startswith("one measurement for both")
    ]  # printed once
    src = _sources(shown + peer)
    t = Table(title="Figures")
    for col in ("part", "subject", "metric", "value", "verdict", "expected"):
        t.add_column(col, overflow="fold")
    for f in shown:
        st = VERDICT_STYLE[f["verdict"]]
        exp = f["expected"] + (f" [{src[f['source']]}]" if f["source"] else "")
        t.add_row(
            f["part"], f["subject"], f["metric"], figure_text(f), f"[{st}]{f['verdict']}[/]", exp
        )
    con.print(t)
    if peer:
        render_peer(con, rep, peer)
    for f in figs:
        if f["verdict"] in ("low", "bad", "unknown") and f["evidence"]:
            con.print(
                f"{f['verdict']}: {f['subject']} {f['metric']}: {f['evidence']}",
                markup=False,
                highlight=False,
            )
    for f in figs:
        if f["verdict"] == "unavailable":
            con.print(
                f"unavailable: {f['subject']} — {f['metric']}: {f['evidence']}",
                markup=False,
                highlight=False,
            )
    if src:
        con.print("sources:")
        for text, n in src.items():
            con.print(f"  [{n}] {text}", markup=False, highlight=False)
    if rep.get("nccl_tests"):
        n = rep["nccl_tests"]
        con.print(f"nccl-tests {n['source']}: {n['collective'] or 'unknown collective'} ({n['collective_from']}), "
                  f"{n['n']} ranks on {len(n['hosts'])} host(s), {n['rows']} rows; peak busbw "
                  f"{n['peak']['busbw_gbps']} GB/s at {n['peak']['size_bytes']:,} B; avg "
                  f"{'unknown' if n['avg_busbw_gbps'] is None else str(n['avg_busbw_gbps']) + ' GB/s'}",
                  markup=False, highlight=False)  # fmt: skip
    cnt = rep["counts"]
    repeats = sum(
        1
        for f in figs
        if f["verdict"] != "unavailable" and f["evidence"].startswith("one measurement for both")
    )
    con.print(", ".join(f"{k} {v}" for k, v in cnt.items())
              + (f" (figures; {repeats} of them repeat a measurement shown once above)" if repeats else " (figures)"),
              markup=False, highlight=False)  # fmt: skip


def render_peer(con, rep: dict, peer: list[dict]) -> None:
    from rich.table import Table

    rows = (rep["cards"] or {}).get("peer") or []
    cards = sorted({r["src"] for r in rows} | {r["dst"] for r in rows})
    verdict = {f["subject"]: f["verdict"] for f in peer}
    val = {(r["src"], r["dst"]): r["gbps"] for r in rows}
    t = Table(title="Card -> card copies (GB/s; row = source)")
    t.add_column("src \\ dst")
    for c in cards:
        t.add_column(str(c), justify="right")
    for a in cards:
        cells = []
        for b in cards:
            if a == b:
                cells.append("—")
                continue
            v = verdict.get(f"card {a} -> {b}", "unknown")
            cells.append(f"[{VERDICT_STYLE[v]}]{val.get((a, b), 0):,.1f}[/]")
        t.add_row(str(a), *cells)
    con.print(t)
