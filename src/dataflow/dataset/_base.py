"""The shared iteration logic of the dataset loaders."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from dataflow.base import DataFlowReentrantGuard, RNGDataFlow
from dataflow.dataset._io import imread_bgr
from dataflow.state import ReaderState
from dataflow.validation import check_choice

__all__ = ["ImageListDataset", "IndexedDataset", "check_choice"]


class IndexedDataset(ReaderState, RNGDataFlow):
    """A finite dataset of ``len(self)`` datapoints, produced by ``self._datapoint(i)``.

    Each epoch visits every index once, in file order or, with ``shuffle``, in an order drawn
    from ``self._epoch_rng(epoch)`` (so ``seed`` reproduces every epoch). The counters and the
    resumable state are :class:`~dataflow.state.ReaderState`'s: ``state_dict()`` is
    ``{"type", "size", "shuffle", "epoch", "pos", "done"[, "seed"]}``; after
    ``load_state_dict()`` the next ``__iter__`` continues the epoch at ``pos`` (its order is
    re-derived from the seed; nothing before ``pos`` is loaded). An epoch begins when
    ``__iter__`` is called and ends when its iterator is exhausted or closed. Not reentrant.
    """

    shuffle: bool = False

    def _init_iteration(self, shuffle: bool, seed: int | None) -> None:
        self.shuffle = self._shuffle = bool(shuffle)
        self.seed = seed
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
        self._guard.check()
        token, epoch, start = self._begin_epoch()
        return self._run(token, self._order(epoch), start)

    def _run(self, token: object, order: np.ndarray, start: int) -> Iterator[list]:
        with self._guard:
            for k in range(start, len(order)):
                dp = self._datapoint(int(order[k]))
                self._pos = k + 1
                yield dp
            self._end(token)


class ImageListDataset(IndexedDataset):
    """A loader of the images listed in ``self.imglist`` (``(path, label)`` pairs): yields
    ``[image, label]``, the image decoded by OpenCV (BGR ``uint8``). Subclasses fill
    ``imglist`` and then call :meth:`_ready`."""

    imglist: list[tuple[str, int]]

    def _open(self, dir: Any, name: str, splits: tuple[str, ...]) -> str:
        """Check ``name`` and keep ``dir`` (``~`` expanded); returns the class name for the
        messages."""
        self.name = check_choice("name", name, splits)
        self.dir = os.path.expanduser(os.fspath(dir))
        return type(self).__name__

    def _ready(self, name: str, shuffle: bool | None, seed: int | None) -> None:
        """Set up the iteration; ``shuffle=None`` shuffles the ``'train'`` split only."""
        self._init_iteration(name == "train" if shuffle is None else shuffle, seed)

    def __len__(self) -> int:
        return len(self.imglist)

    def _datapoint(self, index: int) -> list:
        path, label = self.imglist[index]
        return [imread_bgr(self._path(path), type(self).__name__), label]

    def _path(self, path: str) -> str:
        """The file of an ``imglist`` entry."""
        return path
