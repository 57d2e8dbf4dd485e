"""The rope spec's frequencies as data and per-axis coordinates (engine/tables/rope_grid.py;
docs/reference.md, Token grids): ``inv_freq`` and ``axes_coords`` against the formula written out
here in float64 (column j of a token is cos((scale·i + offset)·f_j), i the token's index on j's
axis), in both layouts and every dealing; a stored table's rows (inside and past it) are those
rows; the canonical spec and the table key give the spec back; each refusal names its field; and a
``grid`` body is never answered by the cached spec of another grid."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import orjson
import pytest

from posenc.engine import kernels
from posenc.engine.answer import pipeline
from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import SpecError
from posenc.engine.tables import FAMILIES
from tests.independent import safetensors_arrays

ROPE = FAMILIES["rope"]
F = [1.0, 0.31, 0.05, 0.0007]  # four frequencies per axis
COORDS = [[0.5, 0.25], [2 / 3, -1.0]]
IDS = [[0, 0, 1, 3, 7, 1000], [0, 1, 0, 2, 5, 99999]]


def reference(freqs, axis_of_freq, coords, ids, layout):
    """cos, sin [n, d] in float64: frequency k at its axis's coordinate, then the layout's order."""
    n = len(ids[0])
    ang = np.empty((n, len(freqs)))
    for t in range(n):
        for k, f in enumerate(freqs):
            a = axis_of_freq[k]
            scale, offset = coords[a] if coords is not None else (1.0, 0.0)
            ang[t, k] = (scale * ids[a][t] + offset) * f
    c, s = np.cos(ang), np.sin(ang)
    if layout == "half_split":
        return np.concatenate([c, c], 1), np.concatenate([s, s], 1)
    return np.repeat(c, 2, 1), np.repeat(s, 2, 1)


def _same(got, want_cos, want_sin, dtype=np.float32):
    """The float64 reference rounded once to ``dtype``, within the kernels' one ulp (the simd
    backend's sincos may differ from numpy's by one; coordinates are numpy's own)."""
    assert got["cos"].dtype == dtype
    for name, want in (("cos", want_cos), ("sin", want_sin)):
        np.testing.assert_array_max_ulp(got[name], want.astype(dtype), maxulp=1)


@pytest.mark.parametrize("layout", ["half_split", "interleaved"])
def test_sections_with_frequencies_and_coordinates(layout):
    body = {"head_dim": 16, "inv_freq": F + F, "mrope_section": [4, 4], "axes_coords": COORDS}
    got = compute("rope", {**body, "layout": layout, "position_ids": IDS})
    _same(got, *reference(F + F, [0] * 4 + [1] * 4, COORDS, IDS, layout))
    np.testing.assert_array_equal(got["inv_freq"], np.array(F + F, np.float32))
    got16 = compute("rope", {**body, "layout": layout, "position_ids": IDS, "dtype": "float16"})
    _same(got16, *reference(F + F, [0] * 4 + [1] * 4, COORDS, IDS, layout), dtype=np.float16)


def test_plain_positions_put_every_axis_at_p():
    body = {"head_dim": 16, "inv_freq": F + F, "mrope_section": [4, 4], "axes_coords": COORDS}
    got = compute("rope", {**body, "positions": [0, 5, 70000]})
    ids = [[0, 5, 70000]] * 2
    _same(got, *reference(F + F, [0] * 4 + [1] * 4, COORDS, ids, "half_split"))


def test_axes_dim_blocks_with_their_own_frequencies():
    """axes_dim [8, 8]: each block its own four frequencies, interleaved within the block (Flux)."""
    g = [2.0, 0.5, 0.125, 0.01]
    body = {"head_dim": 16, "axes_dim": [8, 8], "inv_freq": F + g, "axes_coords": COORDS}
    got = compute("rope", {**body, "layout": "interleaved", "position_ids": IDS})
    _same(got, *reference(F + g, [0] * 4 + [1] * 4, COORDS, IDS, "interleaved"))


def test_frequencies_without_coordinates_are_integer_positions():
    body = {"head_dim": 16, "inv_freq": F + F, "mrope_section": [4, 4], "position_ids": IDS}
    _same(compute("rope", body), *reference(F + F, [0] * 4 + [1] * 4, None, IDS, "half_split"))


def _table(req, length):
    """Fill the request's stored table at ``length`` rows (as the engine does) and view it."""
    t = dataclasses.replace(req.table, length=length)
    arrays = {k: np.zeros(shape, dtype=dt) for k, (shape, dt) in ROPE.layout(t).items()}
    meta = ROPE.fill(t, arrays)
    return types.SimpleNamespace(**arrays, meta=meta, length=length)


@pytest.mark.parametrize("sel", [{"position_ids": IDS}, {"positions": [0, 3, 9, 12]}])
def test_a_stored_table_serves_the_same_rows_inside_and_past_it(sel):
    body = {"head_dim": 16, "inv_freq": F + F, "mrope_section": [4, 4], "axes_coords": COORDS, **sel}
    req = pipeline.parse("rope", body)
    want = compute("rope", body)
    for length in (8, 200000):  # ids past the table, and all inside it
        got = ROPE.serve(_table(req, length), req.spec, req.sel, "float32")
        assert got["cos"].tobytes() == want["cos"].tobytes(), length
        assert got["sin"].tobytes() == want["sin"].tobytes(), length


def test_the_canonical_spec_and_the_table_key_give_the_spec_back():
    body = {
        "head_dim": 16,
        "inv_freq": F + F,
        "mrope_section": [4, 4],
        "axes_coords": COORDS,
        "position_ids": IDS,
    }
    req = pipeline.parse("rope", body)
    shown = ROPE.spec_json(req.spec)
    assert "rope_theta" not in shown and shown["inv_freq"] == F + F and shown["axes_coords"] == COORDS
    assert pipeline.parse("rope", {**shown, "position_ids": IDS}).spec == req.spec
    key = orjson.loads(orjson.dumps(ROPE.table_key(req.table.spec, req.table.variant)))
    assert ROPE.table_spec(key) == (req.table.spec, req.table.variant)
    other = pipeline.parse("rope", {**body, "axes_coords": [[0.5, 0.25], [2 / 3, -0.5]]})
    assert other.table.digest != req.table.digest  # another coordinate map is another table


BAD = [
    ({"inv_freq": F + F, "rope_theta": 100.0}, "rope_theta"),
    (
        {"inv_freq": F + F, "rope_parameters": {"rope_type": "default", "rope_theta": 100.0}},
        "rope_parameters.rope_theta",
    ),
    ({"inv_freq": F + F, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling.rope_type"),
    ({"inv_freq": F}, "inv_freq"),
    ({"inv_freq": "1, 2"}, "inv_freq"),
    ({"inv_freq": F + F[:3] + [0.0]}, "inv_freq.7"),
    ({"inv_freq": F + F[:3] + [-1.0]}, "inv_freq.7"),
    ({"inv_freq": F + F[:3] + [1e-46]}, "inv_freq.7"),
    ({"inv_freq": F + F[:3] + [True]}, "inv_freq.7"),
    ({"axes_coords": COORDS[:1]}, "axes_coords"),
    ({"axes_coords": [[1.0], [1.0, 0.0]]}, "axes_coords.0"),
    ({"axes_coords": [[1.0, 0.0], [1.0, "0"]]}, "axes_coords.1.1"),
    ({"axes_coords": [[1.0, 0.0], [1.0, 3e9]]}, "axes_coords.1.1"),
    ({"axes_coords": [[1.0, 0.0], [float("nan"), 0.0]]}, "axes_coords.1.0"),
]


@pytest.mark.parametrize("extra, loc", BAD, ids=[loc for _, loc in BAD])
def test_refusals_name_the_field(extra, loc):
    body = {"head_dim": 16, "mrope_section": [4, 4], "position_ids": IDS, **extra}
    with pytest.raises(SpecError) as e:
        compute("rope", body)
    assert ".".join(map(str, e.value.loc)) == loc, e.value


def test_coordinates_need_axes():
    with pytest.raises(SpecError) as e:
        compute("rope", {"head_dim": 16, "axes_coords": COORDS, "positions": [1]})
    assert e.value.loc == ("axes_coords",), e.value


def test_a_grid_is_never_answered_by_another_grids_cached_spec():
    """The pipeline caches specs by the body without its selections; a grid body's selection is in
    its spec part, and its spec (the coordinates) follows the grid, so each is validated anew."""
    p = pipeline.Pipeline()
    cfg = {"architecture": "eva02_base_patch14_448"}
    for h, w in ((4, 4), (8, 2), (4, 4), (1, 3)):
        req = p.request("rope", {"hf_config": cfg, "grid": {"height": h, "width": w}})
        want = pipeline.parse("rope", {"hf_config": cfg, "grid": {"height": h, "width": w}})
        assert req.sel["position_ids"].n == h * w and req.spec == want.spec, (h, w)


def test_the_c_shortcut_takes_no_spec_with_coordinates():
    """C computes a row past the stored table as p·f_j; with coordinates a row is (scale·p + offset)·f_j,
    so the template shortcut declines such a spec (its answers are the full path's), for positions
    and position_ids alike; a spec with frequencies as data alone is learnt, and C's rows, inside and
    past the table, are the pipeline's (held to the formula above)."""
    import orjson

    from posenc.service.shortcut import templates as replay
    from tests.service.shortcut.test_templates_in_memory import ACCEPT, HEADERS, LENGTH, answer_both, view_of

    spec = {"head_dim": 16, "inv_freq": F + F, "mrope_section": [4, 4], "axes_coords": COORDS}
    for sel, later in (
        ("positions", [0, 3, LENGTH + 5, 2**30]),
        ("position_ids", [[0, LENGTH + 5], [2**30, 1]]),
    ):
        first = [1] if sel == "positions" else [[1], [1]]
        c, served, computed = answer_both("rope", {**spec, sel: first}, {**spec, sel: later})
        assert c is None and served == computed, sel
    if not replay.NATIVE or kernels.c_api() is None:  # no C shortcut, or it computes no rows past a table
        return
    plain = {k: v for k, v in spec.items() if k != "axes_coords"}
    templates = replay.Templates(max_n=1 << 20, max_bytes=4 << 20)
    req = pipeline.parse("rope", {**plain, "positions": [1]}, LENGTH)
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
        templates.learn("safetensors", orjson.dumps({**plain, "positions": [1]}), req, view_of(req.table))
    later = {**plain, "positions": [0, 3, LENGTH + 5, 2**30]}
    c = replay.answer(orjson.dumps(later), HEADERS, {ACCEPT: 0}, templates.native["rope"], "rope")
    want = compute("rope", later)
    assert c is not None
    got = safetensors_arrays(c)
    assert got["cos"].tobytes() == want["cos"].tobytes() and got["sin"].tobytes() == want["sin"].tobytes()
