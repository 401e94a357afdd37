"""One module per card vendor (``nvidia``, ``amd``, ``hygon``, ``ascend``, ``other``), each a
:class:`VendorSpec` registered by name; consumers ask ``spec(vendor)`` and never branch on a
vendor's name.  Adding a vendor = one module here (+ its parsers and probe, + data; its watch
sampler is still a class in watch/backends.py)."""

from nodeledger.machine.vendors.base import (
    DEFAULT_VENDOR,
    ExporterNames,
    HostPath,
    ProbeContext,
    Sampler,
    Vendor,
    VendorSpec,
    all_specs,
    load_probe,
    names,
    of_backend,
    register,
    samplers,
    spec,
    unregister,
)

# registration order is the order vendors are listed in (as the Enum listed them)
# isort: off
from nodeledger.machine.vendors import nvidia  # noqa: F401
from nodeledger.machine.vendors import amd  # noqa: F401
from nodeledger.machine.vendors import hygon  # noqa: F401
from nodeledger.machine.vendors import ascend  # noqa: F401
from nodeledger.machine.vendors import other  # noqa: F401

# isort: on

__all__ = [
    "DEFAULT_VENDOR",
    "ExporterNames",
    "HostPath",
    "ProbeContext",
    "Sampler",
    "Vendor",
    "VendorSpec",
    "all_specs",
    "load_probe",
    "names",
    "of_backend",
    "register",
    "samplers",
    "spec",
    "unregister",
]  # fmt: skip
