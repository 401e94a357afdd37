"""What the ledger predicts for each watched card: the expectations ``verify`` checks.

Expectations are plain JSON (they go into a recording's header, so a replay needs nothing
else)::

  {"source": "qwen3-32b --job train dp=8 shard=fsdp ...",
   "groups": [{"name": "job" | "<replica>", "job": "train", "shard": "fsdp" | null,
               "cards": [0, 1, ...],
               "predicted": {"0": bytes, ...},   # the ledger's total_bytes for that card
               "unsharded_bytes": bytes | null}]} # busiest card of the same job with shard=none

``--job``: one group; the job's ranks map onto ``cards`` in order (rank r -> cards[r]); a card
the ledger does not list separately gets the busiest card's figure.  Serving with ``replicas``
gives one group per replica (tp x pp cards each).  ``--plan PLAN.toml``: the planner's replicas
(plan() on the machine with its running processes ignored, i.e. as when the plan was made);
``--plan place.json`` (``nodeledger place --json`` output): its replicas as placed.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from nodeledger.errors import InputError
from nodeledger.files import check_user_file, loads_json
from nodeledger.ledger.jobs import JobError, LoadJob, ServeJob, TrainJob
from nodeledger.verdict.fit import fit, job_options


def _cards_of(job) -> int:
    p = getattr(job, "parallel", None)
    if isinstance(job, LoadJob):
        return job.ranks
    if isinstance(job, ServeJob):
        return p.tp * p.pp * job.replicas
    return p.tp * p.pp * p.dp


def unsharded_bytes(spec, job, machine) -> int | None:
    """Busiest card of the same training job without sharding (and without offload); None when
    the job is not sharded or that variant is not a valid job."""
    if not isinstance(job, TrainJob) or job.shard == "none":
        return None
    try:
        # the same precision and optimizer on every rank, nothing shared: PyTorch's own layout
        plain = job.rechoose(shard="none", offload="none", framework="ddp",
                             precision=job.precision, optimizer_impl=job.optimizer_impl)  # fmt: skip
        res = fit(spec, plain, machine, suggest=False)
    except (JobError, InputError):
        return None
    return max(c.total_bytes for c in res.ledger.cards)


def _describe(model: str, job) -> str:
    opts = job_options(job)
    defaults = {"tp": 1, "pp": 1, "dp": 1, "offload": "none", "shard": "none"}
    shown = " ".join(
        f"{k}={v}"
        for k, v in opts.items()
        if k in ("tp", "pp", "dp", "replicas", "shard", "offload", "checkpointing", "micro_batch",
                 "seq", "rank", "dtype", "concurrency", "context", "engine", "ranks")
        and v is not None and defaults.get(k) != v
    )  # fmt: skip
    return f"{model} --job {job.kind if not getattr(job, 'is_lora', False) else 'lora'} {shown}".strip()


def from_job(model: str, spec, job, machine, cards: list[int] | None = None) -> dict:
    """Expectations of one job running on ``cards`` (default: 0..n-1)."""
    n = _cards_of(job)
    cards = list(range(n)) if cards is None else list(cards)
    if len(cards) != n:
        raise InputError(f"--cards lists {len(cards)} card(s); the job uses {n} (tp x pp x dp)")
    suggest = isinstance(job, ServeJob) and job.concurrency is None
    res = fit(spec, job, machine, suggest=suggest)
    busiest = max(c.total_bytes for c in res.ledger.cards)
    per_rank: dict[int, int] = {}
    for cl in res.ledger.cards:
        for r in cl.cards:
            per_rank[r] = cl.total_bytes
    predicted = {str(c): per_rank.get(r, busiest) for r, c in enumerate(cards)}
    unsharded = unsharded_bytes(spec, job, machine)
    shard = getattr(job, "shard", None)
    if isinstance(job, ServeJob) and job.replicas > 1:
        per = n // job.replicas
        groups = [
            {"name": f"replica {k}", "job": "serve", "shard": None,
             "cards": cards[k * per : (k + 1) * per],
             "predicted": {str(c): predicted[str(c)] for c in cards[k * per : (k + 1) * per]},
             "unsharded_bytes": None}
            for k in range(job.replicas)
        ]  # fmt: skip
    else:
        groups = [{"name": "job", "job": job.kind, "shard": shard if shard != "none" else None,
                   "cards": cards, "predicted": predicted, "unsharded_bytes": unsharded}]  # fmt: skip
    return {"source": _describe(model, job), "groups": groups}


def from_plan(path: str, machine) -> dict:
    """Expectations of a plan: PLAN.toml (the planner decides) or `nodeledger place --json`."""
    p = Path(path)
    check_user_file(p, "plan")  # a device, FIFO or folder: one line naming what it is
    if not p.is_file():
        raise InputError(f"--plan {path!r} not found")
    if p.suffix == ".json":
        try:
            check_user_file(p, "placement JSON")
            data = loads_json(p.read_text(encoding="utf-8"), f"--plan {path}")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"--plan {path}: not valid JSON ({exc})") from None
        except RecursionError:
            raise InputError(f"--plan {path}: JSON nested too deeply to be a placement") from None
        if not isinstance(data, dict) or not isinstance(data.get("replicas"), list):
            raise InputError(
                f"--plan {path}: no 'replicas' list (expected `nodeledger place --json`)"
            )
        boats = data.get("lifeboat")
        return {"source": f"placement {p.name}", "groups": _groups(data["replicas"], {}),
                "lifeboat": [_card(c, "lifeboat") for c in boats] if isinstance(boats, list) else []}  # fmt: skip
    from nodeledger.placement.planner import plan
    from nodeledger.verdict.catalogue import load_catalogue, load_specs

    ws, _ = load_catalogue(str(p))
    specs = load_specs(ws)
    # as when the plan was made: the job's own processes must not make its cards look taken
    free = replace(machine, accelerators=[replace(a, processes=[]) for a in machine.accelerators])
    res = plan(free, ws, specs)
    unsharded = {w.id: unsharded_bytes(specs[w.model], w.job(), free) for w in ws}
    shards = {w.id: getattr(w.job(), "shard", None) for w in ws}
    kinds = {w.id: w.kind for w in ws}
    groups = _groups(res["replicas"], unsharded, shards, kinds)
    return {"source": f"plan {p.name} ({len(res['replicas'])} replicas placed)", "groups": groups,
            "lifeboat": list(res.get("lifeboat") or [])}  # fmt: skip


def _card(c, where: str) -> int:
    """A card index of a plan: a non-negative integer (a placement's own JSON), else one line."""
    if isinstance(c, int) and not isinstance(c, bool) and 0 <= c < 1 << 16:
        return c
    raise InputError(f"--plan: {where}: card {str(c)[:40]!r} is not a card index")


def _groups(replicas: list, unsharded: dict, shards: dict | None = None, kinds: dict | None = None):
    groups = []
    for k, r in enumerate(replicas):
        if not isinstance(r, dict) or not isinstance(r.get("cards"), list):
            raise InputError(f"--plan: replica {k} has no 'cards' list")
        wid = r.get("workload")
        shard = (shards or {}).get(wid)
        b = r.get("card_bytes")
        groups.append({
            "name": str(r.get("replica", f"replica {k}")),
            "job": (kinds or {}).get(wid),
            "shard": shard if shard not in (None, "none") else None,
            "cards": [_card(c, f"replica {k}") for c in r["cards"]],
            "predicted": {str(c): b for c in r["cards"]} if isinstance(b, int) else {},
            "unsharded_bytes": unsharded.get(wid),
        })  # fmt: skip
    return groups
