"""The section kinds consumers share (nodeledger.document): one Checklist renders doctor's checks
and the go-live steps in the terminal, Markdown and HTML."""

from __future__ import annotations

import io

from nodeledger.document import Check, Checklist, md_cell


def _list(inline: bool) -> Checklist:
    checks = [
        Check("swap", "warning", "swap in use [nvidia]", ["seen: SwapUsed = 2 (/proc/meminfo)"],
              fix="sudo swapoff -a"),
        Check("thp", "ok", "a | b"),
    ]  # fmt: skip
    return Checklist("Checks", ("check", "severity", "finding"), checks,
                     {"warning": "dark_orange", "ok": "green"}, inline=inline)  # fmt: skip


def _terminal(section: Checklist) -> str:
    from rich.console import Console

    buf = io.StringIO()
    section.terminal(Console(file=buf, width=100, color_system=None))
    return buf.getvalue()


def test_checklist_terminal_keeps_brackets_and_lists_fixes():
    inline = _terminal(_list(True))
    assert "swap in use [nvidia]" in inline  # text, not rich markup
    assert "seen: SwapUsed = 2 (/proc/meminfo)" in inline
    assert "Fixes" in inline and "swap: sudo swapoff -a" in inline
    after = _terminal(_list(False))
    assert "swap — warning:\n  seen: SwapUsed = 2 (/proc/meminfo)" in after


def test_checklist_markdown_and_html_escape_their_text():
    md = _list(False).markdown()
    assert md[:2] == ["| check | severity | finding |", "|---|---|---|"]
    assert "| thp | ok | a \\| b |" in md and "## swap: warning" in md
    assert "Fix: `sudo swapoff -a`" in md and md_cell("x\ny") == "x y"
    html = "".join(_list(False).html())
    assert "<caption>Checks</caption>" in html and "a | b" in html and "[nvidia]" in html
    assert "<script" not in "".join(
        Checklist("t", ("a", "b", "c"), [Check("<script>", "ok", "x")], {"ok": "green"}).html()
    )
