"""Domain errors.  The library raises these; only ``nodeledger.cli`` maps them to exit codes.

Every error carries one line that names the problem (what input, which field, why), so a
user never needs a traceback to know what to fix.
"""

from __future__ import annotations


class NodeledgerError(Exception):
    """Base of every error nodeledger raises on purpose."""

    exit_code = 2


class InputError(NodeledgerError):
    """Bad input: a malformed file, a missing or nonsensical field, an unknown name."""


class ConfigError(InputError):
    """A model config.json that cannot be turned into a model spec."""


class UnknownFamilyError(ConfigError):
    """A ``model_type`` nodeledger does not model; the message lists the supported families."""


class ModelNotFoundError(InputError):
    """A model id that is not a path, not in the local HF cache, not in the catalogue."""


class ProfileError(InputError):
    """A machine profile that does not load or does not validate."""
