"""Checkpoint bytes from safetensors headers, against files written by the safetensors library."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from nodeledger.errors import InputError
from nodeledger.model.safetensors_header import checkpoint_bytes, read_header


def test_header_sums_tensor_bytes(tmp_path):
    save_file(
        {"a": np.zeros((4, 8), np.float16), "b": np.zeros((3,), np.float32)},
        tmp_path / "m1.safetensors",
    )
    save_file({"c": np.zeros((5, 5), np.int8)}, tmp_path / "m2.safetensors")
    ck = checkpoint_bytes(tmp_path)
    assert ck.total_bytes == 4 * 8 * 2 + 3 * 4 + 25
    assert ck.bytes_by_dtype == {"F16": 64, "F32": 12, "I8": 25}
    assert ck.tensor_count == 3
    assert ck.files == ["m1.safetensors", "m2.safetensors"]


def test_no_safetensors_is_none(tmp_path):
    assert checkpoint_bytes(tmp_path) is None


def test_truncated_header_is_input_error(tmp_path):
    f = tmp_path / "bad.safetensors"
    header = json.dumps({"a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}).encode()
    f.write_bytes(len(header).to_bytes(8, "little") + header[:10])
    with pytest.raises(InputError, match="truncated safetensors header"):
        read_header(f)


def test_index_total_size_when_shards_absent(tmp_path):
    index = {
        "metadata": {"total_size": 1234},
        "weight_map": {"a": "m-1.safetensors", "b": "m-2.safetensors"},
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    ck = checkpoint_bytes(tmp_path)
    assert ck.total_bytes == 1234 and ck.tensor_count == 2
    assert "index.json" in ck.source


def test_broken_index_is_input_error(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text("{}")
    with pytest.raises(InputError, match="total_size"):
        checkpoint_bytes(tmp_path)
