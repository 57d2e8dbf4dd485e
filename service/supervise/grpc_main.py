"""A gRPC server process of ``posenc serve`` (``--grpc-port``, ``--grpc-workers``):

    python -m posenc.service.supervise.grpc_main [--exit-with-parent]

Settings come from ``POSENC_*`` (service/core/settings.py; serve exports its flags there). The process
attaches the engine's shared tables through its own ``Client`` (no private copies), reports
``grpc.health.v1`` NOT_SERVING until every table is mapped and verified, then SERVING, and counts
its calls into the server's shared metrics. With ``tls_cert``/``tls_key`` it serves TLS, and with
``auth_token`` every call but health needs the bearer token (service/v2/grpc_auth.py). Several processes share
the port with SO_REUSEPORT (only when ``grpc_workers`` > 1, so that a port held by anything else is an error,
not a silent share). SIGTERM: stop accepting, finish what runs (the shutdown timeout), exit 0. A port that
cannot be bound exits 2 (``posenc serve`` then stops).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import signal
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from posenc.engine.reader.client import Client
from posenc.service import grpclane
from posenc.service.core.auth import gate_for
from posenc.service.core.readiness import attach_when_up
from posenc.service.core.settings import Settings, current
from posenc.service.metrics.counters import open_metrics
from posenc.service.v2.core import V2
from posenc.service.v2.grpc_auth import credentials, interceptors
from posenc.service.v2.grpc_server import SERVICE, GrpcV2

log = logging.getLogger("posenc.service")
EXIT_NO_PORT = 2


async def serve(s: Settings, stop: asyncio.Event) -> int:
    client = Client(s.shm_dir, s.namespace, build_timeout=s.build_timeout_s)
    ready = [False]
    # a metrics file that cannot be made (a full /dev/shm) costs this process's counts, never the
    # process: its calls are answered all the same (the log and /metrics say why)
    metrics, _ = open_metrics(s.shm_dir, s.namespace, "grpc", log)
    server = grpc.aio.server(
        interceptors=interceptors(s),
        options=[  # the bearer token: grpc_auth.py
            ("grpc.so_reuseport", 1 if s.grpc_workers > 1 else 0),
            ("grpc.max_receive_message_length", s.max_body_bytes),
            ("grpc.max_send_message_length", -1),
        ],
    )
    grpc_v2 = GrpcV2(V2(s, client, lambda: ready[0]), metrics)
    server.add_generic_rpc_handlers((grpc_v2.handler(),))
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    for name in ("", SERVICE):
        await health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    lane_on, why = grpclane.status(s)
    log.info("grpc: the gRPC lane is %s", why)
    lane = None
    try:
        if lane_on:  # grpcio behind the lane, on a private abstract socket: nothing left in a folder
            inner = f"unix-abstract:posenc-grpc.{os.getpid()}.{secrets.token_hex(6)}"
            server.add_insecure_port(inner)
        else:
            tls = credentials(s)  # TLS with the HTTPS certificate, when one is configured
            address = f"{s.host}:{s.grpc_port}"
            server.add_secure_port(address, tls) if tls is not None else server.add_insecure_port(address)
    except RuntimeError as e:
        print(f"posenc grpc: cannot listen on {s.host}:{s.grpc_port}: {e}", file=sys.stderr, flush=True)
        if metrics is not None:
            metrics.close()
        return EXIT_NO_PORT
    await server.start()
    if lane_on:
        from posenc.service.grpclane.lane import Lane

        channel = grpc.aio.insecure_channel(inner, options=_RELAY_OPTIONS)
        lane = Lane(
            grpc_v2, channel, gate_for(s), s.max_body_bytes, s.max_response_bytes, s.grpc_max_inflight_bytes
        )
        try:
            await lane.listen(s.host, s.grpc_port, reuse_port=s.grpc_workers > 1)
        except OSError as e:
            print(f"posenc grpc: cannot listen on {s.host}:{s.grpc_port}: {e}", file=sys.stderr, flush=True)
            await server.stop(0)
            if metrics is not None:
                metrics.close()
            return EXIT_NO_PORT
    attach = asyncio.create_task(_attach(client, s, ready, health))
    try:
        await stop.wait()
    finally:
        attach.cancel()
        await health.enter_graceful_shutdown()
        if lane is not None:
            await lane.close(s.shutdown_timeout_s)
            await lane.channel.close()
        await server.stop(s.shutdown_timeout_s)
        if metrics is not None:
            metrics.close()
    return 0


# the lane's channel to grpcio: no limits of its own (grpcio's server and the lane apply them)
_RELAY_OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


async def _attach(client: Client, s: Settings, ready: list, health: HealthServicer) -> None:
    """Map and verify every table (readiness), retrying while the engine starts."""
    n = await attach_when_up(lambda: client.attach_all(True, s.build_timeout_s))
    ready[0] = True
    for name in ("", SERVICE):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info("grpc: ready on port %d: %d tables attached and verified", s.grpc_port, n)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m posenc.service.supervise.grpc_main", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--exit-with-parent", action="store_true", help="get SIGTERM when the parent dies (Linux)")
    args = p.parse_args(argv)
    s = current()
    logging.basicConfig(
        level=s.log_level.upper() if s.log_level != "trace" else "DEBUG",
        format="%(levelname)s:     %(message)s",
    )
    if args.exit_with_parent:
        from posenc.engine.process.proclife import exit_with_parent

        exit_with_parent()

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await serve(s, stop)

    return asyncio.run(run())


if __name__ == "__main__":
    raise SystemExit(main())
