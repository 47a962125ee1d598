"""MultiProcessRunner (multiprocessing queue) specifics."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

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
