"""`nodeledger fit`: the memory ledger of one job, its verdict and the layout search."""

from __future__ import annotations

from typing import Any

import click

from nodeledger.cli.common import (
    console,
    escape,
    gib,
    num,
    print_json,
    ranges,
    verdict_exit,
)
from nodeledger.cli.options import job_options, json_option, no_fail_option, online_option
from nodeledger.units import gib_num

# ---------------------------------------------------------------------------------------
# fit: the memory ledger of one job
# ---------------------------------------------------------------------------------------


@click.command("fit")
@click.argument(
    "model", help="config.json path, checkpoint folder, catalogue name or cached Hub id."
)
@click.option(
    "--job", "job", default="serve", show_default=True, help="serve | train | lora | qlora | load"
)
@click.option("--machine", "machine", help="Preset or profile file; default: reference machine.")
@click.option(
    "--search", "search", is_flag=True, help="Also search the layouts that fit; print the best few."
)
@click.option(
    "--lifeboat",
    "lifeboat",
    type=int,
    default=None,
    help="Cards --search keeps free for triage [default: 1; 0 on a one-card machine, said once].",
)
@click.option(
    "--from-engine-log",
    "engine_log",
    help="A vLLM or SGLang start-up log of this job (--engine vllm|sglang): set the engine's figures beside the ledger's, term by term; the release it prints is followed unless --engine-version says otherwise.",
)
@click.option(
    "--request-rate",
    "request_rate",
    type=click.FloatRange(min=0, min_open=True),
    help="--job serve: the simulated benchmark's requests/s, Poisson arrivals as vllm bench serve sends them [default: inf, all at once].",
)
@click.option(
    "--num-prompts",
    "num_prompts",
    type=click.IntRange(1, 100_000),
    help="--job serve: requests in the simulated benchmark [default: 4 x the concurrency, 32 to 256].",
)
@click.option(
    "--dataset",
    "dataset",
    type=click.Choice(["random", "sharegpt"]),
    help="--job serve: request lengths: random (the job's --input-len / --output-len) or sharegpt (a ShareGPT-like distribution, speed/datasets.toml) [default: random].",
)
@click.option(
    "--slo-ttft-p99",
    "slo_ttft",
    type=click.FloatRange(min=0, min_open=True),
    help="--job serve: a service level, seconds: the highest request rate one replica sustains with its TTFT p99 within it (and --slo-tpot-p99's).",
)
@click.option(
    "--slo-tpot-p99",
    "slo_tpot",
    type=click.FloatRange(min=0, min_open=True),
    help="--job serve: a service level, seconds per output token (TPOT p99).",
)
@online_option
@no_fail_option
@json_option
@job_options
def fit_cmd(
    model,
    job="serve",
    machine=None,
    search=False,
    lifeboat=None,
    engine_log=None,
    request_rate=None,
    num_prompts=None,
    dataset=None,
    slo_ttft=None,
    slo_tpot=None,
    online=False,
    no_fail=False,
    as_json=False,
    **job_opts,
) -> None:
    """Account every byte of one job on each card and in host RAM; say whether it fits.
    Exit 0 fits, 1 tight (or unknown), 3 cannot, 2 bad input; --no-fail: 0 whatever the verdict."""
    opts = job_opts
    from nodeledger.verdict.assess import FitRequest, assess_fit

    report = assess_fit(
        FitRequest(model=model, job=job, job_options=opts, machine=machine, online=online,
                   search=search, lifeboat=lifeboat, engine_log=engine_log,
                   request_rate=request_rate, num_prompts=num_prompts, dataset=dataset,
                   slo_ttft_p99_s=slo_ttft, slo_tpot_p99_s=slo_tpot)
    )  # fmt: skip
    data = report.to_json()
    if as_json:
        print_json(data)
    else:
        _render_fit(data)
    verdict_exit(report.exit_tier, no_fail)


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
# where another engine sizes the same figure otherwise (engines.toml [sglang]): its own words
EXTRA_UNITS_BY_ENGINE = {
    "sglang": {
        "kv_pool_bytes": (
            "B",
            "SGLang pool (memory free before the weights x mem_fraction_static) minus what loading the weights took",
        ),
        "max_concurrency": (
            "sequences",
            "KV pool tokens / context tokens (whole sequences)",
        ),
        "kv_shortfall": ("", "SGLang KV pool"),
    },
}


def _render_fit(d: dict[str, Any]) -> None:
    # long: a renderer: the fit report top to bottom (verdict, card and host tables, extras, search)
    from rich.table import Table

    con = console()
    v = d["verdict"]
    colour = {"fits": "green", "tight": "yellow", "cannot": "red"}.get(v["tier"], "white")
    fw = (d.get("extras") or {}).get("framework")
    assumes = f" — assumes {escape(fw['assumed'])}" if fw else ""
    caveat = (d.get("runtime") or {}).get("caveat")
    if caveat:
        assumes += f"; {escape(caveat)}"
    for f in v.get("flips") or []:
        assumes += f"; {escape(f)}"
    con.print(
        f"[bold]{escape(d['model'])}[/bold] --job {d['job']} on {escape(d['machine'])}: "
        f"[bold {colour}]{v['tier'].upper()}[/bold {colour}] — binding: {v['binding']}; {escape(v['reason'])}{assumes}"
    )
    basis = ", ".join(f"{k}={v}" for k, v in d.get("job_options", {}).items())
    if basis:
        con.print(f"  job: {basis}")
    for c in d["cards"]:
        t = Table(title=f"Per card (cards {ranges(c['cards'])}; peak in: {c['peak_phase']})")
        t.add_column("item")
        t.add_column("GiB", justify="right")
        t.add_column("in torch peak")
        t.add_column("formula / source")
        for it in c["items"]:
            t.add_row(
                it["name"],
                f"{gib_num(it['bytes'], 2)}",
                "yes" if it["torch"] else "no",
                it["source"],
            )
        con.print(t)
        phases = ", ".join(f"{k} {gib_num(val, 2)} GiB" for k, val in c["phases_bytes"].items())
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
        t.add_row(it["name"], f"{gib_num(it['bytes'], 2)}", it["source"])
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
            "unknown" if r["headroom_bytes"] is None else f"{gib_num(r['headroom_bytes'], 2)} GiB"
        )
        con.print(f"  {r['resource']}: {r['tier']}, headroom {head} ({pct})")
    for k, val in d["extras"].items():
        if k == "largest":
            mc, mx = val["max_concurrency_at_context"], val["max_context_at_concurrency"]
            con.print(
                f"  largest that fits ({val['criterion']}): {num(mc)} sequences of "
                f"{val['context']:,} tokens; at {num(val['concurrency'], 'sequences')}, up to {num(mx)} "
                "tokens each"
                + (f" (the model's max_position_embeddings: {val['max_position_embeddings']:,})"
                   if val.get("max_position_embeddings") else "")
            )  # fmt: skip
        elif k in EXTRA_UNITS and val is not None:
            engine = (d.get("job_options") or {}).get("engine")
            unit, src = EXTRA_UNITS_BY_ENGINE.get(engine, {}).get(k, EXTRA_UNITS[k])
            con.print(f"  {k.replace('_', ' ')}: {num(val, unit)} — {src}")
        elif isinstance(val, dict):
            con.print(f"  {k.replace('_', ' ')}: {_flat(val)}", markup=False)
        elif val is not None:
            con.print(f"  {k.replace('_', ' ')}: {_scalar(k, val)}", markup=False)
    for s in v["suggestions"]:
        con.print(f"  would fit: {s['change']} — {s['reason']}")
    _render_speed(con, d.get("speed"))
    _render_engine_check(con, d.get("engine_check"))
    for n in d["notes"]:
        con.print(f"  note: {n}", markup=False)
    if "search" in d:
        sr = d["search"]
        st = Table(
            title=f"Layouts that fit, then tight ones ({sr['tried']:,} tried, {sr['lifeboat']} lifeboat card(s) kept free)"
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
        if sr.get("lifeboat_note"):
            con.print(f"  note: {sr['lifeboat_note']}", markup=False)
        if sr["best"]:
            n_fit = sum(1 for x in sr["best"] if x["tier"] == "fits")
            con.print(
                f"  search: {n_fit} of the {len(sr['best'])} layouts shown fit; best: "
                f"{sr['best'][0]['options']} ({sr['best'][0]['tier']}). The exit code follows "
                f"it ({sr['exit_tier']}); the job as given is {v['tier'].upper()}",
                markup=False,
            )
        if not sr["best"]:
            con.print(
                f"  no layout fits on this machine with {sr['lifeboat']} lifeboat card(s) kept free"
                + (
                    " (try --lifeboat 0 to see what the whole box could do)"
                    if sr["lifeboat"]
                    else ""
                )
            )


def _scalar(key: str, v) -> str:
    """A figure of the ledger's extras with its unit: bytes as B and GiB, shares and small
    figures exact (0.92 stays 0.92), counts with separators."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if key.endswith("_bytes") and isinstance(v, (int, float)):
        return f"{v:,.0f} B ({gib(v)})"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1000 else num(v)
    if isinstance(v, int):
        unit = {"concurrency": "sequences", "kv_blocks": "blocks", "cuda_graphs": "graphs"}
        return num(v, unit.get(key, ""))
    return str(v)


def _flat(d: dict) -> str:
    """One readable line of a figures dict (the engine's accounting): bytes in GiB, names
    without underscores, nested settings and long sources left to --json."""
    parts = []
    for k, v in d.items():
        if v is None or isinstance(v, (dict, list)) or k in ("mirrors", "settings"):
            continue
        name = k.removesuffix("_bytes").replace("_", " ")
        if k.endswith("_bytes") and isinstance(v, (int, float)):
            parts.append(f"{name} {gib(v)}")
        else:
            parts.append(f"{name} {_scalar(k, v)}")
    return "; ".join(parts) + (" (formulas and sources: --json)" if "mirrors" in d else "")


def _secs(x: float | None) -> str:
    if x is None:
        return "unknown"
    if x < 1e-3:
        return f"{x * 1e6:,.0f} us"
    if x < 1:
        return f"{x * 1e3:,.1f} ms"
    return f"{x:,.2f} s" if x < 120 else f"{x / 60:,.1f} min"


def _rate(x: float | None, unit: str) -> str:
    return "unknown" if x is None else f"{x:,.1f} {unit}"


def _render_speed(con, sp: dict | None) -> None:
    # long: a renderer: one section, a branch per job kind (serve, train, load), then the inputs
    """The speed section: every figure with its unit; the inputs with their sources."""
    if not sp:
        return
    how = (
        "the engine's scheduler simulated over the card's kernel table: nodeledger/speed/serving.py"
        if sp.get("model") == "simulated"
        else "formulas in nodeledger/speed/terms.py"
    )
    con.print(f"[bold]Speed[/bold] (estimate; {how})")
    if sp["kind"] == "serve":
        con.print(
            f"  per replica ({sp['cards_per_replica']} card(s)), prompts of {sp['input_len']:,} "
            f"tokens, answers of {sp['output_len']:,}, {num(sp['concurrency'])} sequence(s) at once:"
        )
        if sp.get("batch_capped"):
            con.print(f"  batch capped: {sp['batch_capped']['why']}", markup=False)
        con.print(f"  ttft_s (one prompt alone): {_secs(sp['ttft_s'])}")
        con.print(f"  tpot_s (time per output token): {_secs(sp['tpot_s'])}"
                  + (f"; at batch 1 {_secs(sp['tpot_batch1_s'])}" if sp["concurrency"] != 1 else ""))  # fmt: skip
        con.print(f"  output_tokens_per_s: {_rate(sp['output_tokens_per_s'], 'tokens/s')}; "
                  f"requests_per_s: {_rate(sp['requests_per_s'], 'requests/s')}")  # fmt: skip
        top = sp.get("at_most_that_fit")
        if top:
            con.print(f"  at the most that fit ({top['concurrency']:,} sequences): "
                      f"{_rate(top['output_tokens_per_s'], 'output tokens/s')}, "
                      f"{_rate(top['requests_per_s'], 'requests/s')}, tpot {_secs(top['tpot_s'])}")  # fmt: skip
        sim = sp.get("simulation")
        if sim:
            rate = sim["request_rate"]
            rate = "all at once" if rate == "inf" else f"Poisson {rate:g} requests/s"
            cap = (
                ""
                if not sim.get("max_concurrency")
                else f", at most {sim['max_concurrency']:,} in flight"
            )
            con.print(f"  simulated benchmark ({sim['num_prompts']:,} requests {rate}{cap}, {sim['dataset']}): "
                      f"{_rate(sim['output_tokens_per_s'], 'output tokens/s')}, {_rate(sim['requests_per_s'], 'requests/s')}; "
                      f"TTFT median {_secs(sim['ttft_s'].get('median'))} p99 {_secs(sim['ttft_s'].get('p99'))}; "
                      f"TPOT median {_secs(sim['tpot_s'].get('median'))} p99 {_secs(sim['tpot_s'].get('p99'))}; "
                      f"ITL p99 {_secs(sim['itl_s'].get('p99'))}; batch mean {sim['batch']['mean']:,.1f}, "
                      f"max {sim['batch']['max']:,}" + (f"; {sim['preemptions']:,} preemptions" if sim["preemptions"] else ""),
                      markup=False)  # fmt: skip
            slo = sp.get("capacity_at_slo")
            if slo:
                con.print(f"  capacity within the service levels: {slo['requests_per_s']:.3g} requests/s "
                          f"per replica ({slo['bound']})", markup=False)  # fmt: skip
            con.print(f"  binding: {sp.get('binding') or 'unknown'}; engine {sp['engine']}; kernels: {sp['kernels']}",
                      markup=False)  # fmt: skip
            for term in sp.get("step_terms") or ():
                con.print(f"    step term: {term}", markup=False)
        st = sp.get("step") or {}
        if st.get("seconds") is not None:
            con.print(f"  binding: {sp['binding']} (a step: memory {_secs(st['memory_s'])}, "
                      f"compute {_secs(st['compute_s'])}, card links {_secs(st['card_links_s'])})")  # fmt: skip
    elif sp["kind"] == "train":
        con.print(f"  step_s: {_secs(sp['step_s'])} for {sp['tokens_per_step']:,} tokens on "
                  f"{sp['cards']} card(s); tokens_per_s_per_card: "
                  f"{_rate(sp['tokens_per_s_per_card'], 'tokens/s')}")  # fmt: skip
        if sp.get("step_s") is not None:
            con.print(f"  binding: {sp['binding']} (compute {_secs(sp['compute_s'])} incl. "
                      f"bubble {sp['bubble_fraction']:.0%}, tensor parallel {_secs(sp['tp_s'])}, "
                      + (f"expert all-to-all {_secs(sp['ep_alltoall_s'])}, "
                         if sp.get("ep_alltoall_s") else "") +
                      f"data-parallel sync {_secs(sp['dp_sync_s'])} of which exposed "
                      f"{_secs(sp['dp_exposed_s'])}); MFU {sp['mfu']:.0%} of the bf16 peak")  # fmt: skip
        ops = sp.get("operators")
        if ops:
            parts = ", ".join(f"{k} {_secs(v)}" for k, v in ops["parts_s"].items())
            con.print(f"  a micro-batch: {_secs(ops['micro_batch_s'])} ({parts}; host dispatch "
                      f"{_secs(ops['host_dispatch_s'])}"
                      f"{', the host binds' if ops['host_bound'] else ''}); optimizer step "
                      f"{_secs(ops['optimizer_s'])}; {ops['elementwise']}", markup=False)  # fmt: skip
            con.print(f"    kernels: {ops['kernel_table']}", markup=False)
    elif sp["kind"] == "load":
        con.print(f"  checkpoint {gib(sp['checkpoint_bytes'])} to the cards "
                  f"(host -> card {_rate(sp['host_to_card_gbps'], 'GB/s')} per card):")  # fmt: skip
        for m in sp["mounts"]:
            con.print(f"    from {m['mount']}: {_secs(m['to_cards_s'])} "
                      f"(read {_rate(m['read_gbps'], 'GB/s')}; {m['read_source']})", markup=False)  # fmt: skip
        t = sp["to_second_machine"]
        con.print(f"    to a second machine over the NIC: {_secs(t['seconds'])} ({t['source']}); at "
                  + ", ".join(f"{k} {_secs(v)}" for k, v in t["at_common_ethernet_s"].items()),
                  markup=False)  # fmt: skip

    def brief(text: str, limit: int = 110) -> str:
        return (
            text if len(text) <= limit else text[: limit - 1].rstrip() + "… (--json: whole source)"
        )

    for k, v in (sp.get("inputs") or {}).items():
        if isinstance(v, dict) and v.get("value") is not None:
            x = v["value"]
            shown = (
                f"{x:,.1f}".rstrip("0").rstrip(".")
                if x >= 100
                else (f"{x:,.2f}" if x >= 1 else f"{x:.3g}")
            )
            con.print(f"    {k}: {shown} {v['unit']} — {brief(v['source'])}", markup=False)
    groups: dict[str, list[str]] = {}
    for u in sp.get("unknown") or []:
        name, _, why = u.partition(": ")
        groups.setdefault(why, []).append(name)
    for why, names in groups.items():
        con.print(f"    unknown: {', '.join(names)} — {brief(why)}", markup=False)
    if groups:
        con.print("    (a profile file with the figures decides them: `nodeledger machine show "
                  "PRESET --save FILE`, edit, then --machine FILE; `nodeledger bench "
                  "--save-profile FILE` measures the links)", markup=False)  # fmt: skip
    if sp.get("lower_bound"):
        con.print(f"    lower bound: {sp['lower_bound']}", markup=False)


def _render_engine_check(con, ec: dict | None) -> None:
    """The engine's start-up figures beside the ledger's, per card."""
    if not ec:
        return
    from rich.table import Table

    from nodeledger.ledger.jobs import ENGINE_NAMES

    name = ENGINE_NAMES.get(ec.get("engine") or "vllm", "vLLM")
    t = Table(
        title=f"The engine's start-up log beside the ledger ({name} {ec.get('version') or 'version not printed'}, per card)"
    )
    for c in ("term", "engine printed", "ledger", "difference"):
        t.add_column(c)
    for r in ec["rows"]:

        def cell(x, unit=r["unit"], missing="unknown"):
            if x is None:
                return missing
            return f"{x:,.0f} {unit}" if unit == "tokens" else f"{x:,.2f} {unit}"

        diff = "" if r["difference"] is None else (
            cell(r["difference"]) + ("" if r["relative"] is None else f" ({100 * r['relative']:+.0f} %)"))  # fmt: skip
        t.add_row(r["what"], cell(r["engine"], missing="not printed"), cell(r["ledger"]), diff)
    con.print(t)
    for r in ec["rows"]:
        if r.get("note"):
            con.print(f"  {r['what']}: {r['note']}", markup=False)
    for line in ec["launch_differences"]:
        con.print(f"  launch: {line}", markup=False)
    if ec.get("look_first"):
        con.print(f"  look first at the {ec['look_first']}", markup=False)
