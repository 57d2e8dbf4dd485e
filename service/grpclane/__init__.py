"""The gRPC lane: the HTTP/2 twin of the HTTP lane (docs/kserve.md, "The gRPC lane").

A gRPC process (service/supervise/grpc_main.py) with the lane on owns the gRPC port with its own asyncio
protocol (lane.py), one nghttp2 server session per connection (_h2.c: libnghttp2 in C frames,
parses, flow-controls). A ModelInfer call whose request a learnt template answers at once (one C
call, service/shortcut/hot_grpc.c grpc_answer) is answered on the read's own turn of the loop, a
learnt answer too large for the loop in a thread; ModelStreamInfer is the lane's own; every other
call (ModelInfer the shortcut declines, health, metadata, shared-memory registration, unknown
methods) is relayed, whole and as it comes, to the process's own grpcio server on a private
abstract Unix socket (relay.py), so grpcio answers it exactly as it does without the lane (its
statuses, messages, metadata, deadlines and the bearer token's check) and its ModelInfer calls go
on learning templates in the same process.

``status(settings)`` says whether the lane runs and, where not, why: the one rule, which the gRPC
process and /v1/tables both read.
"""

from __future__ import annotations

import importlib.util

try:
    from posenc.service.grpclane import _h2
except (
    ImportError
) as e:  # not built (libnghttp2's header was absent at install: setup.py), or its library is gone
    _h2 = None
    _WHY = (
        f"built but cannot load ({e}): install libnghttp2"
        if importlib.util.find_spec("posenc.service.grpclane._h2") is not None
        else "not built (libnghttp2's header was absent when posenc was installed)"
    )


def status(s) -> tuple[bool, str]:
    """(on, why): whether settings ``s`` run the gRPC lane, and a sentence saying why."""
    if s.grpc_port == 0:
        return False, "no gRPC server (grpc_port 0)"
    if s.grpc_lane == "off":
        return False, "off (grpc_lane off): grpcio serves the port"
    if _h2 is None:
        return False, f"{_WHY}: grpcio serves the port"
    if s.tls_cert is not None:
        return False, "off under TLS (the lane serves plaintext HTTP/2 only): grpcio serves the port"
    return True, f"on (libnghttp2 {_h2.NGHTTP2_VERSION}): learnt ModelInfer calls, grpcio behind it"
