"""The readings of diffusers' rotary positional modules (engine/models/diffusers_rope.py holds the
record of each class): how a record turns a transformer's ``config.json`` into posenc's rope spec
fields, and a token ``grid`` (models/grid.py) into the positions the class itself builds.

- ``AxesRope``: a frequency set per axis (``get_1d_rotary_pos_embed`` and its copies: Flux, Wan,
  HunyuanVideo, Lumina2...), posenc's ``axes_dim``;
- ``SectionRope``: frequencies per axis dealt over the half width, half-split over the whole head
  (GLM-Image, CogView4, MiniMax-H3): ``inv_freq`` with ``mrope_section``;
- ``CenteredRope``: QwenImage's rows and columns centred on the image (``axes_coords``);
- ``SequenceRope``: a 1-D sequence (the audio DiTs), a plain rope;
- ``CropRope``, ``VideoCropRope``: a crop region of a base grid, fractional (HunyuanDiT, EasyAnimate).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import numpy as np

from ..core.errors import SpecError
from ..core.fields import is_number, json_repr
from ..tables.rope_spec import HALF_SPLIT, INTERLEAVED
from . import grid as model_grid
from .config import LOC, Config, Derived

# How a class builds the positions it rotates by (docs/reference.md lists the request for each):
IDS = "ids"  # handed in by its pipeline (Flux's img_ids / txt_ids): [n, k] -> position_ids [k][n]
GRID = "grid"  # its latent's (frame, row, column) grid, integer, row-major
TEXT_THEN_GRID = "text-then-grid"  # caption tokens (i, 0, 0), then the image at (text, row, column)
IMAGE_THEN_TEXT = "image-then-text"  # the image at (text, row, column), then the caption's (i, 0, 0)
SEQUENCE = "sequence"  # a 1-D sequence, 0..n-1: plain ``positions``
CENTRED = "centred"  # QwenImage: rows and columns centred on the image, then the caption (grid only)
CROP = "crop"  # HunyuanDiT: its pipeline's crop region of a base grid, fractional (grid only)
# the ``grid`` keys of each way of building positions from a token grid (models/grid.py), and the
# ones required; IDS and SEQUENCE take no grid
GRID_KEYS = {
    GRID: (("frames", "height", "width"), ("height", "width")),
    TEXT_THEN_GRID: (("text", "height", "width"), ("height", "width")),
    IMAGE_THEN_TEXT: (("text", "height", "width"), ("height", "width")),
}


def read_config(raw, layer_type, defaults: Mapping) -> Config:
    """A diffusers transformer config read with its class's defaults (a ``layer_type`` is refused:
    they have none)."""
    if layer_type is not None:
        raise SpecError(("layer_type",), "diffusers transformer configs have no layer types")
    return Config(raw, {}, defaults)


@dataclasses.dataclass(frozen=True)
class AxesRope:
    """A frequency set per axis over the head (``axes_dim`` rope). ``axes`` is the config key of the
    axes' widths or a rule computing them from the config (Wan: from attention_head_dim);
    ``theta`` the config key of θ or the constant the class passes; ``positions`` how the class
    builds its positions (IDS, GRID, TEXT_THEN_GRID)."""

    source: str
    defaults: Mapping
    axes: str | Callable[[Config], list]
    theta: str | float
    positions: str
    layout: str = INTERLEAVED
    head_dim: str = "attention_head_dim"
    # ChronoEdit: a two-frame latent takes the frames 0 and cfg[two_frames_key] - 1
    two_frames_key: str | None = None

    @property
    def grid_keys(self):
        """The grid keys this class's positions are built from (None: position_ids only)."""
        keys = GRID_KEYS.get(self.positions)
        return None if keys is None else keys[0]

    def derive(self, raw, layer_type, grid=None):
        cfg = read_config(raw, layer_type, self.defaults)
        if callable(self.axes):
            axes, axes_loc = self.axes(cfg), cfg.loc(self.head_dim)
        else:
            axes, axes_loc = _axes(cfg, self.axes), cfg.loc(self.axes)
        # the rotary width: attention_head_dim, or the axes' sum where the class rotates exactly the
        # axes it is given (its head is dim // n_heads, which it asserts equal to the sum)
        head_dim = sum(axes) if self.head_dim == self.axes else cfg.int(self.head_dim)
        theta, theta_loc = _theta(cfg, self.theta)
        d = Derived(
            {"head_dim": head_dim, "rope_theta": theta, "axes_dim": axes, "layout": self.layout},
            {
                "head_dim": cfg.loc(self.head_dim),
                "axes_dim": axes_loc,
                "rope_theta": theta_loc,
                "layout": (*LOC, "_class_name"),
            },
        )
        if grid is not None:  # else the request's position_ids are the positions
            d.fields["position_ids"] = self.tokens(cfg, grid, len(axes))
            d.origin["position_ids"] = model_grid.LOC
        return d

    def tokens(self, cfg: Config, grid, k: int) -> np.ndarray:
        """The positions the class builds for ``grid``: each axis's index of every token, [k, n]."""
        keys, required = GRID_KEYS[self.positions]
        sizes = model_grid.parse(grid, keys, required)
        h, w = sizes["height"], sizes["width"]
        if self.positions == GRID:
            f = sizes.get("frames", 1)
            if k == 2:
                if f != 1:
                    raise SpecError(
                        (*model_grid.LOC, "frames"), "this config's rotary axes are 2-D (rows, columns)"
                    )
                return model_grid.indices((h, w))
            ids = model_grid.indices((f, h, w))
            if f == 2 and self.two_frames_key is not None:
                ids[0] *= cfg.int(self.two_frames_key) - 1
            return ids
        text = sizes.get("text", 0)
        image = model_grid.indices((1, h, w))
        image[0] = text
        caption = np.zeros((3, text), dtype=np.int64)
        caption[0] = np.arange(text)
        parts = (caption, image) if self.positions == TEXT_THEN_GRID else (image, caption)
        return np.concatenate(parts, axis=1)


@dataclasses.dataclass(frozen=True)
class SequenceRope:
    """A 1-D sequence (an audio DiT's frames): a plain rope over ``width(cfg)`` rotary columns (the
    first of each head where the class rotates part of it), θ from a config key or the class's
    constant, half-split (rotate_half); positions are the sequence's own, 0..n-1."""

    source: str
    defaults: Mapping
    width: Callable[[Config], tuple]  # -> (rotary width, the key it follows from)
    theta: str | float
    layout: str = HALF_SPLIT
    positions: str = SEQUENCE
    grid_keys = None  # a sequence, not a token grid: plain positions

    def derive(self, raw, layer_type):
        cfg = read_config(raw, layer_type, self.defaults)
        width, key = self.width(cfg)
        theta, theta_loc = _theta(cfg, self.theta)
        return Derived(
            {"head_dim": width, "rope_theta": theta, "layout": self.layout},
            {"head_dim": cfg.loc(key), "rope_theta": theta_loc, "layout": (*LOC, "_class_name")},
        )


@dataclasses.dataclass(frozen=True)
class SectionRope:
    """Frequencies per axis dealt over the half width in contiguous runs, half-split over the whole
    head (posenc's ``inv_freq`` with ``mrope_section``): GLM-Image and CogView4 give rows and columns
    each d/4 frequencies θ^(−2j/(d/2)), [rows | columns | rows | columns]; MiniMax-H3 gives (t, h, w)
    the same rope_freq_dim frequencies θ^(−2j/(2·rope_freq_dim)) each. ``positions``: GRID (the
    latent's rows and columns; CogView4 maps them into its rope_axes_dim table) or IDS."""

    source: str
    defaults: Mapping
    shared: bool  # MiniMax-H3: every axis the same frequencies
    positions: str
    scaled_key: str | None = None  # CogView4: row i -> i * rope_axes_dim[0] // height

    @property
    def grid_keys(self):
        return ("height", "width") if self.positions == GRID else None

    def derive(self, raw, layer_type, grid=None):
        cfg = read_config(raw, layer_type, self.defaults)
        if self.shared:
            n, key = cfg.int("rope_freq_dim"), "rope_freq_dim"
            theta, theta_loc = _theta(cfg, "rope_theta")
            f = _inv(theta, 2 * n, n)
            fields = {"head_dim": 6 * n, "inv_freq": f * 3, "mrope_section": [n, n, n]}
        else:
            d, key = cfg.int("attention_head_dim"), "attention_head_dim"
            if d % 4:
                raise SpecError(
                    cfg.loc(key), f"must be a multiple of 4 (rows and columns each rotate d/2), got {d}"
                )
            theta, theta_loc = 10000.0, (*LOC, "_class_name")
            f = _inv(theta, d // 2, d // 4)
            fields = {"head_dim": d, "inv_freq": f * 2, "mrope_section": [d // 4, d // 4]}
        fields["layout"] = HALF_SPLIT
        here = (*LOC, "_class_name")
        origin = {
            "head_dim": cfg.loc(key),
            "inv_freq": theta_loc,
            "mrope_section": cfg.loc(key),
            "layout": here,
        }
        if grid is not None:
            sizes = model_grid.parse(grid, ("height", "width"), ("height", "width"))
            h, w = sizes["height"], sizes["width"]
            ids = model_grid.indices((h, w))
            if self.scaled_key is not None:
                table = _axes(cfg, self.scaled_key)
                ids[0] = ids[0] * table[0] // h
                ids[1] = ids[1] * table[1] // w
            fields["position_ids"] = ids
            origin["position_ids"] = model_grid.LOC
        return Derived(fields, origin)


def _inv(theta: float, dim: int, n: int) -> list:
    """θ^(−2j/dim) for j < n, float64 (the classes compute them in float32)."""
    return (1.0 / np.power(float(theta), np.arange(0, 2 * n, 2, dtype=np.float64) / dim)).tolist()


@dataclasses.dataclass(frozen=True)
class CenteredRope:
    """QwenImage's QwenEmbedRope(scale_rope=True) and NucleusMoE's copy: Flux's axes (θ 10000, complex
    freqs_cis: interleaved) over the frame, and rows and columns centred on the image: row i of h is
    i − (h − h//2) (negative above the middle), and likewise columns; then the caption's tokens, at
    max(h//2, w//2) + j on every axis. A ``grid`` gives them (``axes_coords`` offsets the rows and
    columns; position_ids stay indices), image tokens first, as the module returns them. QwenImage 2.1
    (``text_first``): the caption at j on every axis, then the image at frame ``text``."""

    source: str
    defaults: Mapping
    grid_keys: tuple = ("frames", "height", "width", "text")
    positions = CENTRED
    # QwenImage 2.1's QwenImage21Rope: the caption first, at i on every axis, then the image at frame
    # ``text``; its tables hold the positions 0..8191 and -1024..-1 (beyond them it wraps)
    text_first: bool = False

    def derive(self, raw, layer_type, grid=None):
        cfg = read_config(raw, layer_type, self.defaults)
        if cfg.get("use_layer3d_rope"):
            raise SpecError(cfg.loc("use_layer3d_rope"), "QwenEmbedLayer3DRope (layered images) is not read")
        sizes = model_grid.parse(grid, self.grid_keys, ("height", "width"))
        f, h, w, text = sizes.get("frames", 1), sizes["height"], sizes["width"], sizes.get("text", 0)
        offsets = [0, -(h - h // 2), -(w - w // 2)]
        image = model_grid.indices((f, h, w))
        if self.text_first:
            for key, top, n in (
                ("text", text, 8191),
                ("height", h - h // 2, 1024),
                ("width", w - w // 2, 1024),
            ):
                if top > n:
                    raise SpecError(
                        (*model_grid.LOC, key), f"its rope tables stop at {n} on this axis, got {top}"
                    )
            image[0] = text
            caption = np.arange(text) - np.array(offsets)[:, None]
            ids = np.concatenate([caption, image], axis=1)
        else:
            caption = max(h // 2, w // 2) + np.arange(text) - np.array(offsets)[:, None]
            ids = np.concatenate([image, caption], axis=1)
        here = (*LOC, "_class_name")
        fields = {
            "head_dim": cfg.int("attention_head_dim"),
            "rope_theta": 10000.0,
            "axes_dim": _axes(cfg, "axes_dims_rope"),
            "layout": INTERLEAVED,
            "axes_coords": [[1.0, float(o)] for o in offsets],
            "position_ids": ids,
        }
        origin = {k: here for k in fields}
        origin.update(
            head_dim=cfg.loc("attention_head_dim"),
            axes_dim=cfg.loc("axes_dims_rope"),
            axes_coords=model_grid.LOC,
            position_ids=model_grid.LOC,
        )
        return Derived(fields, origin)


@dataclasses.dataclass(frozen=True)
class InterleavedMrope:
    """Cosmos 3's Cosmos3VLTextRotaryEmbedding: Qwen3-VL's multimodal rope (one frequency set over
    head_dim, dealt to (t, h, w) interleaved by ``rope_axes_dim``, else ``rope_scaling``'s
    ``mrope_section``, else [24, 20, 20]), half-split; position_ids [3][n] from its forward."""

    source: str
    defaults: Mapping
    positions = IDS
    grid_keys = None

    def derive(self, raw, layer_type, grid=None):
        cfg = read_config(raw, layer_type, self.defaults)
        section, where = cfg.get("rope_axes_dim"), cfg.loc("rope_axes_dim")
        if section is None:
            scaling = cfg.block("rope_scaling") or {}
            section, where = (
                scaling.get("mrope_section", [24, 20, 20]),
                (*cfg.loc("rope_scaling"), "mrope_section"),
            )
        theta, theta_loc = _theta(cfg, "rope_theta")
        here = (*LOC, "_class_name")
        return Derived(
            {
                "head_dim": cfg.int("head_dim"),
                "rope_theta": theta,
                "mrope_section": section,
                "mrope_interleaved": True,
                "layout": HALF_SPLIT,
            },
            {
                "head_dim": cfg.loc("head_dim"),
                "rope_theta": theta_loc,
                "mrope_section": where,
                "mrope_interleaved": here,
                "layout": here,
            },
        )


@dataclasses.dataclass(frozen=True)
class CropRope:
    """HunyuanDiT: its pipeline's get_2d_rotary_pos_embed(head, crop, (h, w)) with the crop region
    get_resize_crop_region_for_grid((h, w), 512 // 8 // patch_size) gives: the first half of the head
    rotates by a token's column coordinate, the second by its row's, each Flux's 1-D rope
    (interleaved, θ 10000); coordinates are the crop's linspace(start, stop·(n−1)/n, n), fractional
    (``axes_coords``). A ``grid`` (height, width in patches) gives them."""

    source: str
    defaults: Mapping
    grid_keys = ("height", "width")
    positions = CROP

    def derive(self, raw, layer_type, grid=None):
        cfg = read_config(raw, layer_type, self.defaults)
        d = cfg.int("attention_head_dim")
        if d % 4:
            raise SpecError(
                cfg.loc("attention_head_dim"), f"must be a multiple of 4 (two axes of pairs), got {d}"
            )
        sizes = model_grid.parse(grid, self.grid_keys, self.grid_keys)
        h, w = sizes["height"], sizes["width"]
        base = 512 // 8 // cfg.int("patch_size")
        row, col = _crop(h, w, base, base)
        rows, cols = model_grid.indices((h, w))
        # column axis first, as its meshgrid(grid_w, grid_h, indexing="xy") deals them
        return _crop_rope(cfg, [d // 2, d // 2], [col, row], np.stack([cols, rows]))


def _crop(h: int, w: int, th: int, tw: int) -> tuple[list, list]:
    """[scale, offset] of the rows and of the columns: the linspace(start, stop·(n−1)/n, n) over the
    crop region get_resize_crop_region_for_grid((h, w), tw, th) gives, of a th x tw base."""
    if h / w > th / tw:
        rh, rw = th, int(round(th / h * w))
    else:
        rh, rw = int(round(tw / w * h)), tw
    top, left = int(round((th - rh) / 2.0)), int(round((tw - rw) / 2.0))
    return [_step(top, top + rh, h), float(top)], [_step(left, left + rw, w), float(left)]


def _crop_rope(cfg: Config, axes_dim: list, coords: list, ids: np.ndarray) -> Derived:
    """The fields of a crop-region rope: Flux's 1-D rope per axis (interleaved, θ 10000) over
    attention_head_dim, at ``coords`` (``axes_coords``) of the grid's indices ``ids``."""
    here = (*LOC, "_class_name")
    fields = {
        "head_dim": cfg.int("attention_head_dim"),
        "rope_theta": 10000.0,
        "axes_dim": axes_dim,
        "layout": INTERLEAVED,
        "axes_coords": coords,
        "position_ids": ids,
    }
    origin = {k: model_grid.LOC for k in fields}
    origin.update(
        head_dim=cfg.loc("attention_head_dim"),
        axes_dim=cfg.loc("attention_head_dim"),
        rope_theta=here,
        layout=here,
    )
    return Derived(fields, origin)


def _step(start: int, stop: int, n: int) -> float:
    """The spacing of torch.linspace(start, stop·(n−1)/n, n): 0 for a single point."""
    return 0.0 if n == 1 else (stop * (n - 1) / n - start) / (n - 1)


def _theta(cfg: Config, theta) -> tuple[float, tuple]:
    """θ from the config key ``theta``, or the constant the class passes whatever the config says."""
    if not isinstance(theta, str):
        return float(theta), (*LOC, "_class_name")
    v = cfg.get(theta)
    if not is_number(v):
        raise SpecError(cfg.loc(theta), f"must be a number, got {json_repr(v)}")
    return float(v), cfg.loc(theta)


def _axes(cfg: Config, key: str) -> list:
    v = cfg.get(key)
    if v is None:
        raise SpecError(cfg.loc(key), "field required (this class has no default for it)", "missing")
    if not isinstance(v, (list, tuple)):
        raise SpecError(cfg.loc(key), f"must be a list of the axes' rotary widths, got {json_repr(v)}")
    return list(v)


def wan_axes(cfg: Config) -> list:
    """WanRotaryPosEmbed: h = w = 2 * (attention_head_dim // 6), t the rest of the head."""
    hd = cfg.int("attention_head_dim")
    hw = 2 * (hd // 6)
    return [hd - 2 * hw, hw, hw]


def chronoedit_axes(cfg: Config) -> list:
    """ChronoEditRotaryPosEmbed builds Wan's table (2 * (attention_head_dim // 6) columns per spatial
    axis) but splits it at attention_head_dim // 3: where the two differ its columns mix the axes."""
    hd = cfg.int("attention_head_dim")
    if hd // 3 != 2 * (hd // 6):
        raise SpecError(
            cfg.loc("attention_head_dim"),
            f"ChronoEdit builds 2 * ({hd} // 6) = {2 * (hd // 6)} columns per spatial axis and splits them at "
            f"{hd} // 3 = {hd // 3}, which mixes its axes; posenc reads head widths where the two agree",
        )
    return wan_axes(cfg)


@dataclasses.dataclass(frozen=True)
class VideoCropRope:
    """EasyAnimate's EasyAnimateRotaryPosEmbed: get_3d_rotary_pos_embed(attention_head_dim, its crop
    region, (h, w), frames): frames, rows, columns over d/4, 3d/8, 3d/8 columns (Flux's 1-D rope per
    axis, interleaved, θ 10000); frames at 0..f−1, rows and columns at the linspace(start,
    stop·(n−1)/n, n) of the crop region of a (60, 90) // patch_size base its
    get_resize_crop_region_for_grid gives (``axes_coords``). A ``grid`` (frames, height, width in
    patches) gives them."""

    source: str
    defaults: Mapping
    grid_keys = ("frames", "height", "width")
    positions = CROP

    def derive(self, raw, layer_type, grid=None):
        cfg = read_config(raw, layer_type, self.defaults)
        d = cfg.int("attention_head_dim")
        if d % 16:
            raise SpecError(
                cfg.loc("attention_head_dim"),
                f"must be a multiple of 16 (d/4 and 3d/8 columns of pairs per axis), got {d}",
            )
        sizes = model_grid.parse(grid, self.grid_keys, ("height", "width"))
        f, h, w = sizes.get("frames", 1), sizes["height"], sizes["width"]
        p = cfg.int("patch_size")
        if not 1 <= p <= 60:
            raise SpecError(
                cfg.loc("patch_size"), f"must be 1 to 60 (its crop base is (60, 90) // patch_size), got {p}"
            )
        row, col = _crop(h, w, 60 // p, 90 // p)
        return _crop_rope(
            cfg, [d // 4, d // 8 * 3, d // 8 * 3], [[1.0, 0.0], row, col], model_grid.indices((f, h, w))
        )
