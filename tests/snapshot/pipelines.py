"""Map functions of the snapshot tests, importable by other processes (a subprocess, a
service's workers): each call is counted by appending a byte to the file named by the
environment variable ``SNAPSHOT_CALLS`` (when set)."""

from __future__ import annotations

import os

import numpy as np


def count_call() -> None:
    path = os.environ.get("SNAPSHOT_CALLS")
    if path:
        with open(path, "ab") as f:
            f.write(b"x")


def calls() -> int:
    path = os.environ.get("SNAPSHOT_CALLS")
    return os.path.getsize(path) if path and os.path.exists(path) else 0


def records(n: int) -> list[list]:
    return [[i, f"item{i}"] for i in range(n)]


def decode(dp):
    """A deterministic 'decode': an image of the index, and the label; every 7th dropped."""
    count_call()
    i = int(dp[0])
    if i % 7 == 6:
        return None
    return [np.full((4, 5, 3), i % 256, np.uint8) + np.arange(3, dtype=np.uint8), i % 10,
            np.float32(i) / 4]


def augment(dp):
    """The random part after the snapshot."""
    image = dp[0]
    if np.random.random() < 0.5:
        image = image[:, ::-1]
    return [image.astype(np.int16) + np.random.randint(0, 3), dp[1]]


def kept(n: int) -> list[list]:
    """Records that ``decode`` keeps (none dropped): a service maps every position."""
    return [r for r in records(n) if r[0] % 7 != 6]


def decode_then_augment(dp):
    """The uncached pipeline: both parts in one map."""
    return augment(decode(dp))
