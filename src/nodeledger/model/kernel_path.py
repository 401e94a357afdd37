"""Which path transformers takes for Gated DeltaNet and Mamba-2 layers, as it decides it.

transformers 5 (integrations/hub_kernels.py ``use_kernel_func_from_hub_with_fallback``) runs a
state-space layer's scan through the original package when it imports -- fla
(flash-linear-attention) for Gated DeltaNet's chunk_gated_delta_rule, mamba_ssm for Mamba-2's
mamba_chunk_scan_combined / mamba_split_conv1d_scan_combined -- and otherwise through its own
pure-torch fallback, whose working set is several times larger.  Whether the package is there
is read with importlib.util.find_spec (nothing is imported); ``--ssm-kernels`` overrides.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import lru_cache

# the package whose kernels transformers takes for each layer kind
PACKAGES = {"gdn": "fla", "mamba2": "mamba_ssm"}
CHOICES = ("auto", "torch", "fused")


@dataclass(frozen=True)
class KernelPath:
    kernels: str  # "torch" | "fused"
    source: str


@lru_cache(maxsize=8)
def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def kernel_path(kind: str, asked: str = "auto") -> KernelPath:
    """The path a ``kind`` ("gdn" / "mamba2") layer runs: ``asked`` when it is torch or fused,
    else fused where its package is installed here."""
    package = PACKAGES[kind]
    if asked in ("torch", "fused"):
        return KernelPath(asked, f"--ssm-kernels {asked}")
    if _installed(package):
        return KernelPath("fused", f"{package} is installed here: transformers runs its kernels")
    return KernelPath("torch", f"{package} is not installed here: transformers' pure-torch "
                               "fallback (--ssm-kernels fused for a box that has it)")  # fmt: skip
