from __future__ import annotations

import itertools

import pytest

import dataflow as df
from tests.helpers import check_dataflow


def _src(n=3):
    return df.DataFromList([[i] for i in range(n)], shuffle=False)


def test_repeated_data():
    flow = df.RepeatedData(_src(), 2)
    assert check_dataflow(flow) == [[0], [1], [2], [0], [1], [2]]
    assert len(flow) == 6
    assert list(df.RepeatedData(_src(), 0)) == []


def test_repeated_data_infinite():
    flow = df.RepeatedData(_src(2), -1)
    assert [dp[0] for dp in itertools.islice(flow, 5)] == [0, 1, 0, 1, 0]
    with pytest.raises(NotImplementedError, match="repeats forever"):
        len(flow)
    assert list(df.RepeatedData(_src(0), -1)) == []  # an empty flow does not spin forever


def test_repeated_data_validates():
    with pytest.raises(ValueError, match="`num` must be >= 0, got -2"):
        df.RepeatedData(_src(), -2)


def test_repeated_datapoint():
    flow = df.RepeatedDataPoint(_src(2), 3)
    assert check_dataflow(flow) == [[0], [0], [0], [1], [1], [1]]
    assert len(flow) == 6
    with pytest.raises(ValueError, match="`num` must be >= 1"):
        df.RepeatedDataPoint(_src(), 0)


def test_fixed_size_keep_state():
    flow = df.FixedSizeData(_src(5), 3)
    flow.reset_state()
    assert [[dp[0] for dp in flow] for _ in range(3)] == [[0, 1, 2], [3, 4, 0], [1, 2, 3]]
    assert len(flow) == 3


def test_fixed_size_no_keep_state():
    flow = df.FixedSizeData(_src(2), 3, keep_state=False)
    flow.reset_state()
    assert [[dp[0] for dp in flow] for _ in range(2)] == [[0, 1, 0], [0, 1, 0]]


def test_fixed_size_exact_multiple_continues():
    flow = df.FixedSizeData(_src(2), 2)
    flow.reset_state()
    assert [[dp[0] for dp in flow] for _ in range(2)] == [[0, 1], [0, 1]]


def test_fixed_size_empty_source_errors():
    flow = df.FixedSizeData(_src(0), 2)
    with pytest.raises(ValueError, match="yielded no datapoint in a whole epoch"):
        list(flow)
