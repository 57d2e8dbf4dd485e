"""The one store of learnt templates (service/shortcut/store.py): its learn rule, cap and freshness
check, which every route (/v1 families, v2 REST and JSON, gRPC) keeps to, and that the HTTP
worker's /v1 service and its v2 server share one."""

from __future__ import annotations

from posenc.service.core.settings import Settings
from posenc.service.front.app import create_app
from posenc.service.shortcut import store as st
from tests.service.hot_helpers import needs_native


def manifest(generation: int, **files) -> dict:
    return {"generation": generation, "tables": {d: {"file": f} for d, f in files.items()}}


class Engine:
    """A manifest that the test changes, read as a reader client's ``manifest()``."""

    def __init__(self, m):
        self.m = m

    def __call__(self):
        return self.m


def test_a_key_is_learnt_at_its_second_answer_and_once_only():
    s = st.Store()
    assert not s.admit("rope", b"k")  # first answer: remembered as seen
    assert s.admit("rope", b"k")  # second: learnt now
    s.keep("rope", b"k", "template")
    assert not s.admit("rope", b"k")  # learnt: not again
    assert s.get("rope", b"k") == "template"
    assert not s.admit("alibi", b"k")  # another route's key is another key


def test_a_learnt_entry_goes_to_the_routes_dict_that_c_reads():
    s = st.Store()
    rope = s.route("rope")
    assert s.route("rope") is rope  # one dict per route, made once
    s.admit("rope", b"k"), s.admit("rope", b"k")
    s.keep("rope", b"k", "t")
    s.admit("rope", b"none"), s.admit("rope", b"none")
    s.keep("rope", b"none", None)  # answered, not a template: nothing for C
    assert rope == {b"k": "t"}
    s.admit("v2", b"g"), s.admit("v2", b"g")
    s.keep("v2", b"g", "entry")  # a route with no dict of its own: kept, put nowhere else
    assert s.get("v2", b"g") == "entry" and "v2" not in s.routes


def test_keys_seen_once_never_fill_the_store():
    """A client that sends a fresh key each time (a new request id) costs a bounded set, not
    templates: none of them is learnt, and the set stays under the cap."""
    s = st.Store()
    for i in range(5 * st.MAX_TEMPLATES):
        assert not s.admit("v2", b"id-%d" % i)
    assert not s.known and len(s.once) <= st.MAX_TEMPLATES


def test_one_cap_over_every_route():
    s = st.Store()
    rope, grpc = s.route("rope"), s.route("v2 grpc")
    for i in range(st.MAX_TEMPLATES):
        route = "rope" if i % 2 else "v2 grpc"
        assert not s.admit(route, b"%d" % i) and s.admit(route, b"%d" % i)
        s.keep(route, b"%d" % i, i)
    assert len(rope) + len(grpc) == st.MAX_TEMPLATES
    s.admit("rope", b"one more")
    assert s.admit("rope", b"one more")  # past the cap: every route is dropped first
    assert not rope and not grpc and not s.known
    assert s.route("rope") is rope and s.route("v2 grpc") is grpc  # cleared in place: C's dicts stay


def test_a_manifest_that_only_gained_tables_keeps_the_templates():
    engine = Engine(manifest(3, a="f1"))
    s = st.Store(engine)
    rope = s.route("rope")
    for key, entry in ((b"t", "template"), (b"n", None)):
        s.admit("rope", key), s.admit("rope", key)
        s.keep("rope", key, entry)
    engine.m = manifest(3, a="f1", b="f2")  # a new table
    assert s.fresh()
    assert rope == {b"t": "template"} and s.get("rope", b"t") == "template"
    # a key remembered as no template is forgotten (its table may be built now): learnt again
    assert (("rope", b"n")) not in s.known
    assert not s.admit("rope", b"n") and s.admit("rope", b"n")


def test_any_other_manifest_change_drops_every_route():
    for later in (
        manifest(4, a="f1"),  # a new engine generation
        manifest(3),  # evicted
        manifest(3, a="f9"),  # repaired: a new file for the digest
        None,  # no manifest
    ):
        engine = Engine(manifest(3, a="f1"))
        s = st.Store(engine)
        s.fresh()
        rope, lane = s.route("rope"), s.route("v2 lane")
        s.admit("rope", b"t"), s.admit("rope", b"t")
        s.keep("rope", b"t", "template")
        lane[b"/v2/models/m/infer"] = "route"
        engine.m = later
        assert not s.fresh(), later
        assert not rope and not lane and not s.known, later
        assert s.fresh()  # checked once per manifest


def test_a_key_whose_table_was_not_mapped_is_learnt_at_its_next_answer():
    s = st.Store()
    s.admit("v2", b"k"), s.admit("v2", b"k")
    s.again("v2", b"k")  # its table was being built: not kept as no template
    assert s.admit("v2", b"k")


@needs_native
def test_the_http_workers_v1_and_v2_shortcuts_share_one_store(engine):
    """One cap, rule and freshness check for every route of a worker: a key its v2 server admits
    counts in the store its /v1 service checks against the manifest, and is dropped with it."""
    front = create_app(Settings(namespace=engine.namespace))
    svc, hot = front.svc, front.v2_hot
    assert hot is not None, "the v2 shortcut is on with the C shortcut"
    hot.admit(b"a v2 key"), hot.admit(b"a v2 key")
    hot.learnt(b"a v2 key", lambda: "entry")
    assert svc.store.get("v2", b"a v2 key") == "entry"
    svc.store.clear()
    assert hot.store.get("v2", b"a v2 key") is None
