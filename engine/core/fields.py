"""Strict field readers shared by every family's parser.

docs/reference.md ("Selections, dtypes, strictness"): an int field takes only a JSON integer (not "64", not
64.0, not true); a float field also takes an integer; an explicit null equals an absent optional field;
unknown fields are refused. Every failure raises SpecError naming the field's path.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import SpecError


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v) -> bool:
    return (isinstance(v, (int, float))) and not isinstance(v, bool)


def require_object(obj, loc=()) -> Mapping:
    if type(obj) is dict:  # the common case, without the ABC check
        return obj
    if not isinstance(obj, Mapping):
        raise SpecError(loc, f"must be a JSON object, got {type(obj).__name__}", "dict_type")
    for k in obj:
        if not isinstance(k, str):
            raise SpecError(loc, f"keys must be strings, got {k!r}")
    return obj


def refuse_unknown(obj: Mapping, allowed: Iterable[str], loc=(), why: str = "") -> None:
    allowed = set(allowed)
    for k in obj:
        if k not in allowed:
            hint = f" ({why})" if why else f"; allowed: {', '.join(sorted(allowed))}"
            raise SpecError((*loc, k), f"unknown field{hint}", "extra_forbidden")


def _present(obj: Mapping, key: str, path: tuple, required: bool):
    """The value, or None where absent or null (a SpecError if the field is required)."""
    v = obj.get(key)
    if v is None and required:
        raise SpecError(path, "field required", "missing")
    return v


def req_int(obj, key, loc, lo=None, hi=None, required=True, default=None):
    path = (*loc, key)
    v = _present(obj, key, path, required)
    if v is None:
        return default
    if not is_int(v):
        raise SpecError(path, f"must be an integer, got {json_repr(v)}", "int_type")
    if lo is not None and v < lo:
        raise SpecError(path, f"must be >= {lo}, got {v}")
    if hi is not None and v > hi:
        raise SpecError(path, f"must be <= {hi}, got {v}")
    return v


def req_float(obj, key, loc, gt=None, ge=None, le=None, required=True, default=None):
    path = (*loc, key)
    v = _present(obj, key, path, required)
    if v is None:
        return default
    if not is_number(v):
        raise SpecError(path, f"must be a number, got {json_repr(v)}", "float_type")
    v = float(v)
    if not math.isfinite(v):
        raise SpecError(path, f"must be finite, got {v}")
    if gt is not None and not v > gt:
        raise SpecError(path, f"must be > {gt}, got {v}")
    if ge is not None and not v >= ge:
        raise SpecError(path, f"must be >= {ge}, got {v}")
    if le is not None and not v <= le:
        raise SpecError(path, f"must be <= {le}, got {v}")
    return v


def req_bool(obj, key, loc, default):
    v = obj.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise SpecError((*loc, key), f"must be true or false, got {json_repr(v)}", "bool_type")
    return v


def req_choice(obj, key, loc, choices, default):
    v = obj.get(key)
    if v is None:
        return default
    if not isinstance(v, str) or v not in choices:
        raise SpecError(
            (*loc, key),
            f"must be one of {', '.join(map(repr, choices))}, got {json_repr(v)}",
            "literal_error",
        )
    return v


def json_repr(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return repr(v) if len(v) < 40 else repr(v[:37] + "...")
    if isinstance(v, (list, tuple)):
        return f"a list of {len(v)}"
    if isinstance(v, Mapping):
        return "an object"
    return repr(v)
