"""The capacity report is its header and its sections (report/sections.py); a new section is one
class: added to SECTIONS, it appears in the terminal, Markdown and HTML documents."""

from __future__ import annotations

import io

from rich.console import Console

from nodeledger.machine import resolve_machine
from nodeledger.report import documents, sections
from nodeledger.report.documents import terminal
from nodeledger.report.usecase import CapacityRequest, assess_capacity


class Power(sections.Section):
    """A section the report did not have: the cards' power (here, a count)."""

    def terminal(self, con, details: bool = False) -> None:
        con.print(f"Power: {self.rep['machine']['cards']} cards to feed")

    def markdown(self) -> list[str]:
        return ["", "## Power", "", f"- {self.rep['machine']['cards']} cards to feed"]

    def html(self) -> list[str]:
        return [f"<h2>Power</h2><p>{self.rep['machine']['cards']} cards to feed</p>"]


def _documents(ans) -> tuple[str, str, str]:
    buf = io.StringIO()
    terminal(Console(file=buf, width=120, no_color=True), ans.report, ans.intro)
    return (buf.getvalue(), documents.markdown(ans.report, ans.intro),
            documents.html(ans.report, ans.profile, ans.intro))  # fmt: skip


def test_a_new_section_is_one_class(monkeypatch):
    ans = assess_capacity(CapacityRequest(machine="dgx-h100"))
    before = _documents(ans)
    assert not any("cards to feed" in d for d in before)
    monkeypatch.setattr(
        sections, "SECTIONS", (*sections.SECTIONS[:-1], Power, sections.SECTIONS[-1])
    )
    after = _documents(ans)
    term, md, page = after
    assert "Power: 8 cards to feed" in term and "## Power" in md and "<h2>Power</h2>" in page
    # it sits where it was put: before the scale-out verdict, in every format
    assert term.index("Power:") < term.index("Scale-out verdict")
    assert md.index("## Power") < md.index("## Scale-out verdict")
    assert page.index("<h2>Power</h2>") < page.index("<h2>Scale-out verdict</h2>")


def test_every_section_renders_every_format_on_every_preset():
    from nodeledger.machine import list_presets

    for name in list_presets():
        ans = assess_capacity(CapacityRequest(machine=name))
        profile = resolve_machine(name)
        for sec in sections.sections(ans.report, profile):
            sec.terminal(Console(file=io.StringIO(), width=80), details=True)
            assert all(isinstance(x, str) for x in sec.markdown() + sec.html())
