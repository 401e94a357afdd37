"""Field claims ship as data with their origin (src/nodeledger/field_notes.toml); the product
cites them from there and never a file users do not have."""

from __future__ import annotations

import re
from pathlib import Path

from nodeledger import field_notes

SRC = Path(__file__).resolve().parents[1] / "src" / "nodeledger"


def test_every_claim_the_code_cites_exists_with_its_origin():
    used = set()
    for p in SRC.rglob("*.py"):
        used |= set(
            re.findall(r"field_notes\.(?:cited|claim|value)\(\s*[\"'](\w+)[\"']", p.read_text())
        )
    assert used, "no claim cited"
    for key in used:
        assert field_notes.claim(key)
        assert field_notes.origin() in field_notes.cited(key)
    assert "K100_AI" in field_notes.origin(short=False)


def test_no_shipped_file_names_a_document_users_do_not_have():
    for p in SRC.rglob("*"):
        if p.is_file() and p.suffix in (".py", ".toml", ".json"):
            assert "MISSION" not in p.read_text(encoding="utf-8"), p
