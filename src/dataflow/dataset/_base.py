"""The shared iteration logic of the dataset loaders."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from dataflow.base import DataFlowReentrantGuard, RNGDataFlow

__all__ = ["IndexedDataset", "check_choice"]


def check_choice(param: str, value: Any, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise a ValueError that lists them."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(
            f"`{param}` must be one of {', '.join(repr(c) for c in choices)}; got {value!r}."
        )
    return value


class IndexedDataset(RNGDataFlow):
    """A finite dataset of ``len(self)`` datapoints, produced by ``self._datapoint(i)``.

    Each epoch visits every index once, in file order or, with ``shuffle``, in an order drawn
    from ``self._epoch_rng(epoch)`` (so ``seed`` reproduces every epoch). ``_epoch`` counts the
    epochs started and finished; ``_position`` is the number of datapoints already produced in
    the current epoch (an iteration resumes from it). An iteration that ends, or is closed
    early, completes the epoch. Not reentrant.
    """

    shuffle: bool = False

    def _init_iteration(self, shuffle: bool, seed: int | None) -> None:
        self.shuffle = bool(shuffle)
        self.seed = seed
        self._epoch = 0
        self._position = 0
        self._guard = DataFlowReentrantGuard(type(self).__name__)

    def __len__(self) -> int:
        raise NotImplementedError  # pragma: no cover - every loader defines it

    def _datapoint(self, index: int) -> list:
        raise NotImplementedError  # pragma: no cover - every loader defines it

    def _order(self, epoch: int) -> np.ndarray:
        order = np.arange(len(self))
        if self.shuffle:
            self._epoch_rng(epoch).shuffle(order)
        return order

    def __iter__(self) -> Iterator[list]:
        with self._guard:
            order = self._order(self._epoch)
            try:
                while self._position < len(order):
                    index = int(order[self._position])
                    self._position += 1
                    yield self._datapoint(index)
            finally:
                self._epoch += 1
                self._position = 0
