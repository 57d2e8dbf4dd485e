"""service/v2/admit.py: the calls and planned answer bytes one gRPC process takes on at once."""

from __future__ import annotations

import contextlib

import grpc
import pytest

from posenc.service.v2.admit import Admission, Busy


def test_calls_past_the_bound_are_refused_naming_it_and_leaving_frees_a_place():
    a = Admission(max_calls=2, max_bytes=100)
    with a.call(), a.call():
        with pytest.raises(Busy) as e:
            with a.call():
                pass
        assert (
            "POSENC_GRPC_MAX_CONCURRENT" in str(e.value)
            and e.value.grpc_status == grpc.StatusCode.RESOURCE_EXHAUSTED
        )
    assert a.calls == 0
    with a.call():
        pass


def test_bytes_past_the_bound_are_refused_unless_nothing_else_is_in_flight():
    a = Admission(max_calls=10, max_bytes=100)
    with a.call() as first:
        first(500)  # alone: admitted whatever its size
        with a.call() as second:
            with pytest.raises(Busy) as e:
                second(1)
            assert "POSENC_GRPC_MAX_INFLIGHT_BYTES" in str(e.value)
        assert a.bytes == 500
    assert a.bytes == 0 and a.calls == 0
    with a.call() as one, a.call() as two:
        one(60)
        two(40)  # 100: at the bound
        with a.call() as three, pytest.raises(Busy):
            three(1)
    assert a.bytes == 0


@pytest.mark.parametrize("held", [(), (0,), (30,), (60, 30), (100,), (10, 10, 10)])
def test_most_is_the_largest_answer_a_call_would_reserve_now(held):
    """Admission.most (the gRPC lane's bound for an answer made on one turn) against the call itself:
    an answer of ``most`` bytes is admitted now, one byte more is not (up to the bound asked)."""
    a = Admission(max_calls=3, max_bytes=100)

    def admitted(n: int) -> bool:
        try:
            with a.call() as reserve:
                reserve(n)
        except Busy:
            return False
        return True

    with contextlib.ExitStack() as stack:
        for n in held:
            stack.enter_context(a.call())(n)
        most = a.most(80)
        if len(held) == 3:
            assert most == -1 and not admitted(0)
        else:
            assert 0 <= most <= 80 and admitted(most)
            assert most == 80 or not admitted(most + 1)
