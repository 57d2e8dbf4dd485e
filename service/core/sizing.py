"""The bytes an answer will send, bounded before anything is built, and large JSON texts written
in bounded pieces.

The response limit (``max_response_bytes``) holds for the body that goes on the wire, whatever
its format. A request's arrays are known by shape before they exist (each family's output), so:

- safetensors: exactly, its header built from names, dtypes and shapes (engine/core/formats.py) plus
  the arrays' bytes;
- npz: the arrays' bytes plus a bound on what numpy's .npy headers and the zip structure add;
- JSON: every cell at the longest text a cell of its kind can take, plus the brackets and commas.
  A float32, float16 or bfloat16 value is written as orjson writes a float32: at most
  ``FLOAT_TEXT`` (16) characters (``-0.0000`` and nine digits; held over every float16 and
  bfloat16 value and a 20M-value sample of float32 bit patterns by tests/service/core/test_sizing.py);
  an int32 bucket at most the digits of ``num_buckets - 1``.

So a request whose answer could pass the limit is refused (413) in microseconds, before any array
or text is allocated: ``check`` raises ``AnswerTooLarge`` naming the format, the selections and
their sizes.

``json_text`` writes the JSON of ``encode.json_ready`` values byte for byte as ``orjson.dumps``
would, but an array of more than ``CHUNK_CELLS`` cells in pieces of at most that many, each its
own orjson call: orjson holds the GIL for a whole call, and a large answer is built in a thread,
so that the worker's event loop gets the GIL back between pieces (every few ms) instead of after
the whole text.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import orjson

from posenc.engine.answer import pipeline
from posenc.engine.core import dtypes as _dt
from posenc.engine.core.encode import _JSON_OPTS
from posenc.engine.core.errors import TooLarge

FLOAT_TEXT = 16  # orjson's longest float32 text: "-0.0000" and nine significant digits
SCALAR_TEXT = 24  # a Python float's longest text ("-2.2250738585072014e-308")
INT32_TEXT = 11  # "-2147483648"
CHUNK_CELLS = 16384  # cells per orjson call in json_text (~0.3-1 ms each)
# npz: per array, a zip local header (30) and central record (46) with zip64 extras (2 x 32),
# its name twice plus ".npy", and numpy's .npy header (a multiple of 64 bytes, 128 for the
# shapes here); the end records (22 + 56 + 20); the __bfloat16__ list and the spec (4 bytes a
# character: numpy strings are UTF-32) are arrays too
NPZ_PER_ARRAY = 30 + 46 + 64 + 256
NPZ_END = 22 + 56 + 20 + 64


class AnswerTooLarge(TooLarge):
    """A 413 naming the format and the selections whose size makes the answer too large."""

    def __init__(self, nbytes: int, limit: int, fmt: str, req):
        self.nbytes, self.limit = nbytes, limit
        sels = ", ".join(f"{name} ({s.n} positions)" for name, s in req.sel.items())
        what = {"json": "JSON text", "npz": "npz file", "safetensors": "safetensors file"}.get(fmt, fmt)
        hint = "; or ask for a binary answer, several times smaller" if fmt == "json" else ""
        Exception.__init__(
            self,
            f"response would be {nbytes} bytes ({what}"
            f"{', at most' if fmt != 'safetensors' else ''}), over the limit of {limit} bytes "
            f"({limit / 2**20:.0f} MiB); ask for fewer positions in {sels or 'the selections'}"
            f" or fewer heads{hint}",
        )


def cells(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _lists(shape) -> int:
    """The JSON lists of a nested-list array of this shape: 1 + a + a*b + ... (all but the last axis)."""
    n, total = 1, 1
    for s in shape[:-1]:
        n *= s
        total += n
    return total


def cell_text(dtype: str, spec) -> int:
    if dtype == "int32":
        nb = getattr(spec, "num_buckets", None)
        return len(str(nb - 1)) if nb else INT32_TEXT
    return SCALAR_TEXT if dtype == "float64" else FLOAT_TEXT


def json_bound(req) -> int:
    """At least the bytes of ``req``'s JSON answer."""
    total = 2  # {}
    for name, shape, dt in req.shapes():
        total += len(name) + 4  # "name":  and a comma
        if shape is None:
            total += SCALAR_TEXT
        else:  # each cell and the comma or ']' after it, each list's '[' and the comma after it
            total += cells(shape) * (cell_text(dt, req.spec) + 1) + 2 * _lists(shape)
    if req.shown is not None:
        total += len('"spec":,') + len(orjson.dumps(req.shown)) * 2  # (escapes can grow a string)
    return total


def flat_json_bound(cells: int, dtype: str, spec) -> int:
    """At least the bytes of one flat JSON list of ``cells`` values (a v2 output's ``data``)."""
    return cells * (cell_text(dtype, spec) + 1) + 2


def safetensors_size(req) -> int:
    """The exact bytes of ``req``'s safetensors answer: the header the encoder writes
    (``Family.safetensors_header``, of arrays of the answer's shapes and dtypes that hold one
    value each) and the arrays' bytes."""
    shaped, nbytes = {}, 0
    for name, shape, dt in req.shapes():
        if shape is None:
            shaped[name], nbytes = 0.0, nbytes + 8  # a Python float, as the answer holds it (float64)
        else:
            one = np.zeros((), _dt.DTYPES.get(dt) or np.dtype(dt))
            shaped[name] = a = np.ndarray(shape, one.dtype, one, strides=(0,) * len(shape))
            nbytes += a.nbytes
    return len(req.family.safetensors_header(shaped, req.dtype, req.shown)) + nbytes


def npz_bound(req) -> int:
    arrays = req.shapes()
    total = NPZ_END + req.nbytes()
    for name, _, _ in arrays:
        total += NPZ_PER_ARRAY + 2 * len(name)
    if req.dtype == _dt.BFLOAT16:  # the __bfloat16__ list of names
        total += NPZ_PER_ARRAY + 32 + 4 * sum(len(n) + 1 for n, _, _ in arrays)
    if req.shown is not None:
        total += NPZ_PER_ARRAY + 8 + 4 * len(orjson.dumps(req.shown)) * 2
    return total


def bound(req, fmt: str) -> int:
    """At least the bytes of ``req``'s answer in ``fmt`` (exact for safetensors)."""
    if fmt == "json":
        return json_bound(req)
    if fmt == "npz":
        return npz_bound(req)
    return safetensors_size(req)


def check(req, fmt: str, limit: int | None) -> int:
    """``req``'s answer's bound in ``fmt``; AnswerTooLarge (413) when over ``limit``."""
    n = bound(req, fmt)
    if limit is not None and n > limit:
        raise AnswerTooLarge(n, limit, fmt, req)
    return n


def check_request(req, fmt: str, limit: int | None, max_positions: int | None) -> int:
    """engine/answer/pipeline.py ``check`` with the limit held for the body in ``fmt`` (413 naming
    the format and the selections). Returns the body's bound."""
    return pipeline.check(req, limit, max_positions, lambda r, lim: check(r, fmt, lim))


# -- JSON text in bounded pieces --------------------------------------------------------------
def array_pieces(a: np.ndarray, chunk: int, out: list) -> None:
    """Append the pieces of ``orjson.dumps(a)``'s text to ``out``, each orjson call of at most
    ``chunk`` cells (views of its text, not copies: the one join at the end copies them once)."""
    if a.size <= chunk or a.ndim == 0:
        out.append(orjson.dumps(a, option=_JSON_OPTS))
        return
    out.append(b"[")
    if a.ndim == 1:
        step = chunk
    else:
        row = a[0].size
        step = 0 if row > chunk else max(1, chunk // max(1, row))
    if step == 0:  # each row in pieces
        for i in range(len(a)):
            if i:
                out.append(b",")
            array_pieces(a[i], chunk, out)
    else:  # several rows (or cells) a call, its outer brackets cut off
        for i in range(0, len(a), step):
            if i:
                out.append(b",")
            out.append(memoryview(orjson.dumps(a[i : i + step], option=_JSON_OPTS))[1:-1])
    out.append(b"]")


class Blocks(list):
    """A body as consecutive bytes blocks of at most about BLOCK_BYTES each (service/front/front.py
    ``respond`` sends them one ASGI message each): no copy of the whole text is ever made, which
    would hold the GIL for the whole copy (~30 ms for 40 MB on a busy 2-core host)."""

    @property
    def nbytes(self) -> int:
        return sum(map(len, self))

    def joined(self) -> bytes:
        return b"".join(self)


BLOCK_BYTES = 1 << 20


def json_blocks(obj: Mapping, chunk: int = CHUNK_CELLS) -> bytes | Blocks:
    """``encode.json_text`` of a dict of ``json_ready`` values, written in orjson calls of at
    most ``chunk`` cells, as Blocks of about BLOCK_BYTES (bytes when it is one call)."""
    if not any(isinstance(v, np.ndarray) and v.size > chunk for v in obj.values()):
        return orjson.dumps(obj, option=_JSON_OPTS)
    return as_blocks(_json_pieces(obj, chunk))


def as_blocks(pieces) -> Blocks:
    """Consecutive pieces of a body grouped into Blocks of about BLOCK_BYTES."""
    blocks, group, size = Blocks(), [], 0
    for piece in pieces:
        group.append(piece)
        size += len(piece)
        if size >= BLOCK_BYTES:
            blocks.append(b"".join(group))
            group, size = [], 0
    if group:
        blocks.append(b"".join(group))
    return blocks


def json_text(obj: Mapping, chunk: int = CHUNK_CELLS) -> bytes:
    """``encode.json_text`` of a dict of ``json_ready`` values, its large arrays in pieces (one
    copy of the whole text at the end, as orjson makes one)."""
    if not any(isinstance(v, np.ndarray) and v.size > chunk for v in obj.values()):
        return orjson.dumps(obj, option=_JSON_OPTS)
    return b"".join(_json_pieces(obj, chunk))


def _json_pieces(obj: Mapping, chunk: int) -> list:
    out: list = [b"{"]
    for n, (k, v) in enumerate(obj.items()):
        out += [b"," if n else b"", orjson.dumps(k), b":"]
        if isinstance(v, np.ndarray):
            array_pieces(v, chunk, out)
        else:
            out.append(orjson.dumps(v, option=_JSON_OPTS))
    out.append(b"}")
    return out
