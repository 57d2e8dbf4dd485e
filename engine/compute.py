"""One request (spec + selections + dtype, the JSON of ../shared/API.md) -> named arrays.

    compute(family, request, max_bytes=64 MiB) -> dict[str, np.ndarray | float]

rope: cos, sin [n, d] (dtype), inv_freq [d/2] float32, attention_scaling (float)
sinusoidal: encoding [n, d_model]; alibi: bias [h, nq, nk], slopes [h] float32;
t5-buckets: buckets [nq, nk] int32. bfloat16 arrays are uint16 bit patterns (engine.dtypes).
Raises SpecError (422) for invalid input and TooLarge (413) before allocating anything.
"""

from __future__ import annotations

from typing import Mapping

from . import dtypes as _dt
from .errors import SpecError, TooLarge
from .fields import require_object
from .tables import FAMILIES, HAS_DTYPE, alibi

DEFAULT_MAX_BYTES = 64 * 2**20


def family_module(family: str):
    try:
        return FAMILIES[family]
    except KeyError:
        raise SpecError(("family",), f"must be one of {', '.join(FAMILIES)}, got {family!r}") from None


def parse_request(family: str, request: Mapping):
    """Validate a whole request: (module, spec, selections, dtype)."""
    mod = family_module(family)
    require_object(request)
    spec, sel = mod.parse(request)
    dtype = _dt.check_dtype(request.get("dtype")) if HAS_DTYPE[family] else None
    return mod, spec, sel, dtype


def output_nbytes(mod, spec, sel, dtype) -> int:
    return mod.output_nbytes(spec, *(s.n for s in sel.values()), dtype)


def check_size(nbytes: int, max_bytes: int | None) -> None:
    if max_bytes is not None and nbytes > max_bytes:
        raise TooLarge(nbytes, max_bytes)


def precheck(mod, spec, sel, dtype) -> None:
    """Refusals that can be decided before computing: an ALiBi block whose largest bias would
    round to infinity in the output dtype (422 on dtype), found from the selections' extremes."""
    if mod is alibi and dtype is not None and not spec.mask_future:
        import numpy as np
        worst = alibi.max_abs_bias(spec, sel["query"], sel["key"])
        _dt.round_f64(np.array([worst]), dtype)   # raises SpecError(("dtype",)) if it overflows


def compute(family: str, request: Mapping, max_bytes: int | None = DEFAULT_MAX_BYTES) -> dict:
    mod, spec, sel, dtype = parse_request(family, request)
    check_size(output_nbytes(mod, spec, sel, dtype), max_bytes)
    precheck(mod, spec, sel, dtype)
    return mod.compute(spec, sel, dtype)


# Arrays that take the requested dtype; the others (inv_freq, slopes) stay float32 (API.md).
DTYPED = frozenset({"cos", "sin", "encoding", "bias"})


def as_arrays(result: Mapping, dtype: str | None):
    """A compute() result as named numpy arrays for a file or a binary response: scalars become
    0-d float64 arrays; returns (arrays, names of arrays holding bfloat16 bit patterns)."""
    import numpy as np

    arrays = {k: (np.asarray(v, dtype=np.float64) if isinstance(v, float) else v) for k, v in result.items()}
    bf16 = {k for k in arrays if dtype == "bfloat16" and k in DTYPED}
    return arrays, bf16
