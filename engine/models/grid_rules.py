"""How a model's sin-cos table (``sinusoidal-grid``) follows the token grid a request names beside
its config (models/grid.py, the ``grid`` body form): diffusers' patch embeddings build their table
for the latent they are given, so a record read from a config (vision.GridModel) names one of these
rules. Without a grid the answer is the table of the config's own sample size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from ..core.errors import SpecError
from ..core.fields import is_int, json_repr, require_object
from . import grid as model_grid
from .config import Config


@dataclasses.dataclass(frozen=True)
class GridRule:
    """The grid's axes (``keys``, ``required`` among them; models/grid.py parses them), its token
    ``counts`` (not axes: CogView3-Plus's text tokens, an int >= 0 each, optional) and
    ``apply(cfg, fields, sizes)`` -> (the spec fields of that grid's table, {spec field: the grid
    key it came from})."""

    keys: tuple
    required: tuple
    apply: Callable[[Config, dict, dict], tuple[dict, dict]]
    counts: tuple = ()


def _side(fields: Mapping) -> tuple[int, int]:
    g = fields["grid_size"]
    return (g, g) if is_int(g) else (g[0], g[1])


def _within(sizes: Mapping, most: tuple[int, int]) -> None:
    for key, m in zip(("height", "width"), most):
        if sizes[key] > m:
            raise SpecError(
                (*model_grid.LOC, key), f"must be <= the table's pos_embed_max_size ({m}), got {sizes[key]}"
            )


def _resized(cfg, fields, sizes):
    # PatchEmbed.forward off its sample size: the latent's own grid, base_size and scale kept
    return {**fields, "grid_size": [sizes["height"], sizes["width"]]}, {"grid_size": "height"}


def _centre_crop(cfg, fields, sizes):
    # OmniGenPatchEmbed._cropped_pos_embed: the centred window of its pos_embed_max_size table
    mh, mw = _side(fields)
    _within(sizes, (mh, mw))
    h, w = sizes["height"], sizes["width"]
    return {**fields, "crop": [(mh - h) // 2, (mw - w) // 2, h, w]}, {"crop": "height"}


def _patch_embed(cfg, fields, sizes):
    # PatchEmbed (SD3): cropped_pos_embed with a pos_embed_max_size, else (null) its latent's own grid
    size = cfg.raw.get("pos_embed_max_size", cfg.defaults.get("pos_embed_max_size"))
    return (_resized if size is None else _centre_crop)(cfg, fields, sizes)


def _corner_crop_after_text(cfg, fields, sizes):
    # CogView3PlusPatchEmbed.forward: pos_embed[:height, :width] after the text tokens' zero rows
    _within(sizes, _side(fields))
    fields = {**fields, "crop": [0, 0, sizes["height"], sizes["width"]], "extra_tokens": sizes["text"]}
    return fields, {"crop": "height", "extra_tokens": "text"}


def _video(cfg, fields, sizes):
    # CogVideoXPatchEmbed.forward off its sample size: the 3-D table of the latent's frames and grid,
    # after its max_text_seq_length zero rows
    fields = {**fields, "temporal_size": sizes["frames"], "grid_size": [sizes["height"], sizes["width"]]}
    return fields, {"temporal_size": "frames", "grid_size": "height"}


HW = ("height", "width")
RESIZED = GridRule(HW, HW, _resized)
CENTRE_CROP = GridRule(HW, HW, _centre_crop)
PATCH_EMBED = GridRule(HW, HW, _patch_embed)
CORNER_CROP_AFTER_TEXT = GridRule(HW, HW, _corner_crop_after_text, counts=("text",))
VIDEO = GridRule(("frames", *HW), ("frames", *HW), _video)


def apply(rule: GridRule, cfg: Config, fields: dict, origin: dict, grid) -> tuple[dict, dict]:
    """(fields, origin) of the table for the request's ``grid`` (SpecError at ``grid...``)."""
    grid = require_object(grid, model_grid.LOC)
    counts = {}
    for k in rule.counts:
        v = grid.get(k)
        if v is not None and (not is_int(v) or not 0 <= v <= model_grid.MAX_TOKENS):
            raise SpecError(
                (*model_grid.LOC, k),
                f"must be an integer in [0, {model_grid.MAX_TOKENS}], got {json_repr(v)}",
            )
        counts[k] = v or 0
    axes = model_grid.parse({k: v for k, v in grid.items() if k not in rule.counts}, rule.keys, rule.required)
    fields, keys = rule.apply(cfg, fields, {**axes, **counts})
    return fields, {**origin, **{f: (*model_grid.LOC, k) for f, k in keys.items()}}
