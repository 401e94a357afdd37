"""huggingface_hub is the ``hub`` extra: without it a path or a catalogue name still works and
a Hub id is one line that says how to install it (issue 31: dependencies that earn their place)."""

from __future__ import annotations

import pytest

from nodeledger.errors import ModelNotFoundError
from nodeledger.model import source


def test_without_the_hub_extra_an_id_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(source, "hub_installed", lambda: False)
    with pytest.raises(
        ModelNotFoundError,
        match=r"huggingface_hub is not installed: pip install 'nodeledger\[hub\]'",
    ):
        source.resolve_config("some-org/some-model")
    with pytest.raises(ModelNotFoundError, match=r"--online needs huggingface_hub"):
        source.resolve_config("some-org/some-model", online=True)
    # the catalogue needs no Hub
    assert source.resolve_config("qwen3-0.6b").catalogue_entry is not None


def test_no_dependency_is_declared_and_never_imported():
    import pathlib
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    root = pathlib.Path(__file__).resolve().parents[1]
    deps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {d.split(">")[0].split("=")[0].split(";")[0].strip().lower() for d in deps}
    assert "psutil" not in names and "huggingface_hub" not in names
