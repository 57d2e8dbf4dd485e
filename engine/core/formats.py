"""Binary containers for a response's named arrays. Both load with stock libraries and no
posenc code:

- safetensors (``application/x-safetensors``): 8-byte little-endian header length, a JSON header
  {name: {"dtype", "shape", "data_offsets"}}, then the raw bytes. bfloat16 is native ("BF16").
  ``safetensors.torch.load(body)`` or ``safetensors.numpy.load(body)`` read it; so does a few
  lines of numpy (README). Building it copies each array's bytes once; no JSON of the data.
- npz (``application/x-npz``): ``numpy.savez`` output; bfloat16 arrays are uint16 bit patterns,
  their names listed in the ``__bfloat16__`` entry (``.view(torch.bfloat16)`` after loading).
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Mapping

import numpy as np

from .dtypes import BFLOAT16

_KIND = {"f": "float32", "e": "float16", "d": "float64", "i": "int32", "H": "uint16"}
_ST_DTYPES = {
    "float32": "F32",
    "float16": "F16",
    BFLOAT16: "BF16",
    "int32": "I32",
    "float64": "F64",
    "int64": "I64",
    "uint16": "U16",
}


_HEADERS: dict = {}  # (names, shapes, kinds, metadata) -> header bytes: hot responses repeat shapes


def safetensors_parts(arrays: Mapping, bf16: set = frozenset(), metadata: Mapping | None = None):
    """The header bytes and the list of array buffers that follow it. Python floats become 0-d
    float64 arrays; names in ``bf16`` hold bfloat16 bit patterns (uint16). The header of a
    (names, shapes, dtypes) combination is built once: hot responses repeat their shapes."""
    key, bufs = [], []
    for name, a in arrays.items():
        if type(a) is not np.ndarray:
            a = _as_array(a)
        key.append((name, a.shape, a.dtype.char, name in bf16))
        bufs.append(a)
    ck = (tuple(key), tuple(sorted(metadata.items())) if metadata else ())
    head = _HEADERS.get(ck)
    if head is None:
        header, offset = {}, 0
        for (name, shape, _, is_bf16), a in zip(key, bufs):
            kind = BFLOAT16 if is_bf16 else _KIND.get(a.dtype.char) or a.dtype.name
            header[name] = {
                "dtype": _ST_DTYPES[kind],
                "shape": list(shape),
                "data_offsets": [offset, offset + a.nbytes],
            }
            offset += a.nbytes
        if metadata:
            header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
        h = json.dumps(header, separators=(",", ":")).encode()
        h += b" " * (-len(h) % 8)  # the format pads the header to 8-byte alignment
        head = struct.pack("<Q", len(h)) + h
        if len(_HEADERS) > 4096:
            _HEADERS.clear()
        _HEADERS[ck] = head
    return head, bufs


_SCALARS: dict = {}


def _as_array(v) -> np.ndarray:
    """Python scalars as 0-d arrays (float64 for floats); the few distinct ones are cached."""
    a = _SCALARS.get(v) if isinstance(v, float) else None
    if a is None:
        a = np.asarray(v, dtype=np.float64 if isinstance(v, float) else None)
        if isinstance(v, float) and len(_SCALARS) < 1024:
            a.setflags(write=False)
            _SCALARS[v] = a
    return a


def to_safetensors(arrays: Mapping, bf16: set = frozenset(), metadata: Mapping | None = None) -> bytes:
    head, bufs = safetensors_parts(arrays, bf16, metadata)
    try:
        return b"".join([head, *bufs])  # join takes any C-contiguous buffer
    except (BufferError, TypeError, ValueError):  # a strided view: copy it (keeping 0-d shapes)
        return b"".join([head, *(b if b.flags.c_contiguous else b.copy(order="C") for b in bufs)])


def to_npz(arrays: Mapping, bf16: set = frozenset()) -> bytes:
    buf = io.BytesIO()
    extra = {"__bfloat16__": np.array(sorted(bf16), dtype=str)} if bf16 else {}
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()}, **extra)
    return buf.getvalue()


def read_safetensors(data: bytes) -> tuple[dict, dict]:
    """Reference reader (tests and the Python client): (arrays, {name: dtype name}); the dtype
    name says "bfloat16" where the array is uint16 bits."""
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8 : 8 + n])
    header.pop("__metadata__", None)
    inv = {v: k for k, v in _ST_DTYPES.items()}
    out, kinds = {}, {}
    for name, info in header.items():
        kind = inv[info["dtype"]]
        dt = np.uint16 if kind == BFLOAT16 else np.dtype(kind)
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(
            data, dtype=dt, count=(e - b) // np.dtype(dt).itemsize, offset=8 + n + b
        ).reshape(info["shape"])
        kinds[name] = kind
    return out, kinds
