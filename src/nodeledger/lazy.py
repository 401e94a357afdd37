"""Names a package loads on first use (PEP 562), so that importing one light module of it does
not import the heavy ones beside it."""

from __future__ import annotations

import importlib
import sys


def attr_loader(package: str, where: dict[str, str]):
    """A module ``__getattr__`` for ``package``: name -> the submodule (``where``) it lives in,
    imported when the name is first asked for and kept in the package from then on."""

    def __getattr__(name: str):
        mod = where.get(name)
        if mod is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{mod}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


class LazyModule:
    """A module imported when one of its names is first read: a vendor's parsers cost nothing
    on a machine whose probe never finds that vendor's tool."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._mod = None

    def __getattr__(self, attr: str):
        if self._mod is None:
            self._mod = importlib.import_module(self._name)
        return getattr(self._mod, attr)
