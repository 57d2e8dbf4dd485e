"""The ``grid`` body form (docs/reference.md, "Token grids"): beside ``hf_config`` of a vision or
video model, the token grid the model sees, ``{"frames": F, "height": H, "width": W}`` in patches
(each record says which keys it takes, and may take more, such as text tokens). The model's record
turns it into spec fields (frequencies and coordinate maps that follow the grid's size:
tables/rope_grid.py) and the selection: ``position_ids``, each axis's integer index of every token
in the order the model lays its tokens out. A record that takes a grid has ``grid_keys`` and
``derive(config, layer_type, grid)``; every other record refuses one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

import numpy as np

from ..core.errors import SpecError
from ..core.fields import is_int, is_number, json_repr, require_object

LOC = ("grid",)
AXES = ("frames", "height", "width")  # the axes' names, outermost first
MAX_SIDE = 1 << 16  # patches per axis
MAX_TOKENS = 1 << 20  # tokens of a grid (its position_ids are built before the answer's size is checked)
# grid keys that are not patch counts (no tokens of their own): a number in its range, an index from 0
NUMBERS = {"fps": (1e-3, 1e5)}  # the frame rate a video pipeline passes (LTX's, Cosmos')
INDICES = ("first_frame", "head")  # the first latent frame of LTX-2's refiner window; a split rope's head


def parse(value, keys: tuple, required: tuple) -> dict:
    """The grid's sizes {key: int >= 1} (SpecError at ``grid...``): only ``keys``, ``required``
    among them present, and at most MAX_TOKENS tokens (``tokens``)."""
    if value is None:
        raise SpecError(
            LOC,
            "field required: this model's positions follow its token grid; send "
            + json.dumps({"grid": {k: 16 for k in required}}),
            "missing",
        )
    grid = require_object(value, LOC)
    for k in grid:
        if k not in keys:
            raise SpecError(
                (*LOC, k), f"not a grid key of this model; it takes {', '.join(keys)}", "extra_forbidden"
            )
    out = {}
    for k in keys:
        v = grid.get(k)
        if v is None:
            if k in required:
                raise SpecError((*LOC, k), "field required", "missing")
            continue
        if k in NUMBERS:
            lo, hi = NUMBERS[k]
            if not is_number(v) or not lo <= v <= hi:
                raise SpecError((*LOC, k), f"must be a number in [{lo}, {hi:g}], got {json_repr(v)}")
            out[k] = float(v)
            continue
        lo = 0 if k in INDICES else 1
        if not is_int(v) or not lo <= v <= MAX_SIDE:
            raise SpecError((*LOC, k), f"must be an integer in [{lo}, {MAX_SIDE}], got {json_repr(v)}")
        out[k] = v
    at_most(tokens(out))
    return out


def at_most(n: int) -> None:
    """Refuse a grid of ``n`` tokens past MAX_TOKENS (SpecError at ``grid``)."""
    if n > MAX_TOKENS:
        raise SpecError(LOC, f"{n} tokens: at most {MAX_TOKENS} a request")


def tokens(sizes: Mapping) -> int:
    """The tokens of a grid: its frames x height x width, and every other count (text tokens) after
    them (NUMBERS and INDICES are not counts)."""
    counts = (v for k, v in sizes.items() if k not in AXES and k not in NUMBERS and k not in INDICES)
    return math.prod(v for k, v in sizes.items() if k in AXES) + sum(counts)


def indices(sizes) -> np.ndarray:
    """Each axis's index of every cell of a grid of ``sizes`` (outermost first), cells in row-major
    order: int64 [len(sizes), prod(sizes)]."""
    return np.indices(tuple(sizes), dtype=np.int64).reshape(len(sizes), -1)


def derive(record, config: Mapping, layer_type, grid):
    """``record.derive`` with the grid where the record takes one; a grid beside a model whose
    positions are not a token grid is refused."""
    if getattr(record, "grid_keys", None) is not None:
        return record.derive(config, layer_type, grid)
    if grid is not None:
        raise SpecError(LOC, "this model's positions are not a token grid: send positions (or position_ids)")
    return record.derive(config, layer_type)


def check_selections(derived, body: Mapping, fields) -> None:
    """A grid gives the selection: refuse one sent beside it."""
    if "position_ids" not in derived.fields:
        return
    for k in fields:
        if body.get(k) is not None:
            raise SpecError(
                (k,), "not allowed beside grid, which gives every token's position", "extra_forbidden"
            )


SCHEMA = {
    "type": ["object", "null"],
    "description": "the token grid (patches per axis: frames, height, width) of a vision or video "
    "model's config; it gives the positions (docs/reference.md, Token grids)",
    "properties": {k: {"type": "integer", "minimum": 1, "maximum": MAX_SIDE} for k in AXES},
}
