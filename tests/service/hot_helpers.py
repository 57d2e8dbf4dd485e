"""Helpers of the C-shortcut tests (service/shortcut/_hot.c and its parts): specs, odd tokens, and a full path that
learns a body's template before the shortcut answers it.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import event
from hypothesis import strategies as st

from posenc.engine import kernels
from posenc.engine.core.errors import PosencError
from posenc.service.shortcut import templates as replay
from posenc.service.shortcut.store import still_mapped
from tests.independent import assert_c_answer
from tests.service_cases import ACCEPT_HDRS, BIN, orjson_dumps
from tests.waits import wait_for

needs_native = pytest.mark.skipif(
    replay.shortcut_in_use("auto") != "c",
    reason="the C shortcut runs with service._hot built and the simd backend",
)
# what the shortcut takes only with the engine's C kernels lent (kernels.c_api(), the simd backend):
# T5 blocks, float16/bfloat16 ALiBi cells, rows past a table; with the numpy backend the full path answers
needs_kernels = pytest.mark.skipif(
    not replay.NATIVE or kernels.c_api() is None,
    reason="T5 blocks, half-precision ALiBi cells and rows past a table need the "
    "engine's C kernels (the simd backend)",
)
HOT_SPECS = [{"head_dim": 64}, {"head_dim": 64, "layout": "interleaved", "dtype": "bfloat16"}]
ODD = st.one_of(
    st.none(),
    st.integers(0, 2**70).map(str),
    st.sampled_from(
        [
            "-0",
            "-1",
            "1.0",
            "1e2",
            "01",
            "00",
            "true",
            "null",
            '"3"',
            "[1]",
            "",
            " 7",
            "7 ",
            "\t8\n",
            "\r9",
            "\x0b1",
            "1\u00a0",
        ]
    ),
)

ALIBI_SPECS = [
    {"num_heads": 12},
    {"num_heads": 12, "heads": [11, 0, 0], "mask_future": True},
    {"num_heads": 12, "mode": "symmetric", "max_bias": 8.0},
    {"mask_future": False, "num_heads": 12},
]


def selection_text(draw, odd):
    if draw(st.booleans()):
        items = [str(v) for v in draw(st.lists(st.integers(0, 3000), min_size=1, max_size=12))]
        if odd is not None:
            items.insert(draw(st.integers(0, len(items))), odd)
        return "[" + draw(st.sampled_from([",", ", "])).join(items) + "]"
    start = draw(st.integers(0, 3000))
    parts = {"start": str(start), "stop": str(start + draw(st.integers(-2, 300)))}
    if draw(st.booleans()):
        parts["step"] = draw(st.sampled_from(["1", "3", "0", "null", "1.0", "-1"]))
    if odd is not None:
        parts[draw(st.sampled_from(["start", "stop", "stap"]))] = odd
    order = draw(st.permutations(list(parts)))
    sep = draw(st.sampled_from([":", " : "]))
    return "{" + ",".join(f'"{k}"{sep}{parts[k]}' for k in order) + "}"


@st.composite
def alibi_bodies(draw):
    spec = draw(st.sampled_from(ALIBI_SPECS))
    odd = draw(st.one_of(st.just(None), st.just(None), ODD))
    which = draw(st.sampled_from(["query", "key"]))
    sel = {f: selection_text(draw, odd if f == which else None) for f in ("query", "key")}
    fields = [(k, orjson_dumps(v).decode()) for k, v in spec.items()] + list(sel.items())
    order = draw(st.permutations(fields))
    text = "{" + ",".join(f'"{k}":{v}' for k, v in order) + "}"
    probe = "{" + ",".join(f'"{k}":{"[1]" if k in sel else v}' for k, v in order) + "}"
    return spec, text, probe, odd is None and all(plain_selection(v) for v in sel.values())


def plain_selection(text: str) -> bool:
    """A selection text every shortcut must take: a non-empty list of positions, or a range
    with an integer step of at least 1 that selects something, at most 4096 positions."""
    try:
        v = json.loads(text)
    except ValueError:
        return False
    if isinstance(v, list):
        return 0 < len(v) <= 4096 and all(type(x) is int and x >= 0 for x in v)
    if not isinstance(v, dict) or set(v) - {"start", "stop", "step"} or not {"start", "stop"} <= set(v):
        return False
    step = v.get("step", 1)
    ints = all(type(v[k]) is int for k in ("start", "stop")) and type(step) is int
    return (
        ints and step >= 1 and 0 <= v["start"] < v["stop"] and len(range(v["start"], v["stop"], step)) <= 4096
    )


def learn_then_answer(svc, family: str, body: bytes, probe: bytes):
    """Let the full path learn ``body``'s template by answering ``probe`` (the same text with
    valid selections), then answer ``body`` both ways: (C's bytes or None, the full path's or None).

    A manifest that drops the templates between the learning and the answer (an on-demand table an
    earlier example asked for, grown meanwhile into a new file: ``store.still_mapped`` is false)
    rightly makes C decline: then it learns again (a few times: each such manifest is one table's
    growth). A decline under the manifest it learnt under, or one that only gained tables, stands."""
    for _ in range(4):
        for _ in range(2):  # a key is learnt at its second answer (service/shortcut/store.py)
            try:
                svc.execute(svc.prepare(family, probe, BIN["accept"]))
            except PosencError:  # the spec itself is invalid: nothing to learn
                pass
        learnt_under = svc.store.seen
        c = svc.hot(family, body, ACCEPT_HDRS)
        dropped = learnt_under is not None and not still_mapped(learnt_under, svc.store.seen)
        if c is not None or not dropped:
            break
    if c is not None:  # C's bytes against the float64 reference, not only the full path's
        assert_c_answer(family, json.loads(body), c)
    try:
        full = svc.execute(svc.prepare(family, body, BIN["accept"]))[0]
    except PosencError:
        full = None
    event(
        f"C: {'answered' if c is not None else 'full path'}, full path: {'answered' if full else 'refused'}"
    )
    return c, full


def wait_learnt(manifest, mapped, answer, taken, what: str, timeout: float = 15.0) -> None:
    """Answer through the full path (``answer()``) until the shortcut takes the request (``taken()``).

    The full path learns a key at its second answer once the spec's table is mapped (``mapped()``,
    asked before each answer; a key whose table the learn finds unmapped, being built or replaced
    by a longer file, is learnt at its next answer: service/v2/hot.py ``Hot.learnt``); so when it
    has answered twice with the table mapped while the shortcut's templates stayed checked against
    one engine manifest (``manifest()``, the one they were last checked against: a new one drops
    every template, or forgets the keys remembered as none while their table was being built, to be
    learnt again) and the shortcut still declines, the shortcut is broken: this fails then, saying
    so, instead of waiting out ``timeout``, which only bounds the wait for an on-demand table's build."""
    state = {"manifest": None, "answered with the table mapped": 0, "table mapped": None}

    def learnt() -> bool:
        m = manifest()
        if m is not state["manifest"]:
            state.update({"manifest": m, "answered with the table mapped": 0})
        was_mapped = state["table mapped"] = mapped()
        answer()
        if taken():
            return True
        state["answered with the table mapped"] += bool(was_mapped) and manifest() is m
        answered = state["answered with the table mapped"]
        assert answered < 2, (
            f"{what}: the full path has answered {answered} times with the table mapped "
            "(it learns at the second) and the shortcut still declines"
        )
        return False

    wait_for(
        learnt,
        timeout,
        0.02,
        what=f"{what}: its table mapped (an on-demand one built)",
        seen=lambda: {k: v for k, v in state.items() if k != "manifest"},
    )


def learn_mapped(svc, family: str, body: dict, timeout: float = 30.0) -> None:
    """Answer ``body`` through the full path until its table is mapped and long enough for it, so
    its template is learnt from the table (a new spec's first answers are computed while the
    engine builds its table in the background, and teach the shortcut nothing)."""
    job = svc.prepare(family, orjson_dumps(body), BIN["accept"])
    last = {}

    def long_enough() -> bool:
        svc.execute(job)
        v = svc.client.view(job.r)
        last["table"] = None if v is None else {"length": v.length, "growable": v.growable}
        if v is not None and (not v.growable or v.length >= (job.r.reach() or 0)):
            return True
        svc.client.manifest(force=True)  # the next answer reads the engine's newest
        return False

    wait_for(
        long_enough,
        timeout,
        0.02,
        what=f"the table of {body} mapped, long enough for {job.r.reach()} rows",
        seen=lambda: last,
    )
    for _ in range(2):  # learnt from the mapped table, at its second answer (service/shortcut/store.py)
        svc.execute(job)
