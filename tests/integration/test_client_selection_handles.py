"""Handles for the specs a row lookup does not answer (``Client.handle`` -> SelectionHandle,
engine/reader/selections.py) on a real engine: ALiBi and T5 blocks (query, key) and multi-axis RoPE
(``position_ids``), every dtype, on both sides of the stored tables' end: bit for bit equal to
``posenc.engine.answer.pipeline.compute``; bad selections refused at the pipeline's field; ``out`` filled
in place and checked."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import SpecError
from posenc.engine.reader.lookup import Handle
from posenc.engine.reader.selections import SelectionHandle

LENGTH = 64
DTYPES = ["float32", "float16", "bfloat16"]
ALIBI = [
    {"num_heads": 12},
    {"num_heads": 8, "heads": [7, 0], "mask_future": True},
    {"num_heads": 4, "mode": "symmetric"},
]
T5 = [{}, {"bidirectional": False, "num_buckets": 16, "max_distance": 40}]
AXES = [
    {"head_dim": 64, "mrope_section": [8, 12, 12]},
    {"head_dim": 64, "mrope_section": [12, 10, 10], "mrope_interleaved": True},
    {"head_dim": 64, "axes_dim": [16, 24, 24], "layout": "interleaved"},
]


def _config():
    tables = [
        {"family": "alibi", "spec": {k: v for k, v in s.items() if k == "num_heads"}, "dtypes": DTYPES}
        for s in ALIBI
    ]
    tables += [{"family": "t5-buckets", "spec": s} for s in T5]
    tables += [
        {"family": "rope", "spec": {"head_dim": 64}, "dtypes": DTYPES},
        {"family": "rope", "spec": {"head_dim": 64, "axes_dim": [16, 24, 24]}, "dtypes": DTYPES},
    ]
    return {"length": LENGTH, "tables": tables}


def _same(got: dict, family: str, body: dict):
    want = compute(family, body)
    assert set(got) == set(want), (family, body)
    for k in want:
        assert np.asarray(got[k]).tobytes() == np.asarray(want[k]).tobytes(), (family, body, k)


def _sel(rng, n):
    """Positions over the table and far past it (repeats, both ends included)."""
    return [
        int(x)
        for x in np.concatenate(
            [rng.integers(0, LENGTH, n), rng.integers(LENGTH, 2**20, n), [0, LENGTH - 1, LENGTH]]
        )
    ]


@pytest.mark.parametrize("dtype", DTYPES)
def test_selection_handles_are_compute_bit_for_bit(ns, procs, dtype):
    torch = pytest.importorskip("torch")
    eng = procs.engine(_config(), ns)
    c = eng.client()
    rng = np.random.default_rng(7)
    for family, specs in (("alibi", ALIBI), ("t5-buckets", T5)):
        for spec in specs:
            s = {**spec, "dtype": dtype} if family == "alibi" else spec
            h = c.handle(family, s)
            assert isinstance(h, SelectionHandle)
            for _ in range(3):
                q, k = _sel(rng, 3), _sel(rng, 5)
                if family == "alibi" and dtype == "float16":  # keep the cells inside float16's range
                    q, k = [x % 30000 for x in q], [x % 30000 for x in k]
                _same(h.lookup(query=q, key=k), family, {**s, "query": q, "key": k})
                _same(h.lookup(query=np.array(q), key=torch.tensor(k)), family, {**s, "query": q, "key": k})
            _same(
                h.lookup(query=range(3, 9), key=range(0, 9)),
                family,
                {**s, "query": [3, 4, 5, 6, 7, 8], "key": list(range(9))},
            )
    for spec in AXES:
        s = {**spec, "dtype": dtype}
        h = c.handle("rope", s, selections=("position_ids",))
        assert isinstance(h, SelectionHandle)
        for _ in range(3):
            ids = [_sel(rng, 4) for _ in range(3)]
            _same(h.lookup(position_ids=ids), "rope", {**s, "position_ids": ids})
            _same(h.lookup(position_ids=np.array(ids)), "rope", {**s, "position_ids": ids})
    assert isinstance(
        c.handle("rope", {"head_dim": 64, "mrope_section": [8, 12, 12]}), Handle
    )  # positions: rows
    assert eng.stop() == 0


def test_selection_handles_refuse_at_the_pipelines_field(ns, procs):
    eng = procs.engine(_config(), ns)
    c = eng.client()
    h = c.handle("alibi", {"num_heads": 12})

    def loc(fn):
        with pytest.raises(SpecError) as e:
            fn()
        return e.value.loc

    assert loc(lambda: h.lookup(query=[1])) == ("key",)
    assert loc(lambda: h.lookup(query=[1], key=[-1]))[:1] == ("key",)
    assert loc(lambda: h.lookup(query=[1], key=[1], positions=[1])) == ("positions",)
    assert loc(lambda: c.handle("alibi", {"num_heads": 0})) == ("num_heads",)
    assert loc(lambda: c.handle("alibi", {"num_heads": 12, "query": [1]})) == ("query",)
    assert loc(lambda: c.handle("nosuch", {})) == ("family",)
    ax = c.handle("rope", {"head_dim": 64, "axes_dim": [16, 24, 24]}, selections=("position_ids",))
    assert loc(lambda: ax.lookup(position_ids=[[1, 2], [3], [4, 5]]))[:2] == ("position_ids", 1)
    out = {"bias": np.empty((12, 1, 3), np.float32)}
    got = h.lookup(query=[9], key=[0, 1, 2], out=out)
    assert got["bias"] is out["bias"]
    _same(got, "alibi", {"num_heads": 12, "query": [9], "key": [0, 1, 2]})
    assert loc(lambda: h.lookup(query=[9], key=[0, 1], out=out)) == ("out", "bias")  # another shape
    assert loc(lambda: h.lookup(query=[9], key=[0, 1, 2], out={"bias": np.empty((12, 1, 3))})) == (
        "out",
        "bias",
    )
    assert eng.stop() == 0
