from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dataflow as df
from dataflow.wrappers import batch as batch_module
from dataflow.wrappers.batch import stack_component


def _list(n):
    return df.DataFromList([[i, float(i)] for i in range(n)], shuffle=False)


def test_batch_without_remainder():
    flow = df.BatchData(_list(7), 3)
    flow.reset_state()
    out = list(flow)
    assert len(flow) == 2 == len(out)
    assert [b[0].tolist() for b in out] == [[0, 1, 2], [3, 4, 5]]
    assert out[0][0].dtype == np.int32 and out[0][1].dtype == np.float32


def test_batch_with_remainder_and_two_epochs():
    flow = df.BatchData(_list(7), 3, remainder=True)
    flow.reset_state()
    for _ in range(2):
        out = list(flow)
        assert [b[0].tolist() for b in out] == [[0, 1, 2], [3, 4, 5], [6]]
    assert len(flow) == 3
    assert len(df.BatchData(_list(6), 3, remainder=True)) == 2


def test_batch_use_list():
    flow = df.BatchData(df.DataFromList([[i, "x" * i] for i in range(4)], shuffle=False), 2,
                        use_list=True)
    assert list(flow) == [[[0, 1], ["", "x"]], [[2, 3], ["xx", "xxx"]]]


def test_batch_dict_points():
    flow = df.BatchData(df.DataFromList([{"img": np.full((2,), i), "y": i} for i in range(4)],
                                        shuffle=False), 2)
    out = list(flow)
    assert out[1]["img"].tolist() == [[2, 2], [3, 3]]
    assert out[1]["y"].tolist() == [2, 3] and out[1]["y"].dtype == np.int32


def test_batch_too_large_is_refused():
    with pytest.raises(ValueError, match="`batch_size`=5 is larger than the dataflow's length 3"):
        df.BatchData(_list(3), 5)
    assert len(df.BatchData(_list(3), 5, remainder=True)) == 1


@pytest.mark.parametrize("bad", [0, -2])
def test_batch_size_validated(bad):
    with pytest.raises(ValueError, match="`batch_size` must be >= 1"):
        df.BatchData(_list(3), bad)


def test_dtype_bool_stays_bool():
    assert stack_component([True, False]).dtype == np.bool_


def test_dtype_large_ints_become_int64():
    arr = stack_component([1, 2**40])
    assert arr.dtype == np.int64 and arr.tolist() == [1, 2**40]
    assert stack_component([1, -5]).dtype == np.int32


def test_dtype_from_all_elements():
    arr = stack_component([1, 2.5])
    assert arr.dtype == np.float32 and arr.tolist() == [1.0, 2.5]
    assert stack_component([np.float64(1), np.float64(2)]).dtype == np.float64
    assert stack_component([np.zeros(2, np.uint8), np.ones(2, np.uint8)]).dtype == np.uint8
    assert stack_component(["a", "bc"]).tolist() == ["a", "bc"]
    assert stack_component([b"a", b"bc"]).dtype.kind == "S"


def test_ragged_stack_raises_value_error_with_shapes():
    flow = df.BatchData(df.DataFromList([[np.zeros((2, 2))], [np.zeros((3, 2))]], shuffle=False), 2)
    with pytest.raises(ValueError) as info:
        list(flow)
    msg = str(info.value)
    assert "cannot stack component 0" in msg
    assert "element 0: ndarray shape=(2, 2) dtype=float64" in msg
    assert "element 1: ndarray shape=(3, 2) dtype=float64" in msg
    assert "use_list=True" in msg


def test_unstackable_type_raises_type_error():
    with pytest.raises(TypeError, match="cannot stack values of type object"):
        stack_component([object(), object()])
    with pytest.raises(TypeError, match="mixed types"):
        stack_component(["a", 1])


def test_aggregate_batch_static_and_bad_datapoints():
    out = df.BatchData.aggregate_batch([[1, np.zeros(2)], [2, np.ones(2)]])
    assert out[0].tolist() == [1, 2] and out[1].tolist() == [[0, 0], [1, 1]]
    with pytest.raises(ValueError, match="needs list, tuple or dict datapoints, got int"):
        df.BatchData.aggregate_batch([1, 2])


def test_batch_by_shape():
    dps = [[np.zeros((i % 2 + 1,)), i] for i in range(7)]
    flow = df.BatchDataByShape(df.DataFromList(dps, shuffle=False), 2, idx=0)
    flow.reset_state()
    out = list(flow)
    assert [b[1].tolist() for b in out] == [[0, 2], [1, 3], [4, 6]]
    assert [b[0].shape for b in out] == [(2, 1), (2, 2), (2, 1)]
    # leftovers persist: item 5 waits in its bucket and pairs with the next epoch's 1
    assert [b[1].tolist() for b in flow][:2] == [[5, 1], [0, 2]]
    with pytest.raises(NotImplementedError):
        len(flow)


def test_mixed_numbers_and_strings_refused():
    with pytest.raises(TypeError, match=r"mixed types: \['float', 'str'\]"):
        stack_component([1.5, "a"])
    with pytest.raises(TypeError, match=r"mixed types: \['int', 'str'\]"):
        stack_component([1, "a"])
    assert stack_component([True, 2]).dtype == np.int32
    assert stack_component([1, 2.5, True]).tolist() == [1.0, 2.5, 1.0]


def test_datapoints_with_fewer_components_are_refused():
    with pytest.raises(ValueError, match=r"same number of components, got \[1, 2\]"):
        df.BatchData.aggregate_batch([[1, 2], [3]])


# ---- the C fast path of stacking (dataflow.wrappers._stack) against NumPy's own --------------

_DTYPES = [np.float32, np.float64, np.int64, np.int32, np.uint8, np.bool_, ">f4", "<U3"]


def _same_as_numpy(values):
    try:
        want = np.asarray(values)
    except ValueError:
        with pytest.raises(ValueError, match="different shapes"):
            stack_component(values)
        return
    got = stack_component(values)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want)
    assert got.flags.writeable and got.flags.c_contiguous


@pytest.mark.skipif(batch_module._fill is None, reason="dataflow.wrappers._stack was not built")
@given(st.lists(st.tuples(st.sampled_from(_DTYPES), st.sampled_from([(), (3,), (2, 3), (3, 2)]),
                          st.booleans()), min_size=1, max_size=6), st.integers(0, 2**32 - 1))
@settings(max_examples=200, deadline=None)
def test_stacking_arrays_gives_what_numpy_gives(specs, seed):
    rs = np.random.RandomState(seed)
    values = []
    for dtype, shape, strided in specs:
        a = (rs.rand(*shape, 2) * 100).astype(dtype)
        values.append(a[..., 0] if strided else np.ascontiguousarray(a[..., 0]))
    _same_as_numpy(values)


@pytest.mark.skipif(batch_module._fill is None, reason="dataflow.wrappers._stack was not built")
def test_stacking_equal_arrays_and_scalars_copies_them():
    arrs = [np.full(32, i, np.float32) for i in range(64)]
    got = stack_component(arrs)
    assert got.dtype == np.float32 and got.shape == (64, 32)
    assert got[:, 0].tolist() == list(range(64)) and got[:, 31].tolist() == list(range(64))
    arrs[0][0] = -1  # a copy, not a view
    assert got[0, 0] == 0
    scalars = [np.int64(i) for i in range(64)]
    assert stack_component(scalars).dtype == np.int64
    assert stack_component(scalars).tolist() == list(range(64))
    # a float64 scalar among int64 ones promotes, as NumPy does
    mixed = stack_component([np.int64(1), np.float64(2.5)])
    assert mixed.dtype == np.float64 and mixed.tolist() == [1.0, 2.5]
    # object arrays are never copied as raw pointers
    objs = [np.array([{"a": i}], dtype=object) for i in range(3)]
    got = stack_component(objs)
    assert got.dtype == object and [d["a"] for d in got[:, 0]] == [0, 1, 2]
    # the same total size but other shapes is a ragged batch
    with pytest.raises(ValueError, match="different shapes"):
        stack_component([np.zeros((2, 3)), np.zeros((3, 2))])
