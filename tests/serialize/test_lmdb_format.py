from __future__ import annotations

import pickle

import lmdb
import msgpack
import msgpack_numpy
import numpy as np
import pytest

from dataflow.serialize import CorruptFileError, LMDBData, LMDBDataDecoder, LMDBSerializer, dumps
from dataflow.serialize.lmdb_format import _LMDBWriter
from tests.helpers import check_dataflow, epoch, to_plain
from tests.serialize._samples import flow, listing, rich_datapoints


def _save(path, dps, **kw):
    kw.setdefault("progress", False)
    LMDBSerializer.save(flow(dps), str(path), **kw)


def test_round_trip_sequential_two_epochs_in_order(tmp_path):
    dps = rich_datapoints()
    _save(tmp_path / "db.lmdb", dps, write_frequency=5)
    df = LMDBSerializer.load(str(tmp_path / "db.lmdb"), shuffle=False)
    assert len(df) == 12
    check_dataflow(df, expected=dps, epochs=2)
    assert df._pos == 12
    assert listing(tmp_path) == ["db.lmdb"]


def test_shuffled_load_reads_by_key_a_new_order_each_epoch(tmp_path):
    dps = [[i, np.full(3, i)] for i in range(50)]
    _save(tmp_path / "db", dps)
    df = LMDBSerializer.load(tmp_path / "db", shuffle=True, seed=3)
    df.reset_state()
    e1, e2 = epoch(df), epoch(df)
    assert sorted(dp[0] for dp in e1) == list(range(50)) == sorted(dp[0] for dp in e2)
    assert [dp[0] for dp in e1] != list(range(50))
    assert e1 != e2
    again = LMDBSerializer.load(tmp_path / "db", shuffle=True, seed=3)
    again.reset_state()
    assert epoch(again) == e1


def test_tensorpack_layout_keys_and_pickled_values(tmp_path):
    dps = [[i, f"v{i}"] for i in range(3)]
    _save(tmp_path / "db", dps)
    env = lmdb.open(str(tmp_path / "db"), subdir=False, readonly=True, lock=False)
    with env.begin() as txn:
        items = list(txn.cursor())
    env.close()
    keys = [b"00000000", b"00000001", b"00000002"]
    assert [k for k, _ in items] == [*keys, b"__keys__"]
    assert [pickle.loads(v) for _, v in items[:3]] == dps
    assert pickle.loads(items[3][1]) == keys


def test_existing_directory_gets_data_mdb(tmp_path):
    (tmp_path / "dir").mkdir()
    _save(tmp_path / "dir", [[1], [2]])
    assert listing(tmp_path / "dir") == ["data.mdb"]
    df = LMDBSerializer.load(tmp_path / "dir", shuffle=False)
    assert check_dataflow(df) == [[1], [2]]
    with pytest.raises(FileExistsError, match=r"data.mdb' already exists; pass overwrite=True"):
        _save(tmp_path / "dir", [[3]])


def test_overwrite_is_refused_then_allowed(tmp_path):
    _save(tmp_path / "db", [[1]])
    with pytest.raises(FileExistsError, match=r"overwrite=True"):
        _save(tmp_path / "db", [[2]])
    _save(tmp_path / "db", [[2], [3]], overwrite=True)
    assert check_dataflow(LMDBSerializer.load(tmp_path / "db", shuffle=False)) == [[2], [3]]
    assert listing(tmp_path) == ["db"]


def test_tiny_map_grows_many_times_and_keeps_every_item(tmp_path):
    dps = [[i, np.full(100, i, dtype=np.int64)] for i in range(3000)]
    _save(tmp_path / "db", dps, write_frequency=700, map_size=1 << 15)
    df = LMDBSerializer.load(tmp_path / "db", shuffle=False)
    assert len(df) == 3000
    got = check_dataflow(df)
    df.close()
    assert got == to_plain(dps)
    env = lmdb.open(str(tmp_path / "db"), subdir=False, readonly=True, lock=False)
    assert env.info()["map_size"] >= 1 << 22  # grown >= 7 times from 32 KiB
    env.close()


def test_writer_replays_a_whole_transaction_after_map_full(tmp_path):
    # Without growing ahead, LMDB reports MapFullError in the middle of transactions.
    w = _LMDBWriter(str(tmp_path / "raw"), 1 << 15, proactive=False)
    items = [(b"%08d" % i, b"x") for i in range(20000)]
    for start in range(0, 20000, 5000):
        w.put_batch(items[start : start + 5000], 5000, append=True)
    w.finish(20000, "raw")
    assert w.grows_reactive >= 4 and w.grows_proactive == 0
    env = lmdb.open(str(tmp_path / "raw"), subdir=False, readonly=True, lock=False)
    with env.begin() as txn:
        assert txn.stat()["entries"] == 20000
        assert [k for k, _ in txn.cursor()] == [k for k, _ in items]
    env.close()


def test_lmdbdata_raw_pairs_and_keys_arguments(tmp_path):
    _save(tmp_path / "db", [[i] for i in range(5)])
    raw = LMDBData(tmp_path / "db", shuffle=False)
    raw.reset_state()
    pairs = list(raw)
    assert [k for k, _ in pairs] == [b"%08d" % i for i in range(5)]
    assert [pickle.loads(v) for _, v in pairs] == [[i] for i in range(5)]
    assert raw.keys == [b"%08d" % i for i in range(5)]
    fmt = LMDBData(tmp_path / "db", shuffle=False, keys="{:0>8d}")
    fmt.reset_state()
    assert [k for k, _ in fmt] == [b"%08d" % i for i in range(5)]  # bytes, not str
    some = LMDBData(tmp_path / "db", shuffle=False, keys=["00000003", b"00000001"])
    assert len(some) == 2
    some.reset_state()
    assert [pickle.loads(v) for _, v in some] == [[3], [1]]
    for d in (raw, fmt, some):
        d.close()
        d.close()


def test_decoder_maps_and_drops_none(tmp_path):
    _save(tmp_path / "db", [[i] for i in range(6)])
    dec = LMDBDataDecoder(
        LMDBData(tmp_path / "db", shuffle=False),
        lambda k, v: None if int(k) % 2 else [int(k), pickle.loads(v)[0] * 10],
    )
    dec.reset_state()
    assert list(dec) == [[0, 0], [2, 20], [4, 40]]
    with pytest.raises(TypeError, match=r"`decoder` must be callable"):
        LMDBDataDecoder(LMDBData(tmp_path / "db"), "nope")


def _raw_db(path, entries):
    env = lmdb.open(str(path), subdir=False, lock=False, map_size=1 << 24)
    with env.begin(write=True) as txn:
        for k, v in entries:
            txn.put(k, v)
    env.close()


def test_old_msgpack_databases_are_detected_and_read(tmp_path):
    def pack(o):
        return msgpack.packb(o, default=msgpack_numpy.encode, use_bin_type=True)

    keys = [b"%08d" % i for i in range(4)]
    dps = [[np.arange(i, dtype=np.float32), i, "s"] for i in range(4)]
    _raw_db(tmp_path / "old", [*zip(keys, map(pack, dps)), (b"__keys__", pack(keys))])
    for shuffle in (False, True):
        df = LMDBSerializer.load(tmp_path / "old", shuffle=shuffle, seed=0)
        got = sorted(check_dataflow(df), key=lambda dp: dp[1])
        assert got == to_plain(dps)


def test_database_without_keys_entry_is_scanned_for_shuffle(tmp_path, caplog):
    _raw_db(tmp_path / "nokeys", [(b"b", dumps([2])), (b"a", dumps([1]))])
    df = LMDBSerializer.load(tmp_path / "nokeys", shuffle=True, seed=0)
    assert "no `__keys__` entry" in caplog.text
    assert sorted(check_dataflow(df)) == [[1], [2]]
    seq = LMDBSerializer.load(tmp_path / "nokeys", shuffle=False)
    assert check_dataflow(seq) == [[1], [2]]


def test_keys_entry_in_the_middle_is_skipped(tmp_path):
    entries = [(b"A", dumps(["A"])), (b"__keys__", dumps([b"A", b"z"])), (b"z", dumps(["z"]))]
    _raw_db(tmp_path / "mid", entries)
    df = LMDBSerializer.load(tmp_path / "mid", shuffle=False)
    assert len(df) == 2
    assert check_dataflow(df) == [["A"], ["z"]]


def test_two_loaders_of_one_file_share_the_environment(tmp_path):
    _save(tmp_path / "db", [[1], [2]])
    a = LMDBSerializer.load(tmp_path / "db", shuffle=False)
    b = LMDBSerializer.load(tmp_path / "db", shuffle=True)
    a.reset_state()
    b.reset_state()
    assert list(a) == [[1], [2]] and sorted(b) == [[1], [2]]
    a.close()
    assert sorted(b) == [[1], [2]]
    b.close()


def test_corrupt_value_names_file_and_record(tmp_path):
    dps = [[i, f"marker-{i:03d}"] for i in range(10)]
    _save(tmp_path / "db", dps)
    data = bytearray((tmp_path / "db").read_bytes())
    at = data.find(b"marker-006")
    while at >= 0:  # every copy (LMDB keeps stale pages)
        data[at - 12 : at + 4] = b"\xff" * 16
        at = data.find(b"marker-006")
    (tmp_path / "db").write_bytes(bytes(data))
    for shuffle, index in ((False, "6"), (True, r"\d")):
        df = LMDBSerializer.load(tmp_path / "db", shuffle=shuffle, seed=0)
        df.reset_state()
        with pytest.raises(CorruptFileError, match=rf"record {index} of '.*db'.*cannot be decoded"):
            list(df)
        df.close()


def test_truncated_and_foreign_files_are_refused(tmp_path):
    _save(tmp_path / "db", [[np.zeros(2000)] for _ in range(50)])
    data = (tmp_path / "db").read_bytes()
    (tmp_path / "cut").write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptFileError, match=r"'.*cut' is truncated: it has \d+ bytes"):
        LMDBSerializer.load(tmp_path / "cut")
    (tmp_path / "text.txt").write_text("hello, not a database\n" * 400)
    with pytest.raises(CorruptFileError, match=r"text.txt' is not a readable LMDB database"):
        LMDBData(tmp_path / "text.txt")


def test_missing_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"`lmdb_path` '.*nope' does not exist"):
        LMDBData(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"holds no LMDB database .*data.mdb"):
        LMDBSerializer.load(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match=r"directory .* does not exist"):
        _save(tmp_path / "no" / "such" / "db", [[1]])


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match=r"`write_frequency` must be a positive int, got 0"):
        _save(tmp_path / "db", [[1]], write_frequency=0)
    with pytest.raises(TypeError, match=r"`df` must be a DataFlow, got list"):
        LMDBSerializer.save([[1]], str(tmp_path / "db"))
    _save(tmp_path / "db", [[1]])
    with pytest.raises(TypeError, match=r"`keys` must be a list"):
        LMDBData(tmp_path / "db", keys=3)


def test_pickles_before_and_after_reset(tmp_path):
    _save(tmp_path / "db", [[1], [2]])
    df = LMDBSerializer.load(tmp_path / "db", shuffle=False)
    df.reset_state()
    clone = pickle.loads(pickle.dumps(df))
    clone.reset_state()
    assert list(clone) == [[1], [2]] == list(df)
    clone.close()
    df.close()


def test_empty_flow_round_trips(tmp_path):
    _save(tmp_path / "db", [])
    df = LMDBSerializer.load(tmp_path / "db", shuffle=True)
    assert len(df) == 0
    assert check_dataflow(df) == []


def test_keys_that_are_not_in_the_database(tmp_path):
    _save(tmp_path / "db", [[0], [1]])
    raw = LMDBData(tmp_path / "db", shuffle=False, keys=[b"00000001", b"nope"])
    raw.reset_state()
    with pytest.raises(CorruptFileError, match=r"key b'nope' \(record 1\) is missing from"):
        list(raw)
    raw.close()
    _raw_db(tmp_path / "bad", [(b"a", dumps([1])), (b"__keys__", dumps([b"a", b"b"]))])
    df = LMDBSerializer.load(tmp_path / "bad", shuffle=True, seed=0)
    df.reset_state()
    with pytest.raises(CorruptFileError, match=r"key b'b' \(record \d\) is missing from"):
        list(df)
    df.close()
    _raw_db(tmp_path / "garbage", [(b"a", dumps([1])), (b"__keys__", b"\x80\x05garbage")])
    with pytest.raises(CorruptFileError, match=r"the `__keys__` entry of '.*garbage' cannot be"):
        LMDBSerializer.load(tmp_path / "garbage")
