"""A learnt ModelInfer whose answer is made off the loop (service/grpclane/fill.py) keeps the call's
deadline as grpcio's server keeps a handler's: when its ``grpc-timeout`` passes before the answer is
made, the client gets what grpcio sends then (here: grpcio's own server, a handler that waits on a
gate, asked with the same frames), and the answer made after it is dropped while its reservation
lasts until it is made. Both servers run on loops in this process; the client is raw HTTP/2 (h2),
which keeps no deadline of its own."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import grpc
import pytest

from posenc.service import grpclane
from posenc.service.v2.hot import GrpcEntry
from tests.service.grpclane.test_lane_faults import KEY, lane_on_loop
from tests.service.grpclane.test_lane_held import INFER, SIZE, Gated, wait_released
from tests.waits import wait_for

pytestmark = pytest.mark.skipif(
    grpclane._h2 is None or GrpcEntry is None, reason="service/grpclane/_h2 or service._hot is not built"
)
DEADLINE = (b"grpc-timeout", b"200m")


@contextlib.contextmanager
def grpcio_waiting():
    """(grpcio's own server whose ModelInfer handler waits on a gate, its port, the gate's opener)."""
    loop = asyncio.new_event_loop()
    gate = asyncio.Event()

    async def infer(request: bytes, context) -> bytes:
        await gate.wait()
        return b""

    async def start():
        service, method = INFER.strip("/").split("/")
        s = grpc.aio.server()
        handler = grpc.unary_unary_rpc_method_handler(infer)
        s.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, {method: handler}),))
        port = s.add_insecure_port("127.0.0.1:0")
        await s.start()
        return s, port

    server, port = loop.run_until_complete(start())
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    try:
        yield port, lambda: loop.call_soon_threadsafe(gate.set)
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(0), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)
        loop.close()


def past_deadline(port: int) -> dict:
    """The answer to one ModelInfer with DEADLINE whose handler has not answered."""
    from tests.integration.h2_client import H2

    with H2(port) as h:
        st = h.wait(h.call(INFER, KEY + b"\x3a\x03one", [DEADLINE]), 10)
        return {k: st[k] for k in ("headers", "data", "trailers", "reset")}


def test_a_fill_past_its_deadline_is_answered_as_grpcio_answers_it():
    from tests.integration.h2_client import H2

    with grpcio_waiting() as (port, _opened):
        want = past_deadline(port)
    assert want["trailers"][b"grpc-status"] == b"4", want  # (grpcio's: DEADLINE_EXCEEDED, trailers only)
    grpc_v2 = Gated()
    with lane_on_loop(grpc_v2) as (lane, loop):
        port = lane.server.sockets[0].getsockname()[1]
        assert past_deadline(port) == want
        assert lane.reserved == SIZE  # (its answer is still being made: its bytes stay reserved)
        with H2(port) as h:  # the connection before goes on; a call without a deadline waits for its answer
            sid = h.call(INFER, KEY + b"\x3a\x03two")
            wait_for(lambda: grpc_v2.waiting == 2, 10, 0.01, what="the second answer being made")
            loop.call_soon_threadsafe(grpc_v2.gate.set)
            assert h.status(sid) == (0, b"") and h.messages(sid) == [b"t" * SIZE]
        wait_released(lane, "both reservations released (the one past its deadline once made)")
        assert lane.answered == 1  # the answer made past the deadline was dropped
