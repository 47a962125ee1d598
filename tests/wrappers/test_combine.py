from __future__ import annotations

import collections

import pytest

import dataflow as df
from dataflow.errors import DataFlowError
from tests.helpers import check_dataflow


def _src(values):
    return df.DataFromList([[v] for v in values], shuffle=False)


def test_concat():
    flow = df.ConcatData([_src([1, 2]), _src([3])])
    assert check_dataflow(flow) == [[1], [2], [3]]
    assert len(flow) == 3


def test_join_lists_and_dicts():
    flow = df.JoinData([_src([1, 2, 3]), _src(["a", "b"])])
    assert check_dataflow(flow) == [[1, "a"], [2, "b"]]
    assert len(flow) == 2
    dflow = df.JoinData([
        df.DataFromList([{"x": 1, "y": 0}], shuffle=False),
        df.DataFromList([{"y": 2}], shuffle=False),
    ])
    assert list(dflow) == [{"x": 1, "y": 2}]


def test_join_mixed_kinds_errors():
    flow = df.JoinData([_src([1]), df.DataFromList([{"y": 2}], shuffle=False)])
    with pytest.raises(TypeError, match=r"different kinds \['list', 'dict'\] \(flow 1 differs\)"):
        list(flow)


def test_join_resets_a_shared_instance_once():
    resets = []

    class Counting(df.DataFlow):
        def reset_state(self):
            resets.append(1)

        def __iter__(self):
            yield [0]

    shared = Counting()
    df.JoinData([shared, shared]).reset_state()
    assert resets == [1]


def test_random_choose_equal_and_stops_at_first_exhausted():
    flow = df.RandomChooseData([_src(range(5)), _src(range(100, 105))], seed=0)
    flow.reset_state()
    out = [dp[0] for dp in flow]
    lows = [x for x in out if x < 100]
    highs = [x for x in out if x >= 100]
    assert lows == sorted(lows) and highs == sorted(highs)
    assert len(lows) == 5 or len(highs) == 5
    with pytest.raises(NotImplementedError):
        len(flow)


def test_random_choose_probabilities_within_tolerance_and_lists():
    flow = df.RandomChooseData([[_src([0] * 1000), 0.1], (_src([1] * 1000), 0.2),
                                (_src([2] * 1000), 0.7)], seed=0)
    flow.reset_state()
    counts = collections.Counter(dp[0] for dp in flow)
    assert counts[2] > counts[1] > counts[0]
    with pytest.raises(ValueError, match="sum to 1"):
        df.RandomChooseData([(_src([0]), 0.5), (_src([1]), 0.6)])


def test_random_choose_seeded_reproducible():
    def run():
        f = df.RandomChooseData([_src(range(50)), _src(range(100, 150))], seed=9)
        f.reset_state()
        return [dp[0] for dp in f]

    assert run() == run()


def test_random_mix_consumes_each_exactly():
    flow = df.RandomMixData([_src(range(5)), _src(range(100, 103))], seed=0)
    first = check_dataflow(flow)
    values = [dp[0] for dp in first]
    assert sorted(values) == [0, 1, 2, 3, 4, 100, 101, 102]
    assert [v for v in values if v < 100] == [0, 1, 2, 3, 4]
    assert len(flow) == 8


def test_random_mix_short_source_is_named():
    class Liar(df.DataFlow):
        def __len__(self):
            return 3

        def __iter__(self):
            yield [0]

    flow = df.RandomMixData([Liar(), _src([1])], seed=0)
    flow.reset_state()
    with pytest.raises(DataFlowError, match=r"`df_lists\[0\]` \(Liar\) ended before yielding"):
        list(flow)


def test_random_mix_needs_lengths():
    with pytest.raises(NotImplementedError, match="needs the length of every flow"):
        df.RandomMixData([df.DataFromGenerator(lambda: iter([]))])


def test_empty_list_refused():
    with pytest.raises(ValueError, match="non-empty list of DataFlows"):
        df.ConcatData([])
