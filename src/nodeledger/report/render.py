"""Markdown and self-contained HTML renderings of a capacity report (strings; nothing printed).

The HTML page needs no network at view time: inline CSS and inline SVG charts (per-card stacked
memory bars per workload, the link matrix as a heat map), the tier table and the scale-out
verdict.
"""

from __future__ import annotations

from html import escape

from nodeledger.machine.profile import MachineProfile
from nodeledger.units import GiB

TIER_COLOUR = {"can": "#2e7d32", "tight": "#ef6c00", "cannot": "#c62828", "unknown": "#616161"}


def _gib(b) -> str:
    return "unknown" if b is None else f"{b / GiB:,.1f} GiB"


def _expect(r: dict) -> str:
    if not r.get("expect"):
        return ""
    return f"{r['expect']} ({'agrees' if r['agrees'] else 'differs'})"


def headline(rep: dict) -> str:
    m = rep["machine"]
    c = rep["counts"]
    caveat = (rep.get("runtime") or {}).get("caveat")
    return (
        f"{m['name']}: {len(rep['workloads'])} workloads — {c['can']} can, {c['tight']} tight, "
        f"{c['cannot']} cannot, {c['unknown']} unknown. {rep['scale_out']['verdict']}."
        + (f" Every card figure: {caveat}." if caveat else "")
    )


def serving_lines(rep: dict) -> list[str]:
    s = rep["serving"]
    out = []
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
    """Throughput at the most that fit, or why it is unknown."""
    if w.get("output_tokens_per_s") is None:
        why = w.get("speed_unknown") or []
        return ("; output tokens/s unknown (" + why[0] + ")") if why else ""
    return (
        f"; {w['output_tokens_per_s']:,.0f} output tokens/s = {w['requests_per_s']:,.2f} "
        f"requests/s of {w['input_len']:,} + {w['output_len']:,} tokens "
        f"({w['output_tokens_per_s_per_replica']:,.0f} per replica, bound by {w['speed_binding']}; "
        "speed/serve.py)"
    )


def markdown(rep: dict, intro: list[str] | None = None) -> str:
    m = rep["machine"]
    L = [f"# Capacity report: {m['name']}", ""]
    L += [f"> {line}" for line in intro or []]
    L += ["", headline(rep), "", f"_{m['description']}_", ""]
    L += ["## Workloads", "",
          "| workload | tier | binds | reason (numbers) | field notes |", "|---|---|---|---|---|"]  # fmt: skip
    for r in rep["workloads"]:
        reason = r["reason"].replace("|", "/")
        L.append(f"| {r['id']} — {r['title']} | **{r['tier_name']}** | {r['binding'] or ''} | "
                 f"{reason} | {_expect(r)} |")  # fmt: skip
    L += ["", "Notes:", ""]
    for r in rep["workloads"]:
        if r.get("lifeboat"):
            L.append(f"- {r['id']}: {r['lifeboat']}")
        if r.get("claim") and r.get("model_state"):
            L.append(f"- {r['id']}: claim: {r['claim']}. Ledger: "
                     f"{state_line(r['model_state'], r.get('framework'), r.get('claim_check'))}")  # fmt: skip
    L += ["", "## Bottleneck ranking", "",
          "| resource | cannot | tight | worst demand / capacity (memory: used / size; links, network: traffic / compute time) | unknown | workloads |",
          "|---|---|---|---|---|---|"]  # fmt: skip
    for b in rep["bottlenecks"]:
        ratio = "" if b["worst_ratio"] is None else f"{b['worst_ratio']:.0%}"
        L.append(f"| {b['resource']} | {b['cannot']} | {b['tight']} | {ratio} | {b['unknown']} | "
                 f"{', '.join(b['workloads'])} |")  # fmt: skip
    s = rep["serving"]
    L += [
        "",
        f"## Serving capacity (lifeboat: {s['lifeboat']} of {s['cards']} cards kept free)",
        "",
    ]
    L += [f"- {line}" for line in serving_lines(rep)]
    L += ["", "## Host RAM: big loads at once", ""]
    for h in rep["host_loads"]:
        L.append(f"- {h['model']}: {h['max_concurrent']} at once (hard limit), "
                 f"{h['max_without_tight']} without entering tight; {h['reason']}")  # fmt: skip
        if h.get("load_times"):
            L.append(f"  - {load_line(h['load_times'])}")
    L += ["", "## Links and network", ""]
    for lk in rep["links"]:
        L.append(f"- {lk['id']} ({lk['basis']}): {lk['reason']}")
    so = rep["scale_out"]
    L += ["", f"## Scale-out verdict: {so['verdict']}", ""]
    for i, c in enumerate(so["criteria"], 1):
        L.append(f"{i}. {c['criterion']}: **{'holds' if c['holds'] else 'does not hold'}**")
        L += [f"   - {e}" for e in c["evidence"]]
    L += ["", "Sources: every figure comes from the ledger (`nodeledger fit` for one workload "
          "shows each item with its formula); link figures from ledger/comm.py.", ""]  # fmt: skip
    return "\n".join(L)


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

PALETTE = ["#1565c0", "#6a1b9a", "#00838f", "#2e7d32", "#9e9d24", "#ef6c00", "#ad1457",
           "#4e342e", "#37474f", "#5c6bc0", "#26a69a", "#8d6e63", "#7cb342", "#ffa000"]  # fmt: skip


def _colour(name: str, cache: dict[str, str]) -> str:
    key = name.split("(")[0].split(",")[0].strip().lower()
    if key not in cache:
        cache[key] = PALETTE[len(cache) % len(PALETTE)]
    return cache[key]


def _bars_svg(rows: list[dict]) -> str:
    """One horizontal stacked bar per workload: the busiest card's items against its memory."""
    rows = [r for r in rows if r.get("stack") and r["stack"]["capacity_bytes"]]
    if not rows:
        return "<p>No card ledger to draw (card memory unknown).</p>"
    width, label_w, bar_h, gap = 900, 220, 22, 10
    top = max(max(r["stack"]["total_bytes"], r["stack"]["capacity_bytes"]) for r in rows)
    scale = (width - label_w - 110) / top
    colours: dict[str, str] = {}
    h = len(rows) * (bar_h + gap) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" '
           f'role="img" aria-label="per-card memory by workload">']  # fmt: skip
    for k, r in enumerate(rows):
        y = 10 + k * (bar_h + gap)
        st = r["stack"]
        out.append(f'<text x="0" y="{y + 15}" font-size="12">{escape(r["id"])}</text>')
        x = label_w
        for it in st["items"]:
            w = it["bytes"] * scale
            c = _colour(it["name"], colours)
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{max(w, 0.5):.1f}" height="{bar_h}" '
                       f'fill="{c}"><title>{escape(it["name"])}: {_gib(it["bytes"])}</title></rect>')  # fmt: skip
            x += w
        cap_x = label_w + st["capacity_bytes"] * scale
        out.append(f'<line x1="{cap_x:.1f}" x2="{cap_x:.1f}" y1="{y - 3}" y2="{y + bar_h + 3}" '
                   'stroke="#000" stroke-width="2"/>')  # fmt: skip
        pct = 100 * st["total_bytes"] / st["capacity_bytes"]
        out.append(f'<text x="{min(x, cap_x) + 4 if x < cap_x else x + 4:.1f}" y="{y + 15}" '
                   f'font-size="11">{_gib(st["total_bytes"])} ({pct:.0f} %)</text>')  # fmt: skip
    out.append("</svg>")
    legend = "".join(
        f'<span class="key"><i style="background:{c}"></i>{escape(n)}</span>'
        for n, c in colours.items()
    )
    return (
        "".join(out)
        + f'<div class="legend">{legend} <span class="key">| black line = card memory</span></div>'
    )


def _matrix_svg(machine: MachineProfile) -> str:
    cards = [a.index for a in machine.accelerators]
    if not cards:
        return "<p>No cards.</p>"
    cell, pad = 44, 60
    n = len(cards)
    bws = [machine.link(a, b).bandwidth_gbps for a in cards for b in cards if a != b]
    known = [b for b in bws if b is not None]
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


def html(rep: dict, machine: MachineProfile, intro: list[str] | None = None) -> str:
    m = rep["machine"]
    P = ["<!doctype html><html><head><meta charset='utf-8'>",
         f"<title>nodeledger capacity report: {escape(m['name'])}</title><style>{CSS}</style></head><body>",
         f"<h1>Capacity report: {escape(m['name'])}</h1>"]  # fmt: skip
    P += [f"<p class='small'>{escape(line)}</p>" for line in intro or []]
    P.append(f"<p>{escape(headline(rep))}</p><p class='small'>{escape(m['description'])}</p>")
    P.append("<h2>Workloads</h2><table><tr><th>workload</th><th>tier</th><th>binds</th>"
             "<th>reason (numbers)</th><th>field notes</th></tr>")  # fmt: skip
    for r in rep["workloads"]:
        c = TIER_COLOUR[r["tier_name"]]
        P.append(
            f"<tr><td><b>{escape(r['id'])}</b><br><span class='small'>{escape(r['title'])}</span></td>"
            f"<td><span class='tier' style='background:{c}'>{r['tier_name']}</span></td>"
            f"<td>{escape(r['binding'] or '')}</td><td>{escape(r['reason'])}"
            + (f"<br><span class='small'>{escape(r['lifeboat'])}</span>" if r.get("lifeboat") else "")
            + (f"<br><span class='small'>claim: {escape(r['claim'])}. Ledger: "
               f"{escape(state_line(r['model_state'], r.get('framework'), r.get('claim_check')))}</span>" if r.get("claim") and r.get("model_state") else "")
            + f"</td><td>{escape(_expect(r))}</td></tr>"
        )  # fmt: skip
    P.append("</table>")
    P.append("<h2>Busiest card per workload (stacked memory)</h2>" + _bars_svg(rep["workloads"]))
    P.append("<h2>Card-to-card links</h2>" + _matrix_svg(machine))
    P.append("<h2>Bottleneck ranking</h2><table><tr><th>resource</th><th>cannot</th><th>tight</th>"
             "<th>worst demand / capacity (memory: used / size; links, network: traffic / compute time)</th><th>unknown</th><th>workloads</th></tr>")  # fmt: skip
    for b in rep["bottlenecks"]:
        ratio = "" if b["worst_ratio"] is None else f"{b['worst_ratio']:.0%}"
        P.append(f"<tr><td>{b['resource']}</td><td>{b['cannot']}</td><td>{b['tight']}</td>"
                 f"<td>{ratio}</td><td>{b['unknown']}</td><td>{escape(', '.join(b['workloads']))}</td></tr>")  # fmt: skip
    P.append("</table>")
    s = rep["serving"]
    P.append(
        f"<h2>Serving capacity (lifeboat: {s['lifeboat']} of {s['cards']} cards free)</h2><ul>"
    )
    P += [f"<li>{escape(line)}</li>" for line in serving_lines(rep)]
    P.append("</ul><h2>Host RAM: big loads at once</h2><ul>")
    for h in rep["host_loads"]:
        P.append(f"<li>{escape(h['model'])}: {h['max_concurrent']} at once, {h['max_without_tight']} "
                 f"without entering tight; {escape(h['reason'])}"
                 + (f"<br>{escape(load_line(h['load_times']))}" if h.get("load_times") else "")
                 + "</li>")  # fmt: skip
    P.append("</ul><h2>Links and network</h2><ul>")
    P += [f"<li><b>{escape(lk['id'])}</b> ({escape(lk['basis'])}): {escape(lk['reason'])}</li>"
          for lk in rep["links"]]  # fmt: skip
    so = rep["scale_out"]
    P.append(f"</ul><h2>Scale-out verdict</h2><p class='verdict{' buy' if so['buy_second_machine'] else ''}'>"
             f"{escape(so['verdict'])}</p><ol>")  # fmt: skip
    for c in so["criteria"]:
        P.append(f"<li>{escape(c['criterion'])}: <b>{'holds' if c['holds'] else 'does not hold'}</b><ul>"
                 + "".join(f"<li>{escape(e)}</li>" for e in c["evidence"]) + "</ul></li>")  # fmt: skip
    P.append("</ol><p class='small'>Generated by nodeledger; every figure comes from the ledger "
             "(`nodeledger fit` shows each item with its formula and source).</p></body></html>")  # fmt: skip
    return "".join(P)
