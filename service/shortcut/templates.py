"""Spec templates: the hot path's shortcut for a spec it has already answered.

Decode-time clients send the same spec again and again with new positions. After the full path
(the pipeline: strict validation, plan, arrays) has answered a body twice (the learn rule of the
one store, service/shortcut/store.py, which also keeps them: one cap and one freshness check for
every route, v2's included), the body's bytes *around* its selections become a template key:
the body with the text of each selection (RoPE ``positions``; ALiBi ``query`` and ``key``; or, sent
instead of ``positions``, rope's per-axis ``position_ids``, whose template gathers each column at
its axis's position) replaced by one NUL byte (JSON text never holds a raw one). A later
body with the same key is the same validated spec with other selections: the bytes outside the
selections are the learnt body's, so a JSON parser reaches each selection in the same state and
leaves it in the same state. At learn time each cut-out span is checked to be the value its
field really takes (a probe value substituted into the span must come back as the field's
value), which rules out duplicate keys (``{"positions": [1], "positions": [1]}``: JSON's last
one wins) and escaped spellings of a field name. Only the selections are parsed then.

Each family's registry entry makes its own template (``Family.template``: the column map, the
response header, the tail); this module only cuts bodies and keeps templates. Anything unusual —
another format, a range where the learnt body had a list, a rope type whose table follows the
positions, a template not seen yet — takes the full path. Rows past a stored table are computed in
C by the engine's own sincos kernel (``kernels.c_api()``), the same bits as the pipeline's rows.

JSON answers (the lane's, service/protocol/lane.py) come from the same RowsTemplates
(``json_answers``): the full path's JSON of the learnt request, with each array's rows cut out,
around the rows' texts, each stored row rendered once by the full path's own ``json_text`` the
first time an answer needs it, and kept (up to TEXT_BUDGET bytes a template); rows past the table
(GROWN_ROWS of them) are computed by the engine's kernel for their rendering. ALiBi blocks
(``block_json``) are formatted in C, cell by cell, with orjson's own text of a float32
(hot_f32text.c: the shortest digits (vendored zmij) in orjson's layout, held to orjson over all 2^32 values by
tests/tools/f32_text_exhaustive.py): a block's cells are far too many distances to keep texts of.

The shortcut runs in C (service/shortcut/_hot.c and its parts): one call from the request body and
headers to the response bytes; learning cuts bodies with the same C (``_hot.cut``). The
``shortcut`` setting picks it (``shortcut_in_use``): ``auto`` runs it when service._hot is built
and the kernel backend is simd, ``c`` requires it, ``off`` never runs it. There is no Python
twin: without the C shortcut (the numpy backend, the reference path, or no C compiler at install
time) every request takes the full path. Tests hold the C answers to the full path's bytes and
to the float64 reference. C takes its rules and limits from here (``configure``), and calls back
into Python only where service/shortcut/hot.h says (serve's write and again; a miss is ``_again``'s).
"""

from __future__ import annotations

import logging

import numpy as np
import orjson

from posenc.engine import kernels
from posenc.engine.answer import pipeline
from posenc.engine.core.dtypes import DTYPES
from posenc.engine.core.encode import json_ready, json_text
from posenc.engine.core.errors import ConfigError
from posenc.engine.core.selection import POSITION_LIMIT, RANGE_KEYS
from posenc.engine.tables import FAMILIES, Family
from posenc.service.core.settings import ENV_PREFIX, LANE_OFF_HEADERS, Settings, current
from posenc.service.shortcut.store import MAX_KEY_BYTES, Store

MAX_ROWS = 64  # small answers only: bigger ones gain nothing from the shortcut
FORMATS = {"safetensors": 0, "json": 1}  # the answer formats C writes (hot.h HOT_FORMATS, _hot.FORMATS)
TEXT_BUDGET = (
    128 << 20
)  # bytes of stored rows' JSON texts a template keeps (a 32k x 128 float32 RoPE table: ~110 MiB)
KEEP_BYTES = 256 << 20  # bytes all templates keep together: JSON texts and rows past a table once computed
_ROWS_MARK = "posenc:rows:%d"  # stands for an array's rows in the JSON answer the parts are cut from
# the families that make templates -> their selections' names as JSON text, quotes included
FIELDS = {
    name: tuple(map(orjson.dumps, f.selections))
    for name, f in FAMILIES.items()
    if type(f).template is not Family.template
}
# a one-selection family's field of per-axis position lists, sent instead of its selection (rope's
# position_ids): its templates gather each column at its axis's position (service/shortcut/hot_axes.c)
AXIS_FIELDS = {
    name: orjson.dumps(next(iter(FAMILIES[name].axis_fields)))
    for name, fields in FIELDS.items()
    if len(fields) == 1 and len(FAMILIES[name].axis_fields) == 1
}


def _load_native():
    """(service._hot, None), or (None, why it is missing)."""
    try:
        from . import _hot
    except ImportError as exc:
        return None, exc
    return _hot, None


_hot, _MISSING = _load_native()
NATIVE = _hot is not None  # built


def native_rules(settings: Settings) -> dict:
    """What the C shortcut is configured with: the rules Python owns (selections, template
    fields, the lane's off headers), the limits of ``settings`` and the engine's kernels (their
    sincos loop computes rows past a stored table; None with the numpy backend)."""
    return dict(
        position_limit=POSITION_LIMIT,
        max_rows=MAX_ROWS,
        fields=FIELDS,
        axis_fields=AXIS_FIELDS,
        range_keys=tuple(map(orjson.dumps, RANGE_KEYS)),
        max_head=settings.max_header_bytes,
        max_body=settings.max_body_bytes,
        off_headers=LANE_OFF_HEADERS,
        kernels=kernels.c_api(),
        keep_bytes=KEEP_BYTES,
    )


def configure(settings: Settings) -> None:
    """Configure the C shortcut for ``settings`` (the Service calls it with its own). One
    configuration per process: the last call's limits hold for every template."""
    if _hot is not None:
        _hot.configure(**native_rules(settings))


configure(current())  # this process's settings, until a Service configures its own


def shortcut_in_use(setting: str) -> str:
    """The shortcut that runs for the ``shortcut`` setting: "c" or "off". ConfigError at start-up
    when "c" is required but service._hot is not built."""
    if setting == "c" and _hot is None:
        raise ConfigError(
            f"{ENV_PREFIX}SHORTCUT=c but posenc.service.shortcut._hot is not built ({_MISSING}); "
            f"reinstall with a C compiler available, or set {ENV_PREFIX}SHORTCUT=auto"
        )
    if setting == "auto" and _hot is None and kernels.BACKEND == "simd":
        logging.getLogger("posenc.service").warning("service._hot is not built: no template shortcut")
    if setting == "c" or (setting == "auto" and _hot is not None and kernels.BACKEND == "simd"):
        return "c"
    return "off"


# -- the calls into the C shortcut: the rest of the service reaches service._hot only through these --
# what a miss lacked (hot.h HOT_MISSES, exported as _hot.MISSES: test_hot_kinds.py holds them equal)
MISSES = ("header", "texts")
MISS_HEADER, MISS_TEXTS = range(2)
_MISSES = 4  # misses one call may meet (another thread may clear a full cache meanwhile)


def _again(call, declined):
    """``call()`` again after each miss it meets; ``declined`` after _MISSES of them.

    The miss protocol (service/shortcut/hot.h says the same for the C side): C never calls back
    into Python. An answer that lacks what only Python computes returns NotImplemented and notes,
    in this thread's thread-state dict, what it lacked; ``_hot.missing()`` hands that note over
    once (None: nothing noted) as ``(what, template, detail)``, ``what`` an index of MISSES:

    - ``MISS_HEADER``, detail ``shape``: the safetensors header of an answer of ``shape`` ((n,)
      rows, (nq, nk) blocks), computed by ``template.header_for(*shape)`` (the family's function)
      and cached by ``template.set_header(shape, header)``;
    - ``MISS_TEXTS``, detail ``[(array, row), ...]``: JSON texts of stored rows, rendered by
      ``template.text_for(array, row)`` and kept by ``template.set_text(array, row, text)``.

    Then the call is made again. Another thread may drop what was stored meanwhile (a full header
    cache starts over, the keep budget drops texts), so a call may miss again: after _MISSES misses
    the request is ``declined`` (the full path answers). The note is per thread, so two threads
    missing at once each fetch their own."""
    for _ in range(_MISSES):
        got = _hot.missing()  # this thread's note: (what, template, detail), or None
        if got is not None:
            what, t, detail = got
            if what == MISS_TEXTS:
                for a, r in detail:
                    t.set_text(a, r, t.text_for(a, r))
            else:
                t.set_header(detail, t.header_for(*detail))
        out = call()
        if out is not NotImplemented:
            return out
    return declined


def answer(raw: bytes, headers, accepts: dict, templates: dict, family: str, json: bool = False):
    """A body of ``family`` whose spec is one of ``templates``, answered whole (safetensors), or
    None: the full path answers. (A body over the configured max_body_bytes: None.) ``json``: an
    Accept negotiated to JSON is answered too, and the answer is (bytes, format: FORMATS' value)."""
    kw = {"accepts": accepts, "templates": templates, "family": family, "json": json}
    out = _hot.answer(raw, headers, **kw)
    if out is NotImplemented:
        return _again(lambda: _hot.answer(raw, headers, **kw), None)
    return out


def answer_request(
    data: bytes, start: int, routes: dict, accepts: dict, native: dict, pre: bytes, post: bytes, close: bool
):
    """The HTTP request at ``data[start:]`` answered from its bytes to the response's bytes, for
    service/protocol/lane.py: (end of the request, its route, response, keep-alive) when it is a
    whole plain POST to a target of ``routes`` that the shortcut answers. Else
    - None: the bytes are not a whole plain request to a target of ``routes`` (incomplete,
      outside the C parser's strict subset of HTTP/1.1, or to another target): httptools reads
      them;
    - False: they are one, and the shortcut declines it (its Accept not negotiated to
      safetensors, a body over max_body_bytes, no template for its spec, or one that does not
      answer it): the full path answers it, and need not offer it to the shortcut again."""
    kw = {"routes": routes, "accepts": accepts, "native": native, "pre": pre, "post": post, "close": close}
    out = _hot.lane(data, start, **kw)
    if out is NotImplemented:
        out = lane_again(data, start, **kw)
    return out


def lane_again(data: bytes, start: int, **lane):
    """The request at ``data[start:]`` that lane() could not answer before a header or a row's text
    was computed (it returned NotImplemented), answered as answer_request answers it: a Reader's
    ``again``, called from C with lane()'s arguments (``lane``: routes, accepts, native, pre, post,
    close, by name)."""
    return _again(lambda: _hot.lane(data, start, **lane), False)


# Reader(*, routes, accepts, native, post, counts, buckets, again, fresh, every): a worker's hot lane,
# bound to each connection (reader.bind(write, flow)); a connection's reader(data, pre, now) answers
# the whole requests at the start of one socket read as answer_request answers each, every response
# written and counted in one C call (service/shortcut/hot_serve.c says what it returns); one that
# misses a header or text is answered by ``again`` (lane_again) inside the same loop, so the loop's
# rules (when to stop, what to count) have one owner. The arguments that do not change are checked
# and bound once: a read hands C its bytes, the head's start and the loop's time only.
Reader = None if _hot is None else _hot.Reader
# What the lane's v2 routes hold (service/v2/hot.py, hot_blocks.py, hot_json.py make them): small
# types with named fields, each checked once when made (service/shortcut/hot_named.c says them):
# V2Route(*, metrics, entries, length_name, refused, json_name, json_entries), RowsEntry(*,
# template, itemsize, nbytes, parts, post), BlockEntry(*, template, itemsizes, nbytes, key_first,
# parts, post), JsonEntry(*, template, counts, swap, post).
V2Route, RowsEntry, BlockEntry, JsonEntry = (
    (None,) * 4 if _hot is None else (_hot.V2Route, _hot.RowsEntry, _hot.BlockEntry, _hot.JsonEntry)
)
# gRPC's door (service/shortcut/hot_grpc.c, read by service/v2/hot.py and the gRPC lane): grpc_cut(data),
# a ModelInferRequest's key and its trailing raw fields' lengths, the one owner of that cut;
# grpc_answer(data, entries, *, ...), a learnt message's answer, framed and counted, in one call; and
# GrpcEntry(*, fill, nbytes, size, metrics, stream_metrics, entry), what it reads (hot_named.c).
grpc_cut, grpc_answer, GrpcEntry = (
    (None,) * 3 if _hot is None else (_hot.grpc_cut, _hot.grpc_answer, _hot.GrpcEntry)
)


def v2_rest(route, body: bytes, headers):
    """A v2 REST infer Python read (its body and ASGI headers) answered from its V2Route as the lane
    answers it, in one C call (hot_lane.c v2_rest says what it returns), a JSON row's missing texts
    rendered first (``_again``); None: declined."""
    out = _hot.v2_rest(route, body, headers)
    if out is NotImplemented:
        return _again(lambda: _hot.v2_rest(route, body, headers), None)
    return out


# Why serve's loop stopped: the states are C's, named and ordered once (hot.h HOT_SERVE_STATES,
# exported as _hot.SERVE_STATES); each constant here is its name's index there (-1 without the
# extension, where nothing returns a state).
SERVE_STATES = () if _hot is None else _hot.SERVE_STATES
SERVE_DONE, SERVE_PAUSED, SERVE_NOT_REQUEST, SERVE_DECLINED, SERVE_AGAIN, SERVE_CLOSED, SERVE_FAILED = (
    SERVE_STATES.index(name) if name in SERVE_STATES else -1
    for name in ("done", "paused", "not a request", "declined", "again", "closed", "failed")
)


# A template's kind (``t.kind``, its C kind's name: service/shortcut/hot.h, struct hot_ops): what it
# answers. Rows of positions (RoPE, sinusoidal: RowsTemplate), rows of a large grid (GridTemplate),
# blocks of query x key positions (ALiBi, T5). The Python side branches on these, never on the type.
KIND_ROWS, KIND_GRID, KIND_ALIBI, KIND_T5 = "rows", "grid", "alibi", "t5"
BLOCK_KINDS = (KIND_ALIBI, KIND_T5)


def rows_template(req, view):
    """The family's row template of a request answered from ``view`` (one row per position), or
    None when the family makes none for it (the v2 shortcut, service/v2/hot.py, fills its rows)."""
    t = req.family.template(_hot, req, view, Limits(MAX_ROWS, 1, 1))
    return t if t is not None and t.kind == KIND_ROWS else None


def flat_json_template(req, view, parts: tuple, limits: Limits):
    """The family's template of ``req`` (list selections), writing JSON with ``parts`` around each
    array's values as one flat list (a v2 output's row-major data; service/shortcut/hot_v2json.c):
    a RowsTemplate of one axis, or a T5Template or AlibiTemplate (``parts`` around its block); None
    for any other."""
    t = req.family.template(_hot, req, view, limits)
    if t is not None and t.kind == KIND_ROWS:
        return t if _rows_json(t, req, parts, True) else None
    if t is not None and t.kind in BLOCK_KINDS and len(parts) == 2:
        t.enable_json(parts, True)
        return t
    return None


def v2_cut(raw: bytes, name: bytes):
    """(key, spans) of a v2 JSON-tensor infer body, each list of the data field ``name`` (JSON text)
    cut out as the C lane cuts it (service/shortcut/hot_v2json.c); None when the lane does not."""
    return _hot.v2_cut(raw, name)


def block_template(req, view, max_n: int, max_bytes: int):
    """The family's block template (AlibiTemplate, T5Template: the one /v1 answers from) of a
    request answered from ``view``, for blocks of at most ``max_n`` positions a selection and
    ``max_bytes`` bytes; None when the family makes none for it (the v2 shortcut's blocks,
    service/v2/hot_blocks.py)."""
    t = req.family.template(_hot, req, view, Limits(MAX_ROWS, max_n, max_bytes))
    return t if t is not None and t.kind in BLOCK_KINDS else None


def fill_block(t, first, second, itemsizes: tuple, key_first: bool, parts: tuple) -> bytes | None:
    """``parts[0]`` + block template ``t``'s block at raw positions ``first`` then ``second``
    (query then key, or key then query when ``key_first``; little-endian ints of ``itemsizes``
    bytes) + ``parts[1]``, or None: the full path answers (a position negative or past the limit,
    a cell that overflows the dtype)."""
    return _hot.fill_block(t, first, second, itemsizes=itemsizes, key_first=key_first, parts=parts)


def fill(rows, positions, itemsize: int, parts: tuple) -> bytes | None:
    """The rows of ``positions`` (raw little-endian ints of ``itemsize`` bytes) laid out between
    ``parts``, or None when a position is not inside the table."""
    return _hot.fill(rows, positions, itemsize, parts=parts)


def fill_into(rows, positions, itemsize: int, views: tuple) -> bool:
    """The same rows written into writable buffers ``views`` (one per array); False as fill's None."""
    return _hot.fill_into(rows, positions, itemsize, buffers=views)


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


class Limits:
    """What a template may answer: rows per RowsTemplate answer, positions per selection and
    response bytes (the full path's limits, which the C code is handed, never redefines)."""

    __slots__ = ("max_rows", "max_positions", "max_bytes")

    def __init__(self, max_rows: int, max_positions: int, max_bytes: int):
        self.max_rows, self.max_positions, self.max_bytes = max_rows, max_positions, max_bytes


class Templates:
    """The /v1 templates: each family's learnt bodies, in ``store`` (service/shortcut/store.py: its
    learn rule, cap and freshness check), under the family's name as their route."""

    def __init__(self, store: Store | None = None, max_n: int = 1 << 20, max_bytes: int = 1 << 20):
        self.store = Store() if store is None else store
        # family -> key -> service._hot template: the dicts C reads, the store's own
        self.native: dict[str, dict] = {f: self.store.route(f) for f in FIELDS}
        self.limits = Limits(MAX_ROWS, max_n, max_bytes)

    def learn(self, fmt: str, raw: bytes, req, view) -> None:
        """After the full path answered ``raw`` (the pipeline's ``req``) from the mapped ``view``
        in either format: remember its template if the family makes one for it (at the key's
        second answer: the store's rule)."""
        family = req.family.name
        fields = FIELDS.get(family)
        if fmt not in FORMATS or not NATIVE or fields is None:
            return
        axes = next((f for f in req.family.axis_fields if req.body.get(f) is not None), None)
        if axes is not None:  # cut (C) takes the per-axis field where the body has no selection
            fields = (AXIS_FIELDS[family],)
        got = _hot.cut(raw, family)  # C cuts bodies here as when it answers them
        if got is None:
            return
        key, cut = got
        if len(key) > MAX_KEY_BYTES or not self.store.admit(family, key):
            return
        t = req.family.template(_hot, req, view, self.limits) if controls(raw, cut, fields) else None
        if t is not None and t.kind == KIND_ROWS and axes is None:  # per-axis rows in JSON: the full path's
            json_answers(t, key, raw, req, view)
        elif t is not None and t.kind in BLOCK_KINDS:
            block_json(t, key, raw, req, view)
        self.store.keep(family, key, t)


def _json_parts(req, view):
    """(the full path's JSON answer of ``req``, and the parts of it around each row-gathered
    array's text, or None when a mark is not found)."""
    result = pipeline.arrays(req, view)
    names = [k for k in result if k in req.family.batched]
    marks = {k: _ROWS_MARK % i for i, k in enumerate(names)}
    parts = [json_text({k: marks.get(k) or json_ready(v, req.dtype) for k, v in result.items()})]
    for k in names:
        head, sep, rest = parts[-1].partition(orjson.dumps(marks[k]))
        if not sep:
            return json_text({k: json_ready(v, req.dtype) for k, v in result.items()}), None
        parts[-1:] = [head, rest]
    return json_text({k: json_ready(v, req.dtype) for k, v in result.items()}), tuple(parts)


def _lane_json(t, key: bytes, raw: bytes, req) -> bytes | None:
    """Template ``t``'s JSON answer to ``raw``, asked through the lane's own entry point."""
    got = answer_request(
        b"POST / HTTP/1.1\r\ncontent-length: %d\r\n\r\n%s" % (len(raw), raw),
        0,
        {b"/": (req.family.name,)},
        {None: FORMATS["json"]},
        {req.family.name: {key: t}},
        (b"", b"", b""),
        b"",
        False,
    )
    return got[2].partition(b"\r\n")[2] if got else None


def _rows_json(t, req, parts: tuple, flat: bool) -> bool:
    """Let RowsTemplate ``t`` write JSON between ``parts`` (each array's rows as a list of rows, or
    ``flat``: as one list), its rows' texts rendered by the full path's own ``json_text``; False
    when ``parts`` are not one more than its arrays (or it has several axes)."""
    storage, dtype = DTYPES[req.dtype], req.dtype

    def text_for(a: int, r: int) -> bytes:
        return json_text(json_ready(np.frombuffer(t.row(a, r), storage), dtype))

    try:
        t.enable_json(
            parts,
            zero=json_text(json_ready(np.zeros(1, storage), dtype))[1:-1],
            text_for=text_for,
            budget=TEXT_BUDGET,
            flat=flat,
        )
    except ValueError:  # not one part more than the template's arrays
        return False
    return True


def json_answers(t, key: bytes, raw: bytes, req, view) -> bool:
    """Let RowsTemplate ``t`` answer JSON too (service/shortcut/hot_json.c): its parts are the full
    path's JSON answer of ``req`` with each row-gathered array's rows cut out, and its rows' texts
    are rendered by the full path's own ``json_text``. Only when its JSON answer to ``raw``, asked
    through the lane's own entry point, is the full path's bytes."""
    want, parts = _json_parts(req, view)
    if parts is None or not _rows_json(t, req, parts, False):
        return False
    if _lane_json(t, key, raw, req) != want:
        t.enable_json(None)  # JSON stays with the full path
        return False
    return True


def block_json(t, key: bytes, raw: bytes, req, view) -> bool:
    """Let T5Template or AlibiTemplate ``t`` answer JSON too (service/shortcut/hot_t5.c: integers;
    hot_alibi.c: floats as the full path's writer formats them): the full path's JSON answer of
    ``req`` around the block's text, which C writes. Only when its answer to ``raw`` through the
    lane is the full path's bytes."""
    want, parts = _json_parts(req, view)
    if parts is None or len(parts) != 2:
        return False
    t.enable_json(parts)
    if _lane_json(t, key, raw, req) != want:
        t.enable_json(None)  # JSON stays with the full path
        return False
    return True
