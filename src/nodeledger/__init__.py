"""nodeledger: capacity accounting for one multi-accelerator server."""

__version__ = "0.1.0"
