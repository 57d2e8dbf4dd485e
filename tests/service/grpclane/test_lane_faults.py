"""The gRPC lane's own faults stay on their stream: a real Lane (service/grpclane/lane.py, its real
nghttp2 session) on a socket of this process, asked by raw HTTP/2 frames. What answers a learnt
ModelInfer is a stand-in for GrpcV2 that fails on purpose once (a fault nothing else can provoke);
the stream that met it is reset with INTERNAL_ERROR, and the next call on the same connection is
answered."""

from __future__ import annotations

import asyncio
import threading

import pytest

from posenc.service import grpclane

pytestmark = pytest.mark.skipif(
    grpclane._h2 is None, reason="service/grpclane/_h2 is not built (no libnghttp2 headers)"
)


class FailsOnce:
    """GrpcV2's infer_now, failing at its first call."""

    def __init__(self):
        self.calls = 0

    def infer_now(self, data: bytes) -> bytes:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("a fault of the lane's own")
        return b"answer:" + data


def test_a_fault_resets_its_stream_and_the_connection_goes_on():
    from posenc.service.grpclane.lane import Lane
    from tests.integration.h2_client import H2

    loop = asyncio.new_event_loop()
    lane = Lane(FailsOnce(), None, None, 1 << 20, 64 << 20)
    loop.run_until_complete(lane.listen("127.0.0.1", 0, reuse_port=False))
    port = lane.server.sockets[0].getsockname()[1]
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    try:
        with H2(port) as h:
            first = h.call("/inference.GRPCInferenceService/ModelInfer", b"one")
            assert h.wait(first)["reset"] == 2  # INTERNAL_ERROR
            second = h.call("/inference.GRPCInferenceService/ModelInfer", b"two")
            assert h.status(second) == (0, b"") and h.messages(second) == [b"answer:two"]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)
        lane.server.close()
        loop.run_until_complete(lane.server.wait_closed())
        loop.close()
