"""Shared helpers of the sinklab Python suite: where the fixtures are, the `sinklab` binary,
and a minimal safetensors reader/writer in numpy (no torch, no safetensors package needed)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(os.environ.get("SINKLAB_REPO", Path(__file__).resolve().parents[2]))
FIXTURES = REPO / "tests" / "fixtures"

_DT = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "F16": np.float16}
_TD = {np.dtype(v): k for k, v in _DT.items()}


def read_safetensors(path) -> dict:
    """Every tensor of a safetensors file as a numpy array."""
    b = Path(path).read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8 : 8 + n])
    data = b[8 + n :]
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(data[s:e], dtype=_DT[v["dtype"]]).reshape(v["shape"])
    return out


def write_safetensors(path, tensors: dict, metadata=None) -> None:
    """Writes `tensors` (name → numpy array) as a safetensors file."""
    header, blobs, off = {}, [], 0
    for k, a in tensors.items():
        a = np.ascontiguousarray(a)
        raw = a.tobytes()
        header[k] = {"dtype": _TD[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def sinklab_bin():
    """This build's `sinklab` binary (set by the cargo test target), or skip."""
    b = os.environ.get("SINKLAB_BIN")
    if not b:
        pytest.skip("SINKLAB_BIN not set (run through `cargo test --test python`)")
    return b


def cli(*args) -> str:
    """Runs `sinklab ARGS`; returns stdout, failing with stderr on a non-zero exit."""
    p = subprocess.run([sinklab_bin(), *map(str, args)], capture_output=True, text=True)
    assert p.returncode == 0, f"sinklab {args}: {p.stderr}"
    return p.stdout
