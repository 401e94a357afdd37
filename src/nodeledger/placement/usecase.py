"""The ``place`` use case: a plan's replicas placed on a machine's cards (ledger-checked,
best-linked groups, a lifeboat kept free, NUMA binding), and with ``emit`` the Slurm or
Kubernetes files written.  The CLI parses, calls :func:`place_plan` once and renders
``PlaceAnswer.result`` (``place --json`` prints it).  Never prints, never exits."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typing_extensions import NotRequired, TypedDict  # pydantic needs these on Python < 3.12

from nodeledger.errors import NodeledgerError
from nodeledger.schemas import json_schema


@dataclass(frozen=True)
class PlaceRequest:
    plan_file: Path
    machine: str | None = None  # preset, profile file or bundle; None: probe, else the reference
    lifeboat: int | None = None
    share: bool = False  # let TP1 replicas share a card
    emit: str | None = None  # slurm | k8s
    output: Path | None = None  # folder for the emitted files (default nodeledger-EMIT)
    node_name: str = "node1"  # --emit slurm: gres.conf's NodeName
    image: str | None = None  # --emit k8s: the Pods' container image
    k8s_devices: str | None = None  # --emit k8s: auto | dra | device-plugin


@dataclass
class PlaceAnswer:
    result: dict[str, Any]  # placement.planner.plan's result, with intro / written / k8s_devices
    plan_source: str  # where the plan was read
    workloads: int
    profile: Any  # the MachineProfile placed on
    written: list[str]  # files written by emit


def check_request(req: PlaceRequest) -> None:
    """The option sets that do not go together (one line each, before anything is read)."""
    from nodeledger.placement import emit as em

    if req.emit is not None and req.emit not in ("slurm", "k8s"):
        raise NodeledgerError(f"--emit {req.emit!r} is not one of slurm, k8s")
    if req.emit == "k8s" and not (req.image or "").strip():
        raise NodeledgerError("--emit k8s needs --image IMAGE (the container image the Pods run)")
    if req.image is not None and req.emit != "k8s":
        raise NodeledgerError("--image applies to --emit k8s")
    if req.image is not None:
        em.check_image(req.image)
    if req.k8s_devices is not None and req.emit != "k8s":
        raise NodeledgerError("--k8s-devices applies to --emit k8s")


def place_plan(req: PlaceRequest) -> PlaceAnswer:
    from nodeledger.files import check_user_file
    from nodeledger.machine.resolve import machine_with_intro
    from nodeledger.placement import emit as em
    from nodeledger.placement.planner import plan
    from nodeledger.verdict.catalogue import load_catalogue, load_specs

    check_request(req)
    check_user_file(req.plan_file, "plan")  # a device, FIFO or folder: says what it is
    if not req.plan_file.is_file():
        raise NodeledgerError(f"plan {str(req.plan_file)!r} not found")
    profile, intro = machine_with_intro(req.machine)
    ws, src = load_catalogue(str(req.plan_file))
    specs = load_specs(ws)
    res = plan(profile, ws, specs, lifeboat=req.lifeboat, share=req.share)
    res["intro"] = intro
    commands = {w.id: w.command for w in ws}
    written: list[str] = []
    if req.emit:
        folder = req.output or Path(f"nodeledger-{req.emit}")
        devices = req.k8s_devices or "auto"
        files = (
            {"gres.conf": em.gres_conf(profile, req.node_name),
             **{f"{wid}.sbatch": t for wid, t in em.sbatch_scripts(profile, res, commands).items()}}
            if req.emit == "slurm"
            else {f"{n}.yaml": t for n, t in em.k8s_pods(profile, res, commands, req.image,
                                                         devices).items()}
        )  # fmt: skip
        if req.emit == "k8s":
            mode, why = em.k8s_devices(profile, res, devices)
            res["k8s_devices"] = {"mode": mode, "why": why, "enforced": mode == "dra"}
        try:  # each file atomically, each path checked to stay in the folder
            written = em.write_files(folder, files)
        except OSError as exc:
            raise NodeledgerError(f"-o {folder}: cannot write ({exc.strerror or exc})") from None
        res["written"] = written
    return PlaceAnswer(result={"schema_version": SCHEMA_VERSION, **res}, plan_source=src,
                       workloads=len(ws), profile=profile, written=written)  # fmt: skip


# -- the shape of place --json (place.schema.json is generated from it) ----------------------

# raised when a key of place --json changes meaning or goes away
SCHEMA_VERSION = 1


class ReplicaJSON(TypedDict):
    replica: str
    workload: str
    cards: list[int]
    shared: bool  # TP1 replicas sharing a card (--share)
    links: str  # the group's weakest link
    numa_node: int | None
    cpus: str | None  # the NUMA node's CPU list for numactl
    workers: int | None
    card_bytes: int  # the ledger's busiest card
    host_bytes: int  # the ledger's host peak
    env: dict[str, str]  # the visible-devices variables
    launch: str  # the command line that runs it there
    note: str | None


class NotPlacedJSON(TypedDict):
    replica: str
    workload: str
    cards: int
    binding: str | None
    reason: str


class PlaceJSON(TypedDict):
    """``nodeledger place PLAN --json``: each replica's cards (ledger-checked, best-linked
    groups, a lifeboat kept free) and NUMA binding.  Bytes in ``*_bytes`` keys."""

    schema_version: int
    machine: str
    cards: list[int]
    running: dict[str, list[int]]  # card -> pids already on it
    lifeboat: list[int]
    lifeboat_reason: str | None
    replicas: list[ReplicaJSON]
    not_placed: list[NotPlacedJSON]
    free_after: list[int]
    notes: list[str]
    intro: list[str]
    k8s_devices: NotRequired[dict[str, Any]]  # --emit k8s: mode, why, enforced
    written: NotRequired[list[str]]  # --emit: the files written


def place_json_schema() -> dict[str, Any]:
    """The JSON Schema of ``place --json``, generated from :class:`PlaceJSON`."""
    return json_schema(PlaceJSON, "nodeledger place PLAN --json")
