"""RoPE cos/sin (rotary position embeddings) and every scaling transformers ships.

Reference: transformers 5.24 ``modeling_rope_utils.py`` (``ROPE_INIT_FUNCTIONS``) and
``LlamaRotaryEmbedding.forward``; formulas in ../shared/SEMANTICS.md §1. Everything is evaluated in
float64 (transformers uses float32) and rounded once to the output dtype; ``inv_freq`` is the
float32 rounding of the float64 frequencies actually used.

Registry contract (like transformers' ROPE_INIT_FUNCTIONS, but strict): every rope_type maps to a
``RopeType`` whose ``validate(scaling, ctx)`` returns the resolved parameters (or raises SpecError
naming the key) and whose ``inv_freq(spec, seq_len)`` returns ``(inv_freq float64 [d/2],
attention_scaling)``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Callable, Mapping

import numpy as np

from .. import dtypes as _dt
from ..errors import SpecError
from ..fields import (is_number, json_repr, refuse_unknown, req_bool, req_choice, req_float,
                      req_int, require_object)
from ..selection import Selection, parse_selection

LAYOUTS = ("half_split", "interleaved")
FIELDS = ("head_dim", "rope_theta", "partial_rotary_factor", "max_position_embeddings",
          "rope_scaling", "rope_parameters", "original_max_position_embeddings", "seq_len",
          "layout", "positions", "dtype")
SELECTIONS = ("positions",)


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
    layout: str = "half_split"

    @property
    def d(self) -> int:
        """Rotary width: Python's int(head_dim * partial_rotary_factor) (GPT-NeoX, Phi)."""
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def p(self) -> dict:
        return dict(self.params)

    def table_key(self, variant) -> str:
        """Canonical key of the half-width table these frequencies fill: everything that changes
        the numbers, nothing that only changes their arrangement (layout) or selection."""
        return canonical(
            {"family": "rope", "d": self.d, "rope_theta": self.rope_theta, "rope_type": self.rope_type,
             "params": self.params, "max_position_embeddings": self.max_position_embeddings,
             "variant": variant}
        )


def canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=list)


# ---------------------------------------------------------------------------------------------
# Frequencies. Each function: (spec, seq_len) -> (inv_freq float64 [d/2], attention_scaling).

def _base_inv_freq(theta: float, d: int) -> np.ndarray:
    # 1 / θ^(2k/d), k = 0..d/2-1 (Llama/NeoX compute_default_rope_parameters; exponent over d, not D)
    return 1.0 / np.power(float(theta), np.arange(0, d, 2, dtype=np.float64) / d)


def _default(spec: RopeSpec, seq_len: int):
    return _base_inv_freq(spec.rope_theta, spec.d), 1.0


def _linear(spec: RopeSpec, seq_len: int):
    # _compute_linear_scaling_rope_parameters: positions divided by factor == inv_freq / factor
    return _base_inv_freq(spec.rope_theta, spec.d) / spec.p["factor"], 1.0


def _dynamic_length(spec: RopeSpec, seq_len: int) -> int:
    return max(int(seq_len), spec.max_position_embeddings)


def _dynamic(spec: RopeSpec, seq_len: int):
    # _compute_dynamic_ntk_parameters: θ' = θ·(f·L/M − (f−1))^(d/(d−2)), L = max(seq_len, M)
    d, f, m = spec.d, spec.p["factor"], spec.max_position_embeddings
    length = _dynamic_length(spec, seq_len)
    theta = spec.rope_theta * ((f * length / m) - (f - 1)) ** (d / (d - 2))
    return _base_inv_freq(theta, d), 1.0


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    # get_mscale in _compute_yarn_parameters (YaRN paper, eq. for sqrt(1/t))
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_attention(p: Mapping) -> float:
    if p.get("attention_factor") is not None:
        return float(p["attention_factor"])
    f = p["factor"]
    if p.get("mscale") and p.get("mscale_all_dim"):
        return _yarn_mscale(f, p["mscale"]) / _yarn_mscale(f, p["mscale_all_dim"])
    return _yarn_mscale(f)


def _yarn_ramp_bounds(spec: RopeSpec) -> tuple[float, float]:
    p, d, theta = spec.p, spec.d, spec.rope_theta
    orig = p["original_max_position_embeddings"]

    def correction_dim(rotations):  # find_correction_dim
        return (d * math.log(orig / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(p["beta_fast"]), correction_dim(p["beta_slow"])
    if p["truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001  # linear_ramp_factor: "Prevent singularity"
    return low, high


def _yarn(spec: RopeSpec, seq_len: int):
    # _compute_yarn_parameters: blend, linear in inv_freq, between extrapolation (k < low) and
    # interpolation by factor (k > high).
    d, f = spec.d, spec.p["factor"]
    low, high = _yarn_ramp_bounds(spec)
    ramp = np.clip((np.arange(d // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    extrapolation = _base_inv_freq(spec.rope_theta, d)
    interpolation = extrapolation / f
    return interpolation * ramp + extrapolation * (1.0 - ramp), _yarn_attention(spec.p)


def _llama3(spec: RopeSpec, seq_len: int):
    # _compute_llama3_parameters (Llama 3.1): wavelength bands against the original context O.
    p = spec.p
    f, low_ff, high_ff = p["factor"], p["low_freq_factor"], p["high_freq_factor"]
    orig = p["original_max_position_embeddings"]
    inv = _base_inv_freq(spec.rope_theta, spec.d)
    wavelen = 2 * math.pi / inv
    low_wavelen, high_wavelen = orig / low_ff, orig / high_ff
    out = np.where(wavelen > low_wavelen, inv / f, inv)
    smooth = (orig / wavelen - low_ff) / (high_ff - low_ff)
    smoothed = (1 - smooth) * out / f + smooth * out
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, out), 1.0


def _longrope_uses_long(spec: RopeSpec, seq_len: int) -> bool:
    return seq_len > spec.p["original_max_position_embeddings"]


def _longrope_attention(spec: RopeSpec) -> float:
    p = spec.p
    if p.get("attention_factor") is not None:
        return float(p["attention_factor"])
    f = p["factor"] if p.get("factor") is not None else (
        spec.max_position_embeddings / p["original_max_position_embeddings"])
    return 1.0 if f <= 1.0 else math.sqrt(1 + math.log(f) / math.log(p["original_max_position_embeddings"]))


def _longrope(spec: RopeSpec, seq_len: int):
    # _compute_longrope_parameters (Phi-3): per-dimension rescale, long factors past O; the
    # attention factor applies at every length (SEMANTICS.md §1.3).
    ext = np.asarray(spec.p["long_factor" if _longrope_uses_long(spec, seq_len) else "short_factor"],
                     dtype=np.float64)
    return 1.0 / (ext * np.power(spec.rope_theta, np.arange(0, spec.d, 2, dtype=np.float64) / spec.d)), \
        _longrope_attention(spec)


# ---------------------------------------------------------------------------------------------
# Validators: (scaling dict, ctx) -> resolved params dict. ctx carries the top-level values.

@dataclasses.dataclass
class _Ctx:
    src: str                 # "rope_scaling" or "rope_parameters": the loc prefix of scaling keys
    d: int
    theta: float
    max_pos: int | None
    top_orig: int | None     # top-level original_max_position_embeddings (overrides)
    theta_loc: tuple = ("rope_theta",)   # where rope_theta was given


def _factor(s, ctx, required=True):
    f = req_float(s, "factor", (ctx.src,), required=required)
    if f is not None and f < 1.0:
        raise SpecError((ctx.src, "factor"), f"must be >= 1 (a factor below 1 shrinks the context), got {f}")
    return f


def _orig(s, ctx, rope_type) -> int:
    inner = req_int(s, "original_max_position_embeddings", (ctx.src,), lo=1, required=False)
    orig = ctx.top_orig if ctx.top_orig is not None else inner
    if orig is None:
        orig = ctx.max_pos
    if orig is None:
        raise SpecError(("max_position_embeddings",),
                        f"required for rope_type {rope_type!r} when original_max_position_embeddings "
                        "is not given", "missing")
    return orig


def _v_default(s, ctx):
    return {}


def _v_linear(s, ctx):
    return {"factor": _factor(s, ctx)}


def _v_dynamic(s, ctx):
    f = _factor(s, ctx)
    if ctx.max_pos is None:
        raise SpecError(("max_position_embeddings",), "required for rope_type 'dynamic'", "missing")
    if ctx.d == 2:
        raise SpecError(("head_dim",), "dynamic NTK needs a rotary width d > 2 (its exponent is d/(d-2))")
    return {"factor": f}


def _v_yarn(s, ctx):
    if ctx.theta <= 1.0:
        raise SpecError(ctx.theta_loc, f"must be > 1 for yarn (its ramp divides by ln θ), got {ctx.theta}")
    p = {"factor": _factor(s, ctx), "original_max_position_embeddings": _orig(s, ctx, "yarn")}
    # beta_fast / beta_slow: falsy means the paper's default (32 / 1), as transformers does.
    for key, default in (("beta_fast", 32.0), ("beta_slow", 1.0)):
        v = req_float(s, key, (ctx.src,), required=False)
        if v is not None and v < 0:
            raise SpecError((ctx.src, key), f"must be > 0, got {v}")
        p[key] = v if v else default
    if not p["beta_fast"] > p["beta_slow"]:
        raise SpecError((ctx.src, "beta_fast"),
                        f"must be greater than beta_slow ({p['beta_slow']}), got {p['beta_fast']}")
    for key in ("mscale", "mscale_all_dim"):
        p[key] = req_float(s, key, (ctx.src,), required=False)
    p["attention_factor"] = req_float(s, "attention_factor", (ctx.src,), gt=0.0, required=False)
    p["truncate"] = req_bool(s, "truncate", (ctx.src,), True)
    if p["attention_factor"] is None:
        try:
            att = _yarn_attention(p)
        except ZeroDivisionError:
            att = math.inf
        if not (math.isfinite(att) and att > 0):
            raise SpecError((ctx.src, "mscale_all_dim" if p["mscale"] and p["mscale_all_dim"] else "factor"),
                            f"gives attention factor {att}, which must be finite and > 0")
    return p


def _v_llama3(s, ctx):
    p = {"factor": _factor(s, ctx),
         "low_freq_factor": req_float(s, "low_freq_factor", (ctx.src,), gt=0.0),
         "high_freq_factor": req_float(s, "high_freq_factor", (ctx.src,), gt=0.0),
         "original_max_position_embeddings": _orig(s, ctx, "llama3")}
    if not p["low_freq_factor"] < p["high_freq_factor"]:
        raise SpecError((ctx.src, "high_freq_factor"),
                        f"must be greater than low_freq_factor ({p['low_freq_factor']}), "
                        f"got {p['high_freq_factor']}")
    return p


def _factor_list(s, key, ctx):
    v = s.get(key)
    loc = (ctx.src, key)
    if v is None:
        raise SpecError(loc, "field required for rope_type 'longrope'", "missing")
    if not isinstance(v, (list, tuple)):
        raise SpecError(loc, f"must be a list of d/2 = {ctx.d // 2} numbers, got {json_repr(v)}", "list_type")
    if len(v) != ctx.d // 2:
        raise SpecError(loc, f"must have d/2 = {ctx.d // 2} entries (d = rotary width), got {len(v)}")
    for i, x in enumerate(v):
        if not is_number(x) or not math.isfinite(x) or x <= 0:
            raise SpecError((*loc, i), f"must be a finite number > 0, got {json_repr(x)}")
    return tuple(float(x) for x in v)


def _v_longrope(s, ctx):
    p = {"short_factor": _factor_list(s, "short_factor", ctx),
         "long_factor": _factor_list(s, "long_factor", ctx),
         "factor": _factor(s, ctx, required=False),
         "attention_factor": req_float(s, "attention_factor", (ctx.src,), gt=0.0, required=False),
         "original_max_position_embeddings": _orig(s, ctx, "longrope")}
    if p["attention_factor"] is None:
        if p["factor"] is None and ctx.max_pos is None:
            raise SpecError(("max_position_embeddings",),
                            "required for longrope's attention factor (factor = M / O) when neither "
                            "factor nor attention_factor is given", "missing")
        f = p["factor"] if p["factor"] is not None else ctx.max_pos / p["original_max_position_embeddings"]
        if f > 1.0 and p["original_max_position_embeddings"] == 1:
            raise SpecError(("original_max_position_embeddings",) if ctx.top_orig is not None
                            else (ctx.src, "original_max_position_embeddings"),
                            "must be > 1: the attention factor divides by ln(O)")
    return p


@dataclasses.dataclass(frozen=True)
class RopeType:
    inv_freq: Callable      # (spec, seq_len) -> (inv_freq float64 [d/2], attention_scaling)
    validate: Callable      # (scaling dict, ctx) -> resolved params
    keys: tuple             # keys this type reads from rope_scaling / rope_parameters
    uses_seq_len: bool = False
    uses_original: bool = False


_YARN_KEYS = ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale",
              "mscale_all_dim", "attention_factor", "truncate")
ROPE_TYPES: dict[str, RopeType] = {
    "default": RopeType(_default, _v_default, ()),
    "linear": RopeType(_linear, _v_linear, ("factor",)),
    "dynamic": RopeType(_dynamic, _v_dynamic, ("factor",), uses_seq_len=True),
    "yarn": RopeType(_yarn, _v_yarn, _YARN_KEYS, uses_original=True),
    "llama3": RopeType(_llama3, _v_llama3,
                       ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
                       uses_original=True),
    "longrope": RopeType(_longrope, _v_longrope,
                         ("short_factor", "long_factor", "factor", "attention_factor",
                          "original_max_position_embeddings"), uses_seq_len=True, uses_original=True),
}


# ---------------------------------------------------------------------------------------------
# Parsing

def parse_spec(req: Mapping) -> RopeSpec:
    """Validate the spec fields of a rope request (selections and dtype are read elsewhere)."""
    require_object(req)
    refuse_unknown(req, FIELDS)
    head_dim = req_int(req, "head_dim", (), lo=2)
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
        for key, top, inner in (("rope_theta", theta, inner_theta), ("partial_rotary_factor", prf, inner_prf)):
            if top is not None and inner is not None and top != inner:
                raise SpecError((src, key), f"disagrees with the top-level {key} ({top}); give it once")
        theta_loc = ("rope_theta",) if theta is not None or inner_theta is None else (src, "rope_theta")
        theta = theta if theta is not None else inner_theta
        prf = prf if prf is not None else inner_prf
    else:
        theta_loc = ("rope_theta",)
    theta = 10000.0 if theta is None else theta
    prf = 1.0 if prf is None else prf

    d = int(head_dim * prf)
    if d < 2:
        raise SpecError(("partial_rotary_factor",) if prf < 1 else ("head_dim",),
                        f"rotary width d = int(head_dim * partial_rotary_factor) = {d} must be >= 2")
    if d % 2:
        raise SpecError(("partial_rotary_factor",) if prf < 1 else ("head_dim",),
                        f"rotary width d = int(head_dim * partial_rotary_factor) = {d} must be even")

    rope_type = _rope_type(scaling, src)
    rt = ROPE_TYPES[rope_type]
    allowed = {"rope_type", "type", *rt.keys}
    if src == "rope_parameters":
        allowed |= {"rope_theta", "partial_rotary_factor"}
    refuse_unknown(scaling, allowed, (src,), f"not used by rope_type {rope_type!r}")

    max_pos = req_int(req, "max_position_embeddings", (), lo=1, required=False)
    top_orig = req_int(req, "original_max_position_embeddings", (), lo=1, required=False)
    if top_orig is not None and not rt.uses_original:
        raise SpecError(("original_max_position_embeddings",),
                        f"not used by rope_type {rope_type!r} (only yarn, llama3, longrope)")
    seq_len = req_int(req, "seq_len", (), lo=1, required=False)
    if seq_len is not None and not rt.uses_seq_len:
        raise SpecError(("seq_len",), f"only for rope_type 'dynamic' or 'longrope', not {rope_type!r}")
    layout = req_choice(req, "layout", (), LAYOUTS, "half_split")

    ctx = _Ctx(src=src, d=d, theta=theta, max_pos=max_pos, top_orig=top_orig, theta_loc=theta_loc)
    params = rt.validate(scaling, ctx)
    spec = RopeSpec(head_dim=head_dim, rope_theta=theta, partial_rotary_factor=prf, rope_type=rope_type,
                    params=tuple(sorted(params.items())), max_position_embeddings=max_pos,
                    seq_len=seq_len, layout=layout)
    _check_frequencies(spec, src)
    return spec


def _rope_type(scaling: Mapping, src: str) -> str:
    rt, legacy = scaling.get("rope_type"), scaling.get("type")
    for key, v in (("rope_type", rt), ("type", legacy)):
        if v is not None and (not isinstance(v, str) or v not in ROPE_TYPES):
            raise SpecError((src, key), f"must be one of {', '.join(map(repr, ROPE_TYPES))}, got {json_repr(v)}",
                            "literal_error")
    if rt is not None and legacy is not None and rt != legacy:
        raise SpecError((src, "type"), f"disagrees with rope_type ({rt!r}); send one of them")
    return rt or legacy or "default"


def _check_frequencies(spec: RopeSpec, src: str) -> None:
    """Refuse parameter values whose frequencies would not be finite and positive."""
    variants = [spec.max_position_embeddings or 1]
    if spec.rope_type == "longrope":
        variants = [1, spec.p["original_max_position_embeddings"] + 1]
    for seq_len in variants:
        with np.errstate(all="ignore"):
            inv, att = ROPE_TYPES[spec.rope_type].inv_freq(spec, seq_len)
        if not (np.isfinite(inv).all() and (inv > 0).all() and math.isfinite(att) and att > 0):
            raise SpecError(("rope_theta",) if spec.rope_type == "default" else (src, "rope_type"),
                            "these parameters give non-finite or non-positive frequencies")
        if not np.isfinite(inv.astype(np.float32)).all() or (inv.astype(np.float32) == 0).any():
            raise SpecError(("rope_theta",), "frequencies overflow or underflow float32")


# ---------------------------------------------------------------------------------------------
# Tables

def effective_seq_len(spec: RopeSpec, positions: Selection) -> int:
    """dynamic / longrope pick frequencies from the sequence length: the request's seq_len, else
    max(position) + 1 (a fresh module's value; SEMANTICS.md §1.3 on dynamic's runtime state)."""
    return spec.seq_len if spec.seq_len is not None else positions.max + 1


def variant(spec: RopeSpec, seq_len: int):
    """Which stable frequency set a sequence length selects: None for types whose frequencies do
    not depend on it; 'short'/'long' for longrope; for dynamic, L = max(seq_len, M)."""
    if spec.rope_type == "longrope":
        return "long" if _longrope_uses_long(spec, seq_len) else "short"
    if spec.rope_type == "dynamic":
        return _dynamic_length(spec, seq_len)
    return None


def frequencies(spec: RopeSpec, seq_len: int) -> tuple[np.ndarray, float]:
    return ROPE_TYPES[spec.rope_type].inv_freq(spec, seq_len)


def half_rows(inv_freq: np.ndarray, scaling: float, positions: np.ndarray, dtype: str):
    """cos and sin of p·inv_freq (float64 angles), times attention_scaling, rounded once:
    two [n, d/2] arrays. Both layouts are column arrangements of these."""
    return _dt.sincos(inv_freq, positions, scaling, dtype)


def expand(half: np.ndarray, layout: str) -> np.ndarray:
    """Half width -> rotary width. half_split (Llama rotate_half): [h | h]; interleaved (GPT-J
    rotate_every_two): each column twice, [c0, c0, c1, c1, ...]."""
    if layout == "half_split":
        return np.concatenate([half, half], axis=-1)
    return np.repeat(half, 2, axis=-1)


def output_nbytes(spec: RopeSpec, n: int, dtype: str) -> int:
    return 2 * n * spec.d * _dt.DTYPES[dtype].itemsize + (spec.d // 2) * 4


def compute(spec: RopeSpec, sel: Mapping[str, Selection], dtype: str) -> dict:
    positions = sel["positions"]
    inv, scaling = frequencies(spec, effective_seq_len(spec, positions))
    cos, sin = half_rows(inv, scaling, positions.array(), dtype)
    return {"cos": expand(cos, spec.layout), "sin": expand(sin, spec.layout),
            "inv_freq": inv.astype(np.float32), "attention_scaling": float(scaling)}


def parse(req: Mapping):
    spec = parse_spec(req)
    return spec, {"positions": parse_selection(req.get("positions"), ("positions",))}
