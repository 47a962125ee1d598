"""MultiProcessRunnerZMQ specifics, plus the seed contract of every runner."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from dataflow import rng
from dataflow.errors import WorkerError
from dataflow.parallel import (
    MultiProcessRunner,
    MultiProcessRunnerZMQ,
    MultiThreadRunner,
    PrefetchDataZMQ,
)
from dataflow.parallel.shared_memory import SHM_DIR
from tests.parallel import flows

RUNNERS = {
    "thread": lambda make, n: MultiThreadRunner(make, 4, n),
    "process": lambda make, n: MultiProcessRunner(make(), 4, n),
    "zmq": lambda make, n: MultiProcessRunnerZMQ(make(), n),
}


def test_alias():
    assert PrefetchDataZMQ is MultiProcessRunnerZMQ


def test_arrays_arrive_intact_and_writable():
    with MultiProcessRunnerZMQ(flows.Arrays(6), 1) as r:
        r.reset_state()
        got = list(r)
    assert [dp[0] for dp in got] == list(range(6))
    for i, arr in got:
        assert arr.shape == (224, 224, 3)
        assert arr.dtype == np.uint8
        assert np.array_equal(arr, np.full((224, 224, 3), i % 251, np.uint8))
        assert arr.flags.writeable
        arr += 1  # the consumer owns the memory


def _segments() -> set[str]:
    """This process's segments (a consumer names them after its pid; another test session on
    the machine has its own)."""
    return {n for n in os.listdir(SHM_DIR) if n.startswith(f"dataflow-{os.getpid()}-")}


@pytest.mark.skipif(not os.path.isdir(SHM_DIR), reason="needs /dev/shm")
def test_large_arrays_travel_through_shared_memory_and_leave_nothing():
    before = _segments()
    shape = (1024, 1024, 5)  # 5 MiB: above the shared-memory threshold
    with MultiProcessRunnerZMQ(flows.Arrays(4, shape), 2, hwm=2) as r:
        r.reset_state()
        it = iter(r)
        first = next(it)
        assert np.array_equal(first[1], np.full(shape, first[0] % 251, np.uint8))
        assert first[1].flags.writeable
        deadline = time.monotonic() + 5
        while not _segments() - before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _segments() - before  # the next datapoints wait in /dev/shm
        for dp in it:
            assert int(dp[1][-1, -1, -1]) == dp[0] % 251
        # segments that were sent but not received yet are removed by close()
    deadline = time.monotonic() + 2
    while _segments() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _segments() - before == set()


def test_shared_memory_can_be_disabled():
    shape = (1024, 1024, 5)
    with MultiProcessRunnerZMQ(flows.Arrays(2, shape), 1, use_shm=False) as r:
        r.reset_state()
        assert [int(dp[1][0, 0, 0]) for dp in r] == [0, 1]


def test_sigkill_of_a_worker_surfaces_when_it_may_not_be_replaced():
    with MultiProcessRunnerZMQ(flows.Range(10**6), 2, max_restarts=0) as r:
        r.reset_state()
        it = iter(r)
        next(it)
        victim = r._pool.procs[1].pid
        os.kill(victim, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(WorkerError, match="was killed by signal SIGKILL") as ei:
            for _ in it:
                pass
        assert time.monotonic() - start < 5
    assert ei.value.worker_id == 1
    assert f"pid {victim}" in str(ei.value)
    assert "It was not replaced: 0 worker(s) were replaced already" in str(ei.value)


def test_unpicklable_datapoint_is_reported():
    class Lambdas(flows.Range):
        def __iter__(self):
            yield [lambda: 0]

    with MultiProcessRunnerZMQ(Lambdas(1), 1) as r:
        r.reset_state()
        with pytest.raises(WorkerError) as ei:
            list(r)
    assert "pickle" in ei.value.exc_message.lower() or "pickle" in ei.value.exc_type.lower()


def _streams(kind: str) -> dict[int, list[int]]:
    # a small delay per datapoint: on a busy machine one worker could otherwise produce all
    # 200 datapoints before the other has started
    with RUNNERS[kind](lambda: flows.RandomTagged(50, delay=0.002), 2) as r:
        r.reset_state()
        got = [dp for _ in range(4) for dp in r]
    streams: dict[int, list[int]] = {}
    for wid, value in got:
        streams.setdefault(wid, []).append(value)
    return streams


@pytest.mark.parametrize("kind", sorted(RUNNERS))
def test_seeded_workers_have_distinct_reproducible_streams(kind):
    rng.set_seed(0)
    a = _streams(kind)
    rng.set_seed(0)
    b = _streams(kind)
    assert set(a) <= {0, 1}
    assert set(b) <= {0, 1}
    for wid in set(a) & set(b):
        n = min(len(a[wid]), len(b[wid]))
        assert n > 0
        assert a[wid][:n] == b[wid][:n]
    rng.set_seed(0)
    both = _streams(kind)
    for _ in range(5):  # one worker may have produced everything: try again
        if len(both) == 2:
            break
        rng.set_seed(0)
        both = _streams(kind)
    n = min(len(both[0]), len(both[1]))
    assert both[0][:n] != both[1][:n]
    assert len(set(both[0]) & set(both[1])) < 3  # not the same stream, shifted
