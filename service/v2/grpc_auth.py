"""Who may call the gRPC server: TLS and the bearer token, from the settings the HTTP side uses
(``tls_cert``/``tls_key``, ``auth_token``; service/core/settings.py).

- TLS: with a certificate and key, the port is served with ``grpc.ssl_server_credentials`` (the
  same PEM files HTTPS uses); without them, plaintext, as before.
- The token: every call of ``inference.GRPCInferenceService`` must carry the metadata
  ``authorization: Bearer <token>``, checked by service/core/auth.py's ``Gate`` (constant time: the
  digests of the token and the credentials are compared); any other call is refused with
  UNAUTHENTICATED before the method runs, whether the method exists or not (a caller without the
  token learns nothing of the service). ``grpc.health.v1.Health`` stays open: probes carry no
  token, as /healthz and /readyz stay open on HTTP. Without a token there is no interceptor.
"""

from __future__ import annotations

import grpc

from posenc.service.core.auth import Gate, gate_for
from posenc.service.core.settings import Settings

OPEN = ("/grpc.health.v1.Health/",)
MISSING = "missing bearer token: send the metadata 'authorization: Bearer <token>'"
INVALID = "invalid bearer token"


def credentials(s: Settings) -> grpc.ServerCredentials | None:
    """The server's TLS credentials, or None: plaintext."""
    if s.tls_cert is None or s.tls_key is None:
        return None
    with open(s.tls_key, "rb") as f:
        key = f.read()
    with open(s.tls_cert, "rb") as f:
        chain = f.read()
    return grpc.ssl_server_credentials([(key, chain)])


def interceptors(s: Settings) -> list:
    gate = gate_for(s)
    return [TokenCheck(gate)] if gate is not None else []


class TokenCheck(grpc.aio.ServerInterceptor):
    def __init__(self, gate: Gate):
        self.gate = gate

    async def intercept_service(self, continuation, details):
        if details.method.startswith(OPEN):
            return await continuation(details)
        value = None
        for k, v in details.invocation_metadata or ():
            if k == "authorization":
                value = v.encode("latin-1") if isinstance(v, str) else v
                break
        if value is not None and self.gate.check(value):
            return await continuation(details)
        return refusal(MISSING if value is None else INVALID)


def refusal(message: str) -> grpc.RpcMethodHandler:
    """A handler that answers any call (unary or streamed) with UNAUTHENTICATED, reading nothing.
    As a stream-stream handler it serves unary calls too: a unary request is one message in."""

    async def refuse(requests, ctx):
        await ctx.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        yield b""  # never reached: makes this an async generator

    return grpc.stream_stream_rpc_method_handler(refuse)
