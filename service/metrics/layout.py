"""The layout of a worker's metrics file, shared by the counters (counters.py), the fold of dead
workers' counts (fold.py) and the text format (text.py): routes, statuses, buckets and cells."""

from __future__ import annotations

import os
import struct

from posenc.engine.tables import FAMILIES
from posenc.service.core.errors import GRPC_CODES
from posenc.service.core.settings import HEALTH_PATH, METRICS_PATH, READY_PATH

# the routes a request's path names by itself (the raw front counts any other path as "other")
PATH_ROUTES = (
    *(f"/v1/{name}" for name in FAMILIES),
    "/v1/tables",
    "/v1/models",
    HEALTH_PATH,
    READY_PATH,
    METRICS_PATH,
    "/docs",
)
ROUTES = (
    *PATH_ROUTES,
    # KServe v2 (service/v2): REST inference per family model, table models together, the
    # rest of /v2; gRPC ModelInfer and ModelStreamInfer messages the same way, other methods
    *(f"/v2/models/{name}/infer" for name in FAMILIES),
    "/v2/models/<table>/infer",
    "/v2",
    *(f"grpc ModelInfer {name}" for name in FAMILIES),
    "grpc ModelInfer <table>",
    *(f"grpc ModelStreamInfer {name}" for name in FAMILIES),
    "grpc ModelStreamInfer <table>",
    "grpc",
    "other",
)
STATUSES = (200, 400, 404, 405, 406, 413, 422, 500, 503, 0)  # 0: any other status
BUCKETS_S = (
    10e-6,
    20e-6,
    30e-6,
    40e-6,
    50e-6,
    60e-6,
    70e-6,
    80e-6,
    90e-6,
    100e-6,
    125e-6,
    150e-6,
    200e-6,
    250e-6,
    300e-6,
    400e-6,
    500e-6,
    750e-6,
    1e-3,
    2.5e-3,
    5e-3,
    10e-3,
    25e-3,
    50e-3,
    100e-3,
    250e-3,
    1.0,
)
NB = len(BUCKETS_S) + 1  # + the +Inf bucket
BUCKETS_F64 = struct.pack(f"={len(BUCKETS_S)}d", *BUCKETS_S)  # the bounds as the C lane counts with them
CELLS = NB + 2  # + the sum of seconds, the sum of response bytes
# The ways an answer is made (posenc_answer_path_total): "c", the hot lane's whole-request C call
# from the socket's bytes to the response's (service/protocol/uvicorn_api.py); "shortcut", the C
# template answering a request Python read (the lane after httptools and the raw ASGI front, through
# the front's one door; the gRPC server's); "python", the full path (and every refusal).
PATHS = ("c", "shortcut", "python")
# the routes whose answers may take a C path: /v1 families, v2 REST inference, gRPC ModelInfer
ANSWER_ROUTES = tuple(
    r
    for r in ROUTES
    if r.startswith(("/v1/", "/v2/models/", "grpc Model")) and r not in ("/v1/tables", "/v1/models")
)
# rows: ROUTES (the python path's answers), then each answer route's "c" row and its "shortcut" row
# next to it (200s only: a C path answers nothing else), then a header (this file's token)
PATH_ROW = {
    (route, path): len(ROUTES) + 2 * i + j
    for i, route in enumerate(ANSWER_ROUTES)
    for j, path in enumerate(PATHS[:2])
}
SHAPE = (len(ROUTES) + 2 * len(ANSWER_ROUTES) + 1, len(STATUSES), CELLS)
TO_SHORTCUT = len(STATUSES) * CELLS  # one row: a route's "shortcut" offset less its "c" offset
ROUTE_INDEX = {r: i for i, r in enumerate(ROUTES)}
# gRPC calls are counted and shown under the HTTP status of their code (service/core/errors.py
# GRPC_CODES: OK 200, INVALID_ARGUMENT 400, NOT_FOUND 404, UNIMPLEMENTED 405, RESOURCE_EXHAUSTED 413,
# INTERNAL 500, UNAVAILABLE 503), so one status label means one thing on every route
GRPC_STATUSES = {grpc_code.name: status for status, grpc_code in GRPC_CODES.items()}
# which server counts into a file: its header row's cell [-1, 0, 1] holds the index (0: an HTTP worker)
KINDS = ("http", "grpc")
STATUS_INDEX = {s: i for i, s in enumerate(STATUSES)}


def prefix(namespace: str) -> str:
    return f"{namespace}.metrics."


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
