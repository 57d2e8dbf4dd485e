"""A report's scenario: the requests the probe and wrk send, and the floors' answers to them.

- ``decode`` (the default): the request kinds of ``--kinds`` (loadtest/workloads/payloads.py; the decode RoPE
  row unless told otherwise), a pool of 512 with varying positions;
- ``realistic-mix`` (loadtest/workloads/mix.py): 2,048 requests drawn over the table config's models, their
  context and past it, binary and JSON, /v1 and v2 REST; and, while posenc is measured, a few new
  specs per second (``--new-specs-per-s``).

Each pool request is sent to posenc once before anything is measured; the floors (loadtest/floors/asgi_app.py,
loadtest/floors/http_protocol.py) answer each request with exactly the bytes posenc answered it with.
"""

from __future__ import annotations

import contextlib
import os

from .. import servers
from ..drivers import probe
from ..floors.asgi_app import save_requests
from . import mix, payloads

NAMES = ("decode", mix.NAME)


def add_arguments(p) -> None:
    p.add_argument(
        "--scenario",
        choices=NAMES,
        default="decode",
        help="what the probe and wrk send: decode (--kinds) or realistic-mix (loadtest/workloads/mix.py)",
    )
    p.add_argument(
        "--new-specs-per-s",
        type=float,
        default=3.0,
        help="realistic-mix: RoPE specs no table holds, sent per second while posenc is measured",
    )


def answer(url: str, path: str, headers: dict, body: bytes, kind: str) -> tuple:
    """posenc's answer to one request, as a floor answers it (floor.save_requests): (path, request
    body, content type, answer, [(header, value)]); a status other than 200 raises."""
    status, head, content = servers.http_post_headers(url + path, body, headers)
    if status != 200:
        raise RuntimeError(f"posenc answered {status} to the probe's {kind} request: {content[:300]!r}")
    extra = [(h, head[h]) for h in ("inference-header-content-length",) if h in head]
    return path, body, head.get("content-type", ""), content, extra


def prepare(args, url: str, cfg: dict, out: str) -> dict:
    """The pool (requests, kinds, names, items), posenc's answer to each (saved for the floors as
    ``floor_requests.json``) and a sample per kind for the report."""
    host = url.split("//", 1)[1]
    if args.scenario == mix.NAME:
        reqs, kinds, names, items = mix.build(host, args.tables)
    else:
        reqs, kinds, names = probe.build_requests(host, probe.parse_kinds(args.kinds), cfg=cfg)
        items = []
        for raw, k in zip(reqs, kinds):
            path, accept, _ = payloads.KINDS[names[k]]
            items.append(
                (path, {"Accept": accept, "Content-Type": "application/json"}, raw.split(b"\r\n\r\n", 1)[1])
            )
    answers, samples, seen = [], [], set()
    for (path, headers, body), k in zip(items, kinds):
        answers.append(answer(url, path, headers, body, names[k]))
        if k not in seen:
            seen.add(k)
            _, _, ctype, content, _ = answers[-1]
            samples.append(
                {
                    "kind": names[k],
                    "path": path,
                    "request_bytes": len(body),
                    "response_bytes": len(content),
                    "content_type": ctype,
                }
            )
    floor_requests = os.path.join(out, "floor_requests.json")
    save_requests(floor_requests, answers)
    return {
        "requests": reqs,
        "kinds": kinds,
        "names": names,
        "items": items,
        "floor_requests": floor_requests,
        "samples": samples,
        "pool": len(reqs),
    }


def locust_args(args, grpc: str | None) -> list[str]:
    """The locustfile's options for this scenario (and the gRPC target, when there is one)."""
    extra = ["--posenc-grpc", grpc] if grpc else []
    if args.scenario == mix.NAME:
        extra += ["--posenc-scenario", mix.NAME]
    if args.tables:
        extra += ["--posenc-tables", os.path.abspath(args.tables)]
    return extra


@contextlib.contextmanager
def new_specs(args, url: str, into: list):
    """While posenc is measured in the realistic mix: a few new specs per second (appended to ``into``)."""
    if args.scenario != mix.NAME or args.new_specs_per_s <= 0:
        yield
        return
    t = mix.NewSpecs(url, args.new_specs_per_s, seed=None)
    t.start()
    try:
        yield
    finally:
        into.append(t.stop())
