"""The recent rates of a service's figures: items per second over the last
:data:`RATE_WINDOW` seconds (``rate_10s`` in ``stats()``, beside the lifetime ``rate``), from
samples of a growing count."""

from __future__ import annotations

import collections
from typing import Any

__all__ = ["RATE_WINDOW", "recent_rate", "sample"]

#: seconds of the recent rates of ``stats()`` (``rate_10s``, beside the lifetime ``rate``)
RATE_WINDOW = 10.0


def sample(samples: collections.deque, now: float, count: float) -> None:
    """Add ``(now, count)``; keep the samples of the last :data:`RATE_WINDOW` seconds and
    the one just before them."""
    samples.append((now, count))
    while len(samples) > 2 and now - samples[1][0] >= RATE_WINDOW:
        samples.popleft()


def recent_rate(samples: Any, now: float) -> float:
    """Items per second over the last :data:`RATE_WINDOW` seconds (or since the first
    sample): the count's growth over that time, nothing counted since its last sample."""
    if not samples:
        return 0.0
    t0, c0 = samples[0]
    for t, c in samples:
        if now - t <= RATE_WINDOW:
            break
        t0, c0 = t, c
    return round(max(0.0, samples[-1][1] - c0) / max(now - t0, 1e-9), 2)
