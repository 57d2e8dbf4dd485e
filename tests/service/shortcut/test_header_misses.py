"""The C shortcut never calls Python: a template that lacks an answer's safetensors header makes
the C call return NotImplemented and note (template, shape) for its own thread; the wrapper in
service/shortcut/templates.py computes the header with the template's header_for, caches it with
set_header and calls again. Answers are the same from any number of threads."""

from __future__ import annotations

import sys
import threading
from collections import Counter

import numpy as np
import pytest

from posenc.engine.tables.base import RowPlan
from posenc.service.shortcut import templates as replay

pytestmark = pytest.mark.skipif(not replay.NATIVE, reason="service._hot is not built")
_hot = replay._hot
ACC = ([(b"accept", b"x")], {b"x": 0})  # 0: safetensors
KEY = b'{"positions":\0}'
TABLE = np.arange(64 * 4, dtype=np.float32).reshape(64, 4)


def rows_template(calls: Counter):
    def header_for(n: int) -> bytes:
        calls[n] += 1
        return b"H%d;" % n

    return _hot.RowsTemplate(
        plan=RowPlan(arrays=(TABLE,), colmap=[0, 1, 2, 3], offset=0),
        max_rows=64,
        lists_only=False,
        header_for=header_for,
        tail=b"T",
    )


def body(rows) -> bytes:
    return b'{"positions":[%s]}' % b",".join(b"%d" % r for r in rows)


def want(rows) -> bytes:
    return b"H%d;" % len(rows) + TABLE[list(rows)].tobytes() + b"T"


def test_c_returns_not_implemented_and_notes_the_missing_header():
    calls = Counter()
    t = rows_template(calls)
    assert _hot.missing() is None
    assert (
        _hot.answer(body([3, 5]), ACC[0], accepts=ACC[1], templates={KEY: t}, family="rope") is NotImplemented
    )
    assert not calls  # header_for was not called by C
    got = _hot.missing()
    assert got == (replay.MISS_HEADER, t, (2,)) and got[1] is t
    assert _hot.missing() is None  # handed over once
    t.set_header((2,), t.header_for(2))
    assert _hot.answer(body([3, 5]), ACC[0], accepts=ACC[1], templates={KEY: t}, family="rope") == want(
        [3, 5]
    )


def test_the_wrapper_computes_each_header_once():
    calls = Counter()
    t = rows_template(calls)
    for rows in ([1], [2, 3], [4], [5, 6], [7, 8, 9]):
        assert replay.answer(body(rows), *ACC, {KEY: t}, "rope") == want(rows)
    assert calls == Counter({1: 1, 2: 1, 3: 1})


def test_alibi_misses_name_both_dimensions():
    m = np.array([0.5, 0.25])
    t = _hot.AlibiTemplate(
        slopes=m,
        symmetric=False,
        mask_future=False,
        header_for=lambda nq, nk: b"",
        tail=m.astype(np.float32).tobytes(),
        max_n=100,
        max_bytes=1 << 20,
    )
    raw = b'{"query":[1,2,3],"key":[0,1]}'
    assert (
        _hot.answer(raw, ACC[0], accepts=ACC[1], templates={b'{"query":\0,"key":\0}': t}, family="alibi")
        is NotImplemented
    )
    assert _hot.missing() == (replay.MISS_HEADER, t, (3, 2))
    with pytest.raises(TypeError, match="2 ints"):
        t.set_header((3,), b"")
    assert replay.answer(raw, *ACC, {b'{"query":\0,"key":\0}': t}, "alibi") is not None


def test_a_miss_is_the_thread_own():
    t = rows_template(Counter())
    assert _hot.answer(body([1]), ACC[0], accepts=ACC[1], templates={KEY: t}, family="rope") is NotImplemented
    seen = []
    th = threading.Thread(target=lambda: seen.append(_hot.missing()))
    th.start()
    th.join()
    assert seen == [None] and _hot.missing() == (replay.MISS_HEADER, t, (1,))


def test_threads_answering_one_template_all_get_their_answers():
    calls = Counter()
    t = rows_template(calls)
    templates = {KEY: t}
    errors = []

    def work(seed: int):
        r = np.random.default_rng(seed)
        try:
            for _ in range(300):
                rows = r.integers(0, 64, r.integers(1, 64)).tolist()
                out = replay.answer(body(rows), *ACC, templates, "rope")
                if out != want(rows):
                    errors.append(rows)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch between the C call, the miss and the retry
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors
    assert set(calls) <= set(range(1, 64))
