"""Flows and map functions for the Ray tests (module level: Ray pickles them by reference)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dataflow import rng as _rng
from dataflow.base import DataFlow


def _die_once(marker: str) -> None:
    """SIGKILL this process the first time (creating ``marker``); later calls do nothing."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


class KillOnce:
    """``[x * 2]``, but the process mapping input ``at`` dies once (a node lost mid-epoch)."""

    def __init__(self, marker: Path, at: int) -> None:
        self.marker, self.at = str(marker), at

    def __call__(self, dp: list) -> list:
        if dp[0] == self.at:
            _die_once(self.marker)
        return [dp[0] * 2]


def always_die_at_3(dp: list) -> list:
    if dp[0] == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return dp


class WorkerRange(DataFlow):
    """``[worker id, i]`` for i in range(n), ``delay`` seconds each."""

    def __init__(self, n: int, delay: float = 0.0) -> None:
        self.n, self.delay = n, delay

    def __len__(self) -> int:
        return self.n

    def reset_state(self) -> None:
        self.wid = _rng.get_worker_info()

    def _before(self, i: int) -> None:
        if self.delay:
            time.sleep(self.delay)

    def __iter__(self) -> Iterator[Any]:
        for i in range(self.n):
            self._before(i)
            yield [self.wid, i]


class KillOnceRange(WorkerRange):
    """``[worker id, i]`` for i in range(n); the copy of worker 0 dies once at ``at``."""

    def __init__(self, n: int, at: int, marker: Path) -> None:
        super().__init__(n)
        self.at, self.marker = at, str(marker)

    def _before(self, i: int) -> None:
        if i == self.at and self.wid == 0:
            _die_once(self.marker)


class AlwaysDie(DataFlow):
    def __len__(self) -> int:
        return 5

    def __iter__(self) -> Iterator[Any]:
        yield [0]
        os.kill(os.getpid(), signal.SIGKILL)
        yield [1]


def image(dp: list) -> list:
    return [dp[0], np.full((64, 64, 3), dp[0] % 251, np.uint8)]


def niceness(dp: list) -> list:
    """The datapoint's value and the niceness of the process that maps it."""
    return [dp[0], os.nice(0)]


def big_image(dp: list) -> list:
    """``[i, a 1 MiB uint8 array filled with i % 251]``."""
    return [dp[0], np.full((512, 512, 4), dp[0] % 251, np.uint8)]


def lock_result(dp: list) -> list:
    """A result that cannot be serialized (cloudpickle refuses locks)."""
    return [dp[0], threading.Lock()]


def _load_elsewhere(pid: int) -> int:
    if os.getpid() == pid:
        raise RuntimeError("this result cannot be loaded in the consumer")
    return pid


class _LoadsElsewhere:
    def __init__(self, pid: int) -> None:
        self.pid = pid

    def __reduce__(self) -> tuple:
        return (_load_elsewhere, (self.pid,))


class ResultTheConsumerCannotLoad:
    """``[x, obj]`` where unpickling ``obj`` fails in the consumer's process only."""

    def __init__(self) -> None:
        self.consumer = os.getpid()

    def __call__(self, dp: list) -> list:
        return [dp[0], _LoadsElsewhere(self.consumer)]


class PulledRange(DataFlow):
    """``[i, 10 KB of zeros]`` for i in range(n), writing how many it yielded to ``progress``
    (every 100)."""

    def __init__(self, n: int, progress: Path) -> None:
        self.n, self.progress = n, str(progress)

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[Any]:
        for i in range(self.n):
            if i % 100 == 0:  # (atomically: the test reads it meanwhile)
                tmp = f"{self.progress}.tmp"
                Path(tmp).write_text(str(i))
                os.replace(tmp, self.progress)
            yield [i, np.zeros(1250)]
