"""Spec templates: the hot path's shortcut for a spec it has already answered.

Decode-time clients send the same spec again and again with new positions. After the full path
(strict validation, engine.client.resolve) has answered a RoPE request whose positions are a JSON
list, the body's bytes *around* that list become a template: the bytes before it and after it.
A later body with the same bytes around a list is the same validated spec with other positions;
only the list is parsed. Its answer is written straight into one response buffer (the
safetensors header for n rows is built once, by the same writer the full path uses), so the
two paths give identical bytes (tested).

Anything unusual — another family or format, a range selection, dynamic/longrope (whose table
follows the positions), rows past the table, a template not seen yet — takes the full path.

With the simd kernel backend the shortcut runs in C (service/_hot.c, ``NATIVE``): one call from
the request body and headers to the response bytes. This module stays its twin and its
fallback (the numpy backend, or no C compiler at install time); tests hold the two to the same
bytes.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import orjson

from engine import formats, kernels
from engine.dtypes import DTYPES
from engine.selection import POSITION_LIMIT

MAX_ROWS = 64          # small answers only: bigger ones gain nothing from the shortcut
MAX_TEMPLATES = 1024
_KEY = b'"positions"'


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


def split(raw: bytes):
    """(template key, list bytes) around the first "positions" list, or None."""
    i = raw.find(_KEY)
    if i < 0:
        return None
    j = raw.find(b"[", i + len(_KEY))
    if j < 0 or raw[i + len(_KEY):j].strip(b" \t\r\n:") or raw[i + len(_KEY):j].count(b":") != 1:
        return None
    k = raw.find(b"]", j)
    if k < 0:
        return None
    return raw[:j] + b"\0" + raw[k + 1:], raw[j:k + 1]   # JSON text never holds a raw NUL


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
        """The same template for service._hot (which holds the table arrays it reads)."""
        return _hot.Template(self.view.cos, self.view.sin, self.spec.layout == "interleaved",
                             lambda n: self.layout(n)[0], self.tail)


class Templates:
    def __init__(self):
        self._t: dict[bytes, RopeTemplate] = {}
        self.native: dict = {}        # the same keys -> service._hot.Template (when NATIVE)

    def learn(self, family: str, fmt: str, raw: bytes, resolved, view) -> None:
        """After the full path answered ``raw``: remember its template if the shortcut applies."""
        if (family != "rope" or fmt != "safetensors" or resolved.spec.rope_type in ("dynamic", "longrope")
                or resolved.table is None or not isinstance(resolved.request.get("positions"), list)):
            return
        parts = split(raw)
        if parts is None:
            return
        key, lst = parts
        if key in self._t:
            return
        try:
            if orjson.loads(lst) != resolved.request["positions"]:   # the span really is the list
                return
        except orjson.JSONDecodeError:
            return
        if len(self._t) >= MAX_TEMPLATES:
            self._t.clear()
            self.native.clear()
        t = self._t[key] = RopeTemplate(resolved, view)
        if NATIVE:
            self.native[key] = t.native()

    def answer(self, family: str, fmt: str, raw: bytes) -> bytes | None:
        if family != "rope" or fmt != "safetensors" or not self._t:
            return None
        parts = split(raw)
        if parts is None:
            return None
        t = self._t.get(parts[0])
        if t is None:
            return None
        try:
            rows = orjson.loads(parts[1])
        except orjson.JSONDecodeError:
            return None
        if not rows or len(rows) > MAX_ROWS:
            return None
        for v in rows:
            if type(v) is not int:
                return None
        if min(rows) < 0 or max(rows) >= POSITION_LIMIT:
            return None
        return t.answer(rows)
