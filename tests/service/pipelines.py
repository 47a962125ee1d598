"""Pipelines the service tests serve, in this process or in `python -m dataflow serve`."""

from __future__ import annotations

import os
import random
import re
import sys
import time

import numpy as np

import dataflow as df
from dataflow.service import DataService

#: datapoints of the served dataset (SVC_N overrides it)
N = 200


def tag(dp: list, sleep: float | None = None) -> list:
    """A random map: its output depends on the input and on the draws keyed by its position.
    It first sleeps ``sleep`` seconds (None: ``SVC_SLEEP`` of its process's environment, which
    Ray's actors started after a change of the test's environment do not see)."""
    time.sleep(float(os.environ.get("SVC_SLEEP", "0")) if sleep is None else sleep)
    return [int(dp[0]), int(np.random.randint(1 << 30)), random.random()]


def slow(dp: list) -> list:
    """10 ms of waiting per datapoint, whatever the environment of the worker's process."""
    time.sleep(0.01)
    return [dp[0]]


def stuck_at_5(dp: list) -> list:
    """A map call that never returns for datapoint 5 (its process stays alive and beating)."""
    if dp[0] == 5:
        time.sleep(3600)
    return [dp[0]]


def gil_hog_at_3(dp: list) -> list:
    """For datapoint 3, seconds of computing in C with the GIL held (a regular expression that
    backtracks 2^27 times: 2-4 s on 2020s CPUs, over the tests' ``worker_timeout`` of 1 s): the
    worker's heartbeat thread cannot run meanwhile."""
    if dp[0] == 3:
        re.match(r"(x+x+)+y", "x" * 27)
    return [dp[0]]


def source(n: int = N) -> df.DataFromList:
    return df.DataFromList([[i] for i in range(n)], shuffle=False)


def make() -> DataService:
    """What `python -m dataflow serve tests.service.pipelines:make` serves."""
    return DataService(source(int(os.environ.get("SVC_N", N))), tag,
                       num_workers=int(os.environ.get("SVC_WORKERS", "2")),
                       seed=int(os.environ.get("SVC_SEED", "5")),
                       shuffle=os.environ.get("SVC_SHUFFLE", "1") == "1")


def not_a_service() -> list:
    return [1, 2]


#: the datapoints whose map call :func:`poison` spoils, and how
POISON = {11: "os._exit", 13: "sys.exit", 17: "lone surrogate", 19: "tuple key", 23: "b'nd' key",
          37: "raises"}


def poison(dp: list) -> list:
    """A map whose call fails in every way a worker meets: it ends the process, exits, gives
    an output that cannot be encoded or decoded, or raises (see :data:`POISON`)."""
    i = int(dp[0])
    what = POISON.get(i) if os.environ.get("SVC_POISON", "1") == "1" else None
    if what == "os._exit":
        os._exit(3)
    if what == "sys.exit":
        sys.exit(4)
    if what == "lone surrogate":
        return [i, "name-\udcff.jpg"]
    if what == "tuple key":
        return [i, {(1, 2): 3}]
    if what == "b'nd' key":
        return [i, {b"nd": 1}]
    if what == "raises":
        raise ValueError(f"cannot read datapoint {i}")
    return [i, "ok"]


def megabyte(dp: list) -> list:
    """An output of one MB (an image, a spectrogram)."""
    return [int(dp[0]), np.full(1 << 20, dp[0] % 256, np.uint8)]


def started() -> DataService:
    """A target for `serve` that starts its service itself (serve refuses it)."""
    return DataService(source(10), tag, num_workers=1).start()


def crash_below_2(dp: list) -> list:
    """Datapoints 0 and 1 end their worker's process (``os._exit``); the others map."""
    if dp[0] < 2:
        os._exit(7)
    return [dp[0]]
