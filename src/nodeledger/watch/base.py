"""The card-sampler interface every watch backend implements (backends.py: the vendor paths,
fake.py: the scenarios), and the error a backend raises when nothing can be sampled.

``describe()`` -> the static facts of each card (index, name, uuid, pci_bus_id, total_bytes,
numa_node); ``sample()`` -> per card now: used_bytes, total_bytes, util_pct (None where the tool
does not say) and processes ([{pid, name, used_bytes}], None when the backend cannot list them).
"""

from __future__ import annotations

from nodeledger.errors import NodeledgerError


class WatchError(NodeledgerError):
    """No card could be sampled: nothing to watch (exit 4)."""

    exit_code = 4


class Backend:
    name = "base"
    describe_note: str | None = None  # how the cards were listed, when not the usual way

    def describe(self) -> list[dict]:  # pragma: no cover - interface
        raise NotImplementedError

    def sample(self) -> list[dict]:  # pragma: no cover - interface
        raise NotImplementedError

    def close(self) -> None:
        pass
