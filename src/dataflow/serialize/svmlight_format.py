"""``SVMLightData``: rows of an SVMLight/libsvm file, through scikit-learn (optional)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from dataflow.base import DataFlowReentrantGuard, RNGDataFlow
from dataflow.serialize._atomic import check_source_path

__all__ = ["SVMLightData"]


class SVMLightData(RNGDataFlow):
    """Yields ``[x_row, y]`` (a dense ``float64`` row and its label) of an SVMLight file.

    Needs scikit-learn (``sklearn.datasets.load_svmlight_file``); without it, construction
    raises an ImportError that says so. ``len`` is exact; not reentrant.
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
        self._guard = DataFlowReentrantGuard("SVMLightData")

    def __len__(self) -> int:
        return len(self.y)

    def __iter__(self) -> Iterator[list[Any]]:
        with self._guard:
            epoch = self._epoch
            self._epoch += 1
            self._pos = 0
            n = len(self.y)
            order = self._epoch_rng(epoch).permutation(n).tolist() if self._shuffle else range(n)
            for self._pos, i in enumerate(order, 1):
                yield [self.X[i], self.y[i]]
