"""The pieces the capacity report's sections are rendered from (strings; nothing printed): the
headline, each workload's binding figure and caveats, serving and load lines, and for the
self-contained HTML page its CSS and inline SVG charts (per-card stacked memory bars per
workload, the link matrix as a heat map), which need no network at view time.  The documents
themselves are report/documents.py; the sections report/sections.py."""

from __future__ import annotations

from html import escape

from nodeledger.machine.profile import MachineProfile
from nodeledger.units import count, gib_num, gib_text
from nodeledger.verdict.fit import TIGHT

TIER_COLOUR = {"can": "#2e7d32", "tight": "#ef6c00", "cannot": "#c62828", "unknown": "#616161"}


_gib = gib_text  # bytes as GiB, 1 decimal


def expect_note(r: dict) -> str:
    if not r.get("expect"):
        return ""
    return f"{r['expect']} ({'agrees' if r['agrees'] else 'differs'})"


def headline(rep: dict) -> str:
    m = rep["machine"]
    c = rep["counts"]
    caveat = (rep.get("runtime") or {}).get("caveat")
    return (
        f"{m['name']}: {count(len(rep['workloads']), 'workload')} — {c['can']} can, {c['tight']} tight, "
        f"{c['cannot']} cannot, {c['unknown']} unknown. {rep['scale_out']['verdict']}."
        + (f" Every card figure: {caveat}." if caveat else "")
    )


def serving_lines(rep: dict) -> list[str]:
    s = rep["serving"]
    out = [s["lifeboat_note"]] if s.get("lifeboat_note") else []
    for w in s["workloads"]:
        if w["note"]:
            out.append(f"{w['id']}: {w['note']}")
            continue
        per = w["max_sequences_per_replica"]
        tot = w["total_sequences"]
        out.append(
            f"{w['id']}: {w['replicas_on_business_cards']} replica(s) x {w['cards_per_replica']} "
            f"card(s) on the {s['business_cards']} business cards; up to "
            f"{'unknown' if per is None else f'{per:,}'} sequences of {w['context']:,} tokens "
            f"each = {'unknown' if tot is None else f'{tot:,}'} sequences" + _tput(w)
        )
    return out


def _secs(x: float | None) -> str:
    if x is None:
        return "unknown"
    return f"{x:,.0f} s" if x < 120 else f"{x / 60:,.1f} min"


def load_line(t: dict) -> str:
    """Time to get one checkpoint onto the cards, per mount kind, and to a second machine."""
    mounts = ", ".join(f"{m['mount']} {_secs(m['to_cards_s'])}" for m in t["mounts"])
    eth = ", ".join(
        f"{k} {_secs(v)}" for k, v in t["to_second_machine"]["at_common_ethernet_s"].items()
    )
    nic = t["to_second_machine"]
    own = f"over this machine's port {_secs(nic['seconds'])}" if nic["seconds"] is not None else (
        "this machine's port speed unknown")  # fmt: skip
    return (f"time to load {t['checkpoint_bytes'] / 1e9:,.1f} GB onto the cards, from {mounts} "
            f"(typical read rates per mount kind, speed/hardware.toml; `nodeledger bench` measures "
            f"yours); to a second machine: {own}; at {eth}")  # fmt: skip


def _tput(w: dict) -> str:
    """Throughput at the most that fit (and within the workload's service levels), or why it
    is unknown."""
    if w.get("output_tokens_per_s") is None:
        why = w.get("speed_unknown") or []
        return ("; output tokens/s unknown (" + why[0] + ")") if why else ""
    slo = ""
    if w.get("requests_per_s_at_slo") is not None:
        lv = w["slo"]
        slo = (
            f"; within {lv['levels']}: {w['requests_per_s_at_slo']:,.2f} requests/s "
            f"({lv['per_replica']:,.3g} per replica, Poisson arrivals)"
        )
    return slo + (
        f"; {w['output_tokens_per_s']:,.0f} output tokens/s = {w['requests_per_s']:,.2f} "
        f"requests/s of {w['input_len']:,} + {w['output_len']:,} tokens "
        f"({w['output_tokens_per_s_per_replica']:,.0f} per replica, bound by {w['speed_binding']}; "
        "the engine simulated over the card's kernel table: speed/serving.py)"
    )


def state_line(ms: dict, fw: dict | None = None, check: dict | None = None) -> str:
    """The ledger's model state beside a claim: under the workload's framework layout, then the
    per-card state under each framework's default layout and which reach the claimed range."""
    it = ms["items"]
    other = sum(
        v for k, v in it.items() if k not in ("parameters", "gradients", "optimizer states")
    )
    line = (
        (f"{fw['framework']} ({fw['framework_source']}), {fw['layout']}: " if fw else "")
        + f"parameters {_gib(it['parameters'])} + gradients {_gib(it['gradients'])} + optimizer "
        f"states {_gib(it['optimizer states'])}"
        + (f" + master weights / partitions / buckets {_gib(other)}" if other else "")
        + f" = {_gib(ms['total_bytes'])} over {ms['cards']} cards; {_gib(ms['per_card_bytes'])} of state per card, "
        f"{_gib(ms['busiest_card_total_bytes'])} in all on the busiest card"
    )
    if check and check.get("layouts"):
        per = "; ".join(
            f"{r['framework']} {r['precision']}: {r['state_per_card_bytes'] / 1e9:,.1f} GB ({r['tier']})"
            for r in check["layouts"]
        )
        rng = check.get("range_gb")
        reach = ", ".join(check["reaching"]) or "none"
        line += f". State per card by framework default layout: {per}" + (
            f"; in the claimed {rng[0]:g}-{rng[1]:g} GB: {reach}" if rng else ""
        )
    return line


# -- HTML ------------------------------------------------------------------------------------

# one colour per family of ledger items (the legend lists families, not items)
FAMILIES = (
    ("weights", "#1565c0", ("weights", "parameters", "rotary", "adapters")),
    ("KV cache", "#6a1b9a", ("kv",)),
    ("activations", "#ef6c00", ("activation", "recompute", "transient", "prefill", "decode", "graph", "sampler", "profile")),
    ("loss / logits", "#ad1457", ("loss", "logits")),
    ("gradients, optimizer", "#2e7d32", ("gradient", "optimizer", "master", "partition", "bucket", "autocast")),
    ("sharding gathers", "#00838f", ("gather", "fsdp", "root unit")),
    ("runtime (context, allocator, NCCL)", "#616161", ("context", "allocator", "nccl", "cublas", "workspace", "cuda", "reserve")),
    ("host processes, loaders", "#8d6e63", ("process", "dataloader", "worker", "offload", "checkpoint", "pinned", "load")),
)  # fmt: skip
OTHER = ("other", "#9e9d24")
PAGE_CACHE = "#d7ccc8"
BESIDE = "#4e342e"  # the loads a workload runs beside (host RAM counts them with it)


def _family(name: str) -> tuple[str, str]:
    low = name.lower()
    for fam, colour, keys in FAMILIES:
        if any(k in low for k in keys):
            return fam, colour
    return OTHER


def _panel(
    out: list,
    x0: float,
    y: float,
    w: float,
    h: float,
    items: list[tuple[str, int, str]],
    capacity: int | None,
    used: int,
    seen: dict,
    suffix: str = "",
    tight: float = 0.9,
) -> None:
    """One stacked bar: items (name, bytes, colour) from x0, scaled so that the capacity sits at
    80 % of the panel; a dashed tight marker at the resource's own tight threshold (``tight`` of
    capacity: 90 % for card memory, 50 % for host RAM), a solid capacity line, and a break mark
    where a bar runs past the panel; the value and percentage in a column of their own to the
    right, so nothing is drawn over the capacity line."""
    if not capacity:
        out.append(f'<text x="{x0}" y="{y + h - 6}" font-size="11" fill="#757575">capacity unknown: '
                   f"{_gib(used)} used</text>")  # fmt: skip
        return
    scale = 0.8 * w / capacity
    x, end = x0, x0 + w
    for name, b, colour in items:
        bw = b * scale
        seen.setdefault(colour, name)
        if x < end:
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{max(0.5, min(bw, end - x)):.1f}" height="{h}" '
                       f'fill="{colour}"><title>{escape(name)}: {_gib(b)}</title></rect>')  # fmt: skip
        x += bw
    if x > end:  # past the panel: a white zig-zag says the bar is cut
        zx = end - 10
        out.append(f'<polyline points="{zx},{y - 2} {zx + 4},{y + h / 3:.1f} {zx - 2},{y + 2 * h / 3:.1f} '
                   f'{zx + 3},{y + h + 2}" fill="none" stroke="#fff" stroke-width="3"/>')  # fmt: skip
    cap_x = x0 + capacity * scale
    tight_x = x0 + tight * capacity * scale
    out.append(f'<line x1="{tight_x:.1f}" x2="{tight_x:.1f}" y1="{y - 2}" y2="{y + h + 2}" stroke="#ff8f00" '
               'stroke-width="1.5" stroke-dasharray="3,2"/>')  # fmt: skip
    out.append(f'<line x1="{cap_x:.1f}" x2="{cap_x:.1f}" y1="{y - 3}" y2="{y + h + 3}" stroke="#000" '
               'stroke-width="2"/>')  # fmt: skip
    pct = 100 * used / capacity
    colour = "#c62828" if pct > 100 else ("#e65100" if pct > 100 * tight else "#212121")
    out.append(f'<text x="{end + 6:.1f}" y="{y + h - 6}" font-size="11" fill="{colour}">'
               f"{_gib(used)} ({pct:.0f} %){suffix}</text>")  # fmt: skip


# the chart's geometry in px (the screenshot test reads it to find the capacity lines)
STACKS = {"label_w": 190, "panel_w": 280, "value_w": 180, "gap": 20, "bar_h": 16, "step": 24}


def _stacks_svg(rows: list[dict], machine: MachineProfile) -> str:
    """Per workload, two stacked bars side by side: the busiest card's ledger items against a
    card's memory and the host-RAM items against the host's (page cache light), each with its
    tight (90 %) marker and capacity line; colours by item family."""
    rows = [r for r in rows if r.get("stack") or (r.get("ledger") or {}).get("host_items")]
    if not rows:
        return "<p>No ledger to draw.</p>"
    label_w, panel_w, value_w, gap, bar_h, step = (
        STACKS[k] for k in ("label_w", "panel_w", "value_w", "gap", "bar_h", "step")
    )
    width = label_w + 2 * (panel_w + value_w) + gap
    host_cap = machine.host.ram_bytes
    h = 34 + len(rows) * step
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" role="img" '
           f'aria-label="card memory and host RAM per workload" font-family="sans-serif">']  # fmt: skip
    x_card, x_host = label_w, label_w + panel_w + value_w + gap
    out.append(f'<text x="{x_card}" y="14" font-size="12" font-weight="600">busiest card</text>')
    out.append(f'<text x="{x_host}" y="14" font-size="12" font-weight="600">host RAM</text>')
    seen: dict[str, str] = {}
    for k, r in enumerate(rows):
        y = 26 + k * step
        out.append(f'<text x="0" y="{y + bar_h - 4}" font-size="12">{escape(r["id"])}</text>')
        st = r.get("stack")
        if st:
            items = [(it["name"], it["bytes"], _family(it["name"])[1]) for it in st["items"]]
            _panel(out, x_card, y, panel_w, bar_h, items, st["capacity_bytes"], st["total_bytes"],
                   seen, tight=TIGHT["card memory"])  # fmt: skip
        hl = r.get("ledger") or {}
        own = [it for it in hl.get("host_items") or [] if it["bytes"] > 0]
        # what counts first (the job's own items, then the loads running beside it), the
        # evictable page cache after it, apart: it never decides the tier
        hitems = [(it["name"], it["bytes"], _family(it["name"])[1]) for it in own
                  if not it.get("reclaimable")]  # fmt: skip
        used = hl.get("host_peak_bytes") or 0
        res = resource_of(r, "host RAM")
        beside = (res or {}).get("used_bytes") or 0
        if r.get("beside") and beside > used:  # the host-RAM tier counts the loads beside it
            hitems.append((f"running beside it: {', '.join(r['beside'])}", beside - used, BESIDE))
            used = beside
        cache = sum(it["bytes"] for it in own if it.get("reclaimable"))
        if cache:
            hitems.append(("page cache (evictable)", cache, PAGE_CACHE))
        if hitems:
            _panel(out, x_host, y, panel_w, bar_h, hitems, host_cap, used, seen,
                   f" + {gib_num(cache, 0)} GiB cache" if cache else "", TIGHT["host RAM"])  # fmt: skip
    out.append("</svg>")
    fams = {c: f for f, c, _ in (*FAMILIES, (*OTHER, ()))}
    fams[PAGE_CACHE] = "page cache (evictable)"
    fams[BESIDE] = "loads running beside it"
    keys = "".join(f'<span class="key"><i style="background:{c}"></i>{escape(fams.get(c, c))}</span>'
                   for c in dict.fromkeys(seen))  # fmt: skip
    return (
        "".join(out) + f'<div class="legend">{keys}<span class="key">black line = capacity; '
        f"dashed orange = tight (card memory {TIGHT['card memory']:.0%}, host RAM "
        f"{TIGHT['host RAM']:.0%}); evictable page cache drawn last, after what counts; a white "
        "zig-zag = the bar is cut</span></div>"
    )


def _matrix_svg(machine: MachineProfile) -> str:
    cards = [a.index for a in machine.accelerators]
    if not cards:
        return "<p>No cards.</p>"
    cell, pad = 44, 60
    n = len(cards)
    bws = [machine.link(a, b).bandwidth_gbps for a in cards for b in cards if a != b]
    known = [b for b in bws if b is not None]
    if not known:
        kinds = sorted({machine.link(a, b).kind.value for a in cards for b in cards if a != b})
        return (
            f"<p>Bandwidth unknown for every pair of the {n} cards (link kinds: "
            f"{escape(', '.join(kinds))}): <code>nodeledger bench --save-profile FILE</code> "
            "measures it; no matrix is drawn without figures.</p>"
        )
    hi = max(known) if known else 1.0
    size = pad + n * cell + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{size}" height="{size}" role="img" '
           'aria-label="link matrix">']  # fmt: skip
    for i, a in enumerate(cards):
        out.append(f'<text x="{pad + i * cell + cell / 2}" y="{pad - 8}" font-size="11" '
                   f'text-anchor="middle">{a}</text>')  # fmt: skip
        out.append(f'<text x="{pad - 8}" y="{pad + i * cell + cell / 2 + 4}" font-size="11" '
                   f'text-anchor="end">{a}</text>')  # fmt: skip
        for j, b in enumerate(cards):
            x, y = pad + j * cell, pad + i * cell
            if a == b:
                fill, text, tip = "#eeeeee", "X", "self"
            else:
                lk = machine.link(a, b)
                bw = lk.bandwidth_gbps
                if bw is None:
                    fill = "#bdbdbd"
                else:
                    t = bw / hi
                    fill = f"rgb({int(230 - 200 * t)},{int(240 - 120 * t)},{int(255 - 60 * t)})"
                text = lk.label or lk.kind.value
                tip = f"{text}: {'unknown' if bw is None else f'{bw:,.0f} GB/s'}"
            out.append(f'<rect x="{x}" y="{y}" width="{cell - 2}" height="{cell - 2}" fill="{fill}">'
                       f'<title>{a}-{b} {escape(tip)}</title></rect>')  # fmt: skip
            out.append(f'<text x="{x + cell / 2 - 1}" y="{y + cell / 2 + 4}" font-size="10" '
                       f'text-anchor="middle">{escape(text[:6])}</text>')  # fmt: skip
    out.append("</svg>")
    return "".join(out) + (
        "<p class='small'>Colour: GB/s per direction, darker = faster; grey = unknown.</p>"
    )


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#212121;max-width:1200px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ccc;padding:4px 6px;vertical-align:top;text-align:left}
th{background:#f5f5f5}.tier{color:#fff;padding:1px 6px;border-radius:3px;font-weight:600}
.legend{font-size:11px;margin:6px 0}.key{margin-right:10px;white-space:nowrap}.key i{display:inline-block;width:10px;height:10px;margin-right:3px}
.small{font-size:12px;color:#555}.verdict{font-size:16px;font-weight:600;padding:8px;background:#f1f8e9;border-left:4px solid #2e7d32}
.verdict.buy{background:#fff3e0;border-color:#ef6c00}
"""


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def caveats(rep: dict) -> list[tuple[str, list[str]]]:
    """Each caveat once with the workloads it applies to: the "not judged" clauses of the
    reasons and the lifeboat line, in the order first met."""
    seen: dict[str, list[str]] = {}
    for r in rep["workloads"]:
        parts = [x for x in r["reason"].split("; ") if x.startswith("not judged:")]
        if r.get("lifeboat"):
            parts.append(r["lifeboat"])
        for x in parts:
            seen.setdefault(x, []).append(r["id"])
    return list(seen.items())


def resource_of(r: dict, name: str | None) -> dict | None:
    """The workload row's judgement of resource ``name`` (None: not judged)."""
    return next((x for x in r.get("resources") or [] if x["resource"] == name), None)


def binding_figure(r: dict) -> str:
    """The binding resource's own figure, short: "91.2 GiB of 64.0 GiB (142 %)"."""
    res = resource_of(r, r.get("binding"))
    text = (res or {}).get("reason") or r["reason"]
    text = text.split("; ")[0].removeprefix(f"{r.get('binding')}: ").removeprefix("busiest card ")
    text = text.split(" + ")[0]
    return text if len(text) <= 60 else text[:57] + "..."
