"""The capacity report's sections, each one class that renders itself to the terminal (rich),
to Markdown and to HTML.  The three documents (report/documents.py: ``terminal``,
``markdown``, ``html``) are their header and these sections in order; a new section is one class here
and one entry in ``SECTIONS``.  A section reads its slice of the report (``capacity_report``'s
dict, which ``report --format json`` prints unchanged); a format it has nothing for renders
nothing."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from html import escape as h
from typing import Any

from nodeledger import document
from nodeledger.report import render as R
from nodeledger.units import count, gib_num, gib_text


def rx(text: str) -> str:
    """Text for a rich markup string ('[nvidia]' stays '[nvidia]'); rich is loaded only by the
    terminal format."""
    from rich.markup import escape

    return escape(text)


def Table(*args, **kwargs):
    from rich.table import Table as T

    return T(*args, **kwargs)


TIER_STYLE = {"can": "green", "tight": "dark_orange", "cannot": "red", "unknown": "grey50"}


class Notes:
    """The one-screen report's caveats, each said once and numbered; a row refers to its
    number ("[2]")."""

    def __init__(self) -> None:
        self.items: dict[str, list[str]] = {}

    def ref(self, text: str, ids: list[str] | None = None) -> int:
        """The caveat's number (a new one is added at the end); ``ids``: the rows it covers."""
        rows = self.items.setdefault(text, [])
        rows += [i for i in ids or [] if i not in rows]
        return list(self.items).index(text) + 1

    def lines(self) -> list[str]:
        out = []
        for n, text in enumerate(self.items, 1):
            out.append(f"[{n}] {text}")  # the rows name it in their "see" column
        return out


@dataclass
class Section(document.Section):
    """A capacity-report section: it reads its slice of ``rep``; besides the three formats of
    every section kind (``document.Section``) it has a one-screen form."""

    rep: dict[str, Any]
    machine: Any = None  # the MachineProfile, for the HTML charts

    def brief(self, con, notes: Notes) -> None:
        """Print the section's answer on ``con`` for the one-screen report; a caveat goes to
        ``notes`` (said once, below the table), the rest is for ``--details``.  A section
        without a brief form prints itself whole."""
        self.terminal(con, False)


def _claims(rep: dict) -> list[tuple[dict, str]]:
    """(workload, the ledger's line) for each workload that carries a claim from the notes."""
    return [(r, R.state_line(r["model_state"], r.get("framework"), r.get("claim_check")))
            for r in rep["workloads"] if r.get("claim") and r.get("model_state")]  # fmt: skip


def common_capacity(rows: list[dict], name: str) -> int | None:
    """The capacity most workloads have for ``name`` (card memory, host RAM): the table's
    header states it once, a row with another (two machines' host RAM) states its own."""
    caps = [x["capacity_bytes"] for r in rows
            if (x := R.resource_of(r, name)) and x.get("capacity_bytes")]  # fmt: skip
    return max(set(caps), key=caps.count) if caps else None


def memory_cell(r: dict, name: str, common: int | None = None) -> str:
    """The workload's card memory (busiest card) or host RAM as "59.8 93%" (GiB, of the
    header's capacity; "48.0/250.0 19%" where the row's own differs), with its tier when it is
    not "fits"."""
    x = R.resource_of(r, name)
    if x is None or x.get("used_bytes") is None or not x.get("capacity_bytes"):
        return "" if x is None else "unknown"
    used, size = x["used_bytes"], x["capacity_bytes"]
    cap = "" if size == common else f"/{gib_text(size, unit='')}"
    text = f"{gib_num(used)}{cap} {used / size:.0%}"
    if x.get("tier") not in (None, "fits"):
        text += f" {x['tier']}"
    return text


def beside_note(r: dict) -> str | None:
    """The caveat of a workload whose host RAM counts the loads running beside it."""
    x = R.resource_of(r, "host RAM")
    if r.get("beside") and x is not None and "beside" in (x.get("reason") or ""):
        return f"host RAM counted with {', '.join(r['beside'])} running beside it"
    return None


BINDS_NOTE = {
    "network": " the compute it hides behind",
    "card links": " the compute it hides behind",
}


def binds_cell(r: dict) -> str:
    """The binding resource; a link or network one with its traffic against the compute time
    it hides behind ("network 13.3x")."""
    b = r.get("binding") or ""
    x = R.resource_of(r, b)
    if b in ("card memory", "host RAM") or x is None or x.get("ratio") is None:
        return b
    return f"{b} {x['ratio']:,.1f}x" if b in ("network", "card links") else b


def serving_cell(w: dict | None, notes: Notes, refs: list[int]) -> str:
    """A serving workload's replicas x cards on the business cards and the sequences they hold
    at its context ("7x1 749@4k"), with its output tokens/s when the speed model has them; why
    not (no replica, speed unknown) goes to ``notes`` and ``refs``."""
    if w is None:
        return ""
    if w["note"]:
        refs.append(notes.ref(f"no replica: {w['note'].removesuffix(': no replica')}", [w["id"]]))
        return "none"
    tot, ctx = w["total_sequences"], w["context"]
    text = (f"{w['replicas_on_business_cards']}x{w['cards_per_replica']} "
            f"{'?' if tot is None else f'{tot:,}'}@"
            f"{f'{ctx // 1024}k' if ctx % 1024 == 0 else f'{ctx:,}'}")  # fmt: skip
    if w.get("output_tokens_per_s") is not None:
        return text + f" {w['output_tokens_per_s']:,.0f} tok/s"
    if w.get("speed_unknown"):
        refs.append(notes.ref("output tokens/s unknown: " + w["speed_unknown"][0].split(" (")[0],
                              [w["id"]]))  # fmt: skip
    return text


def field_notes_cell(r: dict) -> str:
    exp = r.get("expect")
    return "" if not exp else ("agrees" if r.get("agrees") else f"said {exp}")


class Workloads(Section):
    """One line per workload (tier, what binds, its figure, the field notes' expectation), each
    caveat once with its rows, the claims checked, every reason whole (terminal: ``--details``)."""

    def terminal(self, con, details: bool = False) -> None:
        rep = self.rep
        if details:
            t = Table(title="Workloads", show_lines=False)
            for col in ("workload", "tier", "binds",
                        "reason (numbers; `nodeledger fit` shows every item)", "field notes"):  # fmt: skip
                t.add_column(col)
            for r in rep["workloads"]:
                tier = r["tier_name"]
                t.add_row(rx(r["id"]), f"[{TIER_STYLE[tier]}]{tier}[/]", r["binding"] or "",
                          r["reason"] + (f"\n{r['lifeboat']}" if r.get("lifeboat") else ""),
                          R.expect_note(r))  # fmt: skip
            con.print(t)
        else:
            t = Table(title="Workloads (`--details`: every reason; `nodeledger fit`: every item)")
            for col in ("workload", "tier", "binds", "figure", "field notes"):
                t.add_column(col, no_wrap=col in ("workload", "tier"))
            for r in rep["workloads"]:
                tier = r["tier_name"]
                exp = r.get("expect")
                notes = (
                    ""
                    if not exp
                    else (f"{exp} (agrees)" if r.get("agrees") else f"{exp} (differs)")
                )
                t.add_row(rx(r["id"]), f"[{TIER_STYLE[tier]}]{tier}[/]", r["binding"] or "",
                          rx(R.binding_figure(r)), notes)  # fmt: skip
            con.print(t)
            for text, ids in R.caveats(rep):
                rows = (
                    ", ".join(ids)
                    if len(ids) <= 4
                    else f"{count(len(ids), 'workload')}: {', '.join(ids)}"
                )
                con.print(f"  {text} — {rows}", markup=False, highlight=False)
        for r, line in _claims(rep):
            con.print(f"{r['id']}: claim: {r['claim']}.\n  ledger: {line}", markup=False)

    def brief(self, con, notes: Notes) -> None:
        from rich import box

        rep = self.rep
        t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0),
                  collapse_padding=True)  # fmt: skip
        rows = rep["workloads"]
        card, host = common_capacity(rows, "card memory"), common_capacity(rows, "host RAM")
        # a narrow terminal leaves out the binds column: a binding other than the two memories
        # becomes a caveat (the tier words in the memory cells show theirs)
        narrow = con.width < 110
        # a catalogue without a serving workload has no serving column
        serves = bool(rep["serving"]["workloads"])
        cols = ["workload", "tier", *([] if narrow else ["binds"]),
                "card GiB" + (f" of {gib_text(card, unit='')}" if card else ""),
                "RAM GiB" + (f" of {gib_text(host, unit='')}" if host else ""),
                *(["serving"] if serves else []), "see"]  # fmt: skip
        for col in cols:
            t.add_column(col, no_wrap=col in ("tier", "see"), overflow="fold")
        serving = {w["id"]: w for w in rep["serving"]["workloads"]}
        caveats = R.caveats(rep)
        for text, ids in caveats:
            notes.ref(text, ids)
        differ = [r for r in rep["workloads"] if r.get("expect") and not r.get("agrees")]
        differs = ("the field notes expect another tier: " + "; ".join(
            f"{r['id']} {r['expect']}" for r in differ)) if differ else None  # fmt: skip
        for r in rep["workloads"]:
            tier = r["tier_name"]
            refs = [notes.ref(text) for text, ids in caveats if r["id"] in ids]
            if beside := beside_note(r):
                refs.append(notes.ref(beside, [r["id"]]))
            if differs and r in differ:
                refs.append(notes.ref(differs))
            cell = serving_cell(serving.get(r["id"]), notes, refs)
            b = binds_cell(r)
            if r.get("binding") not in (None, "card memory", "host RAM", *BINDS_NOTE):
                # cards, disk ...: the row has no cell for it, its figure is a caveat
                refs.append(notes.ref(f"{r['binding']}: {R.binding_figure(r)}", [r["id"]]))
            elif narrow and r.get("binding") in BINDS_NOTE:
                refs.append(notes.ref(f"binds: {b}{BINDS_NOTE[r['binding']]}", [r["id"]]))
            t.add_row(rx(r["id"]), f"[{TIER_STYLE[tier]}]{tier}[/]", *([] if narrow else [rx(b)]),
                      rx(memory_cell(r, "card memory", card)), rx(memory_cell(r, "host RAM", host)),
                      *([rx(cell)] if serves else []), ",".join(map(str, sorted(set(refs)))))  # fmt: skip
        con.print(t)

    def markdown(self) -> list[str]:
        rep = self.rep
        L = ["## Workloads", "",
             "| workload | tier | binds | figure | field notes |", "|---|---|---|---|---|"]  # fmt: skip
        for r in rep["workloads"]:
            L.append(f"| {r['id']} | **{r['tier_name']}** | {r['binding'] or ''} | "
                     f"{R.binding_figure(r).replace('|', '/')} | {R.expect_note(r)} |")  # fmt: skip
        L += [""]
        L += [f"- {text} — {', '.join(ids)}" for text, ids in R.caveats(rep)]
        L += [f"- {r['id']}: claim: {r['claim']}. Ledger: {line}" for r, line in _claims(rep)]
        L += ["", "### Every workload's reason", "", "| workload | reason (numbers) |", "|---|---|"]
        for r in rep["workloads"]:
            L.append(f"| {r['id']} — {r['title']} | {r['reason'].replace('|', '/')} |")
        return L

    def html(self) -> list[str]:
        rep = self.rep
        P = ["<h2>Workloads</h2><table><tr><th>workload</th><th>tier</th><th>binds</th>"
             "<th>figure</th><th>card memory GiB</th><th>host RAM GiB</th><th>field notes</th>"
             "</tr>"]  # fmt: skip
        for r in rep["workloads"]:
            c = R.TIER_COLOUR[r["tier_name"]]
            note = beside_note(r)
            P.append(f"<tr><td><b>{h(r['id'])}</b></td>"
                     f"<td><span class='tier' style='background:{c}'>{r['tier_name']}</span></td>"
                     f"<td>{h(r['binding'] or '')}</td><td>{h(R.binding_figure(r))}</td>"
                     f"<td>{h(memory_cell(r, 'card memory'))}</td>"
                     f"<td>{h(memory_cell(r, 'host RAM'))}{f'<br><small>{h(note)}</small>' if note else ''}</td>"
                     f"<td>{h(R.expect_note(r))}</td></tr>")  # fmt: skip
        P.append("</table><ul class='small'>")
        for text, ids in R.caveats(rep):
            P.append(f"<li>{h(text)} — {h(', '.join(ids))}</li>")
        P.append("</ul>")
        P.append("<h2>Card memory and host RAM per workload</h2>"
                 + R._stacks_svg(rep["workloads"], self.machine))  # fmt: skip
        for r, line in _claims(rep):
            P.append(f"<p class='small'><b>{h(r['id'])}</b>: claim: {h(r['claim'])}. Ledger: "
                     f"{h(line)}</p>")  # fmt: skip
        P.append("<details><summary>Every workload's reason, whole</summary><table><tr><th>workload</th>"
                 "<th>reason (numbers)</th></tr>")  # fmt: skip
        for r in rep["workloads"]:
            P.append(f"<tr><td><b>{h(r['id'])}</b><br><span class='small'>{h(r['title'])}</span></td>"
                     f"<td>{h(r['reason'])}</td></tr>")  # fmt: skip
        P.append("</table></details>")
        return P


class CardLinks(Section):
    """The card-to-card link matrix (HTML: a heat map)."""

    def html(self) -> list[str]:
        return ["<h2>Card-to-card links</h2>" + R._matrix_svg(self.machine)]


# what each resource's worst ratio is a ratio of
RATIO_OF = {"card memory": "a card", "host RAM": "its size", "network": "the compute it hides "
            "behind", "card links": "the compute it hides behind", "disk": "its budget",
            "cards": "the cards"}  # fmt: skip


def ranking_sentence(bottlenecks: list[dict]) -> str:
    """ "Bottlenecks: network >> host RAM > card memory — ...": the resources that bind a
    workload in the report's order, ">>" where one's worst ratio is at least twice the next's;
    each with its count and its worst demand against what it is a ratio of."""
    bind = [b for b in bottlenecks if b["cannot"] or b["tight"]]
    if not bind:
        return "Bottlenecks: no resource makes a workload tight or cannot."
    order = bind[0]["resource"]
    for a, b in itertools.pairwise(bind):
        ra, rb = a.get("worst_ratio"), b.get("worst_ratio")
        order += (" >> " if ra and rb and ra >= 2 * rb else " > ") + b["resource"]
    parts = []
    for b in bind:
        tiers = ", ".join(f"{b[k]} {k}" for k in ("cannot", "tight") if b[k])
        worst = ("" if b.get("worst_ratio") is None else
                 f", up to {b['worst_ratio']:,.2f}x {RATIO_OF.get(b['resource'], 'its capacity')}")  # fmt: skip
        parts.append(f"{b['resource']} {tiers}{worst}")
    return f"Bottlenecks: {order} — {'; '.join(parts)}."


class Bottlenecks(Section):
    """Which resource binds how many workloads, and its worst demand against its capacity."""

    COLUMN = ("worst demand / capacity (memory: used / size; links, network: traffic / compute "
              "time)")  # fmt: skip

    def _rows(self):
        for b in self.rep["bottlenecks"]:
            yield b, "" if b["worst_ratio"] is None else f"{b['worst_ratio']:.0%}"

    def terminal(self, con, details: bool = False) -> None:
        t = Table(title="Bottleneck ranking (workloads each resource binds)")
        for col in ("resource", "cannot", "tight", self.COLUMN, "unknown"):
            t.add_column(col)
        for b, ratio in self._rows():
            t.add_row(b["resource"], str(b["cannot"]), str(b["tight"]), ratio, str(b["unknown"]))
        con.print(t)

    def brief(self, con, notes: Notes) -> None:
        con.print(ranking_sentence(self.rep["bottlenecks"]), markup=False, highlight=False)

    def markdown(self) -> list[str]:
        L = ["", "## Bottleneck ranking", "",
             f"| resource | cannot | tight | {self.COLUMN} | unknown | workloads |",
             "|---|---|---|---|---|---|"]  # fmt: skip
        for b, ratio in self._rows():
            L.append(f"| {b['resource']} | {b['cannot']} | {b['tight']} | {ratio} | {b['unknown']} | "
                     f"{', '.join(b['workloads'])} |")  # fmt: skip
        return L

    def html(self) -> list[str]:
        P = ["<h2>Bottleneck ranking</h2><table><tr><th>resource</th><th>cannot</th><th>tight</th>"
             f"<th>{self.COLUMN}</th><th>unknown</th><th>workloads</th></tr>"]  # fmt: skip
        for b, ratio in self._rows():
            P.append(f"<tr><td>{b['resource']}</td><td>{b['cannot']}</td><td>{b['tight']}</td>"
                     f"<td>{ratio}</td><td>{b['unknown']}</td><td>{h(', '.join(b['workloads']))}</td></tr>")  # fmt: skip
        P.append("</table>")
        return P


class Serving(Section):
    """Serving capacity with the lifeboat card kept free."""

    def terminal(self, con, details: bool = False) -> None:
        s = self.rep["serving"]
        con.print(f"Serving capacity (lifeboat: {s['lifeboat']} of {s['cards']} cards kept free):")
        for line in R.serving_lines(self.rep):
            con.print(f"  {line}", markup=False)

    def brief(self, con, notes: Notes) -> None:
        s = self.rep["serving"]
        if not s["workloads"]:  # no serving workload: no serving column to explain
            return
        con.print(f"serving: replicas x cards on the {s['business_cards']} business cards (lifeboat: "
                  f"{s['lifeboat']} of {s['cards']} cards kept free), sequences held @ context "
                  "tokens, output tokens/s at that load.", markup=False, highlight=False)  # fmt: skip
        if s.get("lifeboat_note"):
            con.print(f"  {s['lifeboat_note']}", markup=False)

    def markdown(self) -> list[str]:
        s = self.rep["serving"]
        L = [
            "",
            f"## Serving capacity (lifeboat: {s['lifeboat']} of {s['cards']} cards kept free)",
            "",
        ]
        return L + [f"- {line}" for line in R.serving_lines(self.rep)]

    def html(self) -> list[str]:
        s = self.rep["serving"]
        total = sum(w["total_sequences"] or 0 for w in s["workloads"])
        P = [f"<h2>Serving capacity (lifeboat: {s['lifeboat']} of {s['cards']} cards free)</h2>"
             f"<details><summary>{count(len(s['workloads']), 'serving workload')} on "
             f"{count(s['business_cards'], 'business card')}; up to {total:,} sequences in all at their contexts</summary><ul>"]  # fmt: skip
        P += [f"<li>{h(line)}</li>" for line in R.serving_lines(self.rep)]
        P.append("</ul></details>")
        return P


class HostLoads(Section):
    """How many big loads host RAM takes at once."""

    def terminal(self, con, details: bool = False) -> None:
        con.print("Host RAM, big loads at once:")
        for x in self.rep["host_loads"]:
            con.print(f"  {x['model']}: {x['max_concurrent']} at once (hard limit), "
                      f"{x['max_without_tight']} without entering tight; {x['reason']}", markup=False)  # fmt: skip
            if x.get("load_times"):
                con.print(f"    {R.load_line(x['load_times'])}", markup=False)

    def brief(self, con, notes: Notes) -> None:
        for x in self.rep["host_loads"]:
            most, calm = (("unknown" if v is None else v)
                          for v in (x["max_concurrent"], x["max_without_tight"]))  # fmt: skip
            con.print(f"Host RAM, big loads at once: {x['model']}: {most} at once "
                      f"(hard limit), {calm} without entering tight; "
                      f"{x['reason']}", markup=False, highlight=False)  # fmt: skip

    def markdown(self) -> list[str]:
        L = ["", "## Host RAM: big loads at once", ""]
        for x in self.rep["host_loads"]:
            L.append(f"- {x['model']}: {x['max_concurrent']} at once (hard limit), "
                     f"{x['max_without_tight']} without entering tight; {x['reason']}")  # fmt: skip
            if x.get("load_times"):
                L.append(f"  - {R.load_line(x['load_times'])}")
        return L

    def html(self) -> list[str]:
        P = ["<h2>Host RAM: big loads at once</h2><ul>"]
        for x in self.rep["host_loads"]:
            P.append(f"<li>{h(x['model'])}: {x['max_concurrent']} at once, {x['max_without_tight']} "
                     f"without entering tight; {h(x['reason'])}"
                     + (f"<br>{h(R.load_line(x['load_times']))}" if x.get("load_times") else "")
                     + "</li>")  # fmt: skip
        P.append("</ul>")
        return P


class Links(Section):
    """Each workload's traffic between cards or machines against the compute it hides behind."""

    def brief(self, con, notes: Notes) -> None:
        """Nothing of its own: the binds column and the caveats say what binds (``--details``)."""

    def terminal(self, con, details: bool = False) -> None:
        con.print("Links and network:")
        for lk in self.rep["links"]:
            con.print(f"  {lk['id']} ({lk['basis']}): {lk['reason']}", markup=False)

    def markdown(self) -> list[str]:
        L = ["", "## Links and network", ""]
        return L + [f"- {lk['id']} ({lk['basis']}): {lk['reason']}" for lk in self.rep["links"]]

    def html(self) -> list[str]:
        links = self.rep["links"]
        P = [f"<h2>Links and network</h2><details><summary>{count(len(links), 'workload')} "
             "that move data between cards or machines: traffic per token against the compute it "
             "hides behind</summary><ul>"]  # fmt: skip
        P += [
            f"<li><b>{h(lk['id'])}</b> ({h(lk['basis'])}): {h(lk['reason'])}</li>" for lk in links
        ]
        P.append("</ul></details>")
        return P


class ScaleOut(Section):
    """When a second machine is justified: the verdict and each criterion with its evidence."""

    def terminal(self, con, details: bool = False) -> None:
        so = self.rep["scale_out"]
        con.print(f"Scale-out verdict: {so['verdict']}", markup=False)
        for i, c in enumerate(so["criteria"], 1):
            con.print(f"  {i}. {c['criterion']}: {'holds' if c['holds'] else 'does not hold'}",
                      markup=False)  # fmt: skip
            for e in c["evidence"]:
                con.print(f"     - {e}", markup=False)

    def brief(self, con, notes: Notes) -> None:
        so = self.rep["scale_out"]
        held = [str(i) for i, c in enumerate(so["criteria"], 1) if c["holds"]]
        con.print(f"Scale-out verdict: {so['verdict']}"
                  + (f" (criterion {', '.join(held)} holds)" if held and not so["buy_second_machine"] else ""),
                  markup=False, highlight=False)  # fmt: skip

    def markdown(self) -> list[str]:
        so = self.rep["scale_out"]
        L = ["", f"## Scale-out verdict: {so['verdict']}", ""]
        for i, c in enumerate(so["criteria"], 1):
            L.append(f"{i}. {c['criterion']}: **{'holds' if c['holds'] else 'does not hold'}**")
            L += [f"   - {e}" for e in c["evidence"]]
        return L

    def html(self) -> list[str]:
        so = self.rep["scale_out"]
        P = [f"<h2>Scale-out verdict</h2><p class='verdict{' buy' if so['buy_second_machine'] else ''}'>"
             f"{h(R._cap(so['verdict']))}</p><ol>"]  # fmt: skip
        for c in so["criteria"]:
            P.append(f"<li>{h(c['criterion'])}: <b>{'holds' if c['holds'] else 'does not hold'}</b><ul>"
                     + "".join(f"<li>{h(e)}</li>" for e in c["evidence"]) + "</ul></li>")  # fmt: skip
        P.append("</ol>")
        return P


# the report's sections in the order every format prints them
SECTIONS: tuple[type[Section], ...] = (Workloads, CardLinks, Bottlenecks, Serving, HostLoads,
                                       Links, ScaleOut)  # fmt: skip


def sections(rep: dict, machine: Any = None) -> list[Section]:
    return [cls(rep, machine) for cls in SECTIONS]
