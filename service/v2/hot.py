"""The v2 shortcut: a repeated inference of a row family answered by one C call, on both
transports (gRPC ``ModelInfer``: service/v2/grpc_server.py; REST binary ``infer``: rest.py,
through the raw-ASGI front, service/front/front.py).

Decode-time clients send the same request again and again with new positions. After the full
path (service/v2/infer.py: plan, arrays, the transport's encoding) has answered a request whose
only input is raw INT32/INT64 ``positions`` of a rope or sinusoidal model, the request's bytes
around the positions become a key:
- gRPC: the serialized ModelInferRequest before its one ``raw_input_contents`` field, when that
  field is the message's last and only one (so the key is a run of whole fields: a later message
  that is the key plus one such field of the same length is the same request with other positions);
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
each time costs a set entry per request, not a template). At learn time the template's answer to
the learnt positions must equal the full path's bytes, or the key is remembered as not a template. Templates
are dropped when the engine's manifest changes other than by gaining tables (an eviction, a repair, a
restart), to be learnt again.
"""

from __future__ import annotations

import dataclasses
import threading

from posenc.service.metrics.counters import Metrics
from posenc.service.shortcut.templates import (
    MAX_KEY_BYTES,
    NATIVE,
    RowsEntry,
    V2Route,
    fill,
    fill_into,
    rows_template,
    shortcut_in_use,
    still_mapped,
)
from posenc.service.v2.errors import BadRequest
from posenc.service.v2.hot_blocks import block_entry
from posenc.service.v2.hot_json import DATA, JsonInfers
from posenc.service.v2.infer import LENGTH_HEADER
from posenc.service.v2.wire import varint

MAX_KEYS = 1024
# larger answers are filled in a thread; fill runs at memory speed (8 MiB: ~0.3 ms here)
FILL_INLINE_BYTES = 8 << 20
SCRATCH_BYTES = 16 << 20  # rows for shared memory are gathered into a per-thread buffer of at most this
_RAW_INPUT = 0x3A  # ModelInferRequest.raw_input_contents: field 7, length-delimited
_ITEMSIZE = {"INT32": 4, "INT64": 8}
REFUSED_HEADERS = (b"content-encoding",)  # a compressed body: the full path decodes it


def head_lines(headers) -> bytes:
    """A v2 shortcut answer's head after its content length: the entry's extra headers, as
    uvicorn writes the ASGI headers the raw front sends."""
    return b"\r\n" + b"".join(b"%s: %s\r\n" % (k.lower(), v) for k, v in headers)


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    rows: object  # service._hot.RowsTemplate
    itemsize: int  # of the positions: 4 or 8
    parts: tuple  # the answer's bytes around each gathered array
    nbytes: int  # the positions' bytes
    size: int  # the answer's bytes
    marker: bytes  # gRPC: the raw_input_contents field's tag and length, before the positions
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

    def grpc_positions(self, data: bytes, at: int):
        """The positions (a memoryview) of a serialized request whose key ends at ``at``, or None:
        the rest is not the learnt raw field of the learnt length."""
        if len(data) - at != len(self.marker) + self.nbytes or not data.startswith(self.marker, at):
            return None
        return memoryview(data)[at + len(self.marker) :]

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
        self.known: dict = {}  # key -> Entry, or None: not a template
        self.tails: dict[int, int] = {}  # gRPC: bytes after a key -> how many entries have that tail
        self.paths: set = set()  # REST: the paths with entries
        # REST: request target -> its route in the C lane (service/shortcut/hot_lane.c, a whole
        # request in one call): a V2Route (new_route: the metrics offset of its "c" answers,
        # {JSON header: RowsEntry | BlockEntry}, LENGTH_HEADER, REFUSED_HEADERS, DATA and its
        # {key: JsonEntry} of service/v2/hot_json.py)
        self.lane_routes: dict = {}
        self.json = JsonInfers(self)
        self.once: set = set()  # keys the full path has answered once
        # set while learning a key whose table this process has not mapped yet (being built, or
        # built and not attached: mapping follows the manifest by a few ms): the key is learnt
        # again at its next answer, not kept as no template until the next manifest
        self.unmapped = False
        self._seen = None

    def fresh(self) -> None:
        """Check the templates against the engine's manifest (the lane calls it every few ms)."""
        self._fresh()

    def _fresh(self) -> None:
        """A manifest that only gained tables (``still_mapped``, the /v1 templates' rule: new specs
        arrive every second in a fleet) keeps the templates and forgets only the keys remembered
        as no template (one may have waited for a table now built); any other change drops all."""
        m = self.v2.client.manifest() if self.v2.client is not None else None
        if m is not self._seen:
            if still_mapped(self._seen, m):
                for k in [k for k, e in self.known.items() if e is None]:
                    del self.known[k]
            else:
                self._clear()
            self._seen = m

    def _clear(self) -> None:
        self.known.clear()
        self.tails.clear()
        self.paths.clear()
        self.lane_routes.clear()

    # -- lookups ----------------------------------------------------------------------------------
    def grpc(self, data: bytes):
        """(entry, positions) for a serialized ModelInferRequest, or None."""
        if not self.tails:
            return None
        self._fresh()
        n = len(data)
        for tail in self.tails:
            if tail < n:
                e = self.known.get(data[: n - tail])
                positions = e.grpc_positions(data, n - tail) if e is not None else None
                if positions is not None:
                    return e, positions
        return None

    def rest(self, path: str, body: bytes, headers):
        """(entry, positions) for a v2 REST infer body and its ASGI headers, or None."""
        hl = None
        for k, v in headers:
            if k == LENGTH_HEADER:
                if hl is not None:
                    return None
                hl = v
            elif k in REFUSED_HEADERS:
                return None
        if hl is None or not hl.isdigit():
            return None
        self._fresh()
        n = int(hl)
        e = self.known.get((path, body[:n]))
        if e is None or len(body) - n != e.nbytes:
            return None
        return e, memoryview(body)[n:]

    # -- learning ---------------------------------------------------------------------------------
    def admit(self, key) -> bool:
        """Whether to learn ``key`` now: the second time the full path answers it. A key seen once
        (a request with a fresh id each time) costs a set entry, not a template; a full set or
        table of keys is dropped, to be learnt again."""
        if key in self.known:
            return False
        if key not in self.once:
            if len(self.once) >= MAX_KEYS:
                self.once.clear()
            self.once.add(key)
            return False
        self.once.discard(key)
        self._fresh()
        if len(self.known) >= MAX_KEYS:
            self._clear()
        return True

    def learnt(self, key, make):
        """``make()``'s entry for an admitted ``key`` (None: not a template), remembered: but a None
        made while the key's table was not mapped in this process (``unmapped``: being built, or
        mapped anew because the engine replaced its file, which the manifest read at learning, in
        ``admit``, can show after the answer was made) is not: the key is learnt at its next answer,
        not kept as no template until the next manifest. All three forms learn through it."""
        self.unmapped = False
        e = make()
        if e is None and self.unmapped:
            self.once.add(key)
            return None
        self.known[key] = e
        return e

    def learn_grpc(self, data: bytes, inf, plan, tensors: list, segments: list, route: str) -> None:
        if not self.on:
            return
        cut = _last_raw_inputs(data)
        if cut is None:
            return
        start, markers = cut
        key = data[:start]
        if len(key) > MAX_KEY_BYTES or not self.admit(key):
            return
        e = self.learnt(key, lambda: self._entry(inf, plan, tensors, segments, markers, route, ()))
        if e is not None:
            tail = len(data) - start
            self.tails[tail] = self.tails.get(tail, 0) + 1

    def learn_rest(
        self, path: str, head: bytes, inf, plan, tensors: list, segments: list, route: str, headers: tuple
    ) -> None:
        if not self.on or len(head) > MAX_KEY_BYTES:
            return
        key = (path, bytes(head))
        if not self.admit(key):
            return
        e = self.learnt(key, lambda: self._entry(inf, plan, tensors, segments, (), route, headers))
        if e is not None:
            self.paths.add(path)
            self._lane_route(path, key[1], e)

    def _lane_route(self, path: str, head: bytes, e: Entry) -> None:
        """Hand a REST entry to the C lane: small answers into the message (not shared memory)."""
        if not e.inline or e.regions or not path.isascii():
            return
        self.route_of(path.encode("ascii"), e.route).entries[head] = e.lane_entry(head_lines(e.headers))

    def route_of(self, target: bytes, name: str):
        """The C lane's route of a request target (made, empty, when it has none)."""
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
        self, inf, plan, tensors: list, segments: list, markers: tuple, route: str, headers: tuple
    ) -> Entry | None:
        """The template of an answered inference, or None: its answer's ``segments`` (bytes, and
        the output ``tensors``' arrays as they were joined) with the family template's rows (or
        block: hot_blocks.py) in place of the row-gathered arrays must be the full path's bytes for
        the learnt positions. ``markers``: gRPC's raw fields' tags and lengths; REST: ()."""
        if len(plan.model.family.selections) == 2:
            return block_entry(
                self.v2, inf, plan, tensors, segments, markers, route, headers, FILL_INLINE_BYTES
            )
        if len(inf.inputs) != 1 or len(plan.reqs) != 1 or len(markers) > 1:
            return None
        marker = markers[0] if markers else b""
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
            return self._shm_entry(rows, size, t, shm, segments, marker, route, headers)
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
        e = Entry(rows, size, tuple(parts), len(t.raw), len(expected), marker, route, headers)
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
        self, rows, size: int, t, shm: list, segments: list, marker: bytes, route: str, headers: tuple
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
            marker,
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


def _last_raw_inputs(data: bytes) -> tuple[int, tuple] | None:
    """(where the first of them starts, each one's tag and length) when a serialized message's
    top-level fields end with all its ``raw_input_contents`` fields, each written minimally; else None."""
    i, n, starts, tags = 0, len(data), [], []
    while i < n:
        starts.append(i)
        tag, i = _varint(data, i)
        if tag is None:
            return None
        tags.append(tag)
        wire = tag & 7
        if wire == 0:
            _, i = _varint(data, i)
        elif wire == 2:
            size, j = _varint(data, i)
            if size is None:
                return None
            i = j + size
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            return None
        if i is None or i > n:
            return None
    raws = tags.count(_RAW_INPUT)
    if raws == 0 or tags[len(tags) - raws :] != [_RAW_INPUT] * raws:
        return None
    starts.append(n)
    markers = []
    for k in range(len(tags) - raws, len(tags)):
        size, j = _varint(data, starts[k] + 1)
        marker = data[starts[k] : j]
        if (
            data[starts[k]] != _RAW_INPUT
            or j + size != starts[k + 1]
            or marker != bytes([_RAW_INPUT]) + varint(size)
        ):
            return None
        markers.append(marker)
    return starts[len(tags) - raws], tuple(markers)


def _varint(data: bytes, i: int):
    out, shift = 0, 0
    while i < len(data) and shift < 64:
        b = data[i]
        out |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            return out, i
        shift += 7
    return None, None
