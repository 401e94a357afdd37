"""The section kinds every consumer's document is made of (the capacity report's sections,
doctor's checks, the go-live steps): a ``Section`` renders itself to the terminal (rich), to
Markdown and to HTML; ``Checklist`` is the kind for a list of checks, each with a status, a
summary, its evidence and a fix.  Consumers never import each other, so the kinds they share
live here, below them; rich is imported only when a terminal renders."""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape as h


def md_cell(text: object) -> str:
    """Text for one Markdown table cell or line: '|' escaped, on one line."""
    return str(text).replace("|", "\\|").replace("\n", " ")


class Section:
    """One part of a document; a format it has nothing for renders nothing."""

    def terminal(self, con, details: bool = False) -> None:
        """Print the section on ``con`` (rich), whole."""

    def markdown(self) -> list[str]:
        return []

    def html(self) -> list[str]:
        return []


@dataclass
class Check:
    name: str
    status: str
    summary: str
    evidence: list[str] = field(default_factory=list)  # lines: what was seen, and where
    fix: str | None = None  # a command the reader runs (never run for them)


@dataclass
class Checklist(Section):
    """Checks with a status each: a table (name, status, summary), then each check's evidence
    (or, ``inline``, the evidence under its summary in the table), then the fixes."""

    title: str
    columns: tuple[str, str, str]  # the name's, the status's and the summary's headers
    checks: list[Check]
    styles: dict[str, str]  # status -> rich colour
    inline: bool = False
    fixes_title: str = "Fixes"  # bold, then the note
    fixes_note: str = ""

    def terminal(self, con, details: bool = False) -> None:
        from rich.markup import escape
        from rich.table import Table

        t = Table(title=self.title)
        for col in self.columns:
            if self.inline:  # the evidence column wraps, the name and the status never
                t.add_column(col, no_wrap=col != self.columns[2])
            else:
                t.add_column(col, overflow="fold")
        for c in self.checks:
            body = escape(c.summary)
            if self.inline:
                body += "".join(f"\n  [dim]{escape(e)}[/dim]" for e in c.evidence)
            t.add_row(escape(c.name), f"[{self.styles[c.status]}]{escape(c.status)}[/]", body)
        con.print(t)
        if not self.inline:
            for c in self.checks:
                if not c.evidence:
                    continue
                con.print(f"{c.name} — {c.status}:", markup=False, highlight=False)
                for line in c.evidence:
                    con.print(f"  {line}", markup=False, highlight=False)
        fixes = [c for c in self.checks if c.fix]
        if fixes:
            con.print(f"[bold]{escape(self.fixes_title)}[/bold]{escape(self.fixes_note)}")
            for c in fixes:
                con.print(f"  {c.name}: {c.fix}", markup=False, highlight=False)

    def markdown(self) -> list[str]:
        name, status, summary = self.columns
        out = [f"| {name} | {status} | {summary} |", "|---|---|---|"]
        out += [f"| {md_cell(c.name)} | {c.status} | {md_cell(c.summary)} |" for c in self.checks]
        for c in self.checks:
            out += ["", f"## {c.name}: {c.status}", "", md_cell(c.summary)]
            if c.evidence:
                out.append("")
                out += [f"- {md_cell(e)}" for e in c.evidence]
            if c.fix:
                out += ["", f"Fix: `{c.fix}`"]
        return out

    def html(self) -> list[str]:
        rows = "".join(
            f"<tr><td>{h(c.name)}</td><td>{h(c.status)}</td><td>{h(c.summary)}"
            + "".join(f"<br><small>{h(e)}</small>" for e in c.evidence)
            + "</td></tr>"
            for c in self.checks
        )
        head = "".join(f"<th>{h(col)}</th>" for col in self.columns)
        return [f"<table><caption>{h(self.title)}</caption><tr>{head}</tr>{rows}</table>"]


# a table cell: plain text, or (text, rich colour) segments (a tier word coloured, a note after)
Cell = str | list[tuple[str, str | None]]


def cell_text(cell: Cell) -> str:
    return cell if isinstance(cell, str) else "".join(text for text, _ in cell)


@dataclass
class Grid(Section):
    """A titled table of cells, then lines under it (footnotes)."""

    title: str
    columns: list[str]
    rows: list[list[Cell]]
    notes: list[str] = field(default_factory=list)

    def terminal(self, con, details: bool = False) -> None:
        from rich.markup import escape
        from rich.table import Table

        def markup(cell: Cell) -> str:
            if isinstance(cell, str):
                return escape(cell)
            return "".join(f"[{st}]{escape(t)}[/]" if st else escape(t) for t, st in cell)

        t = Table(title=self.title)
        for col in self.columns:
            t.add_column(col)
        for row in self.rows:
            t.add_row(*[markup(c) for c in row])
        con.print(t)
        for line in self.notes:
            con.print(line, markup=False)

    def markdown(self) -> list[str]:
        out = [f"**{md_cell(self.title)}**", "", "| " + " | ".join(map(md_cell, self.columns)) + " |",
               "|" + "---|" * len(self.columns)]  # fmt: skip
        out += ["| " + " | ".join(md_cell(cell_text(c)) for c in row) + " |" for row in self.rows]
        if self.notes:
            out += ["", *(md_cell(line.strip()) for line in self.notes)]
        return out

    def html(self) -> list[str]:
        head = "".join(f"<th>{h(c)}</th>" for c in self.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{h(cell_text(c))}</td>" for c in row) + "</tr>"
            for row in self.rows
        )
        notes = "".join(f"<p>{h(line)}</p>" for line in self.notes)
        return [f"<table><caption>{h(self.title)}</caption><tr>{head}</tr>{body}</table>{notes}"]


@dataclass
class Lines(Section):
    """Plain lines (a basis, a verdict per machine), printed as they are."""

    lines: list[str]

    def terminal(self, con, details: bool = False) -> None:
        for line in self.lines:
            con.print(line, markup=False)

    def markdown(self) -> list[str]:
        return [md_cell(line.strip()) for line in self.lines]

    def html(self) -> list[str]:
        return [f"<p>{h(line)}</p>" for line in self.lines]
