"""MultiProcessRunner (multiprocessing queue) specifics."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from dataflow.base import DataFlow
from dataflow.errors import WorkerError
from dataflow.parallel import MultiProcessPrefetchData, MultiProcessRunner, PrefetchData
from tests.parallel import flows


def test_aliases():
    assert PrefetchData is MultiProcessRunner
    assert MultiProcessPrefetchData is MultiProcessRunner


def test_arrays():
    with MultiProcessRunner(flows.Arrays(3, (10, 10)), 2, 1) as r:
        got = list(r)
    assert [dp[0] for dp in got] == [0, 1, 2]
    assert all(np.array_equal(a, np.full((10, 10), i, np.uint8)) for i, a in got)


def test_sigkill_of_a_worker_surfaces():
    with MultiProcessRunner(flows.Range(10**6), 4, 2) as r:
        it = iter(r)
        next(it)
        os.kill(r._pool.procs[0].pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(WorkerError, match="was killed by signal SIGKILL") as ei:
            for _ in it:
                pass
        assert time.monotonic() - start < 5
    assert ei.value.worker_id == 0


def test_num_prefetch_is_validated():
    with pytest.raises(ValueError, match="`num_prefetch` must be a positive int, got 0"):
        MultiProcessRunner(flows.Range(2), 0, 1)


class _Records(DataFlow):
    """Raw records of the given sizes, each filled with its index (bytes, like LMDB values)."""

    def __init__(self, sizes):
        self.sizes = sizes

    def __len__(self):
        return len(self.sizes)

    def reset_state(self):
        pass

    def __iter__(self):
        for i, n in enumerate(self.sizes):
            yield [i, bytes([i % 251]) * n]


def test_large_records_arrive_exact_and_in_order():
    # 66 KB records (the worker's ring under fork), small ones (the queue's pipe) and one larger
    # than a quarter of the ring (the pipe again), interleaved: one worker keeps its order
    sizes = [66_000, 10, 66_000, 3 * 1024 * 1024, 20_000, 1, *([66_000] * 300)]
    with MultiProcessRunner(_Records(sizes), 5000, 1, start_method="fork") as r:
        got = list(r)
    assert [dp[0] for dp in got] == list(range(len(sizes)))
    assert [dp[1] for dp in got] == [bytes([i % 251]) * n for i, n in enumerate(sizes)]


def test_large_records_of_two_workers_arrive_exact():
    # each worker has its own ring; the queue interleaves their slots
    sizes = [66_000] * 200
    with MultiProcessRunner(_Records(sizes), 100, 2) as r:
        got = list(r) + list(r)
    assert len(got) == 400
    assert [rec == bytes([i % 251]) * 66_000 for i, rec in got] == [True] * 400
