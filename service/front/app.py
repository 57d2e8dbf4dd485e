"""App factory: FastAPI routes (documented in /docs) behind the raw-ASGI hot path.

uvicorn runs ``service.app:create_app`` as a factory in each worker; settings come from
``POSENC_*`` variables (service/core/settings.py; ``posenc serve`` sets them from its flags).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import multiprocessing
import signal

import anyio
from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from posenc.engine.models import registry
from posenc.engine.process.proclife import exit_with_parent
from posenc.engine.tables import FAMILIES
from posenc.service.core import auth as guard
from posenc.service.core.readiness import attach_when_up, readiness
from posenc.service.core.settings import HEALTH_PATH, METRICS_PATH, READY_PATH, Settings, current
from posenc.service.front import openapi
from posenc.service.front.front import FastFront, handle_family
from posenc.service.front.service import Service
from posenc.service.metrics.counters import open_metrics
from posenc.service.metrics.page import page as metrics_page
from posenc.service.protocol import uvicorn_api
from posenc.service.protocol.lane import STATE_KEY, Lane
from posenc.service.v2 import rest as v2_rest
from posenc.service.v2.core import V2

log = logging.getLogger("posenc.service")


def tune_malloc() -> bool:
    """glibc: keep freed response buffers (up to 32 MiB) in the heap for reuse. By default
    glibc maps each large buffer fresh and unmaps it on free, so every multi-MiB response paid a
    page fault per 4 KiB (a 4096 x 128 RoPE answer: 4.3 ms in-process, 0.22 ms with this)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
        return bool(
            libc.mallopt(M_MMAP_THRESHOLD, 32 * 2**20)
            and libc.mallopt(M_TRIM_THRESHOLD, 256 * 2**20)
            and libc.mallopt(M_TOP_PAD, 64 * 2**20)
        )
    except (OSError, AttributeError):  # not glibc
        return False


def die_with_parent() -> None:
    """A uvicorn worker (a spawned child of ``posenc serve``) gets SIGTERM when its parent dies,
    even by SIGKILL, and so never keeps serving the port as an orphan."""
    import multiprocessing

    parent = multiprocessing.parent_process()
    if parent is not None:
        exit_with_parent(signal.SIGTERM, parent.pid)


def create_app(settings: Settings | None = None):
    settings = settings or current()
    die_with_parent()
    tune_malloc()
    svc = Service(settings)
    front_holder: dict = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        # e.g. a full shared memory: serve without this worker's counts (the log and /metrics say why)
        metrics, missing = open_metrics(settings.shm_dir, settings.namespace, "http", log)
        front = front_holder["front"]
        front.metrics, front.metrics_missing = metrics, missing
        task = asyncio.create_task(_attach(svc))
        try:
            # the protocol (service/protocol/uvicorn_api.py) finds this worker's lane in the
            # lifespan state uvicorn hands it: no module global, no import of the front
            yield {STATE_KEY: front.lane} if front.lane is not None else None
        finally:
            task.cancel()
            if metrics is not None:
                metrics.close()

    app = FastAPI(
        title="posenc",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        description="Exact positional encodings from shared memory. Binary responses: "
        "`Accept: application/x-safetensors` (or `application/x-npz`); see README.",
    )
    app.state.svc = svc
    openapi.install(app, settings)  # the typed document and /docs with bundled assets

    for family in FAMILIES.values():
        _add_family_route(app, svc, family)

    @app.get("/v1/tables", summary="What is in shared memory, and the kernel backend")
    async def tables():
        return svc.tables()

    @app.get(
        "/v1/models",
        summary="The model types whose config.json hf_config reads, by family, "
        "and the rotary ones it does not read, with the reason",
    )
    async def models():
        return Response(registry.catalogue(), media_type="application/json")

    @app.get(HEALTH_PATH, summary="Alive")
    async def healthz():
        return {"status": "ok"}

    @app.get(
        READY_PATH,
        summary="200 once the tables are attached and their checksums verified; "
        "stays 200 while the engine restarts (answers are computed meanwhile)",
    )
    async def readyz():  # service/core/readiness.py says what it means
        status, body = await anyio.to_thread.run_sync(readiness, svc)
        return JSONResponse(body, status_code=status)

    @app.get(METRICS_PATH, response_class=PlainTextResponse, summary="Prometheus metrics (all workers)")
    async def metrics():  # service/metrics/page.py: requests, engine, shared memory, processes
        front = front_holder["front"]
        text = await anyio.to_thread.run_sync(
            metrics_page,
            front.metrics,
            svc.client,
            settings,
            getattr(multiprocessing.parent_process(), "pid", None),
            getattr(front, "metrics_missing", None),
        )
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    front = FastFront(app, svc)
    v2 = V2(settings, svc.client, lambda: svc.ready, svc.store)
    front.v2 = functools.partial(v2_rest.handle, v2)
    front.v2_hot = v2.hot if v2.hot.on else None
    front_holder["front"] = front
    # with CORS the lane is off: its middleware decorates every answer (service/core/auth.py)
    if not uvicorn_api.SUPPORTED:
        front.lane_off = uvicorn_api.WHY_OFF
    elif settings.lane == "on" and front.c_shortcut and not settings.cors_origin_list:
        front.lane = Lane(front)
    svc.lane_state = front.lane_state
    return guard.with_cors(front, settings)


async def _attach(svc: Service) -> None:
    """Background: wait for the engine's manifest, map and verify every table, then ready."""
    n = await attach_when_up(svc.attach_all)
    svc.ready = True
    log.info("ready: %d tables attached and verified", n)


class FamilyAnswer(Response):
    """The FastAPI route's answer to ``POST /v1/{family}``: the raw front's handler
    (front.py ``handle_family``: read the body, ``answer()``, send) run as the route's ASGI
    response, so the route OpenAPI documents and the raw front, which answers every such request
    first, are one code path below their routing: the same bytes, headers and refusals (a
    client gone mid-body gets nothing sent, on both)."""

    def __init__(self, svc: Service, family: str):  # no body of its own: Response's is not built
        self.svc, self.family, self.background = svc, family, None

    async def __call__(self, scope, receive, send):
        await handle_family(self.svc, self.family, scope, receive, send, [])
        if self.background is not None:
            await self.background()


def _add_family_route(app: FastAPI, svc: Service, fam) -> None:
    family = fam.name

    async def route():  # the body is read by the answer, not by FastAPI (openapi_extra documents it)
        return FamilyAnswer(svc, family)

    app.add_api_route(
        f"/v1/{family}",
        route,
        methods=["POST"],
        name=family,
        summary=f"{family}: {fam.returns}",
        responses=openapi.family_responses(fam),
        openapi_extra=openapi.family_request(fam),
    )
