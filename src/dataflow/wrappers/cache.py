"""``CacheData``: keep the first epoch in memory and replay it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dataflow.base import DataFlow, DataFlowReentrantGuard, ProxyDataFlow, RNGDataFlow
from dataflow.state import EpochCounter, check_state, decode_items, encode_items, state_done

__all__ = ["CacheData"]


class CacheData(EpochCounter, ProxyDataFlow, RNGDataFlow):
    """Caches the datapoints of the first complete epoch of ``ds`` and replays them after.

    The first epoch passes ``ds`` through while caching; later epochs replay the cache, shuffled
    (a new order per epoch, reproducible from the seed) if ``shuffle``. Unlike tensorpack, an
    interrupted first epoch does not leave a partial cache behind: the next epoch reads ``ds``
    again. Non-reentrant.
    """

    profile_hint = "buffer"

    def __init__(self, ds: DataFlow, shuffle: bool = False, *, seed: int | None = None) -> None:
        ProxyDataFlow.__init__(self, ds)
        self.shuffle = shuffle
        self.seed = seed
        self._guard = DataFlowReentrantGuard("CacheData")
        self._cache: list[Any] | None = None
        self._partial: list[Any] = []  # the first epoch's datapoints so far

    def reset_state(self) -> None:
        ProxyDataFlow.reset_state(self)
        RNGDataFlow.reset_state(self)
        self._cache = None

    def __len__(self) -> int:
        if self._cache is not None:
            return len(self._cache)
        return len(self.ds)

    def __iter__(self) -> Iterator[Any]:
        restored = self._resume is not None
        token, start = self._begin()
        if not restored:
            self._partial = []
        itr = iter(self.ds) if self._cache is None else None  # the child's epoch begins now
        return self._run(token, start, itr)

    def _run(self, token: object, start: int, itr: Iterator[Any] | None) -> Iterator[Any]:
        with self._guard:
            if itr is not None:
                cache = self._partial
                for dp in itr:
                    cache.append(dp)
                    self._pos += 1
                    yield dp
                self._cache, self._partial = cache, []  # only a complete epoch is kept
                self._end(token)
                return
            cache = self._cache or []
            if self.shuffle:
                order = self._epoch_rng(self._epoch - 1).permutation(len(cache))[start:]
                for i in order:
                    self._pos += 1
                    yield cache[i]
            else:
                for i in range(start, len(cache)):
                    self._pos += 1
                    yield cache[i]
            self._end(token)

    def state_dict(self) -> dict[str, Any]:
        """Own counters and seed, and, since this flow holds a buffer, the cached datapoints
        (the whole cache, or the part of the first epoch read so far) and the child's state."""
        cached = self._cache is not None
        return {
            "type": "CacheData", "shuffle": self.shuffle,
            **self._counters(),
            "seed": self._seed_state(), "complete": cached,
            "cache": encode_items((self._cache or []) if cached else self._partial),
            "child": self.ds.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state(state, self, shuffle=self.shuffle)
        self._load_seed_state(state["seed"])
        self.restore_epoch(state)
        items = decode_items(state["cache"])
        if state["complete"] or (state_done(state["child"]) and state["epoch"] >= 0):
            # (saved after the first epoch's last datapoint: the cache was complete)
            self._cache, self._partial = items, []
        else:
            self._cache, self._partial = None, items if not state["done"] else []
        self.ds.load_state_dict(state["child"])
