"""The C shortcut at its limits, exactly at each and one past it, driven in-process: the request
body limit (4 MiB), the bytes it fills itself (4 MiB; larger answers take the full path, whose
64 MiB limit is tested over HTTP in tests/integration/test_serve_limits.py) and positions below
2^31. At a limit it answers with the library's bytes; one past, it leaves the body to the full
path (which answers or refuses it)."""

from __future__ import annotations

from posenc.engine.core.errors import PosencError
from tests.service.hot_helpers import needs_native
from tests.service_cases import ACCEPT_HDRS, BIN, orjson_dumps, padded_rope_body, reference_safetensors

HOT_BYTES = 4 * 2**20


def full_path(svc, family: str, body: dict):
    try:
        return svc.execute(svc.prepare(family, orjson_dumps(body), BIN["accept"]))[0]
    except PosencError as e:
        return e.status


@needs_native
def test_body_of_exactly_the_limit_and_one_byte_more(learnt):
    limit = learnt.settings.max_body_bytes
    assert limit == 4 * 2**20
    want = reference_safetensors("rope", {"head_dim": 64, "positions": [1, 2]})
    assert learnt.hot("rope", padded_rope_body(limit), ACCEPT_HDRS) == want
    assert learnt.hot("rope", padded_rope_body(limit + 1), ACCEPT_HDRS) is None


@needs_native
def test_alibi_answers_of_exactly_4_mib_and_4_bytes_more(learnt):
    """One head, one query: 2^20 − 1 float32 keys and the slope fill exactly 4 MiB (answered by
    C); 2^20 keys are 4 bytes more (the full path answers them)."""
    spec = {"num_heads": 12, "heads": [0]}
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
        learnt.execute(
            learnt.prepare("alibi", orjson_dumps({**spec, "query": [1], "key": [1]}), BIN["accept"])
        )
    q = 2**20
    at = {**spec, "query": [q], "key": {"start": 2, "stop": q + 1}}
    assert 4 * (q - 1) + 4 == HOT_BYTES
    assert learnt.hot("alibi", orjson_dumps(at), ACCEPT_HDRS) == reference_safetensors("alibi", at)
    past = {**spec, "query": [q], "key": {"start": 1, "stop": q + 1}}
    assert learnt.hot("alibi", orjson_dumps(past), ACCEPT_HDRS) is None
    assert full_path(learnt, "alibi", past) == reference_safetensors("alibi", past)


@needs_native
def test_positions_2_31_minus_1_and_2_31(learnt):
    spec = {"num_heads": 12}
    for _ in range(2):  # learnt at its second answer (service/shortcut/store.py)
        learnt.execute(
            learnt.prepare("alibi", orjson_dumps({**spec, "query": [1], "key": [1]}), BIN["accept"])
        )
    top = 2**31 - 1
    for body in (
        {**spec, "query": [top], "key": {"start": top - 4, "stop": top + 1}},
        {**spec, "query": [top, 0], "key": [top, 0]},
    ):
        assert learnt.hot("alibi", orjson_dumps(body), ACCEPT_HDRS) == reference_safetensors("alibi", body)
    for body in (
        {**spec, "query": [top + 1], "key": [0, 1, 2]},
        {**spec, "query": [5], "key": {"start": top - 2, "stop": top + 2}},
        {**spec, "query": [5], "key": [0, top + 1]},
    ):
        assert learnt.hot("alibi", orjson_dumps(body), ACCEPT_HDRS) is None
        assert full_path(learnt, "alibi", body) == 422
    # RoPE rows past the table are computed in C, up to 2^31 - 1; 2^31 is refused by the full path
    body = {"head_dim": 64, "positions": [5, top]}
    assert learnt.hot("rope", orjson_dumps(body), ACCEPT_HDRS) == reference_safetensors("rope", body)
    assert learnt.hot("rope", orjson_dumps({"head_dim": 64, "positions": [5, top + 1]}), ACCEPT_HDRS) is None
    assert full_path(learnt, "rope", {"head_dim": 64, "positions": [5, top + 1]}) == 422
