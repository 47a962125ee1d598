from __future__ import annotations

import numpy as np
import pytest

import dataflow as df
from tests.helpers import check_dataflow


def _src(n=5):
    return df.DataFromList([[i, i * 10] for i in range(n)], shuffle=False)


def test_map_data_and_none_drops():
    flow = df.MapData(_src(), lambda dp: None if dp[0] % 2 else [dp[0], dp[1] + 1])
    flow.reset_state()
    assert list(flow) == [[0, 1], [2, 21], [4, 41]]
    assert len(flow) == 5  # tensorpack's contract: len of the input


def test_map_data_gets_shallow_copy():
    lst = [[np.zeros(2), 1]]
    flow = df.MapData(df.DataFromList(lst, shuffle=False), lambda dp: dp.append(2) or dp)
    out = list(flow)
    assert out == [[lst[0][0], 1, 2]] and out[0][0] is lst[0][0]
    assert len(lst[0]) == 2


def test_map_data_component_int_and_dict_and_tuple():
    flow = df.MapDataComponent(_src(3), lambda x: x + 100, index=1)
    assert check_dataflow(flow, picklable=False) == [[0, 100], [1, 110], [2, 120]]
    dflow = df.MapDataComponent(df.DataFromList([{"a": 1, "b": 2}], shuffle=False),
                                lambda x: -x, index="b")
    assert list(dflow) == [{"a": 1, "b": -2}]
    tflow = df.MapDataComponent(df.DataFromList([(1, 2)], shuffle=False), str)
    assert list(tflow) == [["1", 2]]


def test_map_data_component_none_drops_and_source_untouched():
    lst = [[1, "a"], [2, "b"]]
    flow = df.MapDataComponent(df.DataFromList(lst, shuffle=False),
                               lambda x: None if x == 1 else x * 3)
    assert list(flow) == [[6, "b"]]
    assert lst == [[1, "a"], [2, "b"]]


def test_filter_data():
    flow = df.FilterData(_src(6), lambda dp: dp[0] % 3 == 0)
    assert check_dataflow(flow, picklable=False) == [[0, 0], [3, 30]]
    with pytest.raises(NotImplementedError, match="FilterData has no length"):
        len(flow)


def test_select_component_list_and_dict():
    flow = df.SelectComponent(df.DataFromList([[1, 2, 3]], shuffle=False), [2, 0])
    assert check_dataflow(flow) == [[3, 1]]
    dflow = df.SelectComponent(df.DataFromList([{"x": 1, "y": 2}], shuffle=False), ["y"])
    assert list(dflow) == [[2]]


def test_non_callable_is_refused():
    with pytest.raises(TypeError, match="`func` must be callable, got 3"):
        df.MapData(_src(), 3)
    with pytest.raises(TypeError, match="`predicate` must be callable"):
        df.FilterData(_src(), None)
