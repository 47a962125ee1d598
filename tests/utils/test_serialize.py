"""dataflow.utils.serialize reads both forms of tensorpack's LMDBSerializer values."""

from __future__ import annotations

import pickle

import msgpack
import msgpack_numpy
import numpy as np
import pytest

from dataflow.serialize import codec
from dataflow.utils import serialize


def _dp():
    return [np.arange(6, dtype=np.float32).reshape(2, 3), np.int64(7), 3, "abc", b"raw",
            {"k": [1.5, None]}]


def _check(got):
    assert got[0].dtype == np.float32 and got[0].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert got[1] == 7 and got[2:5] == [3, "abc", b"raw"]
    assert got[5] == {"k": [1.5, None]}


def test_loads_reads_tensorpacks_msgpack_form():
    # what tensorpack 0.8.9 - 0.9.8 wrote: msgpack + msgpack_numpy, use_bin_type=True
    buf = msgpack.packb(_dp(), use_bin_type=True, default=msgpack_numpy.encode)
    _check(serialize.loads(buf))
    # msgpack has no tuples: they come back as lists (as in tensorpack)
    assert serialize.loads(msgpack.packb((1, (2, 3)), use_bin_type=True)) == [1, [2, 3]]


def test_loads_reads_tensorpacks_pickle_form():
    buf = pickle.dumps(_dp(), protocol=-1)  # tensorpack >= 0.9.9
    _check(serialize.loads(buf))
    assert serialize.loads(pickle.dumps((1, (2, 3)), protocol=-1)) == (1, (2, 3))


def test_dumps_writes_pickle_that_both_read():
    buf = serialize.dumps(_dp())
    assert buf[:2] == b"\x80\x05"
    _check(pickle.loads(buf))
    _check(serialize.loads(buf))


def test_they_are_the_codec_functions():
    assert serialize.dumps is codec.dumps and serialize.loads is codec.loads
    assert serialize.dumps_once is codec.dumps and serialize.loads_once is codec.loads


def test_lmdb_values_of_both_forms(tmp_path):
    lmdb = pytest.importorskip("lmdb")
    from dataflow import LMDBData

    # keys and values as tensorpack's LMDBSerializer lays them out
    dps = [[np.full((2, 2), i, np.uint8), i] for i in range(4)]
    env = lmdb.open(str(tmp_path / "db.lmdb"), subdir=False, map_size=1 << 24)
    keys = [f"{i:08d}".encode() for i in range(4)]
    with env.begin(write=True) as txn:
        for i, (k, dp) in enumerate(zip(keys, dps, strict=True)):
            value = (pickle.dumps(dp, protocol=-1) if i % 2 else
                     msgpack.packb(dp, use_bin_type=True, default=msgpack_numpy.encode))
            txn.put(k, value)
        txn.put(b"__keys__", pickle.dumps(keys, protocol=-1))
    env.close()
    raw = LMDBData(str(tmp_path / "db.lmdb"), shuffle=False)
    raw.reset_state()
    got = [serialize.loads(v) for _k, v in raw]
    raw.close()
    assert [(g[0].tolist(), g[1]) for g in got] == [([[i, i], [i, i]], i) for i in range(4)]
