"""timm's rotary ViTs (read by the ``architecture`` a timm ``config.json`` names, the registered
model name, and the token ``grid``: models/grid.py): each record holds the arguments the registered
model function gives its rope module (timm 1.0.31; engine/models/timm_zoo.json, generated from timm's
registry by tests/tools/timm_zoo.py). registry.ARCHITECTURES holds them.

The answer is what the rope module hands attention for a ``{"height": H, "width": W}`` patch grid
(its patch tokens, row-major; prefix tokens — class, register — take no rope): timm's
``[sin | cos]`` halves as posenc's ``sin`` and ``cos``, in the pairing its attention applies
(``rotate_half``: half_split, else interleaved). The modules, in posenc's terms (half column order
= the d/2 frequencies, dealt to the two grid axes by ``mrope_section`` or ``axes_dim``):

- ``RotaryEmbedding`` / ``RotaryEmbeddingCat``: dim/4 bands per axis (``freq_bands``: 1/T^(k/(dim/4));
  ``in_pixels``: ``pixel_freq_bands``), axis 0 then axis 1 (``grid_indexing`` "xy": width first);
  coordinates ``_build_grid``: "index" i + grid_offset, "pixel" linspace(-1, 1), "centered"
  2·(i + 0.5 + grid_offset)/n - 1, each times ref/size with ``ref_feat_shape`` (EVA's rescaling).
- ``RotaryEmbeddingDinoV3``: frequencies 2π/period (periods T^(2k/(dim/2)), or min·(max/min)^t),
  the centred [-1, 1] grid.
- ``Gemma4RotaryEmbedding2D``: Flux-style blocks, head_dim/2 per axis (x = column first), θ^(-2j/(head_dim/2)),
  half_split within each block.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from collections.abc import Mapping

from ..core.errors import SpecError
from ..tables.rope_spec import HALF_SPLIT, INTERLEAVED
from . import grid as model_grid
from .config import LOC, Derived

ZOO = json.loads(pathlib.Path(__file__).with_name("timm_zoo.json").read_text())
GRID_KEYS = ("height", "width")
# model_args (a hub config's overrides of the model function's arguments) that change the rope module
ROPE_ARGS = (
    "embed_dim",
    "num_heads",
    "head_dim",
    "ref_feat_shape",
    "use_rot_pos_emb",
    "rope_theta",
    "dynamic_img_size",
)


def _identity(coords) -> bool:
    return all(c == (1.0, 0.0) for c in coords)


def _axis_coords(kind: str, sizes, ref, offset: float, normalize: str) -> list:
    """(scale, offset) of each channel's coordinate of index i (timm's _build_grid, in float64)."""
    out = []
    for s, r in zip(sizes, ref or (None,) * len(sizes)):
        f = 1.0 if r is None else r / s  # ref_feat_shape: x / s * r
        if kind == "index":
            out.append((f, offset * f))
        elif kind == "pixel":  # torch.linspace(-1, 1, s)
            step = 2.0 / (s - 1) if s > 1 else 0.0
            out.append((step * f, -1.0 * f))
        else:  # centered: ((i + 0.5 + offset) / denom) * f, then 2x - 1
            denom = {"max": max(sizes), "min": min(sizes)}.get(normalize, s)
            out.append((2.0 * f / denom, 2.0 * (0.5 + offset) * f / denom - 1.0))
    return out


def _bands(a: Mapping) -> list:
    nb = a["dim"] // 4
    if a.get("in_pixels", True):  # pixel_freq_bands(nb, max_res, linear_bands)
        top = float(a.get("max_res", 224))
        if a.get("linear_bands", False):
            pts = [1.0 + (top / 2 - 1.0) * k / (nb - 1) if nb > 1 else 1.0 for k in range(nb)]
        else:
            hi = math.log(top, 2) - 1
            pts = [2.0 ** (hi * k / (nb - 1) if nb > 1 else 0.0) for k in range(nb)]
        return [p * math.pi for p in pts]
    t = float(a.get("temperature", 10000.0))
    return [1.0 / t ** (k / nb) for k in range(nb)]


def _periods(a: Mapping) -> list:
    nb = a["dim"] // 4
    lo, hi = a.get("min_period"), a.get("max_period")
    if lo is not None and hi is not None:
        return [lo * (hi / lo) ** (k / (nb - 1) if nb > 1 else 0.0) for k in range(nb)]
    t = float(a.get("temperature", 100.0))
    return [t ** (2.0 * k / (a["dim"] // 2)) for k in range(nb)]


def _swap(seq):
    return None if seq is None else [seq[1], seq[0]]


@dataclasses.dataclass(frozen=True)
class TimmRope:
    """One registered model's rope module: its class and the arguments its model function passes."""

    source: str
    module: str
    args: Mapping
    grid_keys: tuple = GRID_KEYS

    def derive(self, raw: Mapping, layer_type, grid) -> Derived:
        if layer_type is not None:
            raise SpecError(("layer_type",), "timm configs have no layer types")
        margs = raw.get("model_args")
        if isinstance(margs, Mapping):
            for k in margs:
                if k in ROPE_ARGS or k.startswith("rope_"):
                    raise SpecError(
                        (*LOC, "model_args", k),
                        f"changes the rope module of {raw['architecture']}; posenc reads the registered "
                        "model's own arguments: send the rope spec fields instead of hf_config",
                    )
        sizes = model_grid.parse(grid, self.grid_keys, self.grid_keys)
        h, w = sizes["height"], sizes["width"]
        a = self.args
        here = (*LOC, "architecture")
        if self.module == "Gemma4RotaryEmbedding2D":  # x (the column) is axis 0
            hd = a["head_dim"]
            fields = {
                "head_dim": hd,
                "rope_theta": float(a.get("rope_theta", 100.0)),
                "axes_dim": [hd // 2, hd // 2],
                "layout": HALF_SPLIT,
            }
            fields["position_ids"] = model_grid.indices((h, w))[::-1].copy()
            return Derived(fields, {k: here for k in fields})
        xy = a.get("grid_indexing", "ij") == "xy"
        sizes2 = [w, h] if xy else [h, w]
        if self.module == "RotaryEmbeddingDinoV3":
            bands = [2.0 * math.pi / p for p in _periods(a)]
            kind, ref = "centered", None
        else:
            bands = _bands(a)
            kind = a.get("grid_type") or ("pixel" if a.get("in_pixels", True) else "index")
            ref = a.get("ref_feat_shape")
            ref = _swap(ref) if xy else ref
        coords = _axis_coords(
            kind, sizes2, ref, float(a.get("grid_offset", 0.0)), a.get("normalize_coords", "separate")
        )
        nb = len(bands)
        fields = {
            "head_dim": a["dim"],
            "inv_freq": bands + bands,
            "mrope_section": [nb, nb],
            "layout": HALF_SPLIT
            if a.get("rotate_half", self.module == "RotaryEmbeddingDinoV3")
            else INTERLEAVED,
        }
        if not _identity(coords):
            fields["axes_coords"] = [list(c) for c in coords]
        ids = model_grid.indices((h, w))  # rows, columns of the row-major patch tokens
        fields["position_ids"] = ids[::-1].copy() if xy else ids
        return Derived(fields, {k: here for k in fields})


def _record(name: str, row: Mapping) -> TimmRope:
    return TimmRope(source=f"{row['file']} ({name}), {row['module']}", module=row["module"], args=row["args"])


ARCHITECTURES: dict[str, dict] = {name: {"rope": _record(name, row)} for name, row in ZOO["models"].items()}
UNREAD: dict[str, str] = ZOO["unread"]  # rotary models posenc does not read, and why
EXAMPLE = {"architecture": "vit_base_patch16_rope_reg1_gap_256", "num_classes": 1000, "global_pool": "avg"}
