"""``CacheData``: keep the first epoch in memory and replay it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dataflow.base import DataFlow, DataFlowReentrantGuard, ProxyDataFlow, RNGDataFlow

__all__ = ["CacheData"]


class CacheData(ProxyDataFlow, RNGDataFlow):
    """Caches the datapoints of the first complete epoch of ``ds`` and replays them after.

    The first epoch passes ``ds`` through while caching; later epochs replay the cache, shuffled
    (a new order per epoch, reproducible from the seed) if ``shuffle``. Unlike tensorpack, an
    interrupted first epoch does not leave a partial cache behind: the next epoch reads ``ds``
    again. Non-reentrant.
    """

    def __init__(self, ds: DataFlow, shuffle: bool = False, *, seed: int | None = None) -> None:
        ProxyDataFlow.__init__(self, ds)
        self.shuffle = shuffle
        self.seed = seed
        self._guard = DataFlowReentrantGuard("CacheData")
        self._cache: list[Any] | None = None
        self._epoch = 0

    def reset_state(self) -> None:
        ProxyDataFlow.reset_state(self)
        RNGDataFlow.reset_state(self)
        self._cache = None

    def __len__(self) -> int:
        if self._cache is not None:
            return len(self._cache)
        return len(self.ds)

    def __iter__(self) -> Iterator[Any]:
        with self._guard:
            epoch = self._epoch
            self._epoch += 1
            if self._cache is None:
                cache: list[Any] = []
                for dp in self.ds:
                    cache.append(dp)
                    yield dp
                self._cache = cache  # only a complete epoch becomes the cache
                return
            cache = self._cache
            if self.shuffle:
                for i in self._epoch_rng(epoch).permutation(len(cache)):
                    yield cache[i]
            else:
                yield from cache
