"""What the gRPC lane counts as held is what it holds: a real Lane (service/grpclane/lane.py, its real
nghttp2 session) on a socket of this process, asked by raw HTTP/2 frames by a client that never
opens its windows (every answer stays in the session). A learnt ModelInfer whose answer Python
fills (C's grpc_answer hands the entry over, answer_found makes it) reserves the answer's size until
the answer is in the session; two such answers made on one turn of the loop must not be counted as
three (both in the session and one still reserved), which the lane's most-held figure, the one its
bound and its log report, would show."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from posenc.service import grpclane
from posenc.service.v2.hot import GrpcEntry
from tests.service.grpclane.test_lane_faults import KEY, lane_on_loop
from tests.waits import wait_for

pytestmark = pytest.mark.skipif(
    grpclane._h2 is None or GrpcEntry is None, reason="service/grpclane/_h2 or service._hot is not built"
)
INFER = "/inference.GRPCInferenceService/ModelInfer"
SIZE = 100_000  # each answer's bytes, and what its call reserves


class Gated:
    """GrpcV2 as the lane reads it: its one learnt entry's answers made by Python once ``gate`` opens."""

    behind_lane = False
    native = {"counts": None, "buckets": b""}

    def __init__(self):
        entry = GrpcEntry(
            fill=None, nbytes=(3,), size=SIZE, metrics=-1, stream_metrics=-1, entry=SimpleNamespace(size=SIZE)
        )
        self.hot = SimpleNamespace(grpc_entries={KEY: entry}, fresh=lambda: None)
        self.admission = SimpleNamespace(most=lambda bound: bound)
        self.gate = asyncio.Event()
        self.waiting = 0

    def answer_bytes(self, message: bytes) -> int:  # a call that waits for room reserves this once admitted
        return SIZE

    async def answer_found(self, hit) -> bytes:
        self.waiting += 1
        await self.gate.wait()
        return hit[1][:1] * SIZE


def wait_released(lane, what: str) -> None:
    """Until the lane reserves nothing and has no call in flight."""
    wait_for(
        lambda: lane.reserved == 0 and lane.inflight == 0,
        10,
        0.01,
        what=what,
        seen=lambda: (lane.reserved, lane.inflight),
    )


def test_two_answers_made_on_one_turn_are_counted_once_each():
    from tests.integration.h2_client import H2

    grpc = Gated()
    with lane_on_loop(grpc) as (lane, loop), H2(lane.server.sockets[0].getsockname()[1], window=0) as h:
        h.read_data = False  # (and no window: no DATA leaves the session)
        for name in (b"one", b"two"):
            h.call(INFER, KEY + b"\x3a\x03" + name)
        wait_for(
            lambda: grpc.waiting == 2, 10, 0.01, what="both answers being made", seen=lambda: grpc.waiting
        )
        assert lane.reserved == 2 * SIZE
        loop.call_soon_threadsafe(grpc.gate.set)  # both made on the loop's next turn
        wait_released(lane, "both reservations released")
        held = lane.held()
        assert 2 * SIZE <= held < 2 * SIZE + 1024, held  # both answers in the session, framed
        assert lane.most_held <= held, (lane.most_held, held)
