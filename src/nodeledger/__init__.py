"""nodeledger: capacity accounting for one multi-accelerator server.

The library's API (``nodeledger.api``, loaded on first use): ``fit``, ``capacity_report``, ``probe``.
"""

__version__ = "0.1.0"

_API = ("fit", "capacity_report", "probe", "FitReport", "CapacityAnswer")


def __getattr__(name: str):
    # PEP 562: the command line never pays for the API's imports; `import nodeledger` is cheap
    if name in _API:
        from nodeledger import api

        return getattr(api, name)
    raise AttributeError(f"module 'nodeledger' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
