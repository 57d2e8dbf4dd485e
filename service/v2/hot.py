"""The v2 shortcut: a repeated inference of a row family answered by one C call, on both
transports (gRPC ``ModelInfer``: service/v2/grpc_server.py; REST binary ``infer``: rest.py,
through the raw-ASGI front, service/front/front.py).

Decode-time clients send the same request again and again with new positions. After the full
path (service/v2/infer.py: plan, arrays, the transport's encoding) has answered a request whose
only input is raw INT32/INT64 ``positions`` of a rope or sinusoidal model, the request's bytes
around the positions become a key:
- gRPC: the serialized ModelInferRequest before its one ``raw_input_contents`` field, when that
  field is the message's last and only one (so the key is a run of whole fields: a later message
  that is the key plus one such field of the same length is the same request with other positions;
  C cuts it, ``grpc_cut``, and looks it up, ``grpc_answer``: service/shortcut/hot_grpc.c);
- REST: the model's path and the JSON inference header (the binary positions follow it).
The answer's bytes around its row-gathered outputs (``cos``/``sin``, ``encoding``) become the
template's parts; the rows come from the family's own /v1 template (``Family.template``, the
tables and column map service/shortcut/_hot.c already reads), so no rule of the families is written
twice. ``fill`` (service/shortcut) copies each row straight into the answer's bytes (one gather, no other copy).

What stays with the full path: a position that is negative or not below the position limit
(``fill`` says None; a position past the stored table is computed there with the engine's kernel), a key not
seen, shared-memory inputs or outputs, JSON outputs (but REST infers of JSON tensors answered in JSON:
service/v2/hot_json.py), compressed bodies, requests naming other outputs in another order (the learn-time
check below refuses them), rope types whose table follows the positions. The block families (alibi,
t5-buckets: two raw inputs, ``query`` and ``key``) are learnt alike by hot_blocks.py; their gRPC key is the
message before its two trailing raw_input_contents fields, each of its learnt length.
A key is learnt the second time the full path answers it (a client that sends a fresh request id
each time costs a set entry per request, not a template): the rule of the one store
(service/shortcut/store.py) that keeps every route's templates, /v1's too, with one cap and one
freshness check. At learn time the template's answer to
the learnt positions must equal the full path's bytes, or the key is remembered as not a template. Templates
are dropped when the engine's manifest changes other than by gaining tables (an eviction, a repair, a
restart), to be learnt again.
"""

from __future__ import annotations

import dataclasses
import functools
import threading

from posenc.service.metrics.counters import Metrics
from posenc.service.shortcut.store import MAX_KEY_BYTES
from posenc.service.shortcut.templates import (
    NATIVE,
    GrpcEntry,
    RowsEntry,
    V2Route,
    fill,
    fill_into,
    grpc_answer,
    grpc_cut,
    rows_template,
    shortcut_in_use,
    v2_rest,
)
from posenc.service.v2.errors import BadRequest
from posenc.service.v2.hot_blocks import block_entry
from posenc.service.v2.hot_json import DATA, JsonInfers
from posenc.service.v2.infer import LENGTH_HEADER

ROUTE = "v2"  # the store's route of every v2 key (gRPC bytes, REST (path, header), JSON ("json", path, key))
# larger answers are filled in a thread; fill runs at memory speed (8 MiB: ~0.3 ms here)
FILL_INLINE_BYTES = 8 << 20
SCRATCH_BYTES = 16 << 20  # rows for shared memory are gathered into a per-thread buffer of at most this
_ITEMSIZE = {"INT32": 4, "INT64": 8}
REFUSED_HEADERS = (b"content-encoding",)  # a compressed body: the full path decodes it


def stream_route(route: str) -> str:
    """The metrics route of a ModelStreamInfer message answered as ``route``'s ModelInfer."""
    return route.replace("ModelInfer", "ModelStreamInfer", 1)


def head_lines(headers) -> bytes:
    """A v2 shortcut answer's head after its content length: the entry's extra headers, as
    uvicorn writes the ASGI headers the raw front sends."""
    return b"\r\n" + b"".join(b"%s: %s\r\n" % (k.lower(), v) for k, v in headers)


@functools.lru_cache(maxsize=1024)
def head_pairs(post: bytes) -> tuple:
    """The ASGI headers whose ``head_lines`` are ``post`` (the raw front sends a C answer's so)."""
    return tuple(tuple(line.split(b": ", 1)) for line in post.split(b"\r\n") if line)


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    rows: object  # service._hot.RowsTemplate
    itemsize: int  # of the positions: 4 or 8
    parts: tuple  # the answer's bytes around each gathered array
    nbytes: int  # the positions' bytes
    size: int  # the answer's bytes
    route: str  # the metrics route of the model's calls
    headers: tuple = ()  # REST: the answer's extra headers
    regions: tuple = ()  # the gathered outputs asked into shared memory: (region, offset, byte_size) each
    store: object = None  # with regions: the server's service/v2/shm.py Regions
    block: int = 0  # with regions: the bytes of one gathered output's row

    @property
    def inline(self) -> bool:
        return self.size <= FILL_INLINE_BYTES

    def answer(self, positions) -> bytes | None:
        """The answer's bytes, or None: the full path answers (and says what is wrong)."""
        if not self.regions:
            return fill(self.rows, positions, self.itemsize, self.parts)
        # Rows are gathered into this thread's scratch buffer, then written into the regions with
        # pwrite (service/v2/shm.py): never through a mapping of an object the client can shrink.
        block = len(positions) // self.itemsize * self.block
        views = _scratch(block, len(self.regions))
        if not fill_into(self.rows, positions, self.itemsize, views):
            return None
        try:
            for (name, offset, size), v in zip(self.regions, views):
                self.store.write(name, offset, size, v, "outputs")
        except BadRequest:  # unregistered, shrunk, too small: the full path refuses it
            return None
        return self.parts[0]

    def lane_entry(self, post: bytes):
        """The C lane's entry (service/shortcut/hot_fill.c hot_v2_answer)."""
        return RowsEntry(
            template=self.rows, itemsize=self.itemsize, nbytes=self.nbytes, parts=self.parts, post=post
        )


_SCRATCH = threading.local()


def _scratch(block: int, n: int) -> tuple:
    """``n`` writable views of ``block`` bytes each, in a buffer this thread reuses up to
    SCRATCH_BYTES (a fresh 8 MiB costs ~0.3 ms more, its pages faulted in by the fill)."""
    need = block * n
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or len(buf) < need:
        buf = bytearray(need)
        if need <= SCRATCH_BYTES:
            _SCRATCH.buf = buf
    mv = memoryview(buf)
    return tuple(mv[i * block : (i + 1) * block] for i in range(n))


class Hot:
    """The templates of one server process (a V2 and its engine client)."""

    def __init__(self, v2):
        self.v2 = v2
        self.on = NATIVE and shortcut_in_use(v2.settings.shortcut) == "c"
        # the process's one store (service/shortcut/store.py: learn rule, cap, freshness), whose
        # entries under ROUTE are Entry (or None: not a template); these dicts are its routes too,
        # cleared with it:
        self.store = store = v2.store
        # gRPC: a serialized ModelInferRequest's key -> its GrpcEntry (grpc_answer reads it; learn_grpc
        # adds to it, the store clears it)
        self.grpc_entries: dict = store.route("v2 grpc")
        # REST: request target (an ASCII path's bytes; other paths are not learnt) -> its route in C
        # (service/shortcut/hot_lane.c: lane(), a whole request in one call, and v2_rest, the Python
        # door's, which looks up the path it read): a V2Route (new_route: the metrics offset of its
        # "c" answers, {JSON header: RowsEntry | BlockEntry, or the Entry Python fills: a large
        # answer, outputs into shared memory}, LENGTH_HEADER, REFUSED_HEADERS, DATA and its
        # {key: JsonEntry} of service/v2/hot_json.py)
        self.lane_routes: dict = store.route("v2 lane")
        self.json = JsonInfers(self)
        # set while learning a key whose table this process has not mapped yet (being built, or
        # built and not attached: mapping follows the manifest by a few ms): the key is learnt
        # again at its next answer, not kept as no template until the next manifest
        self.unmapped = False

    def fresh(self) -> None:
        """Check the templates against the engine's manifest (the store's one check)."""
        self.store.fresh()

    # -- lookups ----------------------------------------------------------------------------------
    def grpc(self, data: bytes):
        """(entry, positions) for a serialized ModelInferRequest whose key is learnt, or None: C's
        lookup (grpc_answer), nothing filled there (grpcio's handler answers it, the lane off)."""
        if not self.grpc_entries:
            return None
        self.fresh()
        return grpc_answer(
            data, self.grpc_entries, framed=False, stream=False, most=-1, counts=None, buckets=b""
        )

    def rest(self, path: str, body: bytes, headers):
        """A v2 REST infer Python read (its body and ASGI headers), looked up in C as the lane looks
        it up (templates.v2_rest): (answer, json, post, metrics) answered; (entry, positions): an
        Entry Python fills (a large answer, outputs into shared memory); None: declined."""
        self.fresh()
        route = self.route(path)
        return None if route is None else v2_rest(route, body, headers)

    def route(self, path: str):
        """The C route of a v2 REST path Python read, or None."""
        return self.lane_routes.get(path.encode("ascii")) if path.isascii() else None

    # -- learning ---------------------------------------------------------------------------------
    def admit(self, key) -> bool:
        """Whether to learn ``key`` now: the store's rule (its second full answer)."""
        return self.store.admit(ROUTE, key)

    def learnt(self, key, make):
        """``make()``'s entry for an admitted ``key`` (None: not a template), remembered: but a None
        made while the key's table was not mapped in this process (``unmapped``: being built, or
        mapped anew because the engine replaced its file, which the manifest read at learning, in
        ``admit``, can show after the answer was made) is not: the key is learnt at its next answer,
        not kept as no template until the next manifest. All three forms learn through it."""
        self.unmapped = False
        e = make()
        if e is None and self.unmapped:
            self.store.again(ROUTE, key)
            return None
        self.store.keep(ROUTE, key, e)
        return e

    def learn_grpc(self, data: bytes, inf, plan, tensors: list, segments: list, route: str) -> None:
        if not self.on:
            return
        cut = grpc_cut(data)
        if cut is None:
            return
        start, raws = cut
        key = data[:start]
        if len(key) > MAX_KEY_BYTES or not self.admit(key):
            return
        e = self.learnt(key, lambda: self._entry(inf, plan, tensors, segments, raws, route, ()))
        if e is not None:
            self.grpc_entries[key] = GrpcEntry(
                fill=None if e.regions else e.lane_entry(b""),
                nbytes=raws,
                size=e.size,
                metrics=Metrics.path_at(route, "shortcut"),
                stream_metrics=Metrics.path_at(stream_route(route), "shortcut"),
                entry=e,
            )

    def learn_rest(
        self, path: str, head: bytes, inf, plan, tensors: list, segments: list, route: str, headers: tuple
    ) -> None:
        if not self.on or len(head) > MAX_KEY_BYTES or not path.isascii():  # (no request target is not)
            return
        key = (path, bytes(head))
        if not self.admit(key):
            return
        e = self.learnt(key, lambda: self._entry(inf, plan, tensors, segments, (), route, headers))
        if e is not None:
            self._lane_route(path, key[1], e)

    def _lane_route(self, path: str, head: bytes, e: Entry) -> None:
        """Hand a REST entry to C: small answers into the message C fills; others (shared memory,
        large) as the Entry, which C hands back for Python to fill."""
        c = e.inline and not e.regions
        self.route_of(path, e.route).entries[head] = e.lane_entry(head_lines(e.headers)) if c else e

    def route_of(self, path: str, name: str):
        """The C route of an ASCII v2 REST path (made, empty, when it has none)."""
        target = path.encode("ascii")
        route = self.lane_routes.get(target)
        if route is None:
            route = self.lane_routes[target] = self.new_route(name)
        return route

    @staticmethod
    def new_route(name: str):
        """An empty route of the C lane for requests of metrics route ``name``."""
        return V2Route(
            metrics=Metrics.path_index(name, "c"),
            entries={},
            length_name=LENGTH_HEADER,
            refused=REFUSED_HEADERS,
            json_name=DATA,
            json_entries={},
        )

    def learn_json(
        self,
        path: str,
        body: bytes,
        inf,
        plan,
        tensors: list,
        route: str,
        headers: tuple,
        render,
        answer: bytes,
    ) -> None:
        """A JSON-tensor infer the full path answered in JSON (service/v2/hot_json.py)."""
        if self.on:
            self.json.learn(path, body, inf, plan, tensors, route, head_lines(headers), render, answer)

    def _entry(
        self, inf, plan, tensors: list, segments: list, raws: tuple, route: str, headers: tuple
    ) -> Entry | None:
        """The template of an answered inference, or None: its answer's ``segments`` (bytes, and
        the output ``tensors``' arrays as they were joined) with the family template's rows (or
        block: hot_blocks.py) in place of the row-gathered arrays must be the full path's bytes for
        the learnt positions. ``raws``: gRPC's raw fields' lengths (grpc_cut); REST: ()."""
        if len(plan.model.family.selections) == 2:
            return block_entry(self.v2, inf, plan, tensors, segments, raws, route, headers, FILL_INLINE_BYTES)
        if len(inf.inputs) != 1 or len(plan.reqs) != 1 or len(raws) > 1:
            return None
        t = inf.inputs[0]
        size = _ITEMSIZE.get(t.datatype)
        if t.raw is None or size is None or "shared_memory_region" in t.params:
            return None
        r, client = plan.reqs[0], self.v2.client
        fam = r.family
        if client is None or len(fam.selections) != 1:
            return None
        axes = (
            t.name in fam.axis_fields and len(t.shape) == 2
        )  # [k, n] per-axis positions (rope's position_ids)
        probe = self.probe(r, {t.name: [[0]] * int(t.shape[0])} if axes else {fam.selections[0]: [0]})
        if probe is None:
            return None
        view = self.view(probe)
        rows = None if view is None else rows_template(probe, view)
        if rows is None:
            return None
        shm = [x for x in tensors if x.name in fam.batched and x.region is not None]
        if shm and axes:  # its per-row bytes count k positions a row: the full path's
            return None
        if shm:
            if len(shm) != len([x for x in tensors if x.name in fam.batched]):
                return None  # some in shared memory, some in the answer: the full path's
            return self._shm_entry(rows, size, t, shm, segments, route, headers)
        gathered = {id(x.array) for x in tensors if x.name in fam.batched}
        parts, cur = [], []
        for seg in segments:
            if id(seg) in gathered:
                parts.append(b"".join(cur))
                cur = []
            else:
                cur.append(bytes(seg))
        parts.append(b"".join(cur))
        expected = b"".join(segments)
        e = Entry(rows, size, tuple(parts), len(t.raw), len(expected), route, headers)
        try:
            if e.answer(t.raw) != expected:
                return None
        except (TypeError, ValueError):  # parts that do not fit the template's arrays
            return None
        return e

    def probe(self, r, lists: dict):
        """The pipeline request of ``r``'s spec with ``lists`` as its selections (the family's
        template is made from a list body, as /v1 learns it), or None: not answered from a mapped table."""
        probe = self._request(r, lists)
        if probe is None or probe.table is None:
            return None
        if not self.v2.client.is_mapped(probe):
            self.unmapped = True  # (learnt again at the key's next answer)
            return None
        return probe

    def view(self, probe):
        """The mapped view a template is made from, or None: ``view()`` reads the manifest (at most
        every recheck_s), which can drop the mapping ``probe()`` just saw (the engine replaced the
        file), and its attach can fail (no descriptor left); then, as in ``probe()``, the key is
        ``unmapped`` and learnt again at its next answer, and no template is made from no table."""
        v = self.v2.client.view(probe)
        if v is None:
            self.unmapped = True
        return v

    def _request(self, r, lists: dict):
        try:
            return self.v2.inferer.pipeline.request(r.family.name, {**r.body, **lists})
        except Exception:  # the spec was valid with the real positions: nothing to learn here
            return None

    def _shm_entry(
        self, rows, size: int, t, shm: list, segments: list, route: str, headers: tuple
    ) -> Entry | None:
        """A template whose gathered outputs all went into shared memory: the answer is the same
        bytes every time, and the rows written must be what the full path wrote."""
        regions = tuple(
            (
                x.params["shared_memory_region"],
                x.params.get("shared_memory_offset"),
                x.params.get("shared_memory_byte_size"),
            )
            for x in shm
        )
        expected = b"".join(segments)
        n = len(t.raw) // size
        if any(x.array.nbytes % n for x in shm):
            return None
        e = Entry(
            rows,
            size,
            (expected,),
            len(t.raw),
            len(expected),
            route,
            headers,
            regions,
            self.v2.regions,
            shm[0].array.nbytes // n,
        )
        try:
            written = fill(rows, t.raw, size, (b"",) * (len(shm) + 1))
        except ValueError:  # not as many outputs as the template's arrays
            return None
        if written is None or written != b"".join(bytes(x.array) for x in shm):
            return None
        return e
