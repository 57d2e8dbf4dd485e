"""Spec templates: the hot path's shortcut for a spec it has already answered.

Decode-time clients send the same spec again and again with new positions. After the full path
(strict validation, engine.client.resolve) has answered a body, the body's bytes *around* its
selections become a template key: the body with the text of each selection (RoPE ``positions``;
ALiBi ``query`` and ``key``) replaced by one NUL byte (JSON text never holds a raw one). A later
body with the same key is the same validated spec with other selections: the bytes outside the
selections are the learnt body's, so a JSON parser reaches each selection in the same state and
leaves it in the same state. At learn time each cut-out span is checked to be the value its
field really takes (a probe value substituted into the span must come back as the field's
value), which rules out duplicate keys (``{"positions": [1], "positions": [1]}``: JSON's last
one wins) and escaped spellings of a field name. Only the selections are parsed then.

Anything unusual — another format, a range where the learnt body had a list, dynamic/longrope
(whose table follows the positions), rows past the table, a template not seen yet — takes the
full path.

The shortcut runs in C (service/_hot.c): one call from the request body and headers to the
response bytes, for RoPE and sinusoidal rows and for float32 ALiBi blocks. This module learns
its templates. The ``shortcut`` setting picks it (``shortcut_in_use``): ``auto`` runs it when
service._hot is built and the kernel backend is simd, ``c`` requires it, ``off`` never runs it.
There is no Python twin: without the C shortcut (the numpy backend, the reference path, or no C
compiler at install time) every request takes the full path. Tests hold the C answers to the
full path's bytes and to the float64 reference.
"""

from __future__ import annotations

import logging
import re

import numpy as np
import orjson

from posenc.engine import formats, kernels
from posenc.engine.dtypes import DTYPES
from posenc.engine.errors import ConfigError
from posenc.engine.selection import POSITION_LIMIT, RANGE_KEYS
from posenc.engine.settings import ENV_PREFIX
from posenc.engine.tables import FAMILIES, rope, sinusoidal

MAX_ROWS = 64          # small answers only: bigger ones gain nothing from the shortcut
MAX_TEMPLATES = 1024
# the families with templates -> their selections' names as JSON text, quotes included
FIELDS = {f: tuple(map(orjson.dumps, FAMILIES[f].SELECTIONS)) for f in ("rope", "sinusoidal", "alibi")}
_BETWEEN = re.compile(rb"[ \t\r\n:]*")
_CLOSE = {ord("["): b"]", ord("{"): b"}"}


def _load_native():
    """(service._hot, configured with the rules Python owns), or (None, why it is missing)."""
    try:
        from . import _hot
    except ImportError as exc:
        return None, exc
    _hot.configure(position_limit=POSITION_LIMIT, max_rows=MAX_ROWS, fields=FIELDS,
                   range_keys=tuple(map(orjson.dumps, RANGE_KEYS)))
    return _hot, None


_hot, _MISSING = _load_native()
NATIVE = _hot is not None       # built


def shortcut_in_use(setting: str) -> str:
    """The shortcut that runs for the ``shortcut`` setting: "c" or "off". ConfigError at start-up
    when "c" is required but service._hot is not built."""
    if setting == "c" and _hot is None:
        raise ConfigError(f"{ENV_PREFIX}SHORTCUT=c but posenc.service._hot is not built ({_MISSING}); "
                          f"reinstall with a C compiler available, or set {ENV_PREFIX}SHORTCUT=auto")
    if setting == "auto" and _hot is None and kernels.BACKEND == "simd":
        logging.getLogger("posenc.service").warning("service._hot is not built: no template shortcut")
    if setting == "c" or (setting == "auto" and _hot is not None and kernels.BACKEND == "simd"):
        return "c"
    return "off"


def spans(raw: bytes, fields) -> list[tuple[int, int]] | None:
    """[(start, end)] of each field's selection text, in field order: the field name's first
    occurrence, whitespace and exactly one ':', then '[' .. the first ']' or '{' .. the first
    '}'. None if a field is missing or the spans overlap. (service/_hot.c: find_span.)"""
    out = []
    for name in fields:
        i = raw.find(name)
        if i < 0:
            return None
        j = _BETWEEN.match(raw, i + len(name)).end()
        if j >= len(raw) or raw.count(b":", i + len(name), j) != 1 or raw[j] not in _CLOSE:
            return None
        k = raw.find(_CLOSE[raw[j]], j)
        if k < 0:
            return None
        out.append((j, k + 1))
    ordered = sorted(out)
    if any(a[1] > b[0] for a, b in zip(ordered, ordered[1:])):
        return None
    return out


def template_key(raw: bytes, cut: list[tuple[int, int]]) -> bytes:
    parts, at = [], 0
    for a, b in sorted(cut):
        parts += [raw[at:a], b"\0"]
        at = b
    parts.append(raw[at:])
    return b"".join(parts)


def controls(raw: bytes, cut: list[tuple[int, int]], fields) -> bool:
    """Whether each span is the value its field takes: probes substituted into it come back."""
    for (a, b), name in zip(cut, fields):
        field = name.decode()[1:-1]
        for probe in ([0], [1]):
            try:
                body = orjson.loads(raw[:a] + orjson.dumps(probe) + raw[b:])
            except orjson.JSONDecodeError:
                return False
            if not isinstance(body, dict) or body.get(field) != probe:
                return False
    return True


class RopeTemplate:
    """A validated RoPE spec, its mapped table and the response layout for binary answers."""

    def __init__(self, resolved, view):
        self.spec, self.dtype, self.view = resolved.spec, resolved.dtype, view
        self.half = view.cos.shape[1]
        self.tail = view.inv_freq.tobytes() + np.float64(view.meta["attention_scaling"]).tobytes()

    def header(self, n: int) -> bytes:
        """The safetensors header of an n-row answer (service._hot caches it per n)."""
        d = 2 * self.half
        shapes = {"cos": np.empty((n, d), DTYPES[self.dtype]), "sin": np.empty((n, d), DTYPES[self.dtype]),
                  "inv_freq": self.view.inv_freq, "attention_scaling": float(self.view.meta["attention_scaling"])}
        bf16 = {"cos", "sin"} if self.dtype == "bfloat16" else frozenset()
        return formats.safetensors_parts(shapes, bf16, {"family": "rope"})[0]

    def native(self):
        """The template for service._hot (which holds the table arrays it reads); its column map
        is the engine's own half -> full expansion applied to column numbers."""
        colmap = rope.expand(np.arange(self.half)[None, :], self.spec.layout)[0].tolist()
        return _hot.RowsTemplate((self.view.cos, self.view.sin), colmap, 0, MAX_ROWS, True, self.header, self.tail)


def sinusoidal_native(resolved, view):
    """A sinusoidal spec for service._hot: the stored [sin | cos] table, the layout's column map
    (the engine's own ``arrange`` applied to column numbers + 1; its zero column becomes -1) and
    the response layout (``encoding`` [n, d_model])."""
    spec, dtype = resolved.spec, resolved.dtype
    colmap = (sinusoidal.arrange(np.arange(1, view.table.shape[1] + 1)[None, :], spec)[0] - 1).tolist()
    bf16 = {"encoding"} if dtype == "bfloat16" else frozenset()

    def header_for(n: int) -> bytes:
        arrays = {"encoding": np.empty((n, spec.d_model), DTYPES[dtype])}
        return formats.safetensors_parts(arrays, bf16, {"family": "sinusoidal"})[0]
    return _hot.RowsTemplate((view.table,), colmap, spec.offset, MAX_ROWS, False, header_for, b"")


def alibi_native(resolved, view, max_n: int, max_bytes: int):
    """A float32 ALiBi spec for service._hot: the requested heads' float64 slopes and the
    response layout (the full path's: bias [H, nq, nk], then the float32 slopes)."""
    spec = resolved.spec
    m = np.ascontiguousarray(view.slopes[spec.head_index], dtype=np.float64)
    m32 = m.astype(np.float32)

    def header_for(nq: int, nk: int) -> bytes:
        arrays = {"bias": np.empty((m.shape[0], nq, nk), np.float32), "slopes": m32}
        return formats.safetensors_parts(arrays, frozenset(), {"family": "alibi"})[0]
    dist = getattr(view, "dist", None)       # the engine's float32 -m*d table: decode blocks copy from it
    if dist is None or dist.dtype != np.float32 or not dist.flags.c_contiguous:
        dist = None
    return _hot.AlibiTemplate(m, spec.mode == "symmetric", spec.mask_future, header_for, m32.tobytes(),
                              max_n, max_bytes, dist, spec.head_index.tolist())


class Templates:
    def __init__(self, max_n: int = 1 << 20, max_bytes: int = 1 << 20):
        self.native: dict[str, dict] = {f: {} for f in FIELDS}      # family -> key -> service._hot template
        self.max_n, self.max_bytes = max_n, max_bytes               # the C ALiBi answers' limits

    def learn(self, family: str, fmt: str, raw: bytes, resolved, view) -> None:
        """After the full path answered ``raw``: remember its template if the shortcut applies."""
        if fmt != "safetensors" or resolved.table is None:
            return
        if family == "rope":
            if resolved.spec.rope_type in ("dynamic", "longrope") or not isinstance(resolved.request.get("positions"), list):
                return
        elif not NATIVE or family not in FIELDS or (family == "alibi" and resolved.dtype != "float32"):
            return
        fields = FIELDS[family]
        cut = spans(raw, fields)
        if cut is None:
            return
        key = template_key(raw, cut)
        if key in self.native[family] or not controls(raw, cut, fields):
            return
        if len(self.native[family]) >= MAX_TEMPLATES:
            for d in self.native.values():
                d.clear()
        if family == "rope":
            self.native["rope"][key] = RopeTemplate(resolved, view).native()
        elif family == "sinusoidal":
            self.native["sinusoidal"][key] = sinusoidal_native(resolved, view)
        else:
            self.native["alibi"][key] = alibi_native(resolved, view, self.max_n, self.max_bytes)
