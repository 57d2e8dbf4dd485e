"""numpy reference backend of the kernel layer.

The plain, obviously-correct path: every kernel here is the definition the native SIMD backend
(``_native.c``) is tested against bit for bit (sincos within 1 ulp). Values are computed in
float64 and rounded once with ``engine.dtypes``; nothing here is tuned for speed.

Contract shared with ``_native``: all arrays are C-contiguous, aligned numpy arrays in native
byte order, and outputs are preallocated by the caller. A wrong dtype raises TypeError; a wrong
shape, a non-contiguous, unaligned or read-only array, or an unknown dtype/layout name raises
ValueError; a row outside the table raises IndexError.
"""

from __future__ import annotations

import operator

import numpy as np

from ..core import dtypes

BACKEND = "numpy"
FEATURES: tuple[str, ...] = ()
COMPILER = None

# rope_expand layouts (docs/reference.md, rope `layout`): half_split pairs column k with k + d/2 (Llama/NeoX
# rotate_half), interleaved pairs 2k with 2k + 1 (GPT-J/RoFormer).
ROPE_LAYOUTS = ("half_split", "interleaved")

_I64 = np.dtype(np.int64)
_I32 = np.dtype(np.int32)
_F64 = np.dtype(np.float64)


# --- validation (the native module raises the same exception types) -------------------------


def _array(a, name, dtype=None, ndim=None, writable=False):
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(a).__name__}")
    if dtype is not None and a.dtype != dtype:
        raise TypeError(f"{name} must be {dtype}, got {a.dtype}")
    if not a.dtype.isnative:
        raise TypeError(f"{name} must be in native byte order")
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {a.shape}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    if not a.flags.aligned:
        raise ValueError(f"{name} must be aligned to its element size")
    if writable and not a.flags.writeable:
        raise ValueError(f"{name} must be writable")
    return a


def _storage(a, name, ndim):
    """A table-like array whose elements are 2 or 4 bytes (float32/float16/bf16 bits/int32...)."""
    _array(a, name, ndim=ndim)
    if a.dtype.kind not in "fiu" or a.dtype.itemsize not in (2, 4):
        raise TypeError(f"{name} must have 2- or 4-byte numeric elements, got {a.dtype}")
    return a


def _shape(a, name, shape):
    if a.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {a.shape}")


def _out_dtype(dtype):
    if dtype not in dtypes.DTYPES:
        raise ValueError(f"dtype must be one of {sorted(dtypes.DTYPES)}, got {dtype!r}")
    return dtypes.DTYPES[dtype]


def _check_rows(rows, n_rows):
    _array(rows, "rows", _I64, 1)
    if rows.size and (rows.min() < 0 or rows.max() >= n_rows):
        bad = rows[(rows < 0) | (rows >= n_rows)][0]
        raise IndexError(f"row {bad} out of range for a table of {n_rows} rows")


# --- rounding --------------------------------------------------------------------------------


def _round(x, dtype):
    """float64 -> storage dtype, rounded once to nearest-even (engine.dtypes semantics) without
    refusing overflow: overflowed values become +-inf and the caller checks ``_overflowed``."""
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype == "bfloat16":
            return dtypes.f64_to_bf16_bits(x)
        return x.astype(dtypes.DTYPES[dtype])


def _overflowed(src, out, dtype, count_inf=False) -> bool:
    """True if a finite float64 value became +-inf in ``out`` (with ``count_inf``, an infinite
    one too: alibi_block and sincos report any infinite output, since their float64 values are
    finite unless the float64 arithmetic itself overflowed). NaN never counts."""
    if dtype == "bfloat16":
        inf = (out & np.uint16(0x7FFF)) == np.uint16(0x7F80)
    else:
        inf = np.isinf(out)
    ok = ~np.isnan(src) if count_inf else np.isfinite(src)
    return bool((inf & ok).any())


# --- kernels ---------------------------------------------------------------------------------


def gather_rows(table, rows, out):
    """out[i] = table[rows[i]]."""
    _storage(table, "table", 2)
    _check_rows(rows, table.shape[0])
    _array(out, "out", table.dtype, 2, writable=True)
    _shape(out, "out", (rows.shape[0], table.shape[1]))
    out[...] = table[rows]


def rope_expand(half, rows, out, layout):
    """Expand half-width rotary rows [.., h] to full width [.., 2h] in ``layout``."""
    _storage(half, "half", 2)
    _check_rows(rows, half.shape[0])
    _array(out, "out", half.dtype, 2, writable=True)
    n, h = rows.shape[0], half.shape[1]
    _shape(out, "out", (n, 2 * h))
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"layout must be one of {list(ROPE_LAYOUTS)}, got {layout!r}")
    picked = half[rows]
    if layout == "half_split":
        out[:, :h] = picked
        out[:, h:] = picked
    else:
        out.reshape(n, h, 2)[...] = picked[:, :, None]


def round_into(src, out, dtype) -> bool:
    """out = src rounded once to ``dtype``; returns True if a finite value overflowed."""
    _array(src, "src", _F64)
    _array(out, "out", _out_dtype(dtype), writable=True)
    _shape(out, "out", src.shape)
    out[...] = _round(src, dtype)
    return _overflowed(src, out, dtype)


def alibi_block(slopes, query, key, out, dtype, symmetric, mask_future) -> bool:
    """ALiBi bias block (Press et al. 2022): out[h, a, b] = 0 - slopes[h] * (query[a] - key[b]),
    or with |query[a] - key[b]| when ``symmetric``; ``mask_future`` puts the dtype's most negative
    finite value (transformers' ``finfo.min``) where key[b] > query[a]. Returns True if an
    unmasked output is +-inf (overflow; the caller refuses). The reference of both C extensions'
    ALiBi cell (engine/kernels/alibi_cell.h)."""
    _array(slopes, "slopes", _F64, 1)
    _array(query, "query", _I64, 1)
    _array(key, "key", _I64, 1)
    _array(out, "out", _out_dtype(dtype), 3, writable=True)
    _shape(out, "out", (slopes.shape[0], query.shape[0], key.shape[0]))
    if symmetric and mask_future:
        raise ValueError("mask_future applies to causal ALiBi only, not symmetric")
    dist = query[:, None] - key[None, :]  # int64 (wrapping), as the native kernel
    if symmetric:
        dist = np.abs(dist)
    with np.errstate(over="ignore", invalid="ignore"):
        values = 0.0 - (
            slopes[:, None, None] * dist.astype(np.float64)[None]
        )  # 0 - x: +0.0 on the diagonal, as the reference
    if mask_future:
        # -MAX_FINITE is exact in float64 and rounds to exactly mask_value(dtype), so masked
        # cells go through the same single rounding and never count as overflow.
        values[:, key[None, :] > query[:, None]] = -dtypes.MAX_FINITE[dtype]
    out[...] = _round(values, dtype)
    return _overflowed(values, out, dtype, count_inf=True)


def t5_block(lut, query, key, out, radius):
    """T5 relative buckets through a lookup table (Raffel et al. 2020, transformers'
    ``_relative_position_bucket`` tabulated by the caller):
    out[a, b] = lut[clip(key[b] - query[a], -radius, radius) + radius]."""
    radius = operator.index(radius)
    if radius < 0:
        raise ValueError(f"radius must be >= 0, got {radius}")
    _array(lut, "lut", _I32, 1)
    _shape(lut, "lut", (2 * radius + 1,))
    _array(query, "query", _I64, 1)
    _array(key, "key", _I64, 1)
    _array(out, "out", _I32, 2, writable=True)
    _shape(out, "out", (query.shape[0], key.shape[0]))
    rel = key[None, :] - query[:, None]
    out[...] = lut[np.clip(rel, -radius, radius) + radius]


def sincos(freqs, positions, scale, out_cos, out_sin, dtype) -> bool:
    """angle = float64(p) * freqs[k] (one multiply); out = round(cos/sin(angle) * scale).
    Returns True if an output is +-inf (only a huge ``scale`` can do that)."""
    scale = float(scale)
    _array(freqs, "freqs", _F64, 1)
    _array(positions, "positions", _I64, 1)
    storage = _out_dtype(dtype)
    shape = (positions.shape[0], freqs.shape[0])
    for name, o in (("out_cos", out_cos), ("out_sin", out_sin)):
        _array(o, name, storage, 2, writable=True)
        _shape(o, name, shape)
    over = False
    with np.errstate(over="ignore", invalid="ignore"):
        angle = positions.astype(np.float64)[:, None] * freqs[None, :]
        for fn, o in ((np.cos, out_cos), (np.sin, out_sin)):
            v = fn(angle)
            if scale != 1.0:  # x * 1.0 is exact; skipping it is only a shortcut
                v = v * scale
            o[...] = _round(v, dtype)
            over |= _overflowed(v, o, dtype, count_inf=True)
    return over


def info() -> dict:
    return {"backend": BACKEND, "features": list(FEATURES), "compiler": COMPILER}
