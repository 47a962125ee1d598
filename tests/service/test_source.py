"""Reading a service's input by position: in place for the sources that can be read so
(the workers read them, nothing passes through the dispatcher), one pass for the others."""

from __future__ import annotations

import pickle

import numpy as np

import dataflow as df
from dataflow.service import DataService, ServiceData
from dataflow.service.source import positional


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


def _first(dp):
    return [int(dp[0]) * 10]


def test_a_service_over_lmdb_gives_what_a_mapper_gives(tmp_path):
    path = str(tmp_path / "x.lmdb")
    df.LMDBSerializer.save(df.DataFromList(_records(50), shuffle=False), path)
    with DataService(df.LMDBSerializer.load(path, shuffle=False), _first, num_workers=2,
                     shuffle=False) as svc:
        c = ServiceData(svc.address, rank=0, world_size=1)
        c.reset_state()
        got = [dp[0] for dp in c]
        c.close()
    assert got == [10 * i for i in range(50)]
