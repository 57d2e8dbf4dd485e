"""The gRPC lane's own faults stay on their stream: a real Lane (service/grpclane/lane.py, its real
nghttp2 session) on a socket of this process, asked by raw HTTP/2 frames. What answers a learnt
ModelInfer is a stand-in for GrpcV2 whose one learnt entry is answered by Python (C's grpc_answer
finds it and hands it over) and fails on purpose once (a fault nothing else can provoke); the
stream that met it is reset with INTERNAL_ERROR, and the next call on the same connection is
answered."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import SimpleNamespace

import pytest

from posenc.service import grpclane
from posenc.service.v2.hot import GrpcEntry

pytestmark = pytest.mark.skipif(
    grpclane._h2 is None or GrpcEntry is None, reason="service/grpclane/_h2 or service._hot is not built"
)
KEY = b"\x0a\x01m"  # ModelInferRequest.model_name "m": the learnt key, then one raw field of 3 bytes


class FailsOnce:
    """GrpcV2 as the lane reads it, its one entry's answer failing at its first call."""

    behind_lane = False
    native = {"counts": None, "buckets": b""}

    def __init__(self):
        self.calls = 0
        entry = GrpcEntry(
            fill=None, nbytes=(3,), size=10, metrics=-1, stream_metrics=-1, entry=SimpleNamespace(size=10)
        )
        self.hot = SimpleNamespace(grpc_entries={KEY: entry}, fresh=lambda: None)
        self.admission = SimpleNamespace(most=lambda bound: bound)

    async def answer_found(self, hit) -> bytes:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("a fault of the lane's own")
        return b"answer:" + hit[1]


@contextlib.contextmanager
def lane_on_loop(grpc, max_buffered: int = 64 << 20):
    """(a real Lane over ``grpc``, its event loop), the loop running in a thread, the lane listening
    on a port of this process (``lane.server``); closed at the end. ``max_buffered``: the answers a
    connection holds unread and reserved before a call waits for room."""
    from posenc.service.grpclane.lane import Lane

    loop = asyncio.new_event_loop()
    lane = Lane(grpc, None, None, 1 << 20, max_buffered)
    loop.run_until_complete(lane.listen("127.0.0.1", 0, reuse_port=False))
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    try:
        yield lane, loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)
        lane.server.close()
        loop.run_until_complete(lane.server.wait_closed())
        loop.close()


def test_a_fault_resets_its_stream_and_the_connection_goes_on():
    from tests.integration.h2_client import H2

    with lane_on_loop(FailsOnce()) as (lane, _), H2(lane.server.sockets[0].getsockname()[1]) as h:
        first = h.call("/inference.GRPCInferenceService/ModelInfer", KEY + b"\x3a\x03one")
        assert h.wait(first)["reset"] == 2  # INTERNAL_ERROR
        second = h.call("/inference.GRPCInferenceService/ModelInfer", KEY + b"\x3a\x03two")
        assert h.status(second) == (0, b"") and h.messages(second) == [b"answer:two"]
