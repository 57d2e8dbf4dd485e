"""The C shortcut (service/shortcut/hot_answer.c) for sinusoidal rows against the full path and the library's
bytes, driven in-process.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posenc.service.shortcut.templates import MAX_ROWS
from tests.service.hot_helpers import ODD, learn_then_answer, needs_native, plain_selection
from tests.service_cases import orjson_dumps, reference_safetensors

SINUSOIDAL_SPECS = [
    {"d_model": 33},
    {"d_model": 33, "layout": "concat", "offset": 2, "dtype": "bfloat16"},
    {"d_model": 33, "layout": "fairseq", "dtype": "float16"},
    {"d_model": 32, "layout": "fairseq"},
    {"d_model": 33, "layout": "fairseq_cos_first", "offset": 1},
]


@st.composite
def sinusoidal_bodies(draw):
    spec = draw(st.sampled_from(SINUSOIDAL_SPECS))
    odd = draw(st.one_of(st.just(None), st.just(None), ODD))
    if draw(st.booleans()):
        items = [str(v) for v in draw(st.lists(st.integers(0, 2100), min_size=1, max_size=70))]
        if odd is not None:
            items.insert(draw(st.integers(0, len(items))), odd)
        sel = "[" + ",".join(items) + "]"
    else:
        start = draw(st.integers(0, 2100))
        sel = '{"start":%d,"stop":%d%s}' % (
            start,
            start + draw(st.integers(-1, 70)),
            draw(st.sampled_from(["", ',"step":3', ',"step":null'])),
        )
    fields = draw(
        st.permutations([(k, orjson_dumps(v).decode()) for k, v in spec.items()] + [("positions", sel)])
    )
    text = "{" + ",".join(f'"{k}":{v}' for k, v in fields) + "}"
    probe = "{" + ",".join(f'"{k}":{"[1]" if k == "positions" else v}' for k, v in fields) + "}"
    # C answers from a mapped table only (the configured d_model 33: interleaved, float32), rows
    # inside it, and at most MAX_ROWS of them (a bigger answer takes the full path)
    mapped = spec == SINUSOIDAL_SPECS[0]
    rows = _positions(sel) if plain_selection(sel) else []
    return text, probe, odd is None and mapped and 0 < len(rows) <= MAX_ROWS and max(rows) < 2048


def _positions(sel: str) -> list[int]:
    v = json.loads(sel)
    return v if isinstance(v, list) else list(range(v["start"], v["stop"], v.get("step") or 1))


@needs_native
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=sinusoidal_bodies())
def test_native_sinusoidal_answers_like_the_full_path(learnt, drawn):
    """Sinusoidal rows from a known spec: the C shortcut's bytes are the full path's and the
    float64 reference's (every layout, offsets, bfloat16), or the body takes the full path."""
    text, probe, plain = drawn
    body = text.encode()
    c, full = learn_then_answer(learnt, "sinusoidal", body, probe.encode())
    if plain:  # no odd token in a valid body of the mapped spec: C must answer it
        assert full is not None and c is not None, body
    if c is not None:
        req = json.loads(body)
        assert c == full
        assert c == reference_safetensors("sinusoidal", req)
