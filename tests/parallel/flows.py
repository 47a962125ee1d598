"""Small flows and map functions for the parallel tests (module level, so spawn can pickle)."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import psutil

from dataflow import rng as _rng
from dataflow.base import DataFlow, RNGDataFlow
from dataflow.errors import UnknownLengthError


class Range(DataFlow):
    """``[i]`` for i in range(n); ``fail_at`` raises KeyError there; optional ``delay``."""

    def __init__(self, n: int, fail_at: int | None = None, delay: float = 0.0) -> None:
        self.n = n
        self.fail_at = fail_at
        self.delay = delay

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[Any]:
        for i in range(self.n):
            if i == self.fail_at:
                raise KeyError(f"bad datapoint {i}")
            if self.delay:
                time.sleep(self.delay)
            yield [i]


class NoLen(Range):
    """Like Range but without a length."""

    def __len__(self) -> int:
        raise UnknownLengthError("no length")


class Tagged(DataFlow):
    """``[worker id, pid, i]``: tells which worker produced each datapoint."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def reset_state(self) -> None:
        self.wid = _rng.get_worker_info()  # runners set it before reset_state()

    def __iter__(self) -> Iterator[Any]:
        for i in range(self.n):
            yield [self.wid, os.getpid(), i]


class RandomTagged(RNGDataFlow):
    """``[worker id, random int]`` drawn from ``self.rng``."""

    def __init__(self, n: int, delay: float = 0.0) -> None:
        self.n = n
        self.delay = delay

    def __len__(self) -> int:
        return self.n

    def reset_state(self) -> None:
        super().reset_state()
        self.wid = _rng.get_worker_info()

    def __iter__(self) -> Iterator[Any]:
        for _ in range(self.n):
            if self.delay:
                time.sleep(self.delay)
            yield [self.wid, int(self.rng.randint(1 << 30))]


class Arrays(DataFlow):
    """``[i, uint8 array of shape filled with i]``."""

    def __init__(self, n: int, shape: tuple[int, ...] = (224, 224, 3)) -> None:
        self.n = n
        self.shape = shape

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[Any]:
        for i in range(self.n):
            yield [i, np.full(self.shape, i % 251, np.uint8)]


class Unpicklable(Range):
    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.handle = lambda: None


def double(dp: list) -> list:
    return [dp[0] * 2]


def drop_odd(dp: list) -> list | None:
    return None if dp[0] % 2 else dp


def fail_at_7(dp: list) -> list:
    if dp[0] == 7:
        raise ValueError(f"cannot map {dp[0]}")
    return dp


def slow_identity(dp: list) -> list:
    time.sleep(0.002 * (dp[0] % 5))
    return dp


def sleepy(dp: list) -> list:
    time.sleep(0.01)
    return dp


def with_pid(dp: list) -> list:
    return [dp[0], os.getpid()]


def global_random(dp: list) -> list:
    time.sleep(0.005)
    return [dp[0], _rng.get_worker_info(), int(np.random.randint(1 << 30)), random.getrandbits(30)]


class _UnpicklableError(Exception):
    def __init__(self, a: int, b: int) -> None:  # pickling calls cls(*args): it fails
        super().__init__(f"{a}/{b}")


def raise_unpicklable(dp: list) -> list:
    raise _UnpicklableError(1, 2)


def suicide(dp: list) -> list:
    if dp[0] == 3:
        os.kill(os.getpid(), 9)
    return dp


def children_pids() -> list[int]:
    return [p.pid for p in psutil.Process().children(recursive=True)]


def sleepy_pid(dp: list) -> list:
    time.sleep(0.01)
    return [dp[0], os.getpid()]


class Cv2Threads(DataFlow):
    """``[cv2.getNumThreads(), os.environ['OMP_NUM_THREADS']]`` seen inside the worker."""

    def __len__(self) -> int:
        return 1

    def __iter__(self) -> Iterator[Any]:
        import cv2

        img = np.zeros((512, 512, 3), np.uint8)
        cv2.GaussianBlur(img, (5, 5), 1)  # uses OpenCV's parallel_for
        yield [cv2.getNumThreads(), os.environ.get("OMP_NUM_THREADS")]


def unpicklable_result(dp: list) -> list:
    return [dp[0], lambda: None]


def double_unless_3(dp: list) -> list | None:
    return None if dp[0] % 3 == 0 else [dp[0] * 2]


class RandomAugment:
    """A map function that draws from every kind of random source: augmentors, ``np.random``,
    ``random``; it sleeps a little, unevenly, so that results finish out of order."""

    def __init__(self) -> None:
        from dataflow import imgaug

        self.augs = imgaug.AugmentorList([
            imgaug.RandomCrop((6, 6)), imgaug.Flip(horiz=True), imgaug.Brightness(40),
            imgaug.Brightness(40),  # a second one of the same class draws differently
        ])

    def __call__(self, dp: list) -> list:
        i = dp[0]
        time.sleep((i * 7919 % 5) * 0.0005)
        img = np.arange(100, dtype=np.uint8).reshape(10, 10) + np.uint8(i)
        out = self.augs.augment(img)
        return [i, int(out.astype(np.int64).sum()), int(np.random.randint(1 << 30)),
                random.getrandbits(30)]


def tag_worker(x: Any) -> list:
    """``[worker id, x]``: which runner worker produced a datapoint (after 2 ms, so that every
    worker takes part)."""
    time.sleep(0.002)
    return [_rng.get_worker_info(), x]


def die_at_7(dp: list) -> list:
    """Kills the worker mapping input 7 (a poison input)."""
    if dp[0] == 7:
        os.kill(os.getpid(), 9)
    time.sleep(0.001)
    return dp


def random_draws(dp: list) -> list:
    """``[i, np.random draw, random draw, input_rng draw]``, after an uneven short sleep (the
    results finish out of order): a function of the input's key only."""
    i = dp[0]
    time.sleep((i * 7919 % 3) * 0.0003)
    gen = _rng.input_rng()
    return [i, int(np.random.randint(1 << 30)), random.random(),
            int(gen.randint(1 << 30)) if gen is not None else -1]


def waits(dp: list) -> list:
    """Waits 2 ms (like a read from storage) and holds no CPU."""
    time.sleep(0.002)
    return dp


def spin(dp: list) -> list:
    """Pure-Python work that holds the GIL for about 2 ms."""
    deadline = time.thread_time() + 0.002
    n = 0
    while time.thread_time() < deadline:
        n += 1
    return dp
