from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow.serialize import dumps, loads
from dataflow.serialize.codec import get_loads, sniff_codec
from tests.helpers import to_plain
from tests.serialize._samples import rich_datapoints


@pytest.mark.parametrize("codec", ["pickle", "msgpack"])
def test_round_trip_rich_datapoints(codec):
    for dp in rich_datapoints():
        got = loads(dumps(dp, codec=codec))
        assert to_plain(got) == to_plain(dp)
        assert got[0].dtype == np.uint8 and got[1].dtype == np.float32


def test_pickle_keeps_tuples_msgpack_makes_lists():
    obj = [(1, 2), {"a": (3,)}]
    assert loads(dumps(obj)) == [(1, 2), {"a": (3,)}]
    assert loads(dumps(obj, codec="msgpack")) == [[1, 2], {"a": [3]}]


def test_pickle_is_protocol_5_and_free_of_numpy_private_names():
    buf = dumps([np.arange(3), np.float32(1.5), np.int64(2)])
    assert buf[:2] == b"\x80\x05"
    assert b"numpy._core" not in buf and b"numpy.core" not in buf
    assert sniff_codec(buf) == "pickle-fast"
    assert sniff_codec(dumps([1], codec="msgpack")) == "msgpack"


@pytest.mark.parametrize(
    "arr",
    [
        np.asfortranarray(np.arange(12.0).reshape(3, 4)),
        np.arange(20, dtype=np.int32)[::3],
        np.zeros((0, 3), dtype=np.float64),
        np.array(3.5),
        np.arange(6, dtype=">i4").reshape(2, 3),
        np.zeros(3, dtype=[("x", "f4"), ("y", "i2")]),
        np.array([{"a": 1}, None, "s"], dtype=object),
        np.array([True, False]),
        np.array([1 + 2j], dtype=np.complex64),
    ],
)
def test_arrays_of_every_layout_round_trip_writable(arr):
    got = loads(dumps(arr))
    assert got.dtype == arr.dtype and got.shape == arr.shape
    assert to_plain(got.tolist()) == to_plain(arr.tolist())
    assert got.flags.writeable


def test_readonly_array_round_trips():
    arr = np.arange(5)
    arr.flags.writeable = False
    got = loads(dumps(arr))
    assert got.tolist() == [0, 1, 2, 3, 4]


def test_numpy_scalars_keep_their_type():
    vals = [np.float16(0.5), np.float32(1.25), np.int8(-3), np.uint64(2**63), np.bool_(True)]
    got = loads(dumps(vals))
    assert [type(v) for v in got] == [type(v) for v in vals]
    assert got == vals


def test_numpy1_pickles_load_without_deprecation_warning():
    # A NumPy 1.x pickle refers to numpy.core.multiarray (NumPy 2 warns when that is imported).
    buf = pickle.dumps(np.arange(4, dtype=np.int16), protocol=2)
    assert b"numpy._core.multiarray" in buf
    legacy = buf.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
    got = loads(legacy)  # filterwarnings=error turns any warning into a failure
    assert got.dtype == np.int16 and got.tolist() == [0, 1, 2, 3]
    assert get_loads("pickle")(legacy).tolist() == [0, 1, 2, 3]


def test_unserializable_object_is_a_clear_type_error():
    with pytest.raises(TypeError, match=r"type list with codec 'pickle'.*lambda"):
        dumps([lambda x: x])
    with pytest.raises(TypeError, match=r"codec 'msgpack'"):
        dumps([object()], codec="msgpack")


def test_bad_codec_names_the_parameter():
    with pytest.raises(ValueError, match=r"`codec` must be one of 'pickle', 'msgpack'.*'bson'"):
        dumps(1, codec="bson")


class _Nested:
    def __reduce__(self):
        return (loads, (dumps([1, 2]),))


def test_nested_dumps_call_does_not_corrupt_the_shared_pickler():
    assert loads(dumps([_Nested(), np.arange(2)]))[0] == [1, 2]
    assert loads(dumps({"after": 1})) == {"after": 1}


leaves = st.one_of(
    st.integers(-(2**62), 2**62),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.booleans(),
    st.none(),
)
trees = st.recursive(
    leaves,
    lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=4), kids)),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(obj=trees, codec=st.sampled_from(["pickle", "msgpack"]))
def test_property_round_trip(obj, codec):
    assert loads(dumps(obj, codec=codec)) == obj
