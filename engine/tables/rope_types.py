"""RoPE types: the frequency functions and strict validators of every rope_type transformers
ships (5.25 ``modeling_rope_utils.py``, ``ROPE_INIT_FUNCTIONS`` and its validators; formulas in
docs/reference.md, rope), and ``ROPE_TYPES``, the registry of ``RopeType`` objects.

Contract (like transformers' ROPE_INIT_FUNCTIONS, but strict): each ``RopeType`` has
``validate(scaling, ctx)`` returning the resolved parameters (or raising SpecError naming the key)
and ``inv_freq(spec, seq_len)`` returning ``(inv_freq float64 [d/2], attention_scaling)``. It also
answers what the rest of posenc asks of a type: whether its frequencies follow the sequence length,
which stable frequency sets ("variants") it stores, and which one a sequence length selects.
Everything is evaluated in float64.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping

import numpy as np

from ..core.errors import SpecError
from ..core.fields import is_number, json_repr, req_bool, req_float, req_int

# ---------------------------------------------------------------------------------------------
# Frequencies. Each function: (spec, seq_len) -> (inv_freq float64 [d/2], attention_scaling).


def _base_inv_freq(theta: float, d: int) -> np.ndarray:
    # 1 / θ^(2k/d), k = 0..ceil(d/2)-1 (Llama/NeoX compute_default_rope_parameters; exponent over d,
    # not D; an odd d gives ceil(d/2) frequencies, as torch.arange(0, d, 2) does)
    return 1.0 / np.power(float(theta), np.arange(0, d, 2, dtype=np.float64) / d)


def _default(spec: RopeSpec, seq_len: int):
    return _base_inv_freq(spec.rope_theta, spec.rotary_dim), 1.0


def _linear(spec: RopeSpec, seq_len: int):
    # _compute_linear_scaling_rope_parameters: positions divided by factor == inv_freq / factor
    return _base_inv_freq(spec.rope_theta, spec.rotary_dim) / spec.p["factor"], 1.0


def _dynamic_length(spec: RopeSpec, seq_len: int) -> int:
    return max(int(seq_len), spec.max_position_embeddings)


def _dynamic(spec: RopeSpec, seq_len: int):
    # _compute_dynamic_ntk_parameters: θ' = θ·(f·L/M − (f−1))^(d/(d−2)), L = max(seq_len, M)
    d, f, m = spec.rotary_dim, spec.p["factor"], spec.max_position_embeddings
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
    inv = _base_inv_freq(spec.rope_theta, spec.rotary_dim)
    wavelen = 2 * math.pi / inv
    low_wavelen, high_wavelen = orig / low_ff, orig / high_ff
    out = np.where(wavelen > low_wavelen, inv / f, inv)
    if high_ff == low_ff:  # no band between the two (Llama 4 Scout's 1.0 and 1.0)
        return out, 1.0
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
    f = (
        p["factor"]
        if p.get("factor") is not None
        else (spec.max_position_embeddings / p["original_max_position_embeddings"])
    )
    return 1.0 if f <= 1.0 else math.sqrt(1 + math.log(f) / math.log(p["original_max_position_embeddings"]))


def _proportional_angles(head_dim: int, prf: float) -> int:
    # _compute_proportional_rope_parameters: rope_angles = int(partial_rotary_factor * head_dim // 2)
    return int(prf * head_dim // 2)


def _proportional(spec: RopeSpec, seq_len: int):
    # _compute_proportional_rope_parameters (Gemma 4 full-attention layers): the table stays head_dim
    # wide; the first rope_angles frequencies are 1/θ^(2k/head_dim) (exponent over head_dim, not over
    # the rotated width) and the rest are 0 (those pairs keep cos 1, sin 0); all divided by factor.
    hd = spec.head_dim
    n = _proportional_angles(hd, spec.partial_rotary_factor)
    inv = np.zeros(hd // 2, dtype=np.float64)
    inv[:n] = 1.0 / np.power(float(spec.rope_theta), np.arange(0, 2 * n, 2, dtype=np.float64) / hd)
    return inv / spec.p["factor"], 1.0


def _longrope(spec: RopeSpec, seq_len: int):
    # _compute_longrope_parameters (Phi-3): per-dimension rescale, long factors past O; the
    # attention factor applies at every length (docs/reference.md, rope).
    ext = np.asarray(
        spec.p["long_factor" if _longrope_uses_long(spec, seq_len) else "short_factor"], dtype=np.float64
    )
    return 1.0 / (
        ext * np.power(spec.rope_theta, np.arange(0, spec.d, 2, dtype=np.float64) / spec.d)
    ), _longrope_attention(spec)


# ---------------------------------------------------------------------------------------------
# Validators: (scaling dict, ctx) -> resolved params dict. ctx carries the top-level values.


@dataclasses.dataclass
class _Ctx:
    src: str  # "rope_scaling" or "rope_parameters": the loc prefix of scaling keys
    d: int
    theta: float
    max_pos: int | None
    top_orig: int | None  # top-level original_max_position_embeddings (overrides)
    theta_loc: tuple = ("rope_theta",)  # where rope_theta was given
    head_dim: int = 0
    prf: float = 1.0  # partial_rotary_factor


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
        raise SpecError(
            ("max_position_embeddings",),
            f"required for rope_type {rope_type!r} when original_max_position_embeddings is not given",
            "missing",
        )
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
        raise SpecError(
            (ctx.src, "beta_fast"), f"must be greater than beta_slow ({p['beta_slow']}), got {p['beta_fast']}"
        )
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
            raise SpecError(
                (ctx.src, "mscale_all_dim" if p["mscale"] and p["mscale_all_dim"] else "factor"),
                f"gives attention factor {att}, which must be finite and > 0",
            )
    return p


def _v_llama3(s, ctx):
    p = {
        "factor": _factor(s, ctx),
        "low_freq_factor": req_float(s, "low_freq_factor", (ctx.src,), gt=0.0),
        "high_freq_factor": req_float(s, "high_freq_factor", (ctx.src,), gt=0.0),
        "original_max_position_embeddings": _orig(s, ctx, "llama3"),
    }
    if p["high_freq_factor"] < p["low_freq_factor"]:  # equal: no smoothed band (Llama 4's configs)
        raise SpecError(
            (ctx.src, "high_freq_factor"),
            f"must be >= low_freq_factor ({p['low_freq_factor']}), got {p['high_freq_factor']}",
        )
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
    p = {
        "short_factor": _factor_list(s, "short_factor", ctx),
        "long_factor": _factor_list(s, "long_factor", ctx),
        "factor": _factor(s, ctx, required=False),
        "attention_factor": req_float(s, "attention_factor", (ctx.src,), gt=0.0, required=False),
        "original_max_position_embeddings": _orig(s, ctx, "longrope"),
    }
    if p["attention_factor"] is None:
        if p["factor"] is None and ctx.max_pos is None:
            raise SpecError(
                ("max_position_embeddings",),
                "required for longrope's attention factor (factor = M / O) when neither "
                "factor nor attention_factor is given",
                "missing",
            )
        f = p["factor"] if p["factor"] is not None else ctx.max_pos / p["original_max_position_embeddings"]
        if f > 1.0 and p["original_max_position_embeddings"] == 1:
            raise SpecError(
                ("original_max_position_embeddings",)
                if ctx.top_orig is not None
                else (ctx.src, "original_max_position_embeddings"),
                "must be > 1: the attention factor divides by ln(O)",
            )
    return p


def _v_proportional(s, ctx):
    if _proportional_angles(ctx.head_dim, ctx.prf) < 1:
        raise SpecError(
            ("partial_rotary_factor",),
            "proportional rotates int(partial_rotary_factor * head_dim // 2) angles, here 0",
        )
    f = _factor(s, ctx, required=False)
    return {"factor": 1.0 if f is None else f}


class RopeType:
    """A rope_type whose frequencies do not depend on the sequence length: one stored table."""

    uses_seq_len = False  # frequencies follow the sequence length (seq_len is allowed)
    needs_max_position = False  # max_position_embeddings changes the numbers (part of the key)
    pads_zeros = False  # some frequencies are 0 by design (their pairs are not rotated)

    def __init__(
        self,
        name: str,
        inv_freq: Callable,
        validate: Callable,
        keys: tuple = (),
        uses_original: bool = False,
        odd_width: bool = False,
    ):
        self.name = name  # the canonical rope_type (an alias shares the object)
        self.inv_freq = inv_freq  # (spec, seq_len) -> (inv_freq float64 [d/2], attention_scaling)
        self.validate = validate  # (scaling dict, ctx) -> resolved params
        self.keys = keys  # keys this type reads from rope_scaling / rope_parameters
        self.uses_original = uses_original  # takes original_max_position_embeddings
        # an odd rotary width w is taken as transformers takes it (ceil(w/2) frequencies of exponent
        # 2k/w); yarn's and longrope's own functions fail on one (their d // 2 ramp or factors)
        self.odd_width = odd_width

    def width(self, head_dim: int, prf: float) -> int:
        """The rotary width d of the cos/sin: int(head_dim * partial_rotary_factor) (GPT-NeoX, Phi)."""
        return int(head_dim * prf)

    def variant(self, spec, seq_len: int):
        """Which stable frequency set a sequence length selects."""
        return None

    def stable_variants(self, spec) -> list:
        """The frequency sets a configured table stores."""
        return [None]

    def stores(self, spec, variant) -> bool:
        """Whether the frequencies of ``variant`` are stored (else they are computed per request)."""
        return variant in self.stable_variants(spec)

    def seq_len_of(self, spec, variant) -> int:
        """A sequence length that selects ``variant`` (what a stored table is built with)."""
        return 1


class DynamicNTK(RopeType):
    """Dynamic NTK: θ grows with L = max(seq_len, M). Only L = M is stored; past M every length
    has its own frequencies, which are computed per request."""

    uses_seq_len = True
    needs_max_position = True

    def variant(self, spec, seq_len):
        return _dynamic_length(spec, seq_len)

    def stable_variants(self, spec):
        return [spec.max_position_embeddings]

    def seq_len_of(self, spec, variant):
        return variant


class LongRope(RopeType):
    """LongRoPE (Phi-3): short factors up to O, long factors past it; two stored sets. M feeds the
    default attention factor."""

    uses_seq_len = True
    needs_max_position = True

    def variant(self, spec, seq_len):
        return "long" if _longrope_uses_long(spec, seq_len) else "short"

    def stable_variants(self, spec):
        return ["short", "long"]

    def seq_len_of(self, spec, variant):
        return spec.p["original_max_position_embeddings"] + 1 if variant == "long" else 1


class Proportional(RopeType):
    """Proportional RoPE (Gemma 4): always head_dim wide; partial_rotary_factor sets how many of
    its frequencies are non-zero, so it is part of the table's identity."""

    pads_zeros = True

    def width(self, head_dim, prf):
        return head_dim


_YARN_KEYS = (
    "factor",
    "original_max_position_embeddings",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
    "attention_factor",
    "truncate",
)
ROPE_TYPES: dict[str, RopeType] = {
    t.name: t
    for t in (
        RopeType("default", _default, _v_default, odd_width=True),
        RopeType("linear", _linear, _v_linear, ("factor",), odd_width=True),
        DynamicNTK("dynamic", _dynamic, _v_dynamic, ("factor",), odd_width=True),
        RopeType("yarn", _yarn, _v_yarn, _YARN_KEYS, uses_original=True),
        RopeType(
            "llama3",
            _llama3,
            _v_llama3,
            ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
            uses_original=True,
            odd_width=True,
        ),
        LongRope(
            "longrope",
            _longrope,
            _v_longrope,
            ("short_factor", "long_factor", "factor", "attention_factor", "original_max_position_embeddings"),
            uses_original=True,
        ),
        Proportional("proportional", _proportional, _v_proportional, ("factor",)),
    )
}
# Phi-3's first long-context configs spelled longrope "su" (transformers' Phi3Config still renames it).
ROPE_TYPES["su"] = ROPE_TYPES["longrope"]
