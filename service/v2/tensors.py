"""v2 tensors: datatypes, input decoding (binary bytes or JSON data) and output datatypes.

Inputs (docs/reference.md): ``positions``, ``query``, ``key`` as INT32 or INT64, shape [N] or [B, N]. Outputs
carry the numpy dtype of the answer's arrays; bfloat16 arrays (uint16 bit patterns in posenc)
are BF16, and Python floats (``attention_scaling``) are FP64 of shape [1].
"""

from __future__ import annotations

import math

import numpy as np

from posenc.service.v2.errors import BadRequest

INPUT_DATATYPES = {"INT32": np.dtype("<i4"), "INT64": np.dtype("<i8")}
# numpy dtype char -> v2 datatype of an output (bfloat16 is decided by the request's dtype)
OUTPUT_DATATYPES = {"f": "FP32", "e": "FP16", "d": "FP64", "i": "INT32", "l": "INT64", "q": "INT64"}
MAX_RANK = 2  # [N] or [B, N]
MAX_ELEMENTS = 1 << 40  # any real limit (max_positions, body size) is far below


def check_shape(shape, path: str, rank: int = 1) -> tuple[int, ...]:
    """A v2 input shape: [N] or [B, N] of positive ints (``rank`` 2, per-axis positions such as
    rope's ``position_ids``: [k, N] or [B, k, N])."""
    if not isinstance(shape, (list, tuple)) or not all(type(d) is int for d in shape):
        raise BadRequest(f"{path}.shape", "must be a list of integers")
    if not rank <= len(shape) <= rank + MAX_RANK - 1:
        want = "[N] or [B, N]" if rank == 1 else "[k, N] or [B, k, N]"
        raise BadRequest(f"{path}.shape", f"must be {want} (a batch of B selections), got {list(shape)}")
    for d in shape:
        if d < 1:
            raise BadRequest(f"{path}.shape", f"every dimension must be >= 1, got {list(shape)}")
    if math.prod(shape) > MAX_ELEMENTS:
        raise BadRequest(f"{path}.shape", f"too many elements: {list(shape)}")
    return tuple(shape)


def input_dtype(datatype, path: str) -> np.dtype:
    dt = INPUT_DATATYPES.get(datatype) if isinstance(datatype, str) else None
    if dt is None:
        raise BadRequest(f"{path}.datatype", f"must be INT32 or INT64, got {datatype!r}")
    return dt


def from_bytes(raw, datatype, shape: tuple, path: str) -> np.ndarray:
    """An input tensor from its raw little-endian bytes (binary tensor data, raw contents or a
    shared-memory region); the bytes are viewed, not copied."""
    dt = input_dtype(datatype, path)
    need = math.prod(shape) * dt.itemsize
    if len(raw) != need:
        raise BadRequest(
            path, f"{len(raw)} bytes of data for shape {list(shape)} of {datatype} ({need} bytes)"
        )
    return np.frombuffer(raw, dt).reshape(shape)


def from_json(data, datatype, shape: tuple, path: str) -> np.ndarray:
    """An input tensor from JSON ``data``: a flat list in row-major order, or nested as the shape."""
    dt = input_dtype(datatype, path)
    flat = data
    while isinstance(flat, list) and flat and isinstance(flat[0], list):  # nested as the shape
        flat = [v for row in flat for v in (row if isinstance(row, list) else [row])]
    if not isinstance(flat, list):
        raise BadRequest(f"{path}.data", "must be a list of integers")
    n = math.prod(shape)
    if len(flat) != n:
        raise BadRequest(f"{path}.data", f"{len(flat)} values for shape {list(shape)} ({n} values)")
    for i, v in enumerate(flat):
        if type(v) is not int:
            raise BadRequest(f"{path}.data[{i}]", f"must be an integer, got {type(v).__name__}")
    try:
        return np.array(flat, dtype=dt).reshape(shape)
    except OverflowError:
        lo, hi = np.iinfo(dt).min, np.iinfo(dt).max
        i = next(i for i, v in enumerate(flat) if not lo <= v <= hi)
        raise BadRequest(f"{path}.data[{i}]", f"{flat[i]} does not fit {datatype}") from None


def output_datatype(array: np.ndarray, bf16: bool) -> str:
    if bf16:
        return "BF16"
    return OUTPUT_DATATYPES[array.dtype.char]


def as_output(value) -> np.ndarray:
    """An answer's value as an output array: a Python float becomes FP64 of shape [1]."""
    if isinstance(value, np.ndarray):
        return value
    return np.array([value], dtype=np.float64)
