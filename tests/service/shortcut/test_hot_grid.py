"""Rows of sinusoidal grids too large to store whole (per-axis tables) answered by the C shortcut
(service/shortcut/hot_grid.c): byte for byte the pipeline's answer from the same mapped arrays and
its exact compute (no table), for SD3-, CogVideoX- and ViT-style specs with extra tokens, non-square
grids, non-integer interpolation scales and every dtype; rows past the grid are the full path's
(a 422). In memory (the tables as the engine builds them), no process."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from posenc.engine.answer import pipeline
from posenc.engine.core.errors import SpecError
from posenc.engine.tables.sinusoidal_grid import AXES, parse_spec
from posenc.service.shortcut import templates as replay
from tests.service.shortcut.test_templates_in_memory import HEADERS, LENGTH, answer_both, view_of

pytestmark = pytest.mark.skipif(not replay.NATIVE, reason="service._hot is not built")

SPECS = [
    {"embed_dim": 1536, "grid_size": 192, "base_size": 64},  # SD3's pos_embed_max_size
    {"embed_dim": 256, "grid_size": [300, 500], "extra_tokens": 3, "interpolation_scale": 0.75},
    {
        "embed_dim": 1920,
        "grid_size": [30, 45],
        "temporal_size": 13,
        "interpolation_scale": 1.875,
        "temporal_interpolation_scale": 1.0,
    },  # CogVideoX 3-D
    {"embed_dim": 64, "grid_size": [700, 600], "temporal_size": 3, "extra_tokens": 1},
]
DTYPES = st.sampled_from(["float32", "float16", "bfloat16"])


def rows_of(spec: dict) -> int:
    return parse_spec(spec).rows


def test_the_specs_are_stored_per_axis():
    for spec in SPECS:
        assert pipeline.parse("sinusoidal-grid", {**spec, "positions": [0]}, LENGTH).table.variant == AXES, (
            spec
        )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=st.sampled_from(SPECS), dtype=DTYPES, data=st.data())
def test_grid_rows_match_the_pipeline(spec, dtype, data):
    spec = {**spec, "dtype": dtype}
    n = rows_of(spec)
    position = st.one_of(st.integers(0, 4), st.integers(0, n - 1), st.integers(n - 3, n - 1))
    if data.draw(st.booleans()):
        positions = data.draw(st.lists(position, min_size=1, max_size=replay.MAX_ROWS))
    else:
        start = data.draw(position)
        positions = {
            "start": start,
            "stop": min(n, start + data.draw(st.integers(1, 64))),
            "step": data.draw(st.integers(1, 3)),
        }
    c, served, computed = answer_both(
        "sinusoidal-grid", {**spec, "positions": [1]}, {**spec, "positions": positions}
    )
    event(
        "extra token"
        if any(
            p < parse_spec(spec).extra_tokens
            for p in (positions if isinstance(positions, list) else [positions["start"]])
        )
        else "grid"
    )
    assert c is not None
    assert c == served == computed


@pytest.mark.parametrize("spec", SPECS)
def test_a_row_past_the_grid_is_the_full_paths_422(spec):
    templates = replay.Templates(max_n=1 << 20, max_bytes=4 << 20)
    req = pipeline.parse("sinusoidal-grid", {**spec, "positions": [1]}, LENGTH)
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
        templates.learn("safetensors", orjson.dumps({**spec, "positions": [1]}), req, view_of(req.table))
    (t,) = templates.native["sinusoidal-grid"].values()
    assert type(t).__name__ == "GridTemplate"
    n = rows_of(spec)
    for positions in ([n], [0, n + 5], {"start": n - 1, "stop": n + 1}):
        body = {**spec, "positions": positions}
        assert (
            replay.answer(
                orjson.dumps(body),
                HEADERS,
                {b"application/x-safetensors": 0},
                templates.native["sinusoidal-grid"],
                "sinusoidal-grid",
            )
            is None
        )
        with pytest.raises(SpecError) as e:
            pipeline.check(pipeline.parse("sinusoidal-grid", body, LENGTH))
        assert e.value.loc[0] == "positions"


@pytest.mark.parametrize(
    "bad",
    [
        dict(steps=((1, 193),)),  # mod past the table's rows
        dict(steps=((0, 192),)),  # div 0
        dict(extra=5, rows=5),  # no grid row
        dict(max_rows=replay.MAX_ROWS + 1),  # more than configured
    ],
)
def test_grid_template_checks_its_arguments(bad):
    args = dict(
        arrays=(np.zeros((192, 8), np.float32),),
        steps=((1, 192),),
        extra=0,
        rows=192,
        max_rows=replay.MAX_ROWS,
        header_for=lambda n: b"",
        tail=b"",
    )
    replay._hot.GridTemplate(**args)
    with pytest.raises(ValueError):
        replay._hot.GridTemplate(**{**args, **bad})
