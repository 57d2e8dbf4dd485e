"""What the fuzz harnesses of tests/fuzz/ share: the C shortcut (the instrumented copy .ci/fuzz
builds, when POSENC_FUZZ_HOT names it), real templates of rope, sinusoidal and ALiBi learnt with no
engine (each table built in this process by its own TableDef, as
tests/service/shortcut/test_templates_in_memory.py does), and the oracles each harness holds the
C answers to: the pipeline's bytes, httptools' reading of a request, engine/core/selection.py.

Import this module before anything imports posenc.service.shortcut.templates."""

from __future__ import annotations

import importlib.util
import os
import sys


def _load_instrumented() -> None:
    path = os.environ.get("POSENC_FUZZ_HOT")
    if not path:
        return
    importlib.import_module("posenc.service.shortcut")  # the package the instrumented module goes into
    name = "posenc.service.shortcut._hot"
    assert name not in sys.modules, "tests/fuzz/hot_targets.py must be imported before the shortcut"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)


_load_instrumented()

import orjson  # noqa: E402

from posenc.engine.answer import pipeline  # noqa: E402
from posenc.engine.core.encode import encode, json_ready, json_text  # noqa: E402
from posenc.engine.core.errors import PosencError  # noqa: E402
from posenc.engine.tables import FAMILIES  # noqa: E402
from posenc.service.shortcut import templates as replay  # noqa: E402

# the tables the in-memory template tests build, the engine's arrays without an engine
from tests.service.shortcut.test_templates_in_memory import view_of  # noqa: E402

hot = replay._hot
if os.environ.get("POSENC_FUZZ_HOT"):
    assert hot.__file__ == os.environ["POSENC_FUZZ_HOT"], hot.__file__

LENGTH = 512  # rows (distances) of the in-memory tables
ACCEPT = b"application/x-safetensors"
HEADERS = [(b"content-type", b"application/json"), (b"accept", ACCEPT)]
# Accept value (None: no Accept) -> the format the negotiator chose (templates.FORMATS: 0 safetensors, 1 JSON)
ACCEPTS = {ACCEPT: 0, b"*/*;q=0.1, application/x-safetensors": 0, b"application/json": 1, None: 1}
ROUTES = {
    b"/v1/rope": ("rope", 0),
    b"/v1/sinusoidal": ("sinusoidal", 1),
    b"/v1/alibi": ("alibi", 2),
    b"/v1/sinusoidal-grid": ("sinusoidal-grid", 3),
    b"/v1/t5-buckets": ("t5-buckets", 4),
}
PRE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/x-safetensors\r\ncontent-length: ",  # by format
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ",
    b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: ",
)
POST = b"\r\nx-posenc-worker: 1\r\n"

# the learnt specs: (family, first body); later bodies differ in their selections only
SPECS = [
    ("rope", {"head_dim": 64, "positions": [5]}),
    (
        "rope",
        {
            "head_dim": 36,
            "partial_rotary_factor": 0.5,
            "layout": "interleaved",
            "dtype": "bfloat16",
            "positions": [1],
        },
    ),
    ("sinusoidal", {"d_model": 33, "layout": "concat", "offset": 2, "dtype": "float16", "positions": [1]}),
    ("sinusoidal", {"d_model": 8, "positions": [0]}),
    ("alibi", {"num_heads": 12, "query": [1], "key": [0]}),
    ("alibi", {"num_heads": 16, "mode": "symmetric", "heads": [0, 3], "query": [1], "key": [0]}),
    ("alibi", {"num_heads": 8, "mask_future": True, "query": [1], "key": [0]}),
    ("alibi", {"num_heads": 8, "dtype": "float16", "query": [1], "key": [0]}),  # the engine's block kernel
    ("alibi", {"num_heads": 5, "mode": "symmetric", "dtype": "bfloat16", "query": [1], "key": [0]}),
    (
        "alibi",
        {"num_heads": 2, "max_bias": 0.5, "mask_future": True, "dtype": "float16", "query": [1], "key": [0]},
    ),
    ("t5-buckets", {"num_buckets": 16, "max_distance": 40, "query": [1], "key": [0]}),  # and its T5 kernel
    # per-axis positions (service/shortcut/hot_axes.c): no fill() template (v2 takes them whole)
    ("rope", {"head_dim": 64, "mrope_section": [8, 12, 12], "position_ids": [[1], [2], [3]]}),
    (
        "rope",
        {
            "head_dim": 32,
            "axes_dim": [8, 8, 16],
            "layout": "interleaved",
            "dtype": "float16",
            "position_ids": [[0], [0], [0]],
        },
    ),
    # a grid stored per axis (service/shortcut/hot_grid.c), 3-D with extra tokens
    (
        "sinusoidal-grid",
        {
            "embed_dim": 32,
            "grid_size": [600, 700],
            "temporal_size": 5,
            "extra_tokens": 2,
            "interpolation_scale": 1.5,
            "dtype": "bfloat16",
            "positions": [1],
        },
    ),
]


def learn() -> replay.Templates:
    """Templates of every spec of SPECS, learnt as the service learns them."""
    t = replay.Templates(max_n=1 << 12, max_bytes=1 << 20)
    for family, body in SPECS:
        req = pipeline.parse(family, body, LENGTH)
        for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
            t.learn("safetensors", orjson.dumps(body), req, view_of(req.table))
    for family, _ in SPECS:  # (T5 blocks are the engine's kernel's: none with the numpy backend)
        assert t.native[family] or (family == "t5-buckets" and replay.kernels.c_api() is None), family
    return t


TEMPLATES = learn()


def rows_templates() -> list:
    """(RowsTemplate, its number of arrays, its spec's first body) of each row spec, for fill()."""
    out = []
    for family, body in SPECS:
        if family not in ("rope", "sinusoidal") or "position_ids" in body:
            continue
        req = pipeline.parse(family, body, LENGTH)
        t = replay.rows_template(req, view_of(req.table))
        assert t is not None, body
        out.append(
            (t, 2 if family == "rope" else 1, (family, body))
        )  # rope: cos and sin; sinusoidal: one table
    return out


def axes_templates() -> list:
    """(RowsTemplate, its spec's first body, its table's length) of each per-axis rope spec
    (position_ids), for fill()."""
    out = []
    for family, body in SPECS:
        if "position_ids" in body:
            req = pipeline.parse(family, body, LENGTH)
            out.append((replay.rows_template(req, view_of(req.table)), body, req.table.length))
    return out


def pipeline_ids_rows(body: dict, ids: list) -> bytes:
    """The pipeline's cos then sin for per-axis positions ``ids`` [k, n], from the same tables."""
    req = pipeline.parse("rope", {**body, "position_ids": ids}, LENGTH)
    arrays = pipeline.arrays(req, view_of(req.table))
    return arrays["cos"].tobytes() + arrays["sin"].tobytes()


def full_path(family: str, raw: bytes, fmt: str = "safetensors") -> bytes | None:
    """The full path's answer to ``raw`` (safetensors or JSON) from the same in-memory tables, or
    None where it refuses the body."""
    try:
        body = orjson.loads(raw)
        req = pipeline.parse(family, body, LENGTH)
        pipeline.check(req)
        arrays = pipeline.arrays(req, view_of(req.table))  # (a masked block's overflow is found here)
    except (orjson.JSONDecodeError, PosencError):
        return None
    return encode(req.family, arrays, req.dtype, fmt)[0]


def answer(raw: bytes, family: str, accept: bytes = ACCEPT):
    """The C shortcut's answer to the body ``raw`` (its header misses filled, as the service does)."""
    return replay.answer(raw, [(b"accept", accept)], ACCEPTS, TEMPLATES.native[family], family)


def check_answer(raw: bytes, family: str, got) -> None:
    """A C answer must be the full path's bytes, byte for byte."""
    if got is None:
        return
    want = full_path(family, raw)
    assert want is not None, f"C answered a body the full path refuses: {raw!r}"
    assert got == want, f"C's answer differs from the full path's: {raw!r}"


def pipeline_rows(family: str, body: dict, position: int) -> bytes:
    """The pipeline's row-gathered arrays of one position (rope: cos then sin; sinusoidal: the
    encoding) from the same in-memory tables, as fill() lays them out with empty parts."""
    req = pipeline.parse(family, {**body, "positions": [position]}, LENGTH)
    arrays = pipeline.arrays(req, view_of(req.table))
    return b"".join(arrays[k].tobytes() for k in arrays if k in req.family.batched)


# block templates for fill_block() (the v2 shortcut's ALiBi and T5 blocks): at most this many
# bytes a block (as the v2 shortcut gives its templates the response limit)
BLOCK_BYTES = 1 << 20


def block_templates() -> list:
    """(AlibiTemplate or T5Template, its spec's family and first body) of each block spec, for
    fill_block() (T5 and float16 ALiBi blocks are the engine's kernels': none with the numpy backend)."""
    out = []
    for family, body in SPECS:
        if family in ("alibi", "t5-buckets"):
            req = pipeline.parse(family, body, LENGTH)
            t = replay.block_template(req, view_of(req.table), 1 << 20, BLOCK_BYTES)
            if t is not None:
                out.append((t, family, body))
    return out


def pipeline_block(family: str, body: dict, query: list, key: list) -> bytes | None:
    """The pipeline's block (ALiBi's bias, T5's buckets) of ``query`` and ``key`` from the same
    in-memory tables (computed where none holds it), or None where the full path refuses them."""
    try:
        req = pipeline.parse(family, {**body, "query": query, "key": key}, LENGTH)
        pipeline.check(req, None)
        arrays = pipeline.arrays(req, view_of(req.table) if req.table is not None else None)
    except PosencError:
        return None
    return next(a for name, a in arrays.items() if name in req.family.batched).tobytes()


# v2 REST binary infers in the lane (service/v2/hot.py lane_routes): one learnt entry per row spec,
# int64 positions of V2_ROWS rows after the JSON inference header V2_HEAD
V2_HEAD, V2_ROWS = b'{"inputs":[]}', 2
V2_POST = b"\r\ninference-header-content-length: 7\r\n"
V2_BLOCK = (1, 4)  # a block route's first and second input's positions (int64, then int32)


def _route(**kw):
    """A lane route of v2 REST infers (service/shortcut/hot_named.c V2Route), with these entries."""
    fields = {"entries": {}, "json_name": b'"data"', "json_entries": {}} | kw
    return replay.V2Route(
        metrics=0, length_name=b"inference-header-content-length", refused=(b"content-encoding",), **fields
    )


def v2_routes() -> dict:
    out = {}
    for i, (t, narr, _) in enumerate(rows_templates()):
        parts = tuple(b"<%d>" % k for k in range(narr + 1))
        e = replay.RowsEntry(template=t, itemsize=8, nbytes=8 * V2_ROWS, parts=parts, post=V2_POST)
        out[b"/v2/models/m%d/infer" % i] = _route(entries={V2_HEAD: e})
    for i, (t, _, _) in enumerate(
        block_templates()
    ):  # V2_BLOCK int64 queries then 4 int32 keys (key first: odd i)
        e = replay.BlockEntry(
            template=t,
            itemsizes=(8, 4),
            nbytes=(8 * V2_BLOCK[0], 4 * V2_BLOCK[1]),
            key_first=bool(i % 2),
            parts=(b"<", b">"),
            post=V2_POST,
        )
        out[b"/v2/models/b%d/infer" % i] = _route(entries={V2_HEAD: e})
    return out


# v2 REST JSON-tensor infers in the lane (service/shortcut/hot_v2json.c): one learnt entry per rows
# spec, ALiBi spec and T5 spec, keyed by the body with its data lists cut out (V2J_KEYS), V2J_COUNTS positions each
V2J_KEYS = {1: b'{"inputs":[{"data":\x00}]}', 2: b'{"inputs":[{"data":\x00},{"data":\x00}]}'}
V2J_COUNTS = {1: (2,), 2: (1, 3)}
V2J_POST = b"\r\n"
V2J_SPECS: dict = {}  # target -> (family, first body, parts)


def v2_json_routes() -> dict:
    out = {}
    for i, (family, body) in enumerate(SPECS):
        if family not in ("rope", "sinusoidal", "alibi", "t5-buckets") or "position_ids" in body:
            continue
        req = pipeline.parse(family, body, LENGTH)
        narr = 2 if family == "rope" else 1
        parts = tuple(b"<%d>" % k for k in range(narr + 1))
        t = replay.flat_json_template(
            req, view_of(req.table), parts, replay.Limits(replay.MAX_ROWS, 1 << 12, 1 << 20)
        )
        if t is None:  # (T5 and float16/bfloat16 ALiBi blocks are the engine's kernels': none with numpy)
            continue
        n = len(req.family.selections)
        target = b"/v2/models/j%d/infer" % i
        V2J_SPECS[target] = (family, body, parts)
        e = replay.JsonEntry(template=t, counts=V2J_COUNTS[n], swap=False, post=V2J_POST)
        out[target] = _route(json_entries={V2J_KEYS[n]: e})
    return out


def v2_json_answer(target: bytes, raw: bytes) -> bytes | None:
    """The answer to a JSON-tensor body of a route of v2_json_routes: its parts around each gathered
    array's values as one flat JSON list (as service/v2/rest.py writes an output's data), from the
    pipeline's arrays for the body's lists; None where the full path refuses them."""
    family, body, parts = V2J_SPECS[target]
    try:
        lists = [x["data"] for x in orjson.loads(raw)["inputs"]]
        names = FAMILIES[family].selections
        if len(lists) != len(names):
            return None
        req = pipeline.parse(family, {**body, **dict(zip(names, lists))}, LENGTH)
        pipeline.check(req)
        arrays = pipeline.arrays(req, view_of(req.table) if req.table is not None else None)
    except (orjson.JSONDecodeError, KeyError, TypeError, PosencError):  # (a float16 cell that overflows)
        return None
    texts = [
        json_text(json_ready(arrays[k].reshape(-1), req.dtype)) for k in arrays if k in req.family.batched
    ]
    return parts[0] + b"".join(x + p for x, p in zip(texts, parts[1:]))


V2_ROUTES = {**v2_routes(), **v2_json_routes()}
LANE_ROUTES = (ROUTES, V2_ROUTES)
