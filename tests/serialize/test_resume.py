"""Exact resume of the serializer-backed readers, without re-reading the delivered
part, and clear errors for states of another file."""

from __future__ import annotations

import importlib.util
import json

import lmdb
import numpy as np
import pytest

from dataflow.serialize import (
    CaffeLMDB,
    HDF5Serializer,
    LMDBData,
    LMDBDataDecoder,
    LMDBSerializer,
    NumpySerializer,
    TFRecordData,
    TFRecordSerializer,
    dumps,
)
from dataflow.sources import DataFromList
from dataflow.state import StateMismatchError
from tests.helpers import check_resume, to_plain

N = 6
READERS = ["builtin", pytest.param("tf", marks=[pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None, reason="needs tensorflow"),
    pytest.mark.loads_frameworks])]


def _dps(n=N):
    return [[i, f"s{i}", np.full(2, i, np.int16)] for i in range(n)]


def _save_lmdb(path, n=N):
    LMDBSerializer.save(DataFromList(_dps(n), shuffle=False), str(path), progress=False)
    return str(path)


def _save_tfrecord(path, dps=None):
    dps = _dps() if dps is None else dps
    TFRecordSerializer.save(DataFromList(dps, shuffle=False), str(path), progress=False)
    return str(path)


def _state_after(df, k):
    """The JSON round-tripped state of ``df`` after ``k`` datapoints of its first epoch, and
    the rest of that epoch."""
    df.reset_state()
    it = iter(df)
    for _ in range(k):
        next(it)
    state = json.loads(json.dumps(df.state_dict()))
    rest = [to_plain(dp) for dp in it]
    return state, rest


# ------------------------------------------------------------------------------------- LMDB
@pytest.mark.parametrize("shuffle", [False, True])
def test_lmdb_serializer_load(tmp_path, shuffle):
    path = _save_lmdb(tmp_path / "a.lmdb")
    seq = check_resume(lambda: LMDBSerializer.load(path, shuffle=shuffle, seed=4), epochs=2)
    assert len(seq) == 2 * N
    firsts = sorted(dp[0] for dp in seq[:N])
    assert firsts == list(range(N))


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("keys", [None, "{:0>8d}", ["00000004", b"00000001", "00000003"]])
def test_lmdb_data_raw_and_decoder(tmp_path, shuffle, keys):
    path = _save_lmdb(tmp_path / "a.lmdb")
    seq = check_resume(lambda: LMDBData(path, shuffle=shuffle, keys=keys, seed=2), epochs=2)
    n = N if not isinstance(keys, list) else 3
    assert len(seq) == 2 * n
    if not shuffle and isinstance(keys, list):
        assert [dp[0] for dp in seq] == [b"00000004", b"00000001", b"00000003"] * 2

    def make():
        return LMDBDataDecoder(LMDBData(path, shuffle=shuffle, keys=keys, seed=2), _odd_key)

    dec = check_resume(make, epochs=2)
    odd = [1, 3] if isinstance(keys, list) else [1, 3, 5]
    assert sorted(dp[0] for dp in dec[: len(dec) // 2]) == odd
    state = make().state_dict()  # a proxy: its state is its reader's
    assert state["type"] == "LMDBDataDecoder" and state["child"]["type"] == "LMDBData"


def _odd_key(k, v):
    return [int(k)] if int(k) % 2 else None


def test_lmdb_keys_entry_in_the_middle(tmp_path):
    """A foreign database whose `__keys__` entry sorts between the records (sequential scan
    filters it out; the saved cursor key skips it too)."""
    env = lmdb.open(str(tmp_path / "m.lmdb"), subdir=False, map_size=1 << 22)
    names = [b"A0", b"B1", b"a2", b"b3"]  # b"__keys__" sorts between b"B1" and b"a2"
    with env.begin(write=True) as txn:
        for i, k in enumerate(names):
            txn.put(k, dumps([i]))
        txn.put(b"__keys__", dumps(names))
    env.close()
    path = str(tmp_path / "m.lmdb")
    seq = check_resume(lambda: LMDBSerializer.load(path, shuffle=False), epochs=2)
    assert seq == [[0], [1], [2], [3]] * 2
    raw = check_resume(lambda: LMDBData(path, shuffle=False), epochs=2)
    assert [dp[0] for dp in raw] == names * 2


def test_lmdb_without_keys_entry_and_caffe(tmp_path):
    from tests.serialize.test_caffe_format import _datum

    env = lmdb.open(str(tmp_path / "caffe"), map_size=1 << 22)
    chw = np.arange(6, dtype=np.uint8).reshape(1, 2, 3)
    with env.begin(write=True) as txn:
        for i in range(5):
            value = _datum(1, 2, 3, data=(chw + i).tobytes(), label=i) if i != 2 else b"bad"
            txn.put(b"%08d" % i, value)
    env.close()
    path = str(tmp_path / "caffe")
    for shuffle in (False, True):
        seq = check_resume(lambda s=shuffle: CaffeLMDB(path, shuffle=s, seed=1), epochs=2)
        assert sorted(dp[1] for dp in seq[:4]) == [0, 1, 3, 4]
    seq = check_resume(lambda: CaffeLMDB(path, shuffle=False, keys="{:0>8d}"), epochs=2)
    assert [dp[1] for dp in seq] == [0, 1, 3, 4] * 2
    state = CaffeLMDB(path, shuffle=False).state_dict()
    assert state["type"] == "LMDBDataDecoder" and state["child"]["type"] == "LMDBData"


# --------------------------------------------------------------------------------- TFRecord
@pytest.mark.parametrize("reader", READERS)
def test_tfrecord(tmp_path, reader):
    path = _save_tfrecord(tmp_path / "a.tfrecord")
    seq = check_resume(lambda: TFRecordSerializer.load(path, reader=reader), epochs=2)
    assert [dp[0] for dp in seq] == list(range(N)) * 2
    raw = check_resume(lambda: TFRecordData(path, reader=reader, decode=False), epochs=2)
    assert raw[0] == dumps(_dps()[0])
    part = check_resume(lambda: TFRecordData(path, size=4, reader=reader), epochs=2)
    assert [dp[0] for dp in part] == [0, 1, 2, 3] * 2


@pytest.mark.loads_frameworks  # (its reader="tf" half)
def test_tfrecord_state_holds_the_offset_of_the_next_record(tmp_path):
    dps = _dps()
    path = _save_tfrecord(tmp_path / "a.tfrecord", dps)
    state, _ = _state_after(TFRecordSerializer.load(path, reader="builtin"), 3)
    assert state["offset"] == sum(16 + len(dumps(dp)) for dp in dps[:3])
    assert {k: v for k, v in state.items() if k != "offset"} == {
        "type": "TFRecordData", "size": N, "shuffle": False, "epoch": 0, "pos": 3,
        "done": False}
    # a hand-made state without an offset finds it by scanning the headers
    bare = TFRecordSerializer.load(path, reader="builtin")
    bare.reset_state()
    bare.load_state_dict({k: v for k, v in state.items() if k != "offset"})
    assert bare.state_dict() == state
    if importlib.util.find_spec("tensorflow") is None:
        return
    # the same state from the TensorFlow reader; either loads into the other
    tf_state, tf_rest = _state_after(TFRecordSerializer.load(path, reader="tf"), 3)
    assert tf_state == state
    other = TFRecordSerializer.load(path, reader="builtin")
    other.reset_state()
    other.load_state_dict(tf_state)
    assert [to_plain(dp) for dp in other] == tf_rest == to_plain(dps[3:])


# ------------------------------------------------------------------------------ NumPy, HDF5
@pytest.mark.parametrize("shuffle", [False, True])
def test_numpy_serializer(tmp_path, shuffle):
    path = str(tmp_path / "a.npz")
    NumpySerializer.save(DataFromList(_dps(), shuffle=False), path, progress=False)
    seq = check_resume(lambda: NumpySerializer.load(path, shuffle=shuffle, seed=3), epochs=2)
    assert sorted(dp[0] for dp in seq[N:]) == list(range(N))


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("paths", [["a", "b"], ["a", "b", "c"]])
def test_hdf5(tmp_path, shuffle, paths):
    path = str(tmp_path / "a.h5")
    dps = [[np.full(2, i, np.float32), i, f"n{i}"][: len(paths)] for i in range(N)]
    HDF5Serializer.save(DataFromList(dps, shuffle=False), path, paths, progress=False)

    def make():
        return HDF5Serializer.load(path, paths, shuffle=shuffle, seed=5)

    seq = check_resume(make, epochs=2)
    if not shuffle:
        assert seq == to_plain(dps) * 2
    state, rest = _state_after(make(), 4)
    assert (state["pos"], state["done"], len(rest)) == (4, False, N - 4)


# -------------------------------------------------------------- the delivered part isn't read
LOADS: list[int] = []


def _loaded(i):
    LOADS.append(i)
    return Counted(i)


class Counted:
    """Unpickling one appends its value to LOADS: a record of what the reader decoded."""

    def __init__(self, i):
        self.i = i

    def __reduce__(self):
        return (_loaded, (self.i,))


def _counted_rest(make, k):
    """Resume a fresh ``make()`` from the state after ``k`` datapoints; the values decoded
    while finishing the epoch, and the values delivered."""
    state, _ = _state_after(make(), k)
    fresh = make()
    fresh.reset_state()
    fresh.load_state_dict(state)
    LOADS.clear()
    got = [dp[0].i for dp in fresh]
    return list(LOADS), got


@pytest.mark.parametrize("shuffle", [False, True])
def test_lmdb_resume_decodes_only_the_rest(tmp_path, shuffle):
    path = str(tmp_path / "c.lmdb")
    LMDBSerializer.save(DataFromList([[Counted(i)] for i in range(8)], shuffle=False), path,
                        progress=False)
    LOADS.clear()
    decoded, got = _counted_rest(lambda: LMDBSerializer.load(path, shuffle=shuffle, seed=6), 5)
    assert decoded == got and len(got) == 3
    if not shuffle:
        assert got == [5, 6, 7]


def test_lmdb_sequential_resume_positions_the_cursor_on_the_saved_key(tmp_path):
    path = _save_lmdb(tmp_path / "a.lmdb")
    reader = LMDBData(path, shuffle=False)
    state, _ = _state_after(reader, 2)
    assert state["key"] == b"00000001".hex()
    fresh = LMDBData(path, shuffle=False)
    fresh.reset_state()
    fresh.load_state_dict(state)
    it = iter(fresh)
    assert next(it)[0] == b"00000002"
    assert fresh._cursor.key() == b"00000002"  # reached by set_key, not by a scan
    assert [dp[0] for dp in it] == [b"%08d" % i for i in range(3, N)]


@pytest.mark.parametrize("reader", READERS)
def test_tfrecord_resume_decodes_only_the_rest(tmp_path, reader):
    path = _save_tfrecord(tmp_path / "c.tfrecord", [[Counted(i)] for i in range(7)])
    LOADS.clear()
    decoded, got = _counted_rest(lambda: TFRecordSerializer.load(path, reader=reader), 4)
    assert decoded == got == [4, 5, 6]


def test_tfrecord_resume_starts_reading_at_the_offset(tmp_path):
    """Records before the offset are never touched: damage them, the rest still loads."""
    dps = _dps()
    path = _save_tfrecord(tmp_path / "a.tfrecord", dps)
    state, rest = _state_after(TFRecordSerializer.load(path, reader="builtin"), 4)
    second = 16 + len(dumps(dps[0]))  # record 0 stays: the codec is sniffed from it
    with open(path, "r+b") as f:
        f.seek(second)
        f.write(b"\x00" * (state["offset"] - second))  # zero records 1..3
    fresh = TFRecordSerializer.load(path, size=N, reader="builtin")
    fresh.reset_state()
    fresh.load_state_dict(state)
    assert [to_plain(dp) for dp in fresh] == rest == to_plain(dps[4:])


# ---------------------------------------------------------------------------- compositions
def test_readers_inside_wrappers(tmp_path):
    """Parents that create a child's iterator before (or without) reading it: the epoch
    belongs to the iterator from its creation."""
    from dataflow.wrappers import BatchData, FixedSizeData, LocallyShuffleData, RandomMixData

    lm, tf = _save_lmdb(tmp_path / "a.lmdb", 7), _save_tfrecord(tmp_path / "a.tfrecord")

    def lmdb_reader():
        return LMDBSerializer.load(lm, shuffle=True, seed=1)

    def tf_reader():
        return TFRecordSerializer.load(tf, reader="builtin")

    check_resume(lambda: RandomMixData([lmdb_reader(), tf_reader()], seed=5), epochs=3)
    check_resume(lambda: FixedSizeData(lmdb_reader(), 3, keep_state=False), epochs=3)
    check_resume(lambda: FixedSizeData(tf_reader(), 4), epochs=3)
    check_resume(lambda: BatchData(LocallyShuffleData(tf_reader(), 3, seed=2, finite=True), 2),
                 epochs=2)


# ---------------------------------------------------------------------------- epoch bounds
@pytest.mark.parametrize("shuffle", [False, True])
def test_a_state_saved_after_a_break_resumes_at_the_next_datapoint(tmp_path, shuffle):
    path = _save_lmdb(tmp_path / "a.lmdb")
    reader = LMDBSerializer.load(path, shuffle=shuffle, seed=3)
    reader.reset_state()
    it = iter(reader)
    first = [next(it)[0], next(it)[0]]
    it.close()  # a break: the epoch is left unfinished after the datapoints delivered
    state = reader.state_dict()
    assert (state["epoch"], state["pos"], state["done"]) == (0, 2, False)
    if not shuffle:  # a sequential scan continues after the key of the record delivered last
        assert first == [0, 1] and state["key"] == b"00000001".hex()
    fresh = LMDBSerializer.load(path, shuffle=shuffle, seed=3)
    fresh.reset_state()
    fresh.load_state_dict(state)
    rest = [dp[0] for dp in fresh]
    assert sorted(first + rest) == list(range(N)) and len(rest) == N - 2
    assert fresh.state_dict()["epoch"] == 0
    # in the same process, the next __iter__ still starts a new epoch
    again = [dp[0] for dp in reader]
    assert sorted(again) == list(range(N)) and reader.state_dict()["epoch"] == 1
    if not shuffle:
        assert again == list(range(N))


def test_before_the_first_epoch_and_at_its_end(tmp_path):
    path = _save_tfrecord(tmp_path / "a.tfrecord")
    df = TFRecordSerializer.load(path, reader="builtin")
    assert df.state_dict() == {"type": "TFRecordData", "size": N, "shuffle": False,
                               "epoch": -1, "pos": 0, "done": True, "offset": 0}
    df.reset_state()
    list(df)
    state = df.state_dict()
    assert (state["epoch"], state["pos"], state["done"]) == (0, N, True)


# ------------------------------------------------------------------------------- mismatches
def test_state_of_another_size_names_stage_expected_and_found(tmp_path):
    small, big = _save_lmdb(tmp_path / "s.lmdb", 4), _save_lmdb(tmp_path / "b.lmdb", 6)
    state, _ = _state_after(LMDBSerializer.load(big, shuffle=True, seed=1), 2)
    with pytest.raises(StateMismatchError, match=r"^state for stage LMDBSerializer\.load: "
                                                 r"expected size=4, found size=6; the state was "
                                                 r"saved from another pipeline or dataset\.$"):
        LMDBSerializer.load(small, shuffle=True).load_state_dict(state)
    with pytest.raises(StateMismatchError, match=r"^state for stage LMDBSerializer\.load: "
                                                 r"expected shuffle=False, found shuffle=True"):
        LMDBSerializer.load(big, shuffle=False).load_state_dict(state)
    with pytest.raises(StateMismatchError, match=r"^state for stage LMDBData: expected type "
                                                 r"'LMDBData', found 'LMDBSerializer\.load'; "):
        LMDBData(big, shuffle=True).load_state_dict(state)
    tf_path = _save_tfrecord(tmp_path / "a.tfrecord")
    tf_state, _ = _state_after(TFRecordSerializer.load(tf_path, reader="builtin"), 1)
    with pytest.raises(StateMismatchError, match=r"stage TFRecordData: expected size=4, found "
                                                 r"size=6"):
        TFRecordSerializer.load(tf_path, size=4, reader="builtin").load_state_dict(tf_state)
    h5 = str(tmp_path / "a.h5")
    HDF5Serializer.save(DataFromList([[1], [2]], shuffle=False), h5, ["x"], progress=False)
    with pytest.raises(StateMismatchError, match=r"expected type 'HDF5Data', found "
                                                 r"'TFRecordData'"):
        HDF5Serializer.load(h5, ["x"]).load_state_dict(tf_state)


def test_state_pointing_elsewhere_in_the_file(tmp_path):
    path = _save_lmdb(tmp_path / "a.lmdb")
    state, _ = _state_after(LMDBData(path, shuffle=False), 2)
    with pytest.raises(StateMismatchError, match=r"stage LMDBData: expected a key present in "
                                                 r".*, found b'zz'"):
        LMDBData(path, shuffle=False).load_state_dict({**state, "key": b"zz".hex()})
    with pytest.raises(StateMismatchError, match=r"expected the hex key .* found 'nothex'"):
        LMDBData(path, shuffle=False).load_state_dict({**state, "key": "nothex"})
    with pytest.raises(StateMismatchError, match=r"expected a position in \[0, 6\], found 9"):
        LMDBData(path, shuffle=False).load_state_dict({**state, "pos": 9})
    tf_path = _save_tfrecord(tmp_path / "a.tfrecord")
    tf_state, _ = _state_after(TFRecordSerializer.load(tf_path, reader="builtin"), 2)
    df = TFRecordSerializer.load(tf_path, reader="builtin")
    bad = tf_state["offset"] + 3
    with pytest.raises(StateMismatchError, match=rf"stage TFRecordData: expected a record header "
                                                 rf"at the offset of record 2, byte {bad}, found "
                                                 r"'none'"):
        df.load_state_dict({**tf_state, "offset": bad})
    with pytest.raises(StateMismatchError, match=r"expected the byte offset of record 2, an int "
                                                 r"in \[32, \d+\], found 10"):
        df.load_state_dict({**tf_state, "offset": 10})


# ------------------------------------------------------------- the stage's public name
def test_lmdb_serializer_load_states_name_the_function_the_user_called(tmp_path):
    path = _save_lmdb(tmp_path / "a.lmdb")
    seq_state, _ = _state_after(LMDBSerializer.load(path, shuffle=False), 2)
    assert seq_state == {"type": "LMDBSerializer.load", "size": N, "shuffle": False,
                         "epoch": 0, "pos": 2, "done": False, "key": b"00000001".hex()}
    raw_state, _ = _state_after(LMDBData(path, shuffle=False), 2)
    assert raw_state["type"] == "LMDBData"
    df = LMDBSerializer.load(path, shuffle=False)
    with pytest.raises(StateMismatchError, match=(
            r"^state for stage LMDBSerializer\.load: expected type 'LMDBSerializer\.load', "
            r"found 'LMDBData'; the state was saved from a pipeline of another structure\.$")):
        df.load_state_dict(raw_state)
    with pytest.raises(StateMismatchError, match=(
            r"^state for stage LMDBSerializer\.load: expected a position in \[0, 6\], found 9; "
            r"the state is damaged\.$")):
        df.load_state_dict({**seq_state, "pos": 9})
    with pytest.raises(StateMismatchError, match=(
            r"^state for stage LMDBSerializer\.load: expected a key present in '.*a\.lmdb', "
            r"found b'zz'; the state was saved from another database\.$")):
        df.load_state_dict({**seq_state, "key": b"zz".hex()})
    with pytest.raises(StateMismatchError, match=(
            r"^state for stage LMDBSerializer\.load: expected the hex key of the last datapoint "
            r"delivered, a str, found 'nothex'; the state was saved from another database\.$")):
        df.load_state_dict({**seq_state, "key": "nothex"})
    shuffled, _ = _state_after(LMDBSerializer.load(path, shuffle=True, seed=1), 2)
    with pytest.raises(StateMismatchError, match=(
            r"^state for stage LMDBSerializer\.load: expected a seed \{'entropy': int, "
            r"'spawn_key': \[int, \.\.\.\]\}, found \{'entropy': 'x'\}; the state is "
            r"damaged\.$")):
        LMDBSerializer.load(path, shuffle=True).load_state_dict(
            {**shuffled, "seed": {"entropy": "x"}})


def test_lmdb_serializer_load_takes_states_saved_under_the_old_private_name(tmp_path):
    path = _save_lmdb(tmp_path / "a.lmdb")
    for shuffle in (False, True):
        state, rest = _state_after(LMDBSerializer.load(path, shuffle=shuffle, seed=2), 2)
        old = {**state, "type": "_LoadedLMDBData"}  # as saved before the stage had its name
        df = LMDBSerializer.load(path, shuffle=shuffle, seed=2)
        df.reset_state()
        df.load_state_dict(old)
        assert [to_plain(dp) for dp in df] == rest and len(rest) == N - 2
        assert df.state_dict()["type"] == "LMDBSerializer.load"
    with pytest.raises(StateMismatchError, match=r"^state for stage LMDBData: expected type "
                                                 r"'LMDBData', found '_LoadedLMDBData'; "):
        LMDBData(path, shuffle=False).load_state_dict(old)


def test_lmdb_serializer_load_iterated_before_reset_names_the_function(tmp_path):
    from dataflow.errors import DataFlowError

    path = _save_lmdb(tmp_path / "a.lmdb")
    with pytest.raises(DataFlowError, match=r"^LMDBSerializer\.load was iterated before "
                                            r"reset_state\(\): call reset_state\(\) once"):
        list(LMDBSerializer.load(path, shuffle=True))
    with pytest.raises(DataFlowError, match=r"^LMDBData was iterated before reset_state\(\)"):
        list(LMDBData(path, shuffle=True))


def test_a_sequential_scan_closed_with_its_reader_keeps_its_position(tmp_path):
    path = _save_lmdb(tmp_path / "a.lmdb")
    reader = LMDBSerializer.load(path, shuffle=False)
    reader.reset_state()
    it = iter(reader)
    assert [next(it)[0] for _ in range(3)] == [0, 1, 2]
    reader.close()  # the database closes while the iterator is suspended
    del it  # its generator finishes after that: nothing is raised, nothing is lost
    state = reader.state_dict()
    assert (state["pos"], state["done"], state["key"]) == (3, False, b"00000002".hex())
    fresh = LMDBSerializer.load(path, shuffle=False)
    fresh.reset_state()
    fresh.load_state_dict(state)
    assert [dp[0] for dp in fresh] == [3, 4, 5]
