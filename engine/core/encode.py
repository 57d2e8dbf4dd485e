"""The pipeline's last step: a request's arrays -> response bytes, in JSON (nested lists;
bfloat16 written as its float value) or a binary container (engine.formats): safetensors or npz.
The HTTP service (by Accept) and ``posenc compute`` (by the output file's suffix) both use it.

The canonical spec of an hf_config or table answer (``result["spec"]``, a JSON object) travels
as the ``spec`` key of the JSON answer, as ``__metadata__["spec"]`` (its JSON text) in
safetensors, and as a 0-d string array ``spec`` in npz."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import orjson

from ..tables.base import canonical
from . import formats
from .dtypes import BFLOAT16, bf16_bits_to_f32

# format name -> media type (the service negotiates Accept against these)
CONTENT_TYPES = {
    "json": "application/json",
    "safetensors": "application/x-safetensors",
    "npz": "application/x-npz",
}
_JSON_OPTS = orjson.OPT_SERIALIZE_NUMPY


def bf16_names(family, arrays: Mapping, dtype: str | None) -> frozenset:
    """Names of the arrays holding bfloat16 bit patterns (uint16) in this answer."""
    return family.dtyped & arrays.keys() if dtype == BFLOAT16 else frozenset()


def as_arrays(family, result: Mapping, dtype: str | None):
    """A result as named numpy arrays for a file: scalars become 0-d float64 arrays, the spec a
    0-d string array of its JSON; returns (arrays, names of arrays holding bfloat16 bit patterns)."""
    arrays = {
        k: (
            np.asarray(v, dtype=np.float64)
            if isinstance(v, float)
            else np.asarray(canonical(v))
            if isinstance(v, Mapping)
            else v
        )
        for k, v in result.items()
    }
    return arrays, bf16_names(family, arrays, dtype)


def json_ready(v, dtype: str | None):
    """A value as the JSON answer writes it: an array's bfloat16 bit patterns as their float
    values, in C order; anything else as it is."""
    if isinstance(v, np.ndarray):
        if dtype == BFLOAT16 and v.dtype == np.uint16:
            v = bf16_bits_to_f32(v)
        if not v.flags.c_contiguous:
            v = np.ascontiguousarray(v)
    return v


def json_text(obj) -> bytes:
    """The JSON text of ``json_ready`` values: every float the shortest decimal that reads back as
    the same value of its dtype (orjson's). The template shortcut renders stored rows with it."""
    return orjson.dumps(obj, option=_JSON_OPTS)


def encode(family, result: dict, dtype: str | None, fmt: str) -> tuple[bytes, str]:
    """(body, media type) of an answer; ``family`` is its registry entry."""
    if fmt == "json":
        return json_text({k: json_ready(v, dtype) for k, v in result.items()}), CONTENT_TYPES["json"]
    if fmt == "npz":
        arrays, bf16 = as_arrays(family, result, dtype)
        return formats.to_npz(arrays, bf16), CONTENT_TYPES["npz"]
    shown = result.get("spec")
    if shown is not None:
        result = {k: v for k, v in result.items() if k != "spec"}
    return (
        formats.to_safetensors(result, bf16_names(family, result, dtype), family.answer_metadata(shown)),
        CONTENT_TYPES["safetensors"],
    )
