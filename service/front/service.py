"""The request path shared by the raw-ASGI hot path and the FastAPI routes.

validate (strict parser; the spec part of a body is parsed once and cached under its canonical
bytes) -> size limits -> which shared table -> read-only view (built once by the engine if new)
-> gather / block -> encode. Domain errors carry their status; ``error_response`` (service/core/errors.py) maps them.
"""

from __future__ import annotations

import dataclasses
import logging

import orjson

from posenc.engine.answer import pipeline
from posenc.engine.answer.pipeline import Request
from posenc.engine.core import jsonread
from posenc.engine.core.encode import CONTENT_TYPES, encode, json_ready
from posenc.engine.core.errors import SpecError
from posenc.engine.reader.client import Client
from posenc.service.core import sizing
from posenc.service.core.settings import INLINE_BYTES, INLINE_JSON_BYTES, Settings
from posenc.service.front.negotiate import CACHED_ACCEPT, choose
from posenc.service.shortcut import templates as replay
from posenc.service.shortcut.store import Store
from posenc.service.shortcut.templates import Templates

log = logging.getLogger("posenc.service")

LANE_RECHECK_S = 0.005  # the hot lane's templates are checked against the manifest this often
HOT_BYTES = 4 << 20  # the C template shortcut fills up to this on the loop (memory speed: ~0.2 ms)


@dataclasses.dataclass(slots=True)
class Job:
    r: Request
    fmt: str
    inline: bool
    raw: bytes


class Service:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.client = Client(settings.shm_dir, settings.namespace, build_timeout=settings.build_timeout_s)
        self.ready = False
        self.shortcut = replay.shortcut_in_use(settings.shortcut)  # "c" or "off": /v1/tables shows it
        replay.configure(settings)  # the C side's limits: this worker's
        # every learnt template of this process (/v1's here, v2's: service/v2/hot.py), in one store
        self.store = Store(self.client.manifest)
        # the C side bounds an answer's arrays, not its text: a bound under which even a JSON text
        # of 2-byte cells (17 bytes each at most) and a safetensors header fit the response limit
        self.templates = Templates(
            self.store, settings.max_positions, min(HOT_BYTES, settings.max_response_bytes * 2 // 17)
        )
        # raw Accept values (None: no Accept) the negotiator chose safetensors (0) or JSON (1) for
        self.accepts: dict[bytes | None, int] = {}
        self.lane_state = lambda: ("off", 0)  # (/v1/tables' lane, its answers): the app sets it

    # -- phase 1: cheap, on the event loop ------------------------------------------------------
    def prepare(self, family: str, raw: bytes, accept: str | None) -> Job:
        fmt = choose(accept)  # 406 before any work
        if (
            fmt in replay.FORMATS
            and len(self.accepts) < 256
            and (accept is None or len(accept) <= CACHED_ACCEPT)
        ):
            self.accepts[None if accept is None else accept.encode("latin-1")] = replay.FORMATS[fmt]  # for C
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as e:  # config.json's NaN/Infinity, inside hf_config only
            try:
                body = jsonread.lenient(raw, e, jsonread.in_hf_config)
            except orjson.JSONDecodeError:
                raise SpecError((), f"JSON decode error: {e}", "json_invalid") from None
        if not isinstance(body, dict):
            raise SpecError((), "the body must be a JSON object", "dict_type")
        r = self.client.resolve(family, body)
        # the limit holds for the body itself (its JSON text, its npz or safetensors file), bounded
        # here before anything is built (service/core/sizing.py)
        size = sizing.check_request(r, fmt, self.settings.max_response_bytes, self.settings.max_positions)
        return Job(r, fmt, size <= (INLINE_JSON_BYTES if fmt == "json" else INLINE_BYTES), raw)

    def hot(self, family: str, raw: bytes, headers, json: bool = False):
        """The template shortcut in C (service/shortcut/_hot.c) for a rope, sinusoidal or alibi body and
        its ASGI headers: its safetensors bytes, or None when it does not apply (the full path
        answers). ``json``: JSON answers too, as (bytes, format: 0 safetensors, 1 JSON). Only when
        ``self.shortcut == "c"``."""
        self.store.fresh()  # templates dropped here leave none to answer from: C declines
        return replay.answer(raw, headers, self.accepts, self.templates.native[family], family, json)

    def lane_reader(self, routes, post: bytes, counts) -> replay.Reader:
        """The hot lane's whole-request reader of this worker (service/protocol/lane.py;
        ``replay.Reader``, C), which each connection binds to its transport: every whole plain POST
        at the start of a read to a path of ``routes`` answered in C from the request's bytes to the
        response's (the head's start + content length + ``post``, then the answer; templates.py
        ``answer_request`` says which it answers), written and counted in ``counts`` (a Metrics'
        ``native``, or (None, b"")), in one C call per read (one whose header or text must be
        computed first through ``replay.lane_again``, inside it). The templates are checked against
        the manifest at most every LANE_RECHECK_S of the event loop's clock (the client reads the
        manifest at most every 50 ms anyway; templates dropped there leave none to answer from: C
        declines)."""
        return replay.Reader(
            routes=routes,
            accepts=self.accepts,
            native=self.templates.native,
            post=post,
            counts=counts[0],
            buckets=counts[1],
            again=replay.lane_again,
            fresh=self.store.fresh,
            every=LANE_RECHECK_S,
        )

    # -- phase 2: the work (inline for small answers from mapped tables, else in a thread) -----
    def execute(self, job: Job) -> tuple[bytes, str]:
        r = job.r
        view = self.client.view(r)
        result = pipeline.arrays(r, view)
        if job.fmt == "json" and not job.inline:  # (in a thread) orjson in pieces, sent as blocks (never
            # one copy of the whole text): the loop gets the GIL between them
            out = (
                sizing.json_blocks({k: json_ready(v, r.dtype) for k, v in result.items()}),
                CONTENT_TYPES["json"],
            )
        else:
            out = encode(r.family, result, r.dtype, job.fmt)
        if (
            view is not None and self.shortcut == "c"
        ):  # (big answers run in a thread: the dicts it adds to are GIL-safe)
            self.store.fresh()  # learnt under the manifest it was answered from, not dropped at the next hot()
            self.templates.learn(job.fmt, job.raw, r, view)
        return out

    def run(self, family: str, raw: bytes, accept: str | None) -> tuple[bytes, str]:
        """prepare + execute in one go (in a thread, for bodies too large to parse on the loop)."""
        return self.execute(self.prepare(family, raw, accept))

    def is_mapped(self, job: Job) -> bool:
        return self.client.is_mapped(job.r)

    # -- readiness -----------------------------------------------------------------------------
    def attach_all(self, wait_s: float = 0.5) -> int:
        """Map every table in the manifest and verify its checksum (readiness). Waits at most
        ``wait_s`` for a manifest: the app's readiness loop asks again, and a worker told to stop
        while no engine has come must not sit in this thread for the whole build timeout."""
        return self.client.attach_all(verify=True, timeout=wait_s)

    def tables(self) -> dict:
        from posenc.engine import kernels_info
        from posenc.service import grpclane

        m = self.client.manifest() or {}
        lane, lane_answers = self.lane_state()
        return {
            "generation": m.get("generation"),
            "engine_pid": m.get("pid"),
            "backend": kernels_info(),
            "engine_backend": m.get("backend"),
            "shortcut": self.shortcut,
            "lane": lane,
            "lane_answers": lane_answers,
            # the gRPC processes' lane (service/grpclane): on, or off and why, from the same settings
            "grpc_lane": grpclane.status(self.settings)[1],
            "ready": self.ready,
            # every configured table by name: stored (in shared memory) or computed (no room)
            "named": [
                {
                    "name": e["name"],
                    "family": e["family"],
                    "digest": e["digest"],
                    "answered": "stored" if e.get("stored") else "computed",
                }
                for e in m.get("named", ())
            ],
            "tables": [
                {k: e[k] for k in ("name", "family", "dtype", "length", "nbytes", "pinned", "crc32", "file")}
                | {"key": orjson.loads(e["key"]), "digest": d}
                for d, e in (m.get("tables") or {}).items()
            ],
        }
