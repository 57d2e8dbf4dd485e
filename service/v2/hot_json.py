"""v2 REST JSON-tensor infers on the whole-request C path: a repeated infer whose inputs carry
their positions as JSON ``data`` lists (no ``Inference-Header-Content-Length``, every output in
JSON) answered by one C call from the socket's bytes in the lane (service/shortcut/hot_v2json.c,
a branch of the v2 routes of service/v2/hot.py).

The key is the body with each input's ``data`` list cut out (``templates.v2_cut``: the same C that
cuts it in the lane), as /v1 bodies are cut at their selections; at learn time each cut-out list
is checked to be the data its input really takes (probe lists substituted into it come back as
``inputs[i].data``, in order), which rules out duplicate keys and escaped spellings. A later body
with the same key is the learnt infer with other positions; each list is parsed by the
shortcut's own selection parser (lists of non-negative ints below the position limit) and must
hold the learnt shape's number of positions.

The answer is the full path's JSON (service/v2/rest.py ``_answer``, asked once with a mark in
place of each row-gathered output's data) around each output's values, which C writes from the
family's template as a flat row-major list: RoPE and sinusoidal rows from a RowsTemplate's kept
texts of stored rows (service/shortcut/hot_json.c, rows past the table computed and rendered as
/v1 JSON's are), T5 blocks by the engine's kernel (integers), ALiBi blocks [heads, nq, nk] from
an AlibiTemplate's cells formatted in C as orjson writes them (service/shortcut/hot_alibi.c:
every mode, distances inside and past the stored table; a float16 cell that overflows is
declined, as on /v1). A key is learnt at the full path's second answer, only when the template's answer to the
learnt body, through the lane's own entry point, is the full path's bytes (its table found unmapped then: at its
next answer, ``Hot.learnt``); entries are dropped with hot.py's (a manifest change other than new tables).

What stays with the full path: outputs asked as binary (``binary_data_output``, an output's
``binary_data``: the answer then carries binary data), inputs in shared memory or binary, batches
of T5 and ALiBi blocks ([B, N] inputs), per-axis ``position_ids``, rope types whose rows follow
the positions, more than 64 rows (``MAX_ROWS``, as /v1 JSON) or 1 MiB of arrays, and bodies the strict C cut
or parser refuses (an occurrence of ``"data"`` that is not an input's list, nested lists, ``-0``).
"""

from __future__ import annotations

import dataclasses
import math

import orjson

from posenc.service.core.settings import INLINE_BYTES
from posenc.service.shortcut.store import MAX_KEY_BYTES
from posenc.service.shortcut.templates import (
    MAX_ROWS,
    JsonEntry,
    Limits,
    answer_request,
    flat_json_template,
    v2_cut,
)

DATA = orjson.dumps("data")  # the input field whose lists are cut out, as JSON text
_MARK = "posenc:v2rows:%d"  # stands for a gathered output's data in the answer the parts are cut from


class _Marked:
    """In place of a gathered output's array in rest.py's ``_answer``: its data is a mark."""

    def __init__(self, i: int):
        self.i = i

    def reshape(self, *shape) -> str:
        return _MARK % self.i


JSON_BLOCK_BYTES = 1 << 20


def controls(raw: bytes, spans: tuple) -> bool:
    """Whether the i-th cut-out list is ``inputs[i].data``: probe lists substituted into every
    span come back there, in order, and the body has no other input."""
    for r in (0, 1):
        body, at = b"", 0
        for i, (a, b) in enumerate(spans):
            body += raw[at:a] + b"[%d]" % (10 * r + i)
            at = b
        try:
            obj = orjson.loads(body + raw[at:])
        except orjson.JSONDecodeError:
            return False
        inputs = obj.get("inputs") if isinstance(obj, dict) else None
        if not isinstance(inputs, list) or len(inputs) != len(spans):
            return False
        if any(not isinstance(x, dict) or x.get("data") != [10 * r + i] for i, x in enumerate(inputs)):
            return False
    return True


def entry_of(hot, inf, plan, tensors: list, render, post: bytes, counts: tuple):
    """A JsonEntry (template, counts, swap, post) for hot_v2json.c, or None: the family's template of the
    answered infer, writing the full path's JSON (``render(tensors)``'s bytes) around each gathered
    output's flat data."""
    if len(plan.reqs) != 1 or plan.stacked or plan.nbytes > INLINE_BYTES:
        return None
    if len(counts) == 1 and counts[0] > MAX_ROWS:  # as /v1's JSON rows: small answers only
        return None
    r = plan.reqs[0]
    fam = r.family
    names = [t.name for t in inf.inputs]
    if sorted(names) != sorted(fam.selections) or any(n in fam.axis_fields for n in names):
        return None
    probe = hot.probe(r, {n: [0] for n in fam.selections})
    if probe is None:
        return None
    gathered = [i for i, t in enumerate(tensors) if t.name in fam.batched]
    if not gathered or any(tensors[i].region is not None for i in gathered):
        return None
    marked = list(tensors)
    for k, i in enumerate(gathered):
        marked[i] = dataclasses.replace(tensors[i], array=_Marked(k))
    parts, rest = [], render(marked)
    for k in range(len(gathered)):
        head, sep, rest = rest.partition(orjson.dumps(_MARK % k))
        if not sep:
            return None
        parts.append(head)
    parts.append(rest)
    view = hot.view(probe)
    if view is None:
        return None
    settings = hot.v2.settings
    # the C side bounds a block's arrays, not its text, and writes it on the event loop: arrays of
    # at most JSON_BLOCK_BYTES (a few ms of text), and never a text past the response limit
    # (17 bytes a 2-byte cell at most: service/core/sizing.py); bigger ones take the full path
    t = flat_json_template(
        probe,
        view,
        tuple(parts),
        Limits(
            MAX_ROWS, settings.max_positions, min(JSON_BLOCK_BYTES, settings.max_response_bytes * 2 // 17)
        ),
    )
    if t is None:
        return None
    return JsonEntry(template=t, counts=counts, swap=names[0] != fam.selections[0], post=post)


class JsonInfers:
    """The JSON-tensor entries of one server process's v2 shortcut (service/v2/hot.py ``Hot``)."""

    def __init__(self, hot):
        self.hot = hot

    def learn(
        self, path: str, body: bytes, inf, plan, tensors: list, route: str, post: bytes, render, answer: bytes
    ) -> None:
        """After the full path answered ``body`` (every output in JSON: ``answer``), learn its
        entry; ``render(tensors)`` is the full path's JSON of other output tensors."""
        hot = self.hot
        client = hot.v2.client
        if not path.isascii() or any(t.raw is not None or t.data is None or t.params for t in inf.inputs):
            return
        if client is None or not all(client.is_mapped(r) for r in plan.reqs):
            return  # learnt once its table is mapped (a new spec's is built on demand)
        got = v2_cut(body, DATA)
        if got is None:
            return
        key, spans = got
        if len(key) > MAX_KEY_BYTES or len(spans) != len(inf.inputs) or not hot.admit(("json", path, key)):
            return
        if not controls(body, spans):
            hot.learnt(("json", path, key), lambda: None)  # remembered as no template
            return
        counts = tuple(math.prod(t.shape) for t in inf.inputs)
        target = path.encode("ascii")

        def make():
            e = entry_of(hot, inf, plan, tensors, render, post, counts)
            want = b"%d%s\r\n%s" % (len(answer), post, answer)
            return (
                e
                if e is not None and self._answer(target, hot.new_route(route), key, e, body) == want
                else None
            )

        e = hot.learnt(("json", path, key), make)  # its table unmapped meanwhile: learnt at its next answer
        if e is not None:
            hot.route_of(path, route).json_entries[key] = e

    @staticmethod
    def _answer(target: bytes, route, key: bytes, e, body: bytes) -> bytes | None:
        """Entry ``e``'s answer to ``body`` (its head from the content length's digits on), asked
        through the lane's own entry point with a fresh ``route`` holding it alone."""
        route.json_entries[key] = e
        data = b"POST %s HTTP/1.1\r\ncontent-length: %d\r\n\r\n%s" % (target, len(body), body)
        got = answer_request(data, 0, ({}, {target: route}), {}, {}, (b"", b"", b""), b"", False)
        return got[2] if got else None
