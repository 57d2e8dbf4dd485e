"""The C shortcut's files reference each other in layers (service/shortcut/hot.h, its top comment):
shared pieces, then the kinds of template, then the routes (which reach a kind through its ops only),
then the lane, then the module. Read from the sources: each file's hot_* definitions and the
hot_* names it uses, comments and strings aside."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "service" / "shortcut"
LAYERS = {
    "hot_select": 1, "hot_out": 1, "hot_f32text": 1,
    "hot_templates": 2, "hot_named": 2,
    "hot_rows_copy": 3, "hot_json": 3, "hot_axes": 3,
    "hot_rows": 4, "hot_grid": 4, "hot_alibi": 4, "hot_t5": 4,
    "hot_blocks": 5, "hot_answer": 5, "hot_v2json": 5, "hot_fill": 6,
    "hot_lane": 7, "hot_serve": 8, "hot_grpc": 8,
    "_hot": 9,
}  # fmt: skip
ROUTES = ("hot_answer", "hot_v2json", "hot_blocks", "hot_fill", "hot_lane", "hot_serve", "hot_grpc")
_NOISE = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\])*"', re.S)
_DEF = re.compile(r"^(?!static|extern|typedef|#)[A-Za-z_][\w \*]*?\b(hot_\w+)\s*(?:\(|\[|=|;)", re.M)


def _graph() -> dict[str, set[str]]:
    code = {p.stem: _NOISE.sub(" ", p.read_text()) for p in SRC.glob("*.c")}
    defs = {name: f for f, text in code.items() for name in _DEF.findall(text)}
    return {
        f: {defs[n] for n in set(re.findall(r"\bhot_\w+\b", text)) if defs.get(n, f) != f}
        for f, text in code.items()
    }


def test_every_file_has_a_layer():
    assert set(_graph()) == set(LAYERS)


def test_files_call_their_own_layer_or_below():
    up = [(f, g) for f, uses in _graph().items() for g in uses if LAYERS[g] > LAYERS[f]]
    assert not up


def test_the_routes_know_no_kind_of_template():
    kinds = ("RowsTemplate", "GridTemplate", "AlibiTemplate", "T5Template")
    for f in ROUTES:
        text = _NOISE.sub(" ", (SRC / f"{f}.c").read_text())
        assert not [k for k in kinds if k in text], f
        assert "Py_IS_TYPE" not in text, f


def test_each_kind_keeps_its_struct_to_itself():
    """hot.h, which every file includes, defines no kind's struct: the block kinds' live in their
    one file, the rows kind's in hot_rows.h, which only the rows kind's own files include."""
    header = _NOISE.sub(" ", (SRC / "hot.h").read_text())
    kinds = ("RowsTemplate", "GridTemplate", "AlibiTemplate", "T5Template")
    assert not [k for k in kinds if k in header]
    rows_files = {"hot_rows", "hot_rows_copy", "hot_json", "hot_axes"}
    including = {p.stem for p in SRC.glob("*.c") if '#include "hot_rows.h"' in p.read_text()}
    assert including == rows_files
    for kind, name in (
        ("hot_alibi", "AlibiTemplate"),
        ("hot_grid", "GridTemplate"),
        ("hot_t5", "T5Template"),
    ):
        users = {p.stem for p in SRC.glob("*.c") if name in _NOISE.sub(" ", p.read_text())}
        assert users == {kind}, name
