"""dataflow.utils.stats: tensorpack's counters."""

from __future__ import annotations

import numpy as np
import pytest

from dataflow.utils.stats import (
    Accuracy,
    BinaryStatistics,
    OnlineMoments,
    RatioCounter,
    StatCounter,
)


def test_stat_counter():
    c = StatCounter()
    for v in (1, 2, 3, 6):
        c.feed(v)
    assert (c.average, c.sum, c.max, c.min, c.count, c.values) == (3.0, 12, 6, 1, 4, [1, 2, 3, 6])
    c.reset()
    assert (c.count, c.sum) == (0, 0)
    for prop in ("average", "max", "min"):
        with pytest.raises(ValueError, match=f"StatCounter.{prop}: nothing was fed"):
            getattr(c, prop)


def test_ratio_counter_and_accuracy():
    r = RatioCounter()
    assert r.ratio == 0
    r.feed(3, 4)
    r.feed(1, 4)
    assert (r.ratio, r.total, r.count) == (0.5, 8, 4)
    a = Accuracy()
    for correct in (1, 0, 1, 1):
        a.feed(correct)
    assert (a.accuracy, a.total, a.count) == (0.75, 4, 3)
    a.reset()
    assert (a.accuracy, a.total) == (0, 0)


def test_binary_statistics():
    s = BinaryStatistics()
    assert (s.precision, s.recall, s.false_positive, s.false_negative) == (0, 0, 0, 0)
    s.feed(np.array([1, 1, 0, 0, 0, 1]), np.array([1, 1, 1, 1, 0, 0]))
    assert (s.nr_pos, s.nr_neg, s.nr_pred_pos, s.nr_pred_neg, s.corr_pos, s.corr_neg) == (
        4, 2, 3, 3, 2, 1)
    assert s.precision == 2 / 3 and s.recall == 0.5
    assert s.false_positive == 1 - 2 / 3 and s.false_negative == 0.5
    s.feed(np.array([[1, 0]]), np.array([[1, 0]]))  # any shape; counts add up
    assert (s.corr_pos, s.nr_pos, s.nr_pred_pos) == (3, 5, 4)
    assert (s.precision, s.recall) == (0.75, 0.6)
    with pytest.raises(ValueError, match="same shape"):
        s.feed(np.zeros(2), np.zeros(3))


def test_online_moments():
    m = OnlineMoments()
    for x in (2, 4, 4, 4, 5, 5, 7, 9):
        m.feed(x)
    assert m.mean == 5.0
    assert m.variance == pytest.approx(32 / 7, rel=1e-12)  # the sample variance
    assert m.std == pytest.approx((32 / 7) ** 0.5, rel=1e-12)
    v = OnlineMoments()
    for x in (np.array([1.0, 10.0]), np.array([3.0, 30.0])):
        v.feed(x)
    assert v.mean.tolist() == [2.0, 20.0] and v.variance.tolist() == [2.0, 200.0]
    with pytest.raises(ValueError, match="at least 2 values, got 0"):
        _ = OnlineMoments().variance
