"""The resolved lookup (``Client.handle``, engine/reader/lookup.py) on a real engine: bit for bit equal to
``posenc.engine.answer.pipeline.compute`` for every covered family, dtype and layout, on both sides of the
table's end, single and [B, N], numpy and torch; bad positions refused at the pipeline's field;
``out`` checked; correct across an engine restart, an eviction and a table's growth."""

from __future__ import annotations

import numpy as np
import pytest

from posenc.engine import kernels
from posenc.engine.answer.pipeline import compute
from posenc.engine.core.errors import SpecError
from tests.procs import wait_for

LENGTH = 64
DTYPES = ["float32", "float16", "bfloat16"]
ROPE = [
    {"head_dim": 32, "rope_theta": 500000.0},
    {"head_dim": 64, "partial_rotary_factor": 0.25, "layout": "interleaved"},
    {"head_dim": 16, "rope_scaling": {"rope_type": "linear", "factor": 4.0}},
    {"head_dim": 32, "max_position_embeddings": 4096, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
    {
        "head_dim": 128,
        "rope_theta": 500000.0,
        "max_position_embeddings": 131072,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        "layout": "interleaved",
    },
]
SINUSOIDAL = [
    {"d_model": 33},
    {"d_model": 16, "layout": "concat"},
    {"d_model": 13, "layout": "fairseq", "offset": 2},
    {"d_model": 8, "offset": 70},
]
CASES = [("rope", s) for s in ROPE] + [("sinusoidal", s) for s in SINUSOIDAL]
FAST = kernels.BACKEND == "simd"  # the numpy backend answers through the pipeline (same bits)


def _table_spec(fam, spec):
    return {
        k: v
        for k, v in spec.items()
        if k not in ("layout", "offset") or fam == "sinusoidal" and k == "layout"
    }


def _config(length=LENGTH):
    return {
        "length": length,
        "tables": [{"family": f, "spec": _table_spec(f, s), "dtypes": DTYPES} for f, s in CASES],
    }


def _positions(rng, n):
    """Random positions over the table and well past it (2**31 - 1 included), with repeats."""
    p = np.concatenate(
        [rng.integers(0, LENGTH, n), rng.integers(LENGTH, 2**31, n), [LENGTH - 1, LENGTH, 2**31 - 1]]
    )
    rng.shuffle(p)
    return p.astype(np.int64)


def _same(got: dict, family, spec, positions):
    want = compute(family, {**spec, "positions": [int(p) for p in positions]})
    for k, v in got.items():
        v = v.numpy() if hasattr(v, "numpy") and not isinstance(v, np.ndarray) else v
        assert v.shape == want[k].shape and v.tobytes() == want[k].tobytes(), (family, spec, k)


@pytest.mark.parametrize("dtype", DTYPES)
def test_handle_is_compute_bit_for_bit_single_batched_and_torch(ns, procs, dtype):
    torch = pytest.importorskip("torch")
    eng = procs.engine(_config(), ns)
    c = eng.client()
    rng = np.random.default_rng(25)
    for family, spec in CASES:
        s = {**spec, "dtype": dtype}
        h = c.handle(family, s)
        assert (h._plan is not None) == FAST, (family, spec)
        assert FAST <= (h._plan is not None and h.past_in_c)  # past rows in C too
        pos = _positions(rng, 8)
        _same(h.lookup(pos), family, s, pos)
        _same(h.lookup(pos.tolist()), family, s, pos)
        long = _positions(rng, 150)  # longer than the kernel's prefetch distance
        _same(h.lookup(long), family, s, long)
        _same(h.lookup(long[::-1].astype(np.int32)), family, s, long[::-1])  # converted by the general path
        _same(h.lookup(long[::2]), family, s, long[::2])  # not contiguous: likewise
        batch = np.stack([_positions(rng, 8) for _ in range(3)])
        got = h.lookup(batch)
        for b in range(3):
            _same({k: v[b] for k, v in got.items()}, family, s, batch[b])
        tgot = h.lookup(torch.from_numpy(batch))  # torch in, torch out (bfloat16 as torch.bfloat16)
        assert all(v.dtype == getattr(torch, dtype) for v in tgot.values())
        for b in range(3):
            _same(
                {
                    k: v[b].view(torch.int16).numpy().view(np.uint16) if dtype == "bfloat16" else v[b]
                    for k, v in tgot.items()
                },
                family,
                s,
                batch[b],
            )
        outs = {k: torch.empty(v.shape, dtype=v.dtype) for k, v in tgot.items()}
        ptrs = {k: v.data_ptr() for k, v in outs.items()}
        back = h.lookup(batch, out=outs)  # written in place, no copy
        assert all(
            back[k] is outs[k] and outs[k].data_ptr() == ptrs[k] and torch.equal(outs[k], tgot[k])
            for k in outs
        )
        # Client.lookup takes the handle once it has seen the spec: the same answer, the same bits
        body = {**s, "positions": pos.tolist()}
        for _ in range(2):
            full, want = c.lookup(family, body), compute(family, body)
            assert set(full) == set(want)
            assert all(np.asarray(full[k]).tobytes() == np.asarray(want[k]).tobytes() for k in want)
    assert eng.stop() == 0


def bits_of(answer: dict) -> dict:
    return {k: np.asarray(v).tobytes() for k, v in answer.items()}


def _loc(fn):
    with pytest.raises(SpecError) as e:
        fn()
    return e.value.loc


def test_bad_positions_and_outs_are_refused_at_the_pipelines_field(ns, procs):
    eng = procs.engine(_config(), ns)
    c = eng.client()
    spec = {**ROPE[0], "dtype": "bfloat16"}
    h = c.handle("rope", spec)
    for bad in ([-1], [3, 2**31], [], [1.5], [True], [0, "1"], [2**70]):
        want = _loc(lambda: compute("rope", {**spec, "positions": bad}))
        assert _loc(lambda: h.lookup(bad)) == want, bad
        if all(type(v) is int and -(2**63) <= v < 2**63 for v in bad):  # [] as an empty int64 array too
            assert _loc(lambda: h.lookup(np.array(bad, np.int64))) == want, bad
    from posenc.engine.core.errors import TooLarge

    for _ in range(2):  # Client.lookup through the handle it keeps: the pipeline's 413 and 422
        assert bits_of(c.lookup("rope", {**spec, "positions": [5]}, max_bytes=1000)) == bits_of(
            compute("rope", {**spec, "positions": [5]})
        )
        with pytest.raises(TooLarge):
            c.lookup("rope", {**spec, "positions": list(range(40))}, max_bytes=1000)
        assert _loc(lambda: c.lookup("rope", {**spec, "positions": [1, -1]}, max_bytes=1000)) == (
            "positions",
            1,
        )
    with pytest.raises(TooLarge):
        c.handle("rope", spec, max_bytes=1000).lookup(np.arange(40))
    assert _loc(lambda: h.lookup([[0, 1], [2, -5]])) == ("positions", 1, 1)
    assert _loc(lambda: h.lookup(np.array([[0, 1], [2**31, 0]]))) == ("positions", 1, 0)
    assert _loc(lambda: h.lookup(np.zeros((2, 2, 2), np.int64))) == ("positions",)
    assert _loc(lambda: h.lookup(np.array([0.0, 1.0]))) == ("positions",)
    good = np.empty((2, 32), np.uint16)
    for out in (
        (np.empty((2, 32), np.float32), good),
        (np.empty((3, 32), np.uint16), good),
        (np.empty((2, 64), np.uint16)[:, ::2], good),
        (good,),
        {"cos": good},
    ):
        with pytest.raises((SpecError, KeyError)):
            h.lookup([1, 2], out=out)
    ro = np.empty((2, 32), np.uint16)
    ro.flags.writeable = False
    assert _loc(lambda: h.lookup([1, 2], out=(good, ro))) == ("out", "sin")
    torch = pytest.importorskip("torch")
    assert _loc(lambda: h.lookup([1, 2], out=(torch.empty(2, 32, dtype=torch.float16), good))) == (
        "out",
        "cos",
    )
    assert eng.stop() == 0


def _error(fn):
    with pytest.raises(SpecError) as e:
        fn()
    return type(e.value).__name__, e.value.loc, str(e.value)


def test_client_lookup_of_a_seen_spec_takes_its_handle_and_answers_as_compute(ns, procs):
    """The README's call, in a process that never made a handle: after a spec's first
    Client.lookup, lists and 1-D integer arrays of positions (every integer dtype, 1 to 4,096 of
    them, inside and past the table) are answered without resolving the request again, bit for
    bit compute's answer (its other entries included); every bad form gets compute's own error;
    answers share no memory with each other, and the one array all answers share is read-only."""
    eng = procs.engine(_config(), ns)
    c = eng.client()
    resolved = []
    resolve = c.resolve
    c.resolve = lambda family, body: resolved.append(family) or resolve(family, body)
    rng = np.random.default_rng(34)
    for family, spec in CASES:
        spec = {**spec, "dtype": "bfloat16" if family == "rope" else "float32"}
        first = c.lookup(family, {**spec, "positions": [1]})
        assert bits_of(first) == bits_of(compute(family, {**spec, "positions": [1]}))
        n_resolved = len(resolved)
        for n in (1, 3, 4096):
            p = _positions(rng, n)[:n]
            for form in (p.tolist(), p, (p % 2**31).astype(np.int32), (p % 2**16).astype(np.uint16)):
                got = c.lookup(family, {**spec, "positions": form})
                want = compute(family, {**spec, "positions": [int(v) for v in form]})
                assert bits_of(got) == bits_of(want), (family, spec, n, type(form))
                assert all(got[k].flags.c_contiguous for k in got if isinstance(got[k], np.ndarray))
        if FAST:  # the handle answered: nothing was resolved again
            assert len(resolved) == n_resolved, (family, spec)
        for bad in ([-1], [3, 2**31], [True], [1, False], [1.5], [0, "1"], [2**70], [[1, 2]]):
            body = {**spec, "positions": bad}
            assert _error(lambda: c.lookup(family, body)) == _error(lambda: compute(family, body)), bad
        for bad in (np.array([1.0]), np.array([[1, 2]]), np.array([], np.int64), np.array([4, -3])):
            body = {**spec, "positions": bad}
            assert _error(lambda: c.lookup(family, body)) == _error(lambda: compute(family, body)), bad
    a, b = (c.lookup("rope", {**ROPE[0], "dtype": "float32", "positions": [7, 9]}) for _ in range(2))
    a["cos"][...] = 0
    assert not np.shares_memory(a["cos"], b["cos"]) and b["cos"].any()
    with pytest.raises(ValueError):  # inv_freq: the handle's one array, in every answer
        b["inv_freq"][0] = 0
    assert eng.stop() == 0


def test_a_handle_stays_right_across_restart_and_sees_the_new_longer_table(ns, procs):
    spec, rng = {**ROPE[1], "dtype": "float16"}, np.random.default_rng(7)
    eng = procs.engine(_config(), ns)
    c = eng.client()
    h = c.handle("rope", spec)
    pos = _positions(rng, 16)
    _same(h.lookup(pos), "rope", spec, pos)
    assert eng.stop() == 0  # its segments are gone; the mapping stays valid
    _same(h.lookup(pos), "rope", spec, pos)
    eng = procs.engine(_config(4 * LENGTH), ns)  # a new engine, longer tables

    def longer():
        h.lookup([0])
        return h._view.length == 4 * LENGTH

    wait_for(longer, 10, 0.02, "the handle to map the new engine's table")
    assert (h._plan is not None) == FAST
    _same(h.lookup(pos), "rope", spec, pos)
    assert eng.stop() == 0


def test_a_handle_follows_growth_and_eviction_of_on_demand_tables(ns, procs):
    from posenc.engine.tables.base import MIN_ON_DEMAND

    cfg = {**_config(), "on_demand_length": 4 * MIN_ON_DEMAND}
    table = 2 * MIN_ON_DEMAND * 4 * 4 + 4 * 8 + 4 * 4  # [MIN_ON_DEMAND, 4] cos + sin float32 (head_dim 8)
    eng = procs.engine(cfg, ns, args=["--memory-budget", str(2 * table * 4 + table)])
    c = eng.client()
    spec = {"head_dim": 8, "rope_theta": 777.0}
    h = c.handle("rope", spec)  # built on demand, MIN_ON_DEMAND rows
    assert h._view.length == MIN_ON_DEMAND
    pos = np.array([1, MIN_ON_DEMAND + 5, 3 * MIN_ON_DEMAND, 2**31 - 1])
    _same(h.lookup(pos), "rope", spec, pos)  # past it: computed, and it is asked to grow

    def grown():
        _same(h.lookup(pos), "rope", spec, pos)
        return h._view.length > MIN_ON_DEMAND

    wait_for(grown, 20, 0.05, "the handle to map the grown table")
    for k in range(6):  # other specs evict it
        c.handle("rope", {"head_dim": 8, "rope_theta": 100.0 + k}).lookup([MIN_ON_DEMAND * 3])
    assert eng.manifest()["stats"]["evictions"] >= 1
    _same(h.lookup(pos), "rope", spec, pos)  # its mapping stays right
    assert eng.stop() == 0


@pytest.mark.skipif(not FAST, reason="the C plan needs the simd backend")
def test_every_dispatch_level_gives_the_same_bits(ns, procs):
    from posenc.engine.kernels import _native

    eng = procs.engine(_config(), ns)
    c = eng.client()
    rng = np.random.default_rng(3)
    handles = [(f, {**s, "dtype": dt}) for f, s in CASES for dt in DTYPES]
    handles = [(f, s, c.handle(f, s)) for f, s in handles]
    first = _native.LEVEL
    try:
        for level in _native.levels():
            _native._set_level(level)
            for family, spec, h in handles:
                pos = _positions(rng, 6)
                _same(h.lookup(pos), family, spec, pos)
    finally:
        _native._set_level(first)
    assert eng.stop() == 0


@pytest.mark.skipif(not FAST, reason="the C plan needs the simd backend")
def test_a_wrong_rule_for_rows_past_the_table_is_caught_when_the_handle_binds(ns, procs, monkeypatch):
    import dataclasses

    from posenc.engine.tables import FAMILIES

    fam = FAMILIES["sinusoidal"]
    real = type(fam).row_plan

    def swapped(self, req, view):  # the family's rule with cos columns where sin belongs: not its table rows
        plan = real(self, req, view)
        h, (pmap,) = plan.past.freqs.shape[0], plan.past.maps
        past = dataclasses.replace(plan.past, maps=(tuple(c - h if c >= h else c + h for c in pmap),))
        return dataclasses.replace(plan, past=past)

    monkeypatch.setattr(type(fam), "row_plan", swapped)
    eng = procs.engine(_config(), ns)
    h = eng.client().handle("sinusoidal", SINUSOIDAL[0])
    assert h.fast and not h.past_in_c  # gathers in C, rows past the table by the pipeline
    pos = _positions(np.random.default_rng(1), 8)
    _same(h.lookup(pos), "sinusoidal", SINUSOIDAL[0], pos)
    assert eng.stop() == 0


def test_a_stored_grid_is_gathered_and_its_refusals_are_the_pipelines(ns, procs):
    """sinusoidal-grid (a whole table, extra tokens first): rows gathered in C, the positions past
    the grid refused at the pipeline's field."""
    spec = {"embed_dim": 32, "grid_size": 8, "extra_tokens": 1}
    eng = procs.engine(
        {"length": LENGTH, "tables": [{"family": "sinusoidal-grid", "spec": spec, "dtypes": DTYPES}]}, ns
    )
    c, rng = eng.client(), np.random.default_rng(11)
    for dtype in DTYPES:
        s = {**spec, "dtype": dtype}
        h = c.handle("sinusoidal-grid", s)
        assert h.fast == FAST
        batch = rng.integers(0, 65, (4, 9))
        got = h.lookup(batch)["encoding"]
        for b in range(4):
            _same({"encoding": got[b]}, "sinusoidal-grid", s, batch[b])
        assert _loc(lambda: h.lookup([3, 65])) == _loc(
            lambda: compute("sinusoidal-grid", {**s, "positions": [3, 65]})
        )
    assert eng.stop() == 0


def test_client_lookup_of_a_range_takes_the_handle_and_answers_as_compute(ns, procs):
    """A range ({"start", "stop", "step"}, the README's own example) of a seen spec is answered by
    its handle, with no resolve, bit for bit compute's answer, inside and past the table; a bad
    range gets compute's own error at its field, and a range of more rows than max_bytes allows
    compute's 413, before any of its positions is made."""
    from posenc.engine.core.errors import TooLarge

    eng = procs.engine(_config(), ns)
    c = eng.client()
    resolved = []
    resolve = c.resolve
    c.resolve = lambda family, body: resolved.append(family) or resolve(family, body)
    rng = np.random.default_rng(36)
    for family, spec in CASES:
        spec = {**spec, "dtype": "bfloat16" if family == "rope" else "float32"}
        c.lookup(family, {**spec, "positions": {"start": 0, "stop": 2}})
        n_resolved = len(resolved)
        for n in (1, 16, 4096):
            for start in (int(rng.integers(0, LENGTH)), int(rng.integers(LENGTH, 2**31 - 8 * n))):
                for step in (None, 1, int(rng.integers(2, 8))):
                    sel = {"start": start, "stop": start + n * (step or 1)}
                    if step is not None:
                        sel["step"] = step
                    body = {**spec, "positions": sel}
                    assert bits_of(c.lookup(family, body)) == bits_of(compute(family, body)), (family, sel)
        if FAST:
            assert len(resolved) == n_resolved, (family, spec)
        bads = (
            {"start": 5},
            {"start": 5, "stop": 5},
            {"start": -1, "stop": 3},
            {"start": 0, "stop": 2**31 + 1},
            {"start": 0, "stop": 4, "step": 0},
            {"start": 0, "stop": 4, "step": 1.0},
            {"start": 0, "stop": 4, "stride": 2},
        )
        for bad in bads:
            body = {**spec, "positions": bad}
            assert _error(lambda: c.lookup(family, body)) == _error(lambda: compute(family, body)), bad
        huge = {**spec, "positions": {"start": 0, "stop": 2**31}}
        with pytest.raises(TooLarge):
            compute(family, huge)
        with pytest.raises(TooLarge):
            c.lookup(family, huge)
    assert eng.stop() == 0
