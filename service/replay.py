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

With the simd kernel backend the shortcut runs in C (service/_hot.c, ``NATIVE``): one call from
the request body and headers to the response bytes, for RoPE and sinusoidal rows and for
float32 ALiBi blocks. This module's RoPE answer is its twin and its fallback (the numpy backend,
or no C compiler at install time); tests hold the C answers to this module's, to the full path's
and to the float64 reference.
"""

from __future__ import annotations

import logging
import os
import re

import numpy as np
import orjson

from posenc.engine import formats, kernels
from posenc.engine.dtypes import DTYPES
from posenc.engine.selection import POSITION_LIMIT
from posenc.engine.tables import FAMILIES, rope, sinusoidal

MAX_ROWS = 64          # small answers only: bigger ones gain nothing from the shortcut
MAX_TEMPLATES = 1024
# the families with templates -> their selections' names as JSON text, quotes included
FIELDS = {f: tuple(b'"%s"' % n.encode() for n in FAMILIES[f].SELECTIONS) for f in ("rope", "sinusoidal", "alibi")}
_BETWEEN = re.compile(rb"[ \t\r\n:]*")
_CLOSE = {ord("["): b"]", ord("{"): b"}"}


def _load_native():
    """service._hot when the kernels are the C backend (one switch, POSENC_BACKEND, for all C)."""
    if kernels.BACKEND != "simd":
        return None
    try:
        from . import _hot
    except ImportError as exc:
        if os.environ.get(kernels.ENV_VAR) == "simd":
            raise ImportError(f"{kernels.ENV_VAR}=simd but service._hot is not built ({exc})") from exc
        logging.getLogger("posenc.service").warning("service._hot not built; the Python shortcut runs")
        return None
    assert _hot.MAX_ROWS == MAX_ROWS
    return _hot


_hot = _load_native()
NATIVE = _hot is not None


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


def split(raw: bytes, fields=FIELDS["rope"]):
    """(template key, [selection text, in field order]) or None."""
    cut = spans(raw, fields)
    if cut is None:
        return None
    return template_key(raw, cut), [raw[a:b] for a, b in cut]


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
        self.itemsize = DTYPES[self.dtype].itemsize
        self.heads: dict[int, tuple[bytes, int]] = {}   # n -> (header, total bytes)
        self.tail = view.inv_freq.tobytes() + np.float64(view.meta["attention_scaling"]).tobytes()

    def layout(self, n: int):
        got = self.heads.get(n)
        if got is None:
            d = 2 * self.half
            shapes = {"cos": np.empty((n, d), DTYPES[self.dtype]), "sin": np.empty((n, d), DTYPES[self.dtype]),
                      "inv_freq": self.view.inv_freq, "attention_scaling": float(self.view.meta["attention_scaling"])}
            bf16 = {"cos", "sin"} if self.dtype == "bfloat16" else frozenset()
            head, _ = formats.safetensors_parts(shapes, bf16, {"family": "rope"})
            got = self.heads[n] = (head, len(head) + 2 * n * d * self.itemsize + len(self.tail))
            if len(self.heads) > MAX_ROWS:
                self.heads.clear()
        return got

    def answer(self, rows: list) -> bytes | None:
        n = len(rows)
        if n > MAX_ROWS or max(rows) >= self.view.length:
            return None
        head, total = self.layout(n)
        buf = np.empty(total, np.uint8)
        h = len(head)
        buf[:h] = np.frombuffer(head, np.uint8)
        block = n * 2 * self.half * self.itemsize
        st = DTYPES[self.dtype]
        idx = np.array(rows, dtype=np.int64)
        kernels.rope_expand(self.view.cos, idx, buf[h:h + block].view(st).reshape(n, 2 * self.half), self.spec.layout)
        kernels.rope_expand(self.view.sin, idx, buf[h + block:h + 2 * block].view(st).reshape(n, 2 * self.half),
                            self.spec.layout)
        buf[h + 2 * block:] = np.frombuffer(self.tail, np.uint8)
        return buf.tobytes()

    def native(self):
        """The same template for service._hot (which holds the table arrays it reads); its column
        map is the engine's own half -> full expansion applied to column numbers."""
        colmap = rope.expand(np.arange(self.half)[None, :], self.spec.layout)[0].tolist()
        return _hot.RowsTemplate((self.view.cos, self.view.sin), colmap, 0, MAX_ROWS, True,
                                 lambda n: self.layout(n)[0], self.tail)


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
        self._t: dict[bytes, RopeTemplate] = {}
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
        if key in self._t or key in self.native[family] or not controls(raw, cut, fields):
            return
        if len(self._t) + len(self.native[family]) >= MAX_TEMPLATES:
            self._t.clear()
            for d in self.native.values():
                d.clear()
        if family == "rope":
            t = self._t[key] = RopeTemplate(resolved, view)
            if NATIVE:
                self.native["rope"][key] = t.native()
        elif family == "sinusoidal":
            self.native["sinusoidal"][key] = sinusoidal_native(resolved, view)
        else:
            self.native["alibi"][key] = alibi_native(resolved, view, self.max_n, self.max_bytes)

    def answer(self, family: str, fmt: str, raw: bytes) -> bytes | None:
        """The Python shortcut (RoPE lists only)."""
        if family != "rope" or fmt != "safetensors" or not self._t:
            return None
        parts = split(raw)
        if parts is None:
            return None
        t = self._t.get(parts[0])
        if t is None:
            return None
        try:
            rows = orjson.loads(parts[1][0])
        except orjson.JSONDecodeError:
            return None
        if type(rows) is not list or not rows or len(rows) > MAX_ROWS:
            return None
        for v in rows:
            if type(v) is not int:
                return None
        if min(rows) < 0 or max(rows) >= POSITION_LIMIT:
            return None
        return t.answer(rows)
