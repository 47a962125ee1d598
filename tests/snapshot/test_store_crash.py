"""The snapshot store across processes and failures, with real processes and real files: two
writers at once, writers SIGKILLed at random points (between records and inside one), flipped
bits and shards cut short, and a full disk (a small tmpfs)."""

from __future__ import annotations

import errno
import logging
import multiprocessing as mp
import os
import signal
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow.errors import DataFlowError
from dataflow.snapshot import store as store_module
from dataflow.snapshot.store import SnapshotFullError, SnapshotFullWarning, SnapshotStore

FORK = mp.get_context("fork")


def value(i):
    """A datapoint whose size depends on ``i``."""
    return [np.full((i % 5 + 1, 37), i, np.int16), i, f"s{i}"]


def check_values(store, indices):
    for i in indices:
        ok, got = store.get(i)
        assert ok, i
        assert got[0].dtype == np.int16 and np.array_equal(got[0], value(i)[0])
        assert got[1:] == [i, f"s{i}"]


def files(root):
    return sorted(os.listdir(root))


# -- two writers at once -------------------------------------------------------------------


def _writer(root, n, indices, barrier):
    store = SnapshotStore(root, n)
    barrier.wait()  # both write at the same time
    for i in indices:
        store.put(i, value(i))
    barrier.wait()  # both are done: each reads what the other wrote
    store.refresh()
    check_values(store, range(n))
    store.close()


def test_two_writers_at_once_then_a_third_process_reads_everything(tmp_path):
    root, n = str(tmp_path / "k"), 100
    barrier = FORK.Barrier(2)
    procs = [FORK.Process(target=_writer, args=(root, n, idx, barrier))
             for idx in (range(60), range(99, 39, -1))]  # 40..59 written by both
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    with SnapshotStore(root, n) as reader:
        assert reader.complete() and reader.stats()["shards"] == 2
        check_values(reader, range(n))
    assert len(files(root)) == 5  # meta.json, two shards and their indexes: no lock file


def _open_at_once(root, barrier, k):
    barrier.wait()
    with SnapshotStore(root, 8, meta={"writer": k}) as store:
        store.put(k, k)


def test_processes_that_create_one_snapshot_at_once_agree_on_its_meta(tmp_path):
    root = str(tmp_path / "k")
    barrier = FORK.Barrier(4)
    procs = [FORK.Process(target=_open_at_once, args=(root, barrier, k)) for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 4
    with SnapshotStore(root, 8) as store:
        assert store.info["meta"]["writer"] in range(4)  # one of them, whole
        assert [store.get(k) for k in range(4)] == [(True, k) for k in range(4)]
    assert not [x for x in files(root) if x.startswith(".")]


def test_a_miss_looks_for_what_other_writers_stored(tmp_path, monkeypatch):
    with SnapshotStore(tmp_path / "k", 3) as a, SnapshotStore(tmp_path / "k", 3) as b:
        a.put(1, "x")
        assert b.has(1) is False  # not looked for yet
        b.refresh(min_interval=3600)  # refreshed less than an hour ago: nothing done
        assert b.has(1) is False
        monkeypatch.setattr(store_module, "MISS_REFRESH_S", 0.0)
        assert b.get(1) == (True, "x")


def _inherited(store):
    store.put(2, "child")
    store.close()


def test_a_forked_child_writes_shards_of_its_own(tmp_path):
    import threading

    with SnapshotStore(tmp_path / "k", 4) as store:
        store.put(0, "parent")
        held, release = threading.Event(), threading.Event()

        def hold():  # another thread of the parent holds the store's lock during the fork
            with store._lock:
                held.set()
                release.wait()

        t = threading.Thread(target=hold)
        t.start()
        held.wait()
        p = FORK.Process(target=_inherited, args=(store,))
        p.start()
        p.join(30)
        release.set()
        t.join()
        if p.exitcode is None:
            p.kill()
            p.join()
        assert p.exitcode == 0
        store.put(1, "parent again")  # the parent's shard is still the parent's
        store.refresh()
        assert [store.get(i) for i in range(4)] == [
            (True, "parent"), (True, "parent again"), (True, "child"), (False, None)]
        assert store.stats()["shards"] == 2
    with SnapshotStore(tmp_path / "k", 4) as reader:
        assert reader.stored() == 3 and reader.stats()["corrupted"] == 0


# -- writers killed ------------------------------------------------------------------------


def _write_then_die(root, n, upto, cut):
    store = SnapshotStore(root, n)
    for i in range(upto):
        store.put(i, value(i))
    if cut is not None:  # die inside the next record: after `cut` of its bytes reach the file

        def torn_writev(fd, buffers):
            data = b"".join(bytes(b) for b in buffers)
            os.write(fd, data[: int(cut * len(data))])
            os.kill(os.getpid(), signal.SIGKILL)

        os.writev = torn_writev
        store.put(upto, value(upto))
    os.kill(os.getpid(), signal.SIGKILL)


def _complete_and_check(root, n, stored):
    with SnapshotStore(root, n) as reader:
        assert reader.stored() == stored and reader.stats()["corrupted"] == 0
        check_values(reader, range(stored))
        assert reader.get(stored) == (False, None)
        for i in range(n):  # a new writer completes it
            assert (reader.put(i, value(i)) > 0) == (i >= stored)
    with SnapshotStore(root, n) as again:
        assert again.complete() and again.stats()["corrupted"] == 0
        check_values(again, range(n))


@settings(max_examples=8, deadline=None)
@given(upto=st.integers(0, 12), cut=st.one_of(st.none(), st.floats(0, 0.999)))
def test_a_writer_killed_anywhere_loses_at_most_its_unfinished_record(tmp_path_factory, upto,
                                                                      cut):
    root, n = str(tmp_path_factory.mktemp("s") / "k"), 16
    p = FORK.Process(target=_write_then_die, args=(root, n, upto, cut))
    p.start()
    p.join(60)
    assert p.exitcode == -signal.SIGKILL
    names = files(root)
    assert names[0] == "meta.json" and all(x.endswith(".shard") for x in names[1:])
    _complete_and_check(root, n, upto)


def _read_past_a_cut_back(root):
    from dataflow.snapshot.shard import KIND_RECORD, header_bytes

    with SnapshotStore(root, 3) as writer, SnapshotStore(root, 3) as reader:
        writer.put(0, value(0))
        reader.refresh()
        shard = _shard(root)
        end = os.path.getsize(shard)
        with open(shard, "ab") as f:  # a record of 1 MB, half written when the disk filled
            f.write(header_bytes(KIND_RECORD, 0, 1, 1 << 20, 1 << 20, 0.0, 0) + bytes(1 << 19))
        reader.refresh()  # maps the half-written record, does not index it
        os.truncate(shard, end)  # the writer cuts it back
        writer.put(2, value(2))
        reader.refresh()  # the map is longer than the file: read only up to the file's end
        assert reader.stored() == 2 and reader.stats()["corrupted"] == 0
        check_values(reader, [0, 2])


def test_a_reader_never_reads_past_the_end_of_a_file_cut_back(tmp_path):
    p = FORK.Process(target=_read_past_a_cut_back, args=(str(tmp_path / "k"),))
    p.start()
    p.join(60)
    assert p.exitcode == 0  # (a read past the end of the file is a SIGBUS)


def _write_forever(root, n, conn):
    store = SnapshotStore(root, n)
    big = np.arange(1 << 18, dtype=np.uint8)
    for i in range(n):
        store.put(i, [big, i])
        conn.send(i)
    conn.send(-1)


def test_a_writer_killed_by_another_process_while_writing(tmp_path):
    root, n = str(tmp_path / "k"), 400
    for after in (3, 17):
        theirs, mine = FORK.Pipe()
        p = FORK.Process(target=_write_forever, args=(root, n, mine))
        p.start()
        while theirs.recv() < after:
            pass
        os.kill(p.pid, signal.SIGKILL)  # while it writes the next records
        p.join(60)
        with SnapshotStore(root, n) as reader:
            assert reader.stored() >= after + 1 and reader.stats()["corrupted"] == 0
            for i in reader.costs():
                ok, (arr, label) = reader.get(i)
                assert ok and label == i and np.array_equal(arr, np.arange(1 << 18, dtype=np.uint8))
            reader.drop()


# -- corruption ----------------------------------------------------------------------------


def _five(root):
    with SnapshotStore(root, 5) as store:
        return [store.put(i, value(i)) for i in range(5)]


def _flip(path, at):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x10]))


def _shard(root):
    (name,) = [x for x in os.listdir(root) if x.endswith(".shard")]
    return os.path.join(root, name)


def test_a_flipped_bit_in_a_payload_is_reported_and_recomputed(tmp_path, caplog):
    root = str(tmp_path / "k")
    sizes = _five(root)
    shard = _shard(root)
    _flip(shard, sum(sizes[:2]) + 64 + 100)  # inside record 2's array
    with caplog.at_level(logging.WARNING, logger="dataflow"), SnapshotStore(root, 5) as store:
        assert store.complete()  # the index does not read payloads
        assert store.get(2) == (False, None)
        assert store.stats()["corrupted"] == 1 and store.stored() == 4 and not store.has(2)
        check_values(store, [0, 1, 3, 4])
        assert store.put(2, value(2)) == sizes[2]  # the caller recomputes it
        check_values(store, [2])
    (msg,) = [r.getMessage() for r in caplog.records]
    assert "record of index 2" in msg and "payload fails its checksum" in msg and root in msg
    with SnapshotStore(root, 5) as store:  # a later process: the good copy is read
        check_values(store, range(5))
        assert store.stats()["corrupted"] == (1 if _shard_first(root, shard) else 0)


def _shard_first(root, shard):
    return sorted(x for x in os.listdir(root) if x.endswith(".shard"))[0] == os.path.basename(
        shard)


def test_a_flipped_bit_in_a_header_is_reported(tmp_path, caplog):
    root = str(tmp_path / "k")
    sizes = _five(root)
    shard = _shard(root)
    _flip(shard, sum(sizes[:3]) + 9)  # record 3's index field
    with caplog.at_level(logging.WARNING, logger="dataflow"), SnapshotStore(root, 5) as store:
        assert store.get(3) == (False, None)  # found by the first read (the index is sealed)
        check_values(store, [0, 1, 2, 4])
        assert store.stats()["corrupted"] == 1
    os.remove(shard.replace(".shard", ".idx"))  # unsealed: found when the shard is walked
    with caplog.at_level(logging.WARNING, logger="dataflow"), SnapshotStore(root, 5) as store:
        assert store.stored() == 4 and store.stats()["corrupted"] == 1
        check_values(store, [0, 1, 2, 4])  # the walk finds the next header
    assert ["header fails its checksum" in r.getMessage() for r in caplog.records] == [True, False]
    assert "not a valid record header" in caplog.records[1].getMessage()


def test_a_damaged_shard_index_is_ignored_and_the_shard_walked(tmp_path):
    root = str(tmp_path / "k")
    _five(root)
    index = _shard(root).replace(".shard", ".idx")
    _flip(index, 40)  # inside the first entry
    with SnapshotStore(root, 5) as store:
        assert store.complete() and store.stats()["corrupted"] == 0
        check_values(store, range(5))


def test_a_shard_cut_short_is_reported(tmp_path, caplog):
    root = str(tmp_path / "k")
    sizes = _five(root)
    shard = _shard(root)
    with SnapshotStore(root, 5) as early:  # indexed before the cut, read after it
        os.truncate(shard, sum(sizes[:3]) + 70)
        with caplog.at_level(logging.WARNING, logger="dataflow"):
            assert early.get(4) == (False, None)
            check_values(early, [0, 1, 2])
        assert early.stats()["corrupted"] == 1
        with caplog.at_level(logging.WARNING, logger="dataflow"), SnapshotStore(root, 5) as late:
            assert late.stored() == 3 and late.stats()["corrupted"] == 2
            check_values(late, [0, 1, 2])
    assert all("cut short" in r.getMessage() for r in caplog.records) and len(caplog.records) == 3


# -- a full disk ---------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MB tmpfs (mounting needs root)."""
    path = tmp_path / "small"
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(path)],
                       capture_output=True, text=True, check=False)
    if r.returncode:
        pytest.skip(f"mounting a small tmpfs is not permitted here: {r.stderr.strip()}")
    try:
        yield str(path)
    finally:
        subprocess.run(["umount", str(path)], check=True)


def _big(i):
    return [np.full(100_000, i, np.uint8), i]


def _check_big(store, indices):
    for i in indices:
        ok, (arr, label) = store.get(i)
        assert ok and label == i and arr.shape == (100_000,) and (arr == i).all()


def _fill_to_the_brim(path):
    """Fill the disk with a file: its last write fails with ENOSPC."""
    fd = os.open(os.path.join(path, "filler"), os.O_WRONLY | os.O_CREAT)
    try:
        while os.statvfs(path).f_bavail:
            os.write(fd, bytes(4096))
        with pytest.raises(OSError, match="No space left"):
            os.write(fd, bytes(4096))
    finally:
        os.close(fd)


def _fill(store):
    """Put records until the disk is full: how many were stored, and the error."""
    for i in range(len(store)):
        try:
            store.put(i, _big(i))
        except SnapshotFullError as e:
            return i, e
    raise AssertionError("the disk never filled")


def test_a_full_disk_is_a_clear_error_and_the_snapshot_stays_valid(small_disk):
    root = os.path.join(small_disk, "k")
    with SnapshotStore(root, 100) as store:
        stored, e = _fill(store)
        assert stored == store.stored() and 5 < stored < 25
        assert isinstance(e, OSError) and isinstance(e, DataFlowError)
        assert e.errno == errno.ENOSPC and e.filename == root and root in str(e)
        assert "on_full='read'" in str(e)
        with pytest.raises(SnapshotFullError):  # and again, while the disk is full
            store.put(stored, _big(stored))
        _check_big(store, range(stored))
    assert os.path.getsize(_shard(root)) == stored * (128 + 100_032)  # no partial record
    assert not [x for x in os.listdir(root) if x.startswith(".")]  # no temporary file
    _fill_to_the_brim(small_disk)
    with pytest.raises(SnapshotFullError, match="is full"):  # meta.json does not fit
        SnapshotStore(os.path.join(small_disk, "other"), 3)
    with SnapshotStore(root, 100) as reader:
        assert reader.stored() == stored and reader.stats()["corrupted"] == 0
        _check_big(reader, range(stored))


def test_a_full_disk_with_on_full_read_warns_once_and_reads_on(small_disk):
    root = os.path.join(small_disk, "k")
    with SnapshotStore(root, 100, on_full="read") as store:
        with pytest.warns(SnapshotFullWarning, match="is full") as warned:
            written = [store.put(i, _big(i)) for i in range(40)]
        assert len(warned) == 1 and root in str(warned[0].message)
        stored = store.stored()
        assert written == [128 + 100_032] * stored + [0] * (40 - stored) and 5 < stored < 25
        _check_big(store, range(stored))
        assert store.get(stored) == (False, None)
    with SnapshotStore(root, 100, on_full="read") as reader:
        assert reader.stored() == stored and reader.stats()["corrupted"] == 0
        _check_big(reader, range(stored))
    _fill_to_the_brim(small_disk)
    with pytest.warns(SnapshotFullWarning):  # meta.json does not fit
        other = SnapshotStore(os.path.join(small_disk, "other"), 3, on_full="read")
    with other:
        assert other.put(0, _big(0)) == 0 and other.get(0) == (False, None)
