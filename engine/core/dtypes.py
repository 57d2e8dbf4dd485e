"""Output dtypes and the single rounding from float64.

numpy has no bfloat16, so bfloat16 arrays are numpy ``uint16`` holding the bit patterns
(the top half of the float32 encoding). ``torch.from_numpy(a).view(torch.bfloat16)`` reinterprets
them without a copy. Every value is computed in float64 and rounded once, to nearest-even,
straight to the output type: bfloat16 is *not* produced through float32, which would round twice.
"""

from __future__ import annotations

import numpy as np

from .errors import SpecError

# The output dtypes' names: everything else in posenc spells them through these.
FLOAT32, FLOAT16, BFLOAT16 = "float32", "float16", "bfloat16"
# name -> numpy storage dtype. Allowed names come from here (and only here).
DTYPES: dict[str, np.dtype] = {
    FLOAT32: np.dtype(np.float32),
    FLOAT16: np.dtype(np.float16),
    BFLOAT16: np.dtype(np.uint16),  # bit patterns: numpy has no bfloat16
}
DEFAULT_DTYPE = FLOAT32

# Largest finite value of each output dtype (for refusing overflow and for masked cells).
MAX_FINITE = {
    FLOAT32: float(np.finfo(np.float32).max),
    FLOAT16: 65504.0,
    BFLOAT16: float(np.frombuffer(np.uint32(0x7F7F0000).tobytes(), np.float32)[0]),
}

_BF16_MIN_NORMAL = 2.0**-126
_BF16_SUBNORMAL_QUANTUM = 2.0**-133  # 7 stored mantissa bits below 2**-126


def check_dtype(value, loc=("dtype",)) -> str:
    if value is None:
        return DEFAULT_DTYPE
    if not isinstance(value, str) or value not in DTYPES:
        raise SpecError(loc, f"must be one of {sorted(DTYPES)}, got {value!r}")
    return value


def f64_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round float64 to bfloat16 (nearest-even), returned as uint16 bit patterns."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    bits = x.view(np.uint64)
    # Round the 52-bit mantissa to 7 bits (drop 45 bits) with ties to even, in integer space.
    lsb = (bits >> np.uint64(45)) & np.uint64(1)
    rounded = (bits + np.uint64((1 << 44) - 1) + lsb) & ~np.uint64((1 << 45) - 1)
    r = rounded.view(np.float64)
    # bfloat16 subnormals (|x| < 2**-126) have a fixed quantum, not 7 relative bits.
    tiny = np.abs(x) < _BF16_MIN_NORMAL
    if tiny.any():
        r = r.copy()
        r[tiny] = np.round(x[tiny] / _BF16_SUBNORMAL_QUANTUM) * _BF16_SUBNORMAL_QUANTUM
    nan = np.isnan(x)
    with np.errstate(over="ignore"):
        f32 = r.astype(np.float32)  # exact: r is representable in bfloat16 (or overflows to inf)
    out = (f32.view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    if nan.any():
        out[nan] = 0x7FC0
    return out


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def to_float(a: np.ndarray, dtype: str) -> np.ndarray:
    """Read an array of output dtype ``dtype`` back as float32/float16 (bfloat16 -> float32)."""
    return bf16_bits_to_f32(a) if dtype == BFLOAT16 else a


def round_f64(x: np.ndarray, dtype: str, loc=("dtype",)) -> np.ndarray:
    """Round float64 values once to ``dtype``; refuse (422 on ``dtype``) if a finite value would
    overflow it rather than silently returning infinities."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):
        if dtype == FLOAT32:
            out = x.astype(np.float32)
        elif dtype == FLOAT16:
            out = x.astype(np.float16)
        elif dtype == BFLOAT16:
            out = f64_to_bf16_bits(x)
        else:  # pragma: no cover - callers validate first
            raise SpecError(loc, f"unknown dtype {dtype!r}")
    check_finite(out, dtype, loc)
    return out


def check_finite(out: np.ndarray, dtype: str, loc=("dtype",)) -> None:
    if out.size == 0:
        return
    if dtype == BFLOAT16:
        bad = ((out & np.uint16(0x7F80)) == np.uint16(0x7F80)).any()
    else:
        bad = not np.isfinite(out).all()
    if bad:
        raise SpecError(
            loc,
            f"values overflow {dtype} (largest finite {MAX_FINITE[dtype]:.6g}); "
            "use a wider dtype or smaller positions",
        )


def mask_value(dtype: str):
    """The output dtype's most negative finite value, as stored (transformers masks with
    ``torch.finfo(dtype).min``)."""
    if dtype == BFLOAT16:
        return np.uint16(0xFF7F)
    return np.array(-MAX_FINITE[dtype], dtype=DTYPES[dtype])[()]
