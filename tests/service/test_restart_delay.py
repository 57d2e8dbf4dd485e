"""One back-off for every process `posenc serve` restarts (service/supervise/children.py): the gRPC
processes' delay by deaths in a row, and the engine's (engine_watch.py), whose streak counts its
crash-loop deaths only, on the same schedule: at once, then 0.5 s doubling to 4 s."""

from __future__ import annotations

from posenc.service.supervise.children import restart_delay
from posenc.service.supervise.engine_watch import engine_delay

SCHEDULE = [0.0, 0.5, 1.0, 2.0, 4.0, 4.0, 4.0]  # docs/deploy.md: a delay doubling from 0.5 s to 4 s


def test_a_grpc_process_restarts_at_once_then_backs_off():
    assert [restart_delay(n) for n in range(1, 8)] == SCHEDULE
    assert restart_delay(0) == 0.0


def test_the_engine_backs_off_on_the_same_schedule_from_its_first_crash_loop_death():
    assert [engine_delay(n) for n in range(7)] == SCHEDULE
