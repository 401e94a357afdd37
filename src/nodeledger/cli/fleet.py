"""CLI layer of the fleet hooks: `nodeledger slurm prolog|epilog`, `nodeledger k8s
daemonset|features`, `nodeledger fleet BUNDLE…` (the work is in nodeledger/fleet/)."""

from __future__ import annotations

import sys

import click

from nodeledger.cli.common import exit_with

EXIT_REFUSED = 4


@click.group("slurm")
def slurm() -> None:
    """Slurm hooks: a TaskProlog that admits a job only when its ledger keeps the host-RAM rules
    and leaves the lifeboat card free (the reason goes to the job's output and the job is
    cancelled; the node is never drained), and an Epilog that releases its booking."""


@slurm.command("prolog")
@click.option("--plan", "plan", required=True, help="The plan: a workload catalogue TOML.")
@click.option(
    "--machine", "machine", help="Preset, profile file or bundle; default: probe this host."
)
@click.option("--state", "state", help="Reservations state file (shared with `nodeledger run`).")
@click.option("--lifeboat", "lifeboat", type=click.IntRange(0, 64), default=1, show_default=True,
              help="Cards the plan keeps free for triage.")  # fmt: skip
@click.option("--settle", "settle", type=click.FloatRange(0, 86400), default=120.0,
              show_default=True,
              help="Seconds a booking's host RAM counts as not yet allocated (its load runs).")  # fmt: skip
@click.option("--no-cancel", "no_cancel", is_flag=True,
              help="Do not scancel a refused job: exit 4 instead (a dry run, a test).")  # fmt: skip
def prolog(plan, machine=None, state=None, lifeboat=1, settle=120.0, no_cancel=False) -> None:
    """Admit (and book) the job of this environment (SLURM_JOB_ID, SLURM_JOB_GPUS,
    NODELEDGER_REPLICA), or refuse it: `print` lines for the task's stdout, exit 0 (refused:
    cancelled with scancel; with --no-cancel exit 4)."""
    import os

    from nodeledger.fleet import slurm as sl
    from nodeledger.placement import reserve as rs

    store = rs.Store(state)
    try:
        a = sl.admit(dict(os.environ), plan, store, machine, lifeboat=lifeboat, settle=settle)
    except rs.Refused as exc:  # no machine to book on
        a = sl.Admission(False, sl.job_id(dict(os.environ)), reason=str(exc))
    finally:
        store.close()
    for line in a.lines():
        sys.stdout.write(line + "\n")
    if a.ok:
        return
    sys.stderr.write(f"nodeledger: job {a.job} refused: {a.reason}\n")
    if no_cancel:
        exit_with(EXIT_REFUSED)
    problem = sl.cancel(a.job)
    if problem:
        sys.stdout.write(f"print nodeledger: could not cancel job {a.job}: {problem}\n")


@slurm.command("epilog")
@click.option("--state", "state", help="Reservations state file (as the prolog's).")
def epilog(state=None) -> None:
    """Release the booking the prolog made for this job (SLURM_JOB_ID); exit 0."""
    import os

    from nodeledger.fleet import slurm as sl
    from nodeledger.placement import reserve as rs

    store = rs.Store(state)
    try:
        replica = sl.release(dict(os.environ), store)
    finally:
        store.close()
    if replica:
        sys.stdout.write(f"nodeledger: released {replica}\n")


def self_command() -> list[str]:
    """The argv that runs this nodeledger again from anywhere: the absolute path of the program
    it was started as (a console script: /usr/local/bin/nodeledger, a venv's bin/nodeledger),
    else this Python with ``-m nodeledger`` (symbolic links kept: a venv's python must stay
    the venv's)."""
    import os
    import shutil

    exe = sys.argv[0] if sys.argv else ""
    if exe and not exe.endswith(".py") and exe not in ("-c", "-m"):
        found = exe if os.sep in exe else shutil.which(exe)
        if found and os.path.isfile(found) and os.access(found, os.X_OK):
            return [os.path.abspath(found)]
    return [os.path.abspath(sys.executable), "-m", "nodeledger"]


@slurm.command("hooks")
@click.option("--plan", "plan", default="/etc/nodeledger/plan.toml", show_default=True,
              help="Where the plan is on the node (absolute).")  # fmt: skip
@click.option("--state", "state", default="/var/lib/nodeledger/state.sqlite", show_default=True,
              help="Reservations state file on the node (absolute; writable by the jobs' users).")  # fmt: skip
@click.option(
    "--machine", "machine", help="Preset or profile file for the prolog (default: probe)."
)
@click.option("--lifeboat", "lifeboat", type=click.IntRange(0, 64), default=1, show_default=True,
              help="Cards the plan keeps free for triage.")  # fmt: skip
@click.option("--settle", "settle", type=click.FloatRange(0, 86400),
              help="The prolog's --settle (default: its own).")  # fmt: skip
@click.option("-o", "--output", "output", default="nodeledger-slurm", show_default=True,
              help="Folder to write task-prolog and epilog into.")  # fmt: skip
def hooks(plan="/etc/nodeledger/plan.toml", state="/var/lib/nodeledger/state.sqlite",
          machine=None, lifeboat=1, settle=None, output="nodeledger-slurm") -> None:  # fmt: skip
    """Write the TaskProlog and Epilog scripts for slurm.conf.  Slurm runs them with no PATH, so
    they name nodeledger by the absolute path of this very program: run this on the node (or
    where nodeledger has the same path), e.g. `sudo nodeledger slurm hooks -o /etc/nodeledger`."""
    import os
    import shutil

    from nodeledger.errors import InputError
    from nodeledger.fleet import slurm as sl
    from nodeledger.placement import emit as em

    argv = self_command()
    files = sl.hook_scripts(argv, plan, state, machine, lifeboat, settle, shutil.which("scancel"))
    try:
        written = em.write_files(output, files)
        for w in written:
            os.chmod(w, 0o755)
    except OSError as exc:
        raise InputError(f"-o {output}: cannot write ({exc.strerror or exc})") from None
    for w in written:
        sys.stdout.write(f"wrote {w}\n")
    sys.stdout.write(
        f"nodeledger runs as: {' '.join(argv)}\n"
        f"slurm.conf: TaskProlog={os.path.abspath(written[0])}  "
        f"Epilog={os.path.abspath(written[1])}\n"
    )
    if not os.path.isfile(plan):
        sys.stdout.write(f"note: {plan} is not on this host: copy the plan there on each node\n")


@click.group("k8s")
def k8s() -> None:
    """Kubernetes: Node Feature Discovery feature files that label a node with its cards, NUMA
    layout and lifeboat card, and a DaemonSet running the exporter on every node."""


@k8s.command("features")
@click.option("--machine", "machine", default="probe", show_default=True,
              help="Preset, profile file or bundle (probe: this host).")  # fmt: skip
@click.option("--plan", "plan", help="A workload catalogue: label the lifeboat card it keeps free.")
@click.option("--lifeboat", "lifeboat", type=click.IntRange(0, 64), default=1, show_default=True,
              help="With --plan: cards the plan keeps free.")  # fmt: skip
@click.option("--lifeboat-cards", "lifeboat_cards", metavar="CARDS",
              help="The lifeboat card(s) by index (e.g. 7), instead of --plan.")  # fmt: skip
def features(machine="probe", plan=None, lifeboat=1, lifeboat_cards=None) -> None:
    """Print the NFD local feature file (`name=value` lines) for this node: install it as
    /etc/kubernetes/node-feature-discovery/features.d/nodeledger."""
    from nodeledger.cli.common import card_indices
    from nodeledger.errors import InputError
    from nodeledger.fleet import kubernetes as kz

    if plan and lifeboat_cards:
        raise InputError("give --plan or --lifeboat-cards, not both")
    boats = card_indices(lifeboat_cards, "--lifeboat-cards") if lifeboat_cards else None
    sys.stdout.write(kz.features_for(machine, plan, lifeboat, boats))


@k8s.command("daemonset")
@click.option("--image", "image", required=True,
              help="Container image with nodeledger and the card tools (nodeledger publishes none).")  # fmt: skip
@click.option("--vendor", "vendor", default="nvidia", show_default=True,
              help="nvidia | amd | hygon | huawei: the devices and tools the Pod mounts.")  # fmt: skip
@click.option("--namespace", "namespace", default="nodeledger", show_default=True)
@click.option("--port", "port", type=int, default=None,
              help="The exporter's port [default: the exporter's own, 19835].")  # fmt: skip
@click.option("--host-network", "host_network", is_flag=True,
              help="Listen on each node's loopback (a node-local Prometheus agent scrapes it); "
              "default: the Pod IP, --expose --allow each --allow-cidr, and a headless Service.")  # fmt: skip
@click.option("--allow-cidr", "allow_cidr", multiple=True, metavar="CIDR",
              help="Who may scrape on the Pod IP (repeatable; required there): your Prometheus "
              "Pods' network, or 0.0.0.0/0 for any client.")  # fmt: skip
@click.option("--lifeboat", "lifeboat", metavar="CARDS",
              help="The lifeboat card(s) on every node (e.g. 7): the exporter's --lifeboat (the "
              "LifeboatCardTaken alert) and the node label lifeboat-card.")  # fmt: skip
@click.option("--node-selector", "node_selector", multiple=True, metavar="KEY=VALUE",
              help="Run only on nodes with this label (repeatable).")  # fmt: skip
def daemonset_cmd(image, vendor="nvidia", namespace="nodeledger", port=None,
                  host_network=False, allow_cidr=(), lifeboat=None, node_selector=()) -> None:  # fmt: skip
    """Print the exporter's DaemonSet (and headless Service) as YAML."""
    from nodeledger.cli.common import card_indices
    from nodeledger.errors import InputError
    from nodeledger.fleet import kubernetes as kz

    sel = {}
    for item in node_selector:
        k, eq, v = item.partition("=")
        if not eq:
            raise InputError(f"--node-selector {item!r}: give KEY=VALUE")
        sel[k] = v
    boats = card_indices(lifeboat, "--lifeboat") if lifeboat else None
    docs = kz.daemonset(image, vendor, namespace, kz.DEFAULT_PORT if port is None else port,
                        host_network, list(allow_cidr), sel, boats)  # fmt: skip
    sys.stdout.write(kz.daemonset_header(allow_cidr, host_network, boats) + kz.to_yaml(docs))


@click.command("fleet")
@click.argument("bundles", nargs=-1, metavar="[BUNDLE...]")
@click.option("--prometheus", "prometheus", metavar="URL",
              help="Read the boxes from this Prometheus server's HTTP API (read-only) instead.")  # fmt: skip
@click.option(
    "--plan", "plan", help="A workload catalogue: each box's lifeboat as the planner keeps it."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON on stdout.")
def fleet_cmd(bundles=(), prometheus=None, plan=None, as_json=False) -> None:
    """One row per box: free cards, the lifeboat, host-RAM headroom and findings, from support
    bundles (`nodeledger bundle` on each box) or a Prometheus server scraping the exporters.
    No agent, no database of its own."""
    from nodeledger.cli.common import console, print_json
    from nodeledger.errors import InputError
    from nodeledger.fleet import table as ft

    if bool(bundles) == bool(prometheus):
        raise InputError("give support bundles or --prometheus URL (one of the two)")
    if prometheus and plan:
        raise InputError("--plan applies to bundles (Prometheus has the exporters' lifeboat)")
    boxes = (ft.from_prometheus(prometheus) if prometheus
             else [ft.from_bundle(b, plan) for b in bundles])  # fmt: skip
    if as_json:
        print_json(ft.fleet_json(boxes))
        return
    ft.grid(boxes).terminal(console())
