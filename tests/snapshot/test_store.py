"""The snapshot's on-disk store in one process: exact round trips of every value kind, zero-copy
reads, the index and its counters, meta.json, compression, pickling, drop and discard."""

from __future__ import annotations

import json
import mmap
import os
import pickle
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from dataflow.snapshot import codec
from dataflow.snapshot.store import SnapshotStore


def same(a, b):
    """Equal values of the same types all the way down (list vs tuple, dtypes, shapes)."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()
    elif isinstance(a, np.generic):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            same(x, y)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            same(a[k], b[k])
    elif isinstance(a, float) and a != a:
        assert b != b
    else:
        assert a == b


KINDS = [
    None, True, False, 0, -1, 2**63 - 1, -(2**63), 2**70, -(2**100), 1.5, float("inf"), "",
    "héllo wörld", "\udc80 lone surrogate", b"", b"\x00\xffab",
    [1, (2, 3), {"a": [4.0], 5: (None,)}],
    (np.float32(1.25), np.int8(-3), np.uint64(2**64 - 1), np.bool_(True), np.float16(0.5),
     np.complex64(1 + 2j), np.str_("ab"), np.bytes_(b"xy"), np.datetime64("2024-01-02")),
    np.arange(24, dtype=np.int32).reshape(2, 3, 4), np.array(3.5), np.zeros((0, 5), np.float64),
    np.array([True, False, True]), np.array(["ab", "cde"]), np.array([b"a", b"bcd"]),
    np.arange(6, dtype=">i4"), np.array(["2024-01-01", "2025-06-30"], dtype="M8[D]"),
    np.zeros(3, dtype=[("x", "<i4"), ("y", "<f8", (2,))]),
    np.arange(12, dtype=np.float32).reshape(3, 4).T,  # not contiguous
    {"image": np.ones((4, 4, 3), np.uint8), "label": 7, (1, "k"): [np.float64(2.0)]},
]


def test_every_value_kind_round_trips_exactly(tmp_path):
    with SnapshotStore(tmp_path / "k", len(KINDS)) as store:
        for i, v in enumerate(KINDS):
            assert store.put(i, v) > 0
        for i, v in enumerate(KINDS):
            ok, got = store.get(i)
            assert ok
            same(v, got)
    with SnapshotStore(tmp_path / "k", len(KINDS)) as again:  # a new process's view: the index
        assert again.complete()
        for i, v in enumerate(KINDS):
            same(v, again.get(i)[1])


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8),
    st.binary(max_size=8),
    hnp.from_dtype(np.dtype(np.float32)).map(np.float32),
    hnp.arrays(st.sampled_from([np.uint8, np.int64, np.float32, np.bool_, np.dtype("<U3")]),
               hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)),
)
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.lists(inner, max_size=4).map(tuple),
    st.dictionaries(st.one_of(st.text(max_size=4), st.integers()), inner, max_size=4)),
    max_leaves=12)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(_values, min_size=1, max_size=4),
       compression=st.sampled_from([None, "lz4", "zstd"]))
def test_nested_values_round_trip(tmp_path_factory, values, compression):
    root = tmp_path_factory.mktemp("s") / "k"
    with SnapshotStore(root, len(values), compression=compression) as store:
        for i, v in enumerate(values):
            store.put(i, v)
        for i, v in enumerate(values):
            same(v, store.get(i)[1])
    with SnapshotStore(root, len(values)) as reader:
        for i, v in enumerate(values):
            same(v, reader.get(i)[1])


def _base_mmap(a):
    while a is not None and not isinstance(a, mmap.mmap):
        a = a.base if isinstance(a, np.ndarray) else getattr(a, "obj", None)
    return a


def test_reads_are_aligned_read_only_views_of_a_memory_map(tmp_path):
    img = np.arange(224 * 224 * 3, dtype=np.uint8).reshape(224, 224, 3)
    with SnapshotStore(tmp_path / "k", 3) as store:
        store.put(0, [img, 1, np.arange(7, dtype=np.float64)])
        store.put(1, {"a": np.ones(5, np.int16), "b": np.ones(3, np.float32)})
    with SnapshotStore(tmp_path / "k", 3) as store:
        (ok, (a, label, f)), (_, d) = store.get(0), store.get(1)
        assert ok and label == 1
        for arr in (a, f, d["a"], d["b"]):
            assert isinstance(_base_mmap(arr), mmap.mmap)
            assert arr.flags.writeable is False
            assert arr.ctypes.data % 64 == 0
        again = store.get(0)[1][0]
        assert np.shares_memory(a, again)  # the same bytes of the map, not a copy
        assert np.array_equal(a, img)
        with pytest.raises(ValueError, match="read-only"):
            a[0, 0, 0] = 1


def test_compressed_records_round_trip_and_are_smaller(tmp_path):
    img = np.zeros((64, 64, 3), np.uint8)
    img[10:20] = 200
    noise = np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8)
    sizes = {}
    for comp in (None, "lz4", "zstd"):
        with SnapshotStore(tmp_path / str(comp), 3, compression=comp) as store:
            sizes[comp] = (store.put(0, [img, 3]), store.put(1, None), store.put(2, noise))
        with SnapshotStore(tmp_path / str(comp), 3) as store:  # the codec is in each record
            ok, (got, label) = store.get(0)
            assert ok and label == 3 and got.dtype == np.uint8
            assert np.array_equal(got, img) and not got.flags.writeable
            assert (_base_mmap(got) is None) == (comp is not None)
            assert store.get(1) == (True, None)
            ok, got = store.get(2)  # noise does not compress: stored as it is, read in place
            assert np.array_equal(got, noise) and isinstance(_base_mmap(got), mmap.mmap)
    assert sizes[None] == (64 + 64 + 12288, 128, 64 + 64 + 5056)
    assert sizes["lz4"][0] < 1000 and sizes["zstd"][0] < 1000
    assert sizes["lz4"][2] == sizes["zstd"][2] == sizes[None][2]


def test_a_missing_compressor_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "zstandard", None)
    monkeypatch.setattr(codec, "_loaded", {})
    with pytest.raises(ImportError, match=r"zstandard.*\[zstd\]"):
        SnapshotStore(tmp_path / "k", 1, compression="zstd")


def test_index_counters_costs_and_a_stored_drop(tmp_path):
    with SnapshotStore(tmp_path / "k", 4, meta={"key": "abc"}) as store:
        assert len(store) == 4 and store.stored() == 0 and not store.complete()
        assert store.get(2) == (False, None) and not store.has(2)
        n0 = store.put(0, [np.zeros(10, np.uint8), 0], cost=0.5)
        assert n0 == 64 + 64 + 64  # header, skeleton, the array padded to 64
        assert store.put(0, "again") == 0  # stored once
        n1 = store.put(1, None, cost=2.0)  # a stored drop
        assert store.get(1) == (True, None) and store.has(1)
        assert store.stored() == 2 and store.nbytes() == n0 + n1
        assert store.costs() == {0: (0.5, n0), 1: (2.0, n1)}
        store.put(2, 2)
        store.put(3, 3)
        assert store.complete()
        assert store.stats() == {"records": 4, "bytes_written": store.nbytes(),
                                 "bytes_read": 64, "hits": 1, "misses": 1, "corrupted": 0,
                                 "shards": 1}
    info = json.loads((tmp_path / "k" / "meta.json").read_text())
    assert info == {"format": 2, "size": 4, "library": info["library"], "meta": {"key": "abc"}}
    with SnapshotStore(tmp_path / "k", 4) as store:
        assert store.costs() == {0: (0.5, n0), 1: (2.0, n1), 2: (0.0, 128), 3: (0.0, 128)}
        assert store.info["meta"] == {"key": "abc"}


def test_bad_arguments_and_values_are_refused_clearly(tmp_path):
    SnapshotStore(tmp_path / "k", 3).close()
    with pytest.raises(ValueError, match=r"has 3 indices, not `size`=4"):
        SnapshotStore(tmp_path / "k", 4)
    with pytest.raises(ValueError, match="`compression` must be None, 'lz4' or 'zstd'"):
        SnapshotStore(tmp_path / "k", 3, compression="gzip")
    with pytest.raises(ValueError, match="`on_full` must be"):
        SnapshotStore(tmp_path / "k", 3, on_full="ignore")
    with SnapshotStore(tmp_path / "k", 3) as store:
        with pytest.raises(TypeError, match=r"index 2 holds an array of dtype object at \[1\]"):
            store.put(2, [1, np.array([{}, None])])
        with pytest.raises(TypeError, match=r"index 1 holds a value of type builtins.set"):
            store.put(1, {"a": {1, 2}})
        with pytest.raises(IndexError, match=r"index 3 is out of range\(0, 3\)"):
            store.put(3, 1)
        with pytest.raises(IndexError, match=r"index -1 is out of range"):
            store.get(-1)
        assert store.stored() == 0 and store.stats()["bytes_written"] == 0
    with pytest.raises(ValueError, match="is closed"):
        store.get(0)
    store.close()  # idempotent


def test_a_pickled_store_reopens_as_a_new_writer(tmp_path):
    with SnapshotStore(tmp_path / "k", 4) as store:
        store.put(0, "a")
        copy = pickle.loads(pickle.dumps(store))
        assert copy.get(0) == (True, "a")
        copy.put(1, "b")
        store.put(2, "c")
        copy.close()
        store.refresh()
        assert store.get(1) == (True, "b") and store.stats()["shards"] == 2
    names = sorted(n for n in os.listdir(tmp_path / "k") if n.endswith(".shard"))
    assert len(names) == 2 and len({n.split("-")[1] for n in names}) == 2  # two tokens
    assert sorted(os.listdir(tmp_path / "k")) == sorted(
        ["meta.json", *names, *(n.replace(".shard", ".idx") for n in names)])


def test_shards_roll_over_and_drop_deletes_every_record(tmp_path):
    with SnapshotStore(tmp_path / "k", 10, shard_bytes=1000) as store:
        for i in range(10):
            store.put(i, np.full(300, i, np.uint8))  # 64 + 64 + 320 bytes each
        assert store.stats()["shards"] == 4  # 3 records fill one (1344 >= 1000 bytes)
        other = SnapshotStore(tmp_path / "k", 10)
        assert other.complete() and other.get(9)[1][0] == 9
        store.drop()
        assert store.stored() == 0 and os.listdir(tmp_path / "k") == ["meta.json"]
        other.refresh()  # another process sees the shards gone
        assert other.stored() == 0 and other.get(3) == (False, None)
        store.put(3, "new")
        other.refresh()
        assert other.get(3) == (True, "new")
        other.close()


def test_rolled_shards_each_get_an_index_and_flush_syncs_them(tmp_path):
    store = SnapshotStore(tmp_path / "k", 10, shard_bytes=1000)
    for i in range(10):
        store.put(i, np.full(300, i, np.uint8))
    store.flush()  # (the three rolled shards and the one being written)
    store.close()
    names = sorted(n for n in os.listdir(tmp_path / "k") if n.endswith(".shard"))
    assert len(names) == 4
    assert sorted(os.listdir(tmp_path / "k")) == sorted(
        ["meta.json", *names, *(n.replace(".shard", ".idx") for n in names)])
    with SnapshotStore(tmp_path / "k", 10) as other:  # (read from the four indexes)
        assert [int(other.get(i)[1][0]) for i in range(10)] == list(range(10))


def test_discard_forgets_a_record_in_every_process(tmp_path):
    with SnapshotStore(tmp_path / "k", 3) as a, SnapshotStore(tmp_path / "k", 3) as b:
        a.put(0, "old")
        b.refresh()
        assert b.get(0) == (True, "old")
        a.discard(0)
        assert a.get(0) == (False, None)
        b.refresh()
        assert b.get(0) == (False, None)
        b.put(0, "new")
        a.refresh()
        assert a.get(0) == (True, "new")
    with SnapshotStore(tmp_path / "k", 3) as c:  # a later process: the tombstone holds
        assert c.get(0) == (True, "new") and c.stored() == 1


def test_a_writer_whose_shard_another_process_dropped_starts_a_new_one(tmp_path):
    with SnapshotStore(tmp_path / "k", 3) as a, SnapshotStore(tmp_path / "k", 3) as b:
        a.put(0, "old")
        b.drop()
        a.refresh()
        assert a.stored() == 0
        a.put(0, "new")
        b.refresh()
        assert b.get(0) == (True, "new") and a.get(0) == (True, "new")
    assert sum(n.endswith(".shard") for n in os.listdir(tmp_path / "k")) == 1


def test_threads_put_and_get_at_once(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    n = 400

    def work(start):
        with_values = []
        for i in list(range(start, n, 3)) + list(range(n)):  # its own indices, then all
            store.put(i, [np.full(50, i % 256, np.uint8), i])
            ok, got = store.get(i)
            with_values.append(ok and got[1] == i and (got[0] == i % 256).all())
        return all(with_values)

    with SnapshotStore(tmp_path / "k", n, shard_bytes=20_000) as store:
        with ThreadPoolExecutor(4) as pool:
            assert list(pool.map(work, [0, 1, 2, 0])) == [True] * 4
        assert store.complete() and store.stats()["corrupted"] == 0
    with SnapshotStore(tmp_path / "k", n) as reader:
        assert reader.complete()
        assert all(reader.get(i)[1][1] == i for i in range(n))


class StoresOfOneSnapshot(RuleBasedStateMachine):
    """Three stores of one root (as three processes would be): whatever they put, discard, evict
    (compacting their shards), drop, refresh and reopen (sealing their shards), a store that
    has refreshed holds exactly the indices that have a live record on disk, and every read
    gives the right value."""

    N = 6

    def __init__(self):
        super().__init__()
        import tempfile

        self.root = tempfile.mkdtemp(prefix="store-machine-")
        self.stores = [SnapshotStore(self.root, self.N, shard_bytes=700) for _ in range(3)]
        self.alive: dict[tuple[str, int], int] = {}  # (shard, offset) -> index

    @staticmethod
    def value(i):
        return [np.full(i + 1, i, np.int8), i]

    def a_copy(self, where):
        """Whether a record a store now indexes is live, or in a shard that another store
        deleted (by drop or compaction), which it forgets when it refreshes or reads it."""
        return where in self.alive or not os.path.exists(os.path.join(self.root, where[0]))

    @rule(w=st.integers(0, 2), i=st.integers(0, N - 1))
    def put(self, w, i):
        store = self.stores[w]
        had = store.has(i)
        n = store.put(i, self.value(i))
        assert (n > 0) == (not had)
        if n:
            self.alive[store._loc.where(i)] = i

    @rule(w=st.integers(0, 2), i=st.integers(0, N - 1))
    def discard(self, w, i):
        store = self.stores[w]
        if store.has(i):
            self.alive.pop(store._loc.where(i), None)
        store.discard(i)
        assert not store.has(i) or self.a_copy(store._loc.where(i))

    @rule(w=st.integers(0, 2), i=st.integers(0, N - 1))
    def evict(self, w, i):  # a budget's eviction: the store's own shards are compacted
        store = self.stores[w]
        if i not in store.own_costs():  # (its own shards', or another store's sealed shard's)
            return
        where = store._loc.where(i)
        before = set(os.listdir(self.root))
        if store.evict([i]) == [i]:  # (a shard another store claimed first stays)
            self.alive.pop(where, None)
        gone = before - set(os.listdir(self.root))
        self.alive = {k: v for k, v in self.alive.items() if k[0] not in gone}
        for j in store.own_costs():  # moved to the new shards
            self.alive[store._loc.where(j)] = j
        assert not store.has(i) or self.a_copy(store._loc.where(i))
        assert store.dead_bytes() == 0

    @rule(w=st.integers(0, 2))
    def drop(self, w):
        self.stores[w].drop()
        self.alive.clear()

    @rule(w=st.integers(0, 2), compression=st.sampled_from([None, "lz4"]))
    def reopen(self, w, compression):  # a process ends (its shard sealed), a new one starts
        self.stores[w].close()
        self.stores[w] = SnapshotStore(self.root, self.N, compression=compression,
                                       shard_bytes=700)
        self.refresh_and_check(w)

    @rule(w=st.integers(0, 2))
    def refresh_and_check(self, w):
        store = self.stores[w]
        store.refresh()
        live = set(self.alive.values())
        assert {i for i in range(self.N) if store.has(i)} == live
        assert store.stored() == len(live)
        for i in live:
            ok, (arr, label) = store.get(i)
            assert ok and label == i and arr.tolist() == [i] * (i + 1)

    @invariant()
    def reads_are_right(self):  # also in a store that has not refreshed since others wrote
        for store in self.stores:
            for i in range(self.N):
                ok, got = store.get(i)
                assert not ok or (got[1] == i and got[0].tolist() == [i] * (i + 1))

    def teardown(self):
        import shutil

        for store in self.stores:
            store.close()
        shutil.rmtree(self.root)


TestStoresOfOneSnapshot = StoresOfOneSnapshot.TestCase
TestStoresOfOneSnapshot.settings = settings(max_examples=25, stateful_step_count=25,
                                            deadline=None)


def test_a_refresh_lists_the_folder_only_when_it_changed(tmp_path):
    root = tmp_path / "k"
    with SnapshotStore(root, 4) as reader, SnapshotStore(root, 4) as a, \
            SnapshotStore(root, 4) as b:
        past = time.time_ns() - 10 * 10**9
        os.utime(root, ns=(past, past))
        reader.refresh()  # lists the folder: nothing yet
        b.put(2, "y")  # a new shard, but the folder's time is set back: not listed again
        os.utime(root, ns=(past, past))
        reader.refresh()
        assert reader.stats()["shards"] == 0 and reader.get(2) == (False, None)
        a.put(1, "x")  # another new shard: the folder's time moves, so it is listed
        reader.refresh()
        assert reader.get(1) == (True, "x") and reader.get(2) == (True, "y")
        assert reader.stats()["shards"] == 2
        b.put(3, "z")  # a shard that grows is seen without a listing (a stat of the file)
        reader.refresh()
        assert reader.get(3) == (True, "z")


def test_the_full_disk_errors_are_exported_lazily_by_the_package():
    code = ("import sys, dataflow.snapshot as s; "
            "print('dataflow.snapshot.store' in sys.modules); "
            "from dataflow.snapshot import SnapshotFullError, SnapshotFullWarning; "
            "from dataflow.snapshot import store; "
            "print(SnapshotFullError is store.SnapshotFullError, "
            "SnapshotFullWarning is store.SnapshotFullWarning, "
            "'SnapshotFullError' in s.__all__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "True", "True", "True"]
