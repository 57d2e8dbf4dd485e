"""Response bodies: JSON (nested lists; bfloat16 written as its float value) or a binary
container (engine.formats) chosen by Accept."""

from __future__ import annotations

import numpy as np
import orjson

from posenc.engine import formats
from posenc.engine.compute import DTYPED, as_arrays
from posenc.engine.dtypes import bf16_bits_to_f32

from .negotiate import CONTENT_TYPES

_JSON_OPTS = orjson.OPT_SERIALIZE_NUMPY
_META = {f: {"family": f} for f in ("rope", "sinusoidal", "alibi", "t5-buckets")}


def encode(family: str, result: dict, dtype: str | None, fmt: str) -> tuple[bytes, str]:
    if fmt == "json":
        out = {}
        for k, v in result.items():
            if isinstance(v, np.ndarray):
                if dtype == "bfloat16" and v.dtype == np.uint16:
                    v = bf16_bits_to_f32(v)
                if not v.flags.c_contiguous:
                    v = np.ascontiguousarray(v)
            out[k] = v
        return orjson.dumps(out, option=_JSON_OPTS), CONTENT_TYPES["json"]
    if fmt == "npz":
        arrays, bf16 = as_arrays(result, dtype)
        return formats.to_npz(arrays, bf16), CONTENT_TYPES["npz"]
    bf16 = DTYPED if dtype == "bfloat16" else frozenset()
    return formats.to_safetensors(result, bf16, _META[family]), CONTENT_TYPES["safetensors"]

