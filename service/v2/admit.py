"""How much inference work one gRPC server process takes on at once (settings
``grpc_max_concurrent`` and ``grpc_max_inflight_bytes``).

grpcio's asyncio server accepts every call; twenty concurrent ModelInfer calls answering 56 MiB
each held 2.5 GiB in the process (each answer's arrays and its message at once). ``Admission``
bounds the calls being answered (ModelInfer calls and ModelStreamInfer messages) and the bytes of
the answers they will send, known before any is built (the v2 plan's size, or a learnt template's
size). Past either bound a call is refused at once with RESOURCE_EXHAUSTED naming the limit, so a
client can back off and retry; a call is never refused for its bytes when no other is in flight
(one answer up to ``max_response_bytes`` always fits). Everything here runs on the process's event
loop: no lock."""

from __future__ import annotations

import contextlib

import grpc

from posenc.engine.core.errors import PosencError
from posenc.service.core.settings import ENV_PREFIX


class Busy(PosencError):
    """A call past a bound of ``Admission``: gRPC RESOURCE_EXHAUSTED (counted under its status, 413,
    in the metrics); ``status`` 503 is what it would be over HTTP (not used: the bound is gRPC's)."""

    status = 503
    grpc_status = grpc.StatusCode.RESOURCE_EXHAUSTED


class Admission:
    def __init__(self, max_calls: int, max_bytes: int):
        self.max_calls, self.max_bytes = max_calls, max_bytes
        self.calls = 0  # being answered now
        self.bytes = 0  # of the answers of the admitted calls (reserved until each call ends)

    @contextlib.contextmanager
    def call(self):
        """One inference call for as long as it runs; its ``reserve`` calls are released at its end."""
        if self.calls >= self.max_calls:
            raise Busy(
                f"server busy: {self.calls} inference calls in flight, at most {self.max_calls} at once "
                f"({ENV_PREFIX}GRPC_MAX_CONCURRENT); retry later"
            )
        self.calls += 1
        held = [0]
        try:
            yield lambda n: self._reserve(n, held)
        finally:
            self.calls -= 1
            self.bytes -= held[0]

    def most(self, bound: int) -> int:
        """The largest answer, at most ``bound`` bytes, a call admitted now may reserve (-1: no call
        may start): the gRPC lane's inline answers, made and ended on one turn of the loop."""
        if self.calls >= self.max_calls:
            return -1
        return bound if not self.bytes else min(bound, self.max_bytes - self.bytes)

    def _reserve(self, n: int, held: list) -> None:
        if self.bytes - held[0] > 0 and self.bytes + n > self.max_bytes:
            raise Busy(over_bytes(n, self.bytes, self.max_bytes))
        self.bytes += n
        held[0] += n


def over_bytes(n: int, inflight: int, limit: int) -> str:
    """The refusal of an answer of ``n`` bytes past ``limit`` (``grpc_max_inflight_bytes``), with
    ``inflight`` bytes of answers in flight: the Admission's, and the gRPC lane's (service/grpclane)."""
    return (
        f"server busy: an answer of {n} bytes would take the answers in flight to {inflight + n} bytes, "
        f"over {limit} ({ENV_PREFIX}GRPC_MAX_INFLIGHT_BYTES); retry later"
    )
