"""Read safetensors headers (metadata only, never tensor data) for exact checkpoint bytes.

Format (https://huggingface.co/docs/safetensors): 8 bytes little-endian u64 N, then N bytes of
JSON: {tensor_name: {"dtype": "BF16", "shape": [...], "data_offsets": [begin, end]}, ...,
"__metadata__": {...}}.  Only the first 8 + N bytes of each file are read.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

from nodeledger.errors import InputError
from nodeledger.files import check_user_file, loads_json

# Element widths in bits; sub-byte formats are packed.
DTYPE_BITS = {
    "F64": 64, "I64": 64, "U64": 64,
    "F32": 32, "I32": 32, "U32": 32,
    "F16": 16, "BF16": 16, "I16": 16, "U16": 16,
    "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "I8": 8, "U8": 8, "BOOL": 8,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}  # fmt: skip

MAX_HEADER_BYTES = 100 * 1024 * 1024  # the format's own limit (safetensors rejects larger)


@dataclass
class CheckpointBytes:
    files: list[str]
    tensor_count: int
    total_bytes: int  # sum over tensors of data_offsets end - begin (the tensor bytes)
    bytes_by_dtype: dict[str, int] = field(default_factory=dict)
    elements_by_dtype: dict[str, int] = field(default_factory=dict)
    source: str = "safetensors headers (metadata only, no tensor data read)"


def read_header(path: Path) -> dict:
    try:
        with path.open("rb") as fh:
            raw = fh.read(8)
            if len(raw) != 8:
                raise InputError(f"{path}: truncated safetensors file (no header length)")
            (n,) = struct.unpack("<Q", raw)
            if n > MAX_HEADER_BYTES:
                raise InputError(f"{path}: safetensors header length {n} is implausible")
            body = fh.read(n)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(body) != n:
        raise InputError(f"{path}: truncated safetensors header ({len(body)} of {n} bytes)")
    try:
        header = loads_json(body, f"{path}: safetensors header")
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise InputError(f"{path}: safetensors header is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise InputError(f"{path}: safetensors header is not a JSON object")
    return header


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _entry(f: Path, name: str, info) -> tuple[str, int, int]:
    """(dtype, elements, bytes) of one header entry, validated."""
    bad = InputError(f"{f}: tensor {name!r} has a malformed header entry")
    if not isinstance(info, dict):
        raise bad
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype, str) or not isinstance(shape, list) or not isinstance(offsets, list):
        raise bad
    if not all(_is_int(d) and d >= 0 for d in shape):
        raise bad
    if (
        len(offsets) != 2
        or not all(_is_int(o) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise bad
    elements = 1
    for d in shape:
        elements *= d
    return dtype, elements, offsets[1] - offsets[0]


def index_total_size(folder: Path) -> CheckpointBytes | None:
    """``metadata.total_size`` of ``model.safetensors.index.json`` (shards not downloaded)."""
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return None
    try:
        check_user_file(index, "safetensors index")
        data = json.loads(index.read_text(encoding="utf-8"))
        total = data["metadata"]["total_size"]
        weight_map = data.get("weight_map") or {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise InputError(f"{index}: no readable metadata.total_size") from None
    if not _is_int(total) or total < 0 or not isinstance(weight_map, dict):
        raise InputError(f"{index}: metadata.total_size must be a non-negative integer")
    return CheckpointBytes(
        files=[index.name],
        tensor_count=len(weight_map),
        total_bytes=total,
        source="model.safetensors.index.json metadata.total_size (shards not present)",
    )


def checkpoint_bytes(folder: Path) -> CheckpointBytes | None:
    """Sum tensor bytes over every ``*.safetensors`` in ``folder``; without shards, the index's
    ``metadata.total_size``; None when there is neither."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return index_total_size(folder)
    out = CheckpointBytes(files=[f.name for f in files], tensor_count=0, total_bytes=0)
    for f in files:
        for name, info in read_header(f).items():
            if name == "__metadata__":
                continue
            dtype, elements, size = _entry(f, name, info)
            out.tensor_count += 1
            out.total_bytes += size
            out.bytes_by_dtype[dtype] = out.bytes_by_dtype.get(dtype, 0) + size
            out.elements_by_dtype[dtype] = out.elements_by_dtype.get(dtype, 0) + elements
    return out
