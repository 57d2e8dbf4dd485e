"""On-demand tables sized to the rows asked, on a real engine and a real ``posenc
serve``: a new spec's table is the positions asked rounded up to a power of two (at least
MIN_ON_DEMAND, at most the config's ``on_demand_length``), it is rebuilt longer when a later
request reaches past it, and the first request for a new spec is answered (exactly) without
waiting for the build. Every answer is compared with the float64 reference."""

from __future__ import annotations

import os
import signal

import httpx

from posenc.engine.answer.pipeline import compute
from posenc.engine.tables.base import MIN_ON_DEMAND
from tests.children.bits import bits_equal
from tests.integration.engine_cases import SMALL_CONFIG
from tests.procs import wait_for
from tests.service_cases import BIN, reference_safetensors
from tests.shm import SHM_DIR, assert_no_leftovers, held_segments, read_manifest

CAP = 65536
CONFIG = {**SMALL_CONFIG, "on_demand_length": CAP}


def _entry(m: dict | None, family: str, key_part: str):
    """The manifest entry of the one ``family`` table whose key holds ``key_part``."""
    return next(
        (
            e
            for e in (m or {"tables": {}})["tables"].values()
            if e["family"] == family and key_part in e["key"]
        ),
        None,
    )


def _exact(c, family, body):
    assert bits_equal(c.lookup(family, body), compute(family, body)), body


def test_a_new_table_is_sized_to_the_rows_asked_and_grows_when_asked_past_it(ns, procs):
    eng = procs.engine(CONFIG, ns)
    c = eng.client()
    spec = {"head_dim": 16, "rope_theta": 4321.0}
    _exact(c, "rope", {**spec, "positions": [3]})  # computed: the table is asked for meanwhile
    e = wait_for(lambda: _entry(eng.manifest(), "rope", "4321"), 30, 0.02, "the on-demand table")
    assert e["length"] == MIN_ON_DEMAND and not e["pinned"]
    first = e["file"]
    _exact(c, "rope", {**spec, "positions": [0, 5, 4095]})  # inside: no new ask
    _exact(c, "rope", {**spec, "positions": [1, 9000]})  # past it: served, and it grows
    e = wait_for(
        lambda: (x := _entry(eng.manifest(), "rope", "4321")) and x["length"] > MIN_ON_DEMAND and x,
        30,
        0.02,
        "the table to grow",
    )
    assert e["length"] == 16384 and e["file"] != first
    assert not os.path.exists(os.path.join(SHM_DIR, first)), "the shorter table's file is still there"
    req = c.resolve("rope", {**spec, "positions": [9000]})
    wait_for(
        lambda: c.manifest(force=True) and (v := c.view(req)) is not None and v.length == 16384,
        60,
        0.02,
        "the client to map the longer table",
    )
    _exact(c, "rope", {**spec, "positions": [16383, 16384, 10**6]})  # past the cap: computed exactly
    e = wait_for(
        lambda: (x := _entry(eng.manifest(), "rope", "4321")) and x["length"] == CAP and x,
        30,
        0.02,
        "the cap",
    )
    _exact(c, "rope", {**spec, "positions": [10**6, CAP - 1, CAP]})
    # never past the cap: the ask such a request makes, made here and answered (not slept on)
    builds = c.call({"op": "stats"})["builds"][req.table.digest]
    reply = c.call({"op": "ensure", "table": req.table.key, "reach": 10**6 + 1})
    assert reply["ok"] and reply["length"] == CAP, reply
    assert c.call({"op": "stats"})["builds"][req.table.digest] == builds  # held, not built again
    assert _entry(eng.manifest(), "rope", "4321")["length"] == CAP
    # the other families follow the same rule: sinusoidal by rows (offset included), alibi by distance
    _exact(c, "sinusoidal", {"d_model": 6, "positions": [5], "offset": 5000})
    assert (
        wait_for(lambda: _entry(eng.manifest(), "sinusoidal", '"d_model":6'), 30, 0.02, "sinusoidal")[
            "length"
        ]
        == 8192
    )
    _exact(c, "alibi", {"num_heads": 3, "query": [20000], "key": [0, 1]})
    assert (
        wait_for(lambda: _entry(eng.manifest(), "alibi", '"num_heads":3'), 30, 0.02, "alibi")["length"]
        == 32768
    )
    # the zero-copy view of a table is the longest one
    assert c.table("rope", {"head_dim": 16, "rope_theta": 999.0}).length == CAP
    assert eng.stop() == 0
    assert_no_leftovers(ns)


def test_the_first_answer_for_a_new_spec_does_not_wait_for_its_build(procs):
    server = procs.serve({**CONFIG, "on_demand_length": 131072}, workers=1)
    body = {"head_dim": 64, "rope_theta": 777.0, "positions": list(range(0, 131072, 2048))}  # 64 rows
    # the order of events, not a race of durations: the engine is stopped (SIGSTOP) before the
    # request and continued only after its answer, so the answer came while no build could run.
    # (A worker that waited for the build would wait out its client's build timeout, 60 s, past
    # this request's 30 s.)
    engine = server.engine_pid()
    os.kill(engine, signal.SIGSTOP)
    try:
        r = httpx.post(server.url + "/v1/rope", json=body, headers=BIN, timeout=30)
        assert _entry(read_manifest(server.namespace), "rope", "777") is None, "built while stopped?"
    finally:
        os.kill(engine, signal.SIGCONT)
    assert r.status_code == 200 and r.content == reference_safetensors("rope", body)
    # the ask the request made meanwhile is answered once the engine runs again: the table is built
    e = wait_for(
        lambda: _entry(read_manifest(server.namespace), "rope", "777"), 60, 0.05, "the build to finish"
    )
    assert e["length"] == 131072
    # once it is there, the same body is served from it, byte for byte the same
    r2 = httpx.post(server.url + "/v1/rope", json=body, headers=BIN, timeout=60)
    assert r2.status_code == 200 and r2.content == r.content
    assert server.engine_pid() == engine and server.stop() == 0


def test_new_specs_under_a_small_budget_evict_and_rebuild_with_nothing_leaked(procs):
    # [4096, 4] cos and sin float32 + inv_freq: ~128 KiB a table; the budget holds three
    table = 2 * MIN_ON_DEMAND * 4 * 4 + 4 * 8 + 4 * 4
    server = procs.serve(CONFIG, workers=2, args=["--memory-budget", str(3 * table + table // 2)])
    url = server.url + "/v1/rope"

    def ask(theta: float, positions) -> None:
        body = {"head_dim": 8, "rope_theta": theta, "positions": positions}
        r = httpx.post(url, json=body, headers=BIN, timeout=30)
        assert r.status_code == 200 and r.content == reference_safetensors("rope", body), (
            r.status_code,
            body,
        )

    def stored(theta: float) -> dict | None:
        return _entry(read_manifest(server.namespace), "rope", f'"rope_theta":{theta}')

    thetas = [1000.0 + k for k in range(12)]
    for theta in thetas:  # each new spec: computed at once, then built, evicting the oldest
        for positions in ([1, 2], [4095, 0]):
            ask(theta, positions)
        wait_for(lambda: stored(theta), 30, 0.02, f"the table of {theta}")
    m = read_manifest(server.namespace)
    on_demand = [e for e in m["tables"].values() if not e["pinned"]]
    assert 1 <= len(on_demand) <= 3 and sum(e["nbytes"] for e in on_demand) <= 3 * table + table // 2
    assert m["stats"]["evictions"] >= len(thetas) - 3, m["stats"]
    assert stored(thetas[0]) is None  # evicted long ago; asked again: rebuilt
    ask(thetas[0], [7])
    wait_for(lambda: stored(thetas[0]), 30, 0.02, "the evicted table rebuilt")
    files = {e["file"] for e in read_manifest(server.namespace)["tables"].values()}
    for holder in (server.engine_pid(), server.pid):  # the engine and serve's keeper hold exactly
        wait_for(
            lambda: set(held_segments(holder, server.namespace)) == files,
            60,
            0.02,  # the tables
            "evicted tables let go",
        )
    assert not [n for n in os.listdir(SHM_DIR) if n.startswith(server.namespace + ".seg.")]
    assert server.stop() == 0, server.output()
    assert_no_leftovers(server.namespace)
