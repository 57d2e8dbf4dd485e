"""The rope request's spec: ``RopeSpec`` (what a rope table and answer are computed from), its
fields, ``parse_spec`` (the strict reading of a request's spec fields, transformers'
``rope_scaling`` / ``rope_parameters`` included) and ``frequencies`` (the float64 frequencies a
spec uses at a sequence length), with the check that they are finite and positive. The family that
stores, serves and templates rope tables is rope.py.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from .. import kernels
from ..core.errors import SpecError
from ..core.fields import json_repr, refuse_unknown, req_bool, req_choice, req_float, req_int, require_object
from . import rope_axes as axes
from . import rope_grid
from .rope_types import ROPE_TYPES, _Ctx

# The pairings of rotary columns (docs/reference.md, rope ``layout``), as the kernels implement them
# (kernels.rope_expand): half_split pairs column k with k + d/2 (Llama / GPT-NeoX rotate_half),
# interleaved pairs 2k with 2k + 1 (GPT-J rotate_every_two).
LAYOUTS = kernels.ROPE_LAYOUTS
HALF_SPLIT, INTERLEAVED = LAYOUTS
DEFAULT_LAYOUT = HALF_SPLIT
# The largest head_dim taken (422 above it). Checked first, before anything is sized by it: the
# frequency checks below build arrays of d/2, and a request must cost microseconds before its size
# is known. Every released model's head_dim is <= 512; one row at this width is 512 KiB.
MAX_HEAD_DIM = 1 << 16


@dataclasses.dataclass(frozen=True)
class RopeSpec:
    head_dim: int
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 1.0
    rope_type: str = "default"
    # The rope_type's resolved parameters, sorted (key, value); lists become tuples.
    params: tuple = ()
    max_position_embeddings: int | None = None
    seq_len: int | None = None
    layout: str = DEFAULT_LAYOUT
    mrope_section: tuple | None = None  # multi-axis (rope_axes.py): Qwen-VL's dealing of d/2
    mrope_interleaved: bool = False
    axes_dim: tuple | None = None  # multi-axis: Flux's frequency set per axis
    mrope_axes: tuple | None = None  # multi-axis: the axis of each of the d/2 frequencies
    inv_freq: tuple | None = None  # the frequencies as data (rope_grid.py)
    axes_coords: tuple | None = None  # per axis (scale, offset): index i is coordinate scale·i + offset

    @property
    def d(self) -> int:
        """Width of the cos/sin: the rotary width, and for an odd one the next even number
        (transformers then takes ceil(w/2) frequencies and hands attention 2·ceil(w/2) columns)."""
        w = self.rotary_dim
        return w + (w & 1)

    @property
    def rotary_dim(self) -> int:
        """Rotary width w, the frequencies' exponent 2k/w: Python's int(head_dim *
        partial_rotary_factor) (GPT-NeoX, Phi); head_dim for proportional (its type says)."""
        return self.type.width(self.head_dim, self.partial_rotary_factor)

    @property
    def p(self) -> dict:
        return dict(self.params)

    @property
    def type(self):
        return ROPE_TYPES[self.rope_type]


# ---------------------------------------------------------------------------------------------
# Parsing


def parse_spec(req: Mapping) -> RopeSpec:
    """Validate the spec fields of a rope request (selections and dtype are read elsewhere)."""
    require_object(req)
    refuse_unknown(req, FIELDS)
    head_dim = req_int(req, "head_dim", (), lo=2, hi=MAX_HEAD_DIM)
    rs, rp = req.get("rope_scaling"), req.get("rope_parameters")
    if rs is not None and rp is not None:
        raise SpecError(("rope_parameters",), "send either rope_scaling or rope_parameters, not both")
    src = "rope_parameters" if rp is not None else "rope_scaling"
    scaling = require_object(rp if rp is not None else (rs if rs is not None else {}), (src,))

    theta = req_float(req, "rope_theta", (), gt=0.0, required=False)
    prf = req_float(req, "partial_rotary_factor", (), gt=0.0, le=1.0, required=False)
    if src == "rope_parameters":  # transformers 5's rope_parameters may carry these two
        inner_theta = req_float(scaling, "rope_theta", (src,), gt=0.0, required=False)
        inner_prf = req_float(scaling, "partial_rotary_factor", (src,), gt=0.0, le=1.0, required=False)
        for key, top, inner in (
            ("rope_theta", theta, inner_theta),
            ("partial_rotary_factor", prf, inner_prf),
        ):
            if top is not None and inner is not None and top != inner:
                raise SpecError((src, key), f"disagrees with the top-level {key} ({top}); give it once")
        theta_loc = ("rope_theta",) if theta is not None or inner_theta is None else (src, "rope_theta")
        theta = theta if theta is not None else inner_theta
        prf = prf if prf is not None else inner_prf
    else:
        theta_loc = ("rope_theta",)
    theta = 10000.0 if theta is None else theta
    prf = 1.0 if prf is None else prf

    rt = ROPE_TYPES[_rope_type(scaling, src)]
    rope_type = rt.name  # an alias ("su") is stored under its canonical name
    d = rt.width(head_dim, prf)
    if d < 2:
        raise SpecError(
            ("partial_rotary_factor",) if prf < 1 else ("head_dim",),
            f"rotary width d = int(head_dim * partial_rotary_factor) = {d} must be >= 2",
        )
    if d % 2 and not rt.odd_width:
        raise SpecError(
            ("partial_rotary_factor",) if prf < 1 and d != head_dim else ("head_dim",),
            f"rotary width d = int(head_dim * partial_rotary_factor) = {d} must be even for rope_type "
            f"{rope_type!r} (odd widths: {', '.join(n for n, t in ROPE_TYPES.items() if t.odd_width)})",
        )
    width, d = d, d + (d & 1)  # an odd width's cos/sin: ceil(w/2) frequencies, 2·ceil(w/2) columns

    allowed = {"rope_type", "type", *rt.keys}
    if src == "rope_parameters":
        allowed |= {"rope_theta", "partial_rotary_factor"}
    refuse_unknown(scaling, allowed, (src,), f"not used by rope_type {rope_type!r}")

    max_pos = req_int(req, "max_position_embeddings", (), lo=1, required=False)
    top_orig = req_int(req, "original_max_position_embeddings", (), lo=1, required=False)
    if top_orig is not None and not rt.uses_original:
        raise SpecError(
            ("original_max_position_embeddings",),
            f"not used by rope_type {rope_type!r} (only yarn, llama3, longrope)",
        )
    seq_len = req_int(req, "seq_len", (), lo=1, required=False)
    if seq_len is not None and not rt.uses_seq_len:
        raise SpecError(("seq_len",), f"only for rope_type 'dynamic' or 'longrope', not {rope_type!r}")
    layout = req_choice(req, "layout", (), LAYOUTS, DEFAULT_LAYOUT)
    section, axes_dim = (
        axes.parse_int_list(req, "mrope_section", 1),
        axes.parse_int_list(req, "axes_dim", 2, True),
    )
    interleaved = req_bool(req, "mrope_interleaved", (), False)
    mrope_axes = axes.parse_axes(req, d)
    axes.check_sections(section, interleaved, axes_dim, d, rope_type, src, mrope_axes)
    inv_freq, coords = rope_grid.parse(req, scaling, src, d, rope_type, section, axes_dim, mrope_axes)

    ctx = _Ctx(
        src=src,
        d=width,
        theta=theta,
        max_pos=max_pos,
        top_orig=top_orig,
        theta_loc=theta_loc,
        head_dim=head_dim,
        prf=prf,
    )
    params = rt.validate(scaling, ctx)
    spec = RopeSpec(
        head_dim=head_dim,
        rope_theta=theta,
        partial_rotary_factor=prf,
        rope_type=rope_type,
        params=tuple(sorted(params.items())),
        max_position_embeddings=max_pos,
        seq_len=seq_len,
        layout=layout,
        mrope_section=section,
        mrope_interleaved=interleaved,
        axes_dim=axes_dim,
        mrope_axes=mrope_axes,
        inv_freq=inv_freq,
        axes_coords=coords,
    )
    _check_frequencies(spec, src)
    return spec


def _rope_type(scaling: Mapping, src: str) -> str:
    rt, legacy = scaling.get("rope_type"), scaling.get("type")
    for key, v in (("rope_type", rt), ("type", legacy)):
        if v is not None and (not isinstance(v, str) or v not in ROPE_TYPES):
            raise SpecError(
                (src, key),
                f"must be one of {', '.join(map(repr, ROPE_TYPES))}, got {json_repr(v)}",
                "literal_error",
            )
    if rt is not None and legacy is not None and rt != legacy:
        raise SpecError((src, "type"), f"disagrees with rope_type ({rt!r}); send one of them")
    return rt or legacy or "default"


def _check_frequencies(spec: RopeSpec, src: str) -> None:
    """Refuse parameter values whose frequencies would not be finite and positive."""
    rt = ROPE_TYPES[spec.rope_type]
    for v in rt.stable_variants(spec):
        with np.errstate(all="ignore"):
            inv, att = frequencies(spec, rt.seq_len_of(spec, v))
        if rt.pads_zeros:  # only the rotated frequencies must be positive
            inv = inv[inv != 0]
        if not (np.isfinite(inv).all() and (inv > 0).all() and math.isfinite(att) and att > 0):
            raise SpecError(
                ("rope_theta",) if spec.rope_type == "default" else (src, "rope_type"),
                "these parameters give non-finite or non-positive frequencies",
            )
        with np.errstate(over="ignore", under="ignore"):  # an overflow to inf is what is tested for
            inv32 = inv.astype(np.float32)
        if not np.isfinite(inv32).all() or (inv32 == 0).any():
            raise SpecError(("rope_theta",), "frequencies overflow or underflow float32")


def frequencies(spec: RopeSpec, seq_len: int) -> tuple[np.ndarray, float]:
    if spec.inv_freq is not None:  # given as data (rope_grid.py)
        return np.array(spec.inv_freq, dtype=np.float64), 1.0
    if spec.axes_dim is not None:  # one set per axis, concatenated (default type only)
        return axes.axes_inv_freq(spec.rope_theta, spec.axes_dim), 1.0
    return spec.type.inv_freq(spec, seq_len)


# the fields of a rope request (selections and dtype included)
FIELDS = (
    "head_dim",
    "rope_theta",
    "partial_rotary_factor",
    "max_position_embeddings",
    "rope_scaling",
    "rope_parameters",
    "original_max_position_embeddings",
    "seq_len",
    "layout",
    "mrope_section",
    "mrope_interleaved",
    "axes_dim",
    "mrope_axes",
    "inv_freq",
    "axes_coords",
    "positions",
    "position_ids",
    "dtype",
)
