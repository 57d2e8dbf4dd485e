"""Timing helpers shared by the benchmark scripts in this folder."""

from __future__ import annotations

import statistics
import time


def calibrate(fn, min_time: float) -> int:
    """Calls per timing so that one timing lasts at least ``min_time`` (after a warm-up call:
    page faults, caches)."""
    fn()
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        t = time.perf_counter() - t0
        if t >= min_time:
            return number
        number *= 2 if t <= 0 else max(2, int(min_time / t * 1.2))


def timeit(fn, repeat: int, min_time: float) -> float:
    """Median seconds per call over ``repeat`` timings of at least ``min_time`` each."""
    number = calibrate(fn, min_time)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return statistics.median(times)
