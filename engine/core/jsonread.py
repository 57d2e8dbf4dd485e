"""JSON with config.json's NaN and Infinity (docs/reference.md, "Named tables and model configs").

transformers writes config.json with Python's ``json.dumps``, which writes ``NaN``, ``Infinity``
and ``-Infinity`` (Bamba's, Falcon-H1's and GraniteMoeHybrid's default ``time_step_limit`` is
``[0.0, Infinity]``); JSON itself has no such tokens and orjson refuses them. Every reader of a
request or a table config parses strictly first (the fast path is orjson alone); only text that
orjson refuses is parsed again leniently, and then accepted only if orjson's refusal was those
tokens and each of them lies where a model config is (``allowed(path)``): anywhere else a non-finite
number is a 422 at its path, as a spec field holding one always was.

The tokens come back as ``NonFinite``: a float (a reader that reads the key sees a number that is
not finite, and refuses it there), which orjson cannot write, so a body holding one is never
cached under its JSON (orjson would write it as null, the same bytes as an absent key:
``Pipeline.request`` and ``Client.lookup`` then validate it the long way).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import orjson

from .errors import SpecError


class NonFinite(float):
    """NaN, Infinity or -Infinity as a config.json holds them (see the module docstring)."""

    __slots__ = ()


def _float(text: str) -> float:
    v = float(text)
    return v if math.isfinite(v) else NonFinite(v)  # 1e999: orjson refuses it as it refuses Infinity


def in_hf_config(path: tuple) -> bool:
    """A request body's own model config (``hf_config``)."""
    return path[:1] == ("hf_config",)


def in_table_hf_config(path: tuple) -> bool:
    """A table config's entries' model configs (``tables[i].hf_config``)."""
    return len(path) >= 3 and path[0] == "tables" and path[2] == "hf_config"


def anywhere(path: tuple) -> bool:
    """A config.json file read as a model config."""
    return True


def lenient(raw: bytes | str, strict: ValueError, allowed: Callable[[tuple], bool]) -> Any:
    """The value of ``raw``, which orjson refused with ``strict``: re-raised unless the refusal was
    NaN/Infinity tokens, every one of them where ``allowed``; a token elsewhere is a SpecError at
    its path."""
    try:
        obj = json.loads(raw, parse_constant=NonFinite, parse_float=_float)
    except (ValueError, RecursionError):
        raise strict from None
    where = _first_non_finite(obj, allowed)
    if where is None:  # none at all: orjson refused it for another reason
        raise strict
    if where is not True:
        raise SpecError(
            where,
            "must be a finite number: NaN and Infinity are accepted only inside a model's "
            "config.json (hf_config)",
            "finite_number",
        )
    return obj


def loads(raw: bytes | str, allowed: Callable[[tuple], bool]) -> Any:
    """orjson.loads, with lenient() when it refuses ``raw``."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        return lenient(raw, e, allowed)


def _first_non_finite(obj: Any, allowed: Callable[[tuple], bool]):
    """The path of the first non-finite number outside ``allowed`` paths; True when every one is
    inside them; None when there is none."""
    seen = False
    stack = [((), obj)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, NonFinite):
            if not allowed(path):
                return path
            seen = True
        elif isinstance(v, dict):
            stack.extend(((*path, k), x) for k, x in reversed(v.items()))
        elif isinstance(v, list):
            stack.extend(((*path, i), x) for i, x in reversed(list(enumerate(v))))
    return True if seen else None
