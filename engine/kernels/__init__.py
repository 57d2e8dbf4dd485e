"""Kernel layer: the hot loops behind table builds and request answers.

Two interchangeable backends implement one API (see docs/native.md):

* ``numpy`` — ``numpy_impl``, the plain reference path, always available;
* ``simd``  — ``_native``, an optional C extension with runtime CPU dispatch (AVX2/F16C on
  x86-64, a portable scalar path everywhere else), bit-identical to numpy except ``sincos``,
  which may differ by at most 1 ulp of the output dtype.

The backend is chosen once, at import, by the ``backend`` setting (``POSENC_BACKEND``, read by
engine/core/settings.py; as python-zstandard and msgspec do): ``auto`` (the default) takes ``simd``
when the extension imports and ``numpy`` otherwise; ``numpy`` and ``simd`` force one; any other
value is refused. ``BACKEND``, ``FEATURES`` and ``info()`` say what was chosen (``/v1/tables``
and the startup log show ``info()``).

    gather_rows(table, rows, out)
    rope_expand(half, rows, out, layout)
    round_into(src, out, dtype) -> bool
    alibi_block(slopes, query, key, out, dtype, symmetric, mask_future) -> bool
    t5_block(lut, query, key, out, radius)
    sincos(freqs, positions, scale, out_cos, out_sin, dtype) -> bool
"""

from __future__ import annotations

import importlib

import numpy as np

from ..core import settings
from ..core.dtypes import DTYPES
from ..core.errors import ConfigError, SpecError
from . import numpy_impl
from .numpy_impl import ROPE_LAYOUTS

ENV_VAR = settings.ENV_PREFIX + "BACKEND"
KERNELS = ("gather_rows", "rope_expand", "round_into", "alibi_block", "t5_block", "sincos")


def _load_numpy():
    return numpy_impl


def _load_simd():
    try:
        _native = importlib.import_module(f"{__name__}._native")
    except ImportError as exc:
        raise ImportError(
            f"{ENV_VAR}=simd but the native extension engine.kernels._native is not built "
            f"({exc}); build it with `python setup.py build_ext --inplace` or reinstall with a C "
            f"compiler available, or set {ENV_VAR}=numpy"
        ) from exc
    return _native


def _load_auto():
    try:
        return _load_simd()
    except ImportError:
        return numpy_impl


# backend setting -> loader (settings.CHOICES["backend"] are the accepted names).
LOADERS = {"auto": _load_auto, "numpy": _load_numpy, "simd": _load_simd}


def load(choice: str | None = None):
    """The backend module for ``choice`` (default: the ``backend`` setting)."""
    if choice is None:
        choice = settings.current().backend
    if choice not in LOADERS:
        raise ConfigError(f"{ENV_VAR}={choice!r} is not one of {', '.join(LOADERS)}")
    return LOADERS[choice]()


_impl = load()

BACKEND: str = _impl.BACKEND
FEATURES: tuple[str, ...] = tuple(_impl.FEATURES)

gather_rows = _impl.gather_rows
rope_expand = _impl.rope_expand
round_into = _impl.round_into
alibi_block = _impl.alibi_block
t5_block = _impl.t5_block
sincos = _impl.sincos


def cos_sin(freqs: np.ndarray, positions: np.ndarray, scale: float, dtype: str):
    """cos and sin of float64(p)·freqs[k] (one multiply), times scale, each rounded once to
    dtype: two new [n, len(freqs)] arrays from the chosen backend's ``sincos``; a result that
    overflows dtype is refused (422 at dtype)."""
    freqs = np.ascontiguousarray(freqs, dtype=np.float64)
    positions = np.ascontiguousarray(positions, dtype=np.int64)
    shape = (positions.shape[0], freqs.shape[0])
    cos, sin = np.empty(shape, DTYPES[dtype]), np.empty(shape, DTYPES[dtype])
    if sincos(freqs, positions, float(scale), cos, sin, dtype):
        raise SpecError(
            ("dtype",), f"values overflow {dtype} (attention scaling {scale:g}); use a wider dtype"
        )
    return cos, sin


def c_api():
    """The simd backend's capsule that lends its ``sincos`` loop to another C extension
    (engine/kernels/native_api.h: the template shortcut computes rows past a stored table with it),
    or None with the numpy backend, whose ``sincos`` may differ from it by an ulp."""
    return getattr(_impl, "API", None)


def info() -> dict:
    """{"backend", "features", "compiler"} of the chosen backend, for /v1/tables and logs."""
    return {"backend": BACKEND, "features": list(FEATURES), "compiler": _impl.COMPILER}


__all__ = [
    "BACKEND",
    "FEATURES",
    "ENV_VAR",
    "KERNELS",
    "LOADERS",
    "ROPE_LAYOUTS",
    "cos_sin",
    "info",
    "load",
    *KERNELS,
]
