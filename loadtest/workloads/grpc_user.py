"""A locust User that speaks gRPC: grpcio (made gevent-friendly) inside a locust User, each call
reported through locust's request event like FastHttpUser's, so gRPC rows sit beside the HTTP
ones in locust's statistics, CSV and HTML.

The target is ``--posenc-grpc HOST:PORT`` / $LOADTEST_GRPC (default: the --host's host, port 8001).
Requests and responses pass as bytes (no protobuf work on the client beyond building a request).
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import grpc
from grpc.experimental import gevent as grpc_gevent
from locust import User

from ..drivers.h2load import INFER

grpc_gevent.init_gevent()  # grpcio's blocking calls yield to gevent instead of stalling every user


def grpc_target(opts, host: str | None) -> str:
    given = getattr(opts, "posenc_grpc", "") if opts is not None else ""
    return given or f"{urlsplit(host or 'http://127.0.0.1').hostname}:8001"


class GrpcUser(User):
    abstract = True
    timeout_s = 10.0

    def on_start(self):
        target = grpc_target(self.environment.parsed_options, self.host)
        self.channel = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", -1)])
        self.infer = self.channel.unary_unary(INFER)

    def on_stop(self):
        self.channel.close()

    def call(self, name: str, request: bytes) -> bytes | None:
        """One ModelInfer; reported to locust as request type "grpc" (failed: the gRPC code)."""
        t0, exc, out = time.perf_counter(), None, None
        try:
            out = self.infer(request, timeout=self.timeout_s)
        except grpc.RpcError as e:
            exc = RuntimeError(f"{e.code().name}: {e.details()}")
        self.environment.events.request.fire(
            request_type="grpc",
            name=name,
            response_time=(time.perf_counter() - t0) * 1000,
            response_length=len(out or b""),
            exception=exc,
            context={},
        )
        return out
