"""tensorpack's ``utils.stats``: running counters and statistics."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["Accuracy", "BinaryStatistics", "OnlineMoments", "RatioCounter", "StatCounter"]


class StatCounter:
    """Collects scalar values: ``average``, ``sum``, ``max``, ``min`` and ``count`` of what was
    fed since the last :meth:`reset`. ``average``, ``max`` and ``min`` of nothing raise
    ``ValueError``."""

    def __init__(self) -> None:
        self.reset()

    def feed(self, v: Any) -> None:
        self._values.append(v)

    def reset(self) -> None:
        self._values: list[Any] = []

    @property
    def count(self) -> int:
        return len(self._values)

    @property
    def values(self) -> list[Any]:
        return self._values

    def _require_values(self, what: str) -> None:
        if not self._values:
            raise ValueError(f"StatCounter.{what}: nothing was fed since the last reset(); "
                             "feed() values first.")

    @property
    def average(self) -> float:
        self._require_values("average")
        return float(np.mean(self._values))

    @property
    def sum(self) -> Any:
        return np.sum(self._values)

    @property
    def max(self) -> Any:
        self._require_values("max")
        return max(self._values)

    @property
    def min(self) -> Any:
        self._require_values("min")
        return min(self._values)


class RatioCounter:
    """``count / total`` over what was fed: ``feed(count, total=1)``; a ratio of nothing is 0."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._tot = 0
        self._cnt = 0

    def feed(self, count: Any, total: Any = 1) -> None:
        self._tot += total
        self._cnt += count

    @property
    def ratio(self) -> float:
        if self._tot == 0:
            return 0
        return self._cnt * 1.0 / self._tot

    @property
    def total(self) -> Any:
        """The sum of the ``total`` fed."""
        return self._tot

    @property
    def count(self) -> Any:
        """The sum of the ``count`` fed."""
        return self._cnt


class Accuracy(RatioCounter):
    """A :class:`RatioCounter` whose ratio is called ``accuracy``."""

    @property
    def accuracy(self) -> float:
        return self.ratio


class BinaryStatistics:
    """Precision, recall, false-positive and false-negative rates of binary predictions.

    ``feed(pred, label)`` takes two arrays of the same shape holding 0/1 (or booleans).
    ``precision`` = correct positives / predicted positives, ``recall`` = correct positives /
    actual positives, ``false_positive`` = 1 - precision, ``false_negative`` = 1 - recall; each
    is 0 while its denominator is 0.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.nr_pos = 0  # positive labels
        self.nr_neg = 0  # negative labels
        self.nr_pred_pos = 0
        self.nr_pred_neg = 0
        self.corr_pos = 0  # correct predictions of positive labels
        self.corr_neg = 0

    def feed(self, pred: Any, label: Any) -> None:
        pred, label = np.asarray(pred), np.asarray(label)
        if pred.shape != label.shape:
            raise ValueError(f"`pred` and `label` must have the same shape, got {pred.shape} "
                             f"and {label.shape}.")
        pos, pred_pos = label == 1, pred == 1
        self.nr_pos += int(pos.sum())
        self.nr_neg += int((label == 0).sum())
        self.nr_pred_pos += int(pred_pos.sum())
        self.nr_pred_neg += int((pred == 0).sum())
        self.corr_pos += int((pos & pred_pos).sum())
        self.corr_neg += int(((label == 0) & (pred == 0)).sum())

    @property
    def precision(self) -> float:
        if self.nr_pred_pos == 0:
            return 0
        return self.corr_pos * 1.0 / self.nr_pred_pos

    @property
    def recall(self) -> float:
        if self.nr_pos == 0:
            return 0
        return self.corr_pos * 1.0 / self.nr_pos

    @property
    def false_positive(self) -> float:
        if self.nr_pred_pos == 0:
            return 0
        return 1 - self.precision

    @property
    def false_negative(self) -> float:
        if self.nr_pos == 0:
            return 0
        return 1 - self.recall


class OnlineMoments:
    """Mean and variance of a stream, computed online (Welford's algorithm) without keeping
    the values: ``mean``, ``variance`` (the sample variance, divided by ``n - 1``), ``std``.
    ``feed(x)`` takes a number or an array (moments are then elementwise)."""

    def __init__(self) -> None:
        self._mean: Any = 0.0
        self._m2: Any = 0.0
        self._n = 0

    def feed(self, x: Any) -> None:
        self._n += 1
        delta = x - self._mean
        self._mean = self._mean + delta * (1.0 / self._n)
        self._m2 = self._m2 + delta * (x - self._mean)

    @property
    def mean(self) -> Any:
        return self._mean

    @property
    def variance(self) -> Any:
        if self._n < 2:
            raise ValueError(f"OnlineMoments.variance needs at least 2 values, got {self._n}.")
        return self._m2 / (self._n - 1)

    @property
    def std(self) -> Any:
        v = self.variance
        return np.sqrt(v) if isinstance(v, np.ndarray) else math.sqrt(v)
