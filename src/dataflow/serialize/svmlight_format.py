"""``SVMLightData``: rows of an SVMLight/libsvm file, through scikit-learn (optional)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from dataflow.base import DataFlowReentrantGuard, RNGDataFlow
from dataflow.serialize._atomic import check_source_path
from dataflow.state import ReaderState

__all__ = ["SVMLightData"]


class SVMLightData(ReaderState, RNGDataFlow):
    """Yields ``[x_row, y]`` (a dense ``float64`` row and its label) of an SVMLight file.

    Needs scikit-learn (``sklearn.datasets.load_svmlight_file``); without it, construction
    raises an ImportError that says so. ``len`` is exact; not reentrant. Resumable:
    ``state_dict()`` saves epoch, position and seed; a restored flow continues at the position.
    """

    def __init__(
        self, filename: str | os.PathLike, shuffle: bool = True, *, seed: int | None = None
    ) -> None:
        try:
            from sklearn.datasets import load_svmlight_file
        except ImportError as e:
            raise ImportError(
                "SVMLightData needs scikit-learn, which is not installed; pip install scikit-learn"
            ) from e
        self._filename = check_source_path(filename, "SVMLightData", "filename")
        x, y = load_svmlight_file(self._filename)
        self.X = np.asarray(x.todense())
        self.y = y
        self._shuffle = bool(shuffle)
        self.seed = seed
        self._pos = 0
        self._epoch = 0
        self._resume: int | None = None
        self._guard = DataFlowReentrantGuard("SVMLightData")

    def __len__(self) -> int:
        return len(self.y)

    def __iter__(self) -> Iterator[list[Any]]:
        return self._run(*self._begin_epoch())

    def _run(self, token: object, epoch: int, start: int) -> Iterator[list[Any]]:
        with self._guard:
            n = len(self.y)
            order = self._epoch_rng(epoch).permutation(n).tolist() if self._shuffle else range(n)
            try:
                for self._pos, i in enumerate(order[start:], start + 1):
                    yield [self.X[i], self.y[i]]
            finally:
                self._end(token)
