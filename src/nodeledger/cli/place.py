"""CLI layer of `nodeledger place` (rendering only; the work is in nodeledger.placement)."""

from __future__ import annotations

from pathlib import Path

import click

from nodeledger.cli.common import (
    console,
    escape,
    print_json,
)
from nodeledger.cli.options import json_option
from nodeledger.units import gib_num


@click.command("place")
@click.argument(
    "plan_file",
    type=click.Path(path_type=Path),
    help="Plan (TOML): workloads as in the report's catalogue, with replicas, priority and command.",
)
@click.option(
    "--machine",
    "machine",
    help="Preset, profile file or bundle; default: probe this host, or the reference machine when it has no accelerator.",
)
@click.option(
    "--lifeboat",
    "lifeboat",
    type=int,
    default=None,
    help="Cards kept free for triage [default: 1; 0 on a one-card machine, said once]; 0 disables, with a warning.",
)
@click.option(
    "--share",
    "share",
    is_flag=True,
    help="Let TP1 replicas share a card when the sum fits (MPS / MIG).",
)
@click.option(
    "--emit", "emit", help="slurm (gres.conf + sbatch per workload) | k8s (a Pod per replica)."
)
@click.option(
    "-o",
    "--output",
    "output",
    type=click.Path(path_type=Path),
    help="Folder for --emit files (default: ./nodeledger-<emit>).",
)
@click.option(
    "--node-name",
    "node_name",
    default="node1",
    show_default=True,
    help="Slurm NodeName for gres.conf.",
)
@click.option(
    "--image",
    "image",
    help="--emit k8s: the container image of every Pod (required there: nodeledger does not guess one).",
)
@click.option(
    "--k8s-devices",
    "k8s_devices",
    type=click.Choice(["auto", "dra", "device-plugin"]),
    help="--emit k8s: how a Pod gets its cards: dra (a ResourceClaim selecting the planned cards; "
    "NVIDIA's DRA driver, Kubernetes 1.34+) or device-plugin (it chooses: the plan's cards and "
    "lifeboat are not enforced) [default: auto, dra where the cards can be named].",
)
@json_option
def place(
    plan_file,
    machine=None,
    lifeboat=None,
    share=False,
    emit=None,
    output=None,
    node_name="node1",
    image=None,
    k8s_devices=None,
    as_json=False,
) -> None:
    # long: a renderer: the placement top to bottom (intro, running, lifeboat, notes, replicas, not placed, devices, files)
    """Place the plan's replicas on cards (ledger-checked, best-linked groups, a lifeboat card
    kept free), bind each to its cards' NUMA node, and print the environment and launch line."""
    from nodeledger.placement.usecase import PlaceRequest, place_plan

    ans = place_plan(PlaceRequest(plan_file=plan_file, machine=machine, lifeboat=lifeboat,
                                  share=share, emit=emit, output=output, node_name=node_name,
                                  image=image, k8s_devices=k8s_devices))  # fmt: skip
    res, intro, profile, written = ans.result, ans.result["intro"], ans.profile, ans.written
    src, ws_count = ans.plan_source, ans.workloads
    if as_json:
        print_json(res)
        return
    from rich.table import Table

    con = console()
    for line in intro:
        con.print(line, markup=False, highlight=False)
    con.print(f"plan: {src} ({ws_count} workloads) on {res['machine']}", markup=False)
    if res["running"]:
        con.print(
            "cards already held (probe): "
            + ", ".join(f"{c} by pid {p}" for c, p in res["running"].items()),
            markup=False,
        )
    if res["lifeboat"]:
        con.print(
            f"lifeboat: card {', '.join(map(str, res['lifeboat']))} — {res['lifeboat_reason']}",
            markup=False,
        )
    for n in res["notes"]:
        con.print(f"warning: {n}", markup=False)
    t = Table(title="Replicas")
    for col in (
        "replica",
        "cards",
        "links",
        "NUMA",
        "CPUs",
        "workers",
        "card GiB",
        "host GiB",
        "launch",
    ):
        t.add_column(col)
    for r in res["replicas"]:
        t.add_row(escape(r["replica"]) + (" (shared)" if r["shared"] else ""), ",".join(map(str, r["cards"])), r["links"],
                  "unknown" if r["numa_node"] is None else str(r["numa_node"]), r["cpus"] or "unknown",
                  "unknown" if r["workers"] is None else str(r["workers"]),
                  f"{gib_num(r['card_bytes'])}", f"{gib_num(r['host_bytes'])}", r["launch"])  # fmt: skip
    con.print(t)
    if res["not_placed"]:
        con.print("not placed:")
        for x in res["not_placed"]:
            con.print(
                f"  {x['replica']} ({x['cards']} card(s)): {x['binding']} — {x['reason']}",
                markup=False,
            )
    con.print(f"free after placement: {', '.join(map(str, res['free_after'])) or 'none'}")
    if res.get("k8s_devices"):
        from nodeledger.machine.vendors import spec as vendor_spec

        kd = res["k8s_devices"]
        con.print(
            f"Kubernetes cards: {kd['why']}"
            + ("." if kd["enforced"] else
               "; the planned cards and the lifeboat are not enforced"
               + (f" (--k8s-devices dra pins them where {vs.label}'s DRA driver runs)."
                  if (vs := vendor_spec(profile.accelerators[0].vendor)).dra_class else ".")),
            markup=False,
        )  # fmt: skip
    for w in written:
        con.print(f"wrote {w}", markup=False)
