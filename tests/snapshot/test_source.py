"""Reading a flow by position (the snapshot's and the service's reader): in place for the
sources that can be read so, one pass for the others, and a clear refusal where no len()."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import dataflow as df
from dataflow.snapshot.source import positional


def _records(n):
    return [[i, np.full(3, i, np.int32)] for i in range(n)]


def _check(reader, n):
    assert len(reader) == n
    got = [reader.get(i) for i in (0, n - 1, 7)]
    assert [int(dp[0]) for dp in got] == [0, n - 1, 7]
    assert all(np.array_equal(dp[1], np.full(3, int(dp[0]), np.int32)) for dp in got)


def test_lmdb_is_read_by_key_in_the_reading_process(tmp_path):
    path = str(tmp_path / "x.lmdb")
    df.LMDBSerializer.save(df.DataFromList(_records(40), shuffle=False), path)
    reader = positional(df.LMDBSerializer.load(path, shuffle=False))
    assert type(reader).__name__ == "_LMDBByKey" and reader._env is None  # (nothing read)
    # what a worker receives: the keys and the path, not an open file
    clone = pickle.loads(pickle.dumps(reader))
    _check(clone, 40)
    raw = positional(df.LMDBData(path, shuffle=True))
    key, value = raw.get(3)
    assert key == b"00000003" or key == raw.keys[3]
    assert df.LMDBSerializer.load(path, shuffle=False)._decoder()(value)[0] == 3


def test_numpy_and_hdf5_are_read_in_place(tmp_path):
    npz = str(tmp_path / "x.npz")
    df.NumpySerializer.save(df.DataFromList(_records(20), shuffle=False), npz)
    _check(positional(df.NumpySerializer.load(npz, shuffle=False)), 20)
    h5 = str(tmp_path / "x.h5")
    df.HDF5Serializer.save(df.DataFromList(_records(30), shuffle=False), h5, ["a", "b"])
    _check(positional(df.HDF5Data(h5, ["a", "b"], shuffle=False)), 30)


class _Duck:
    """A sequence that is not registered as one."""

    def __len__(self):
        return 5

    def __getitem__(self, i):
        if not 0 <= i < 5:
            raise IndexError(i)
        return [i * 2]


def test_a_duck_typed_sequence_is_read_by_position():
    reader = positional(_Duck())
    assert len(reader) == 5
    assert [reader.get(i) for i in range(5)] == [[0], [2], [4], [6], [8]]


def test_a_flow_with_a_len_is_read_once_and_only_len_items():
    class Endless(df.DataFlow):
        def __iter__(self):
            i = 0
            while True:
                yield [i]
                i += 1

        def __len__(self):
            return 7

    reader = positional(Endless())
    assert [reader.get(i) for i in range(len(reader))] == [[i] for i in range(7)]


def test_a_flow_without_a_len_is_refused_with_what_to_pass():
    class NoLen(df.DataFlow):
        def __iter__(self):
            while True:
                yield [0]

    with pytest.raises(ValueError, match=r"has no len\(\).*FixedSizeData\(ds, size\)"):
        positional(NoLen())


def test_a_string_or_an_object_that_is_no_flow_is_refused():
    with pytest.raises(TypeError, match=r"`ds` must be a flow or a sequence.*got a str"):
        positional("abc")
    with pytest.raises(TypeError, match=r"`ds` must be a DataFlow or a sequence.*got object"):
        positional(object())
