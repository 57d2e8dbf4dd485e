"""How long the engine builds an on-demand table: the rows a request reads
(``Family.reach``), rounded up to a power of two, at least MIN_ON_DEMAND, at most the cap."""

from __future__ import annotations

import pytest

from posenc.engine.answer import pipeline
from posenc.engine.tables.base import MIN_ON_DEMAND, on_demand_length


@pytest.mark.parametrize(
    "reach, cap, want",
    [
        (None, 131072, 131072),
        (1, 131072, MIN_ON_DEMAND),
        (MIN_ON_DEMAND, 131072, MIN_ON_DEMAND),
        (MIN_ON_DEMAND + 1, 131072, 2 * MIN_ON_DEMAND),
        (100_000, 131072, 131072),
        (131073, 131072, 131072),
        (10**9, 65536, 65536),
        (5, 1000, 1000),
    ],
)
def test_on_demand_length(reach, cap, want):
    assert on_demand_length(reach, cap) == want


def test_a_power_of_two_that_holds_the_reach():
    for reach in range(1, 70000, 997):
        n = on_demand_length(reach, 1 << 20)
        assert n >= reach and n & (n - 1) == 0 and (n == MIN_ON_DEMAND or n // 2 < reach)


@pytest.mark.parametrize(
    "family, body, reach",
    [
        ("rope", {"head_dim": 8, "positions": [5, 9000, 3]}, 9001),
        ("rope", {"head_dim": 8, "positions": {"start": 10, "stop": 20, "step": 3}}, 20),
        ("sinusoidal", {"d_model": 8, "positions": [7], "offset": 2}, 10),  # offset rows are table rows
        ("alibi", {"num_heads": 4, "query": [100], "key": {"start": 0, "stop": 101}}, 101),
        ("alibi", {"num_heads": 4, "query": [0], "key": [500], "mode": "symmetric"}, 501),  # |i - j|
        ("t5-buckets", {"query": [0], "key": [10**6]}, None),  # its table is the whole function
    ],
)
def test_reach_is_the_last_row_or_distance_read_plus_one(family, body, reach):
    req = pipeline.parse(family, body)
    assert req.reach() == reach and (reach is None or type(req.reach()) is int)
