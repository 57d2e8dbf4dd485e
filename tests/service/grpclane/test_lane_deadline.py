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
def grpcio_serving(infer):
    """(grpcio's own server whose ModelInfer handler is the coroutine ``infer``, its port, its loop)."""
    loop = asyncio.new_event_loop()

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
        yield port, loop
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(0), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)
        loop.close()


@contextlib.contextmanager
def grpcio_waiting():
    """(grpcio's own server whose ModelInfer handler waits on a gate, its port, the gate's opener)."""
    gate = asyncio.Event()

    async def infer(request: bytes, context) -> bytes:
        await gate.wait()
        return b""

    with grpcio_serving(infer) as (port, loop):
        yield port, lambda: loop.call_soon_threadsafe(gate.set)


def seen(st: dict) -> dict:
    """What a stream's client saw (H2.wait's record): headers, data, trailers, RST_STREAM's code."""
    return {k: st[k] for k in ("headers", "data", "trailers", "reset")}


def past_deadline(port: int, unread: bool = False, held=None) -> dict:
    """The answer to one ModelInfer with DEADLINE (seen): a handler that has not answered, or
    (``unread``) an answer to a client that opens no window, so no DATA can reach it. ``held()``,
    where given, is asserted 0 once the stream has ended, the connection still open."""
    from tests.integration.h2_client import H2

    with H2(port, window=0 if unread else None) as h:
        h.read_data = not unread
        st = h.wait(h.call(INFER, KEY + b"\x3a\x03one", [DEADLINE]), 10)
        if held is not None:
            wait_for(lambda: held() == 0, 10, 0.01, what="the dropped answer's bytes freed", seen=held)
        return seen(st)


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


def test_an_answer_unread_at_its_deadline_is_dropped_as_grpcio_drops_it():
    """grpcio's server ends a call at its deadline whatever it still holds: an answer its client
    has not read is dropped and the trailers go instead. The lane's answer, made in the session and
    never read, is ended alike at the deadline, and its bytes are freed with the connection still
    open (before, the session kept them until the client read them or went)."""

    async def at_once(request: bytes, context) -> bytes:
        return b"t" * SIZE

    with grpcio_serving(at_once) as (port, _loop):
        want = past_deadline(port, unread=True)
    assert want["trailers"] == {b"grpc-status": b"4", b"grpc-message": b"Deadline Exceeded"}, want
    assert want["data"] == b"" and want["headers"][b":status"] == b"200", want
    grpc_v2 = Gated()
    with lane_on_loop(grpc_v2) as (lane, loop):
        loop.call_soon_threadsafe(grpc_v2.gate.set)
        assert past_deadline(lane.server.sockets[0].getsockname()[1], unread=True, held=lane.held) == want
        assert lane.answered == 1  # (made, in the session, then dropped at the deadline)


def test_a_call_waiting_for_room_at_its_deadline_is_answered_as_grpcio_answers_it():
    """A call that waits for room (its connection's answers reserved past the bound) when its
    ``grpc-timeout`` passes gets what grpcio sends for a handler still running at its deadline, at
    the deadline, not when room is made; the calls before it are answered whole once made."""
    from tests.integration.h2_client import H2

    with grpcio_waiting() as (port, _opened):
        want = past_deadline(port)
    grpc_v2 = Gated()
    with lane_on_loop(grpc_v2, max_buffered=SIZE + SIZE // 2) as (lane, loop):
        with H2(lane.server.sockets[0].getsockname()[1]) as h:
            first = {name: h.call(INFER, KEY + b"\x3a\x03" + name) for name in (b"one", b"two")}
            wait_for(lambda: grpc_v2.waiting == 2, 10, 0.01, what="two answers being made")
            late = h.call(INFER, KEY + b"\x3a\x03thr", [DEADLINE])  # waits: 2 x SIZE reserved
            st = h.wait(late, 10)
            assert seen(st) == want
            assert grpc_v2.waiting == 2  # (ended while it waited: never admitted)
            loop.call_soon_threadsafe(grpc_v2.gate.set)
            for name, sid in first.items():
                assert h.status(sid) == (0, b"") and h.messages(sid) == [name[:1] * SIZE]
        wait_released(lane, "both reservations released")
