"""The cost a budget compares: wall-clock time less the time the thread waited for a core, and
never above the lowest measurement of the same index."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time

import pytest

from dataflow.snapshot.budget import CostClock


def _spin(seconds: float) -> int:
    end, n = time.thread_time() + seconds, 0
    while time.thread_time() < end:  # (CPU seconds of this thread: the same work however busy)
        n += 1
    return n


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/schedstat"),
                    reason="the run-queue wait is read from /proc/thread-self/schedstat (Linux)")
def test_the_time_waiting_for_a_core_is_not_counted():
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    rival = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(rival.pid, {cpu})
        os.sched_setaffinity(0, {cpu})  # (this thread and the rival share one core)
        clock = CostClock()
        waited = clock._waited()
        wall = time.perf_counter()
        _, cost, again = clock.measure(0, lambda: _spin(0.3))
        wall = time.perf_counter() - wall
        assert clock._waited() - waited > 0  # it did wait for the core
        assert cost < wall and not again  # ... and that wait is not part of the cost
        assert cost == pytest.approx(wall - (clock._waited() - waited), abs=0.05)
    finally:
        os.sched_setaffinity(0, before)
        rival.kill()
        rival.wait()


def test_a_cost_is_never_above_the_lowest_measurement_of_its_index():
    clock = CostClock()
    first = clock.measure(7, lambda: time.sleep(0.05))
    fast = clock.measure(7, lambda: None)
    again = clock.measure(7, lambda: time.sleep(0.05))
    assert first[1] >= 0.05 and fast[1] < first[1] and again[1] == fast[1]
    assert (first[2], fast[2], again[2]) == (False, True, True)  # (measured before?)
    other = clock.measure(8, lambda: time.sleep(0.02))
    assert other[1] >= 0.02 and not other[2]  # (each index its own)


def test_a_pickled_clock_starts_afresh():
    clock = CostClock()
    clock.measure(1, lambda: None)
    copy = pickle.loads(pickle.dumps(clock))
    assert copy._lowest == {} and copy.measure(2, lambda: 5)[::2] == (5, False)
