"""The budget's choice: what fits is stored; when full, the outputs most expensive per byte
replace the cheapest ones, by a margin; the snapshot's files never exceed the budget (evicted
records are reclaimed), and compressed records count with their compressed size."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow.snapshot.budget import EVICT_BATCH, REPLACE_MARGIN, Budget, admit, parse_budget
from dataflow.snapshot.data import CHECKED, SnapshotData
from dataflow.snapshot.shard import ENTRY, index_bytes
from dataflow.snapshot.store import SnapshotStore


def test_parse_budget():
    assert parse_budget(None) is None
    assert parse_budget(1000) == 1000
    assert parse_budget("20GB") == 20 * 10**9
    assert parse_budget("512MiB") == 512 * 2**20
    assert parse_budget("1.5 kb") == 1500
    for bad in ("twenty", "-1GB", "5XB"):
        with pytest.raises(ValueError, match="`budget`"):
            parse_budget(bad)
    with pytest.raises(TypeError, match="`budget`"):
        parse_budget([1])


def test_admit_replaces_the_cheapest_per_byte_only():
    stored = {0: (1.0, 100), 1: (5.0, 100), 2: (0.5, 100)}  # densities .01 .05 .005
    assert admit(50, 0.1, 60, stored) == (True, [])
    assert admit(150, 3.0, 0, stored) == (True, [2, 0])  # .02 per byte beats .005 and .01
    assert admit(150, 0.1, 0, stored) == (False, [])
    assert admit(400, 100.0, 0, stored) == (False, [])  # does not fit even alone
    # about the same cost per byte (noise in the measured seconds) never replaces
    assert admit(100, 0.74, 0, stored) == (False, [])  # .0074 per byte < 1.5 x .005
    assert admit(100, 0.76, 0, stored) == (True, [2])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.001, 10), st.integers(1, 50)), min_size=1, max_size=40),
       st.integers(0, 300))
def test_a_budget_converges_to_the_most_expensive_per_byte(items, limit):
    stored: dict[int, tuple[float, int]] = {}
    for _ in range(len(items) + 2):  # epochs, until one changes nothing
        before = dict(stored)
        for i, (s, b) in enumerate(items):
            if i in stored:
                continue
            ok, victims = admit(b, s, limit - sum(v[1] for v in stored.values()), stored)
            for v in victims:
                del stored[v]
            if ok:
                stored[i] = (s, b)
            assert sum(v[1] for v in stored.values()) <= limit
        if stored == before:
            break
    assert stored == before  # it settles
    # no item left out beats stored ones per byte by the margin while fitting in their place
    for i, (s, b) in enumerate(items):
        if i not in stored and stored:
            cheaper = [v for v in stored.values() if v[0] / v[1] * REPLACE_MARGIN <= s / b]
            free = limit - sum(v[1] for v in stored.values())
            assert b > free + sum(v[1] for v in cheaper)


def _folder_bytes(root):
    """The bytes of the snapshot's files that the budget bounds: all but meta.json."""
    return sum(os.path.getsize(os.path.join(root, n)) for n in os.listdir(root)
               if n != "meta.json")


def _value(i, n=1000):
    return [np.full(n, i % 251, np.uint8), i]


def _fill(store, budget, n, epochs, cost=lambda i, epoch: 1.0):
    """``epochs`` passes over ``range(n)`` as SnapshotData makes them: a miss is stored if the
    budget admits it. After each put the files stay within the budget."""
    for epoch in range(epochs):
        for i in range(n):
            if store.has(i):
                continue
            c = cost(i, epoch)
            store.put(i, _value(i), cost=c, admit=lambda size, c=c: budget.place(store, size, c))
            assert store.disk_bytes() <= budget.limit
            assert _folder_bytes(store.root) <= budget.limit


def _one_record(tmp_path):
    with SnapshotStore(tmp_path / "probe", 1) as probe:
        return probe.put(0, _value(0))


def test_uniform_costs_keep_the_first_records_to_fit_and_never_churn(tmp_path):
    one, k = _one_record(tmp_path), 6
    limit = k * (one + ENTRY.itemsize) + index_bytes(0)  # K records, their entries, the index
    budget = Budget(limit)
    noise = np.random.default_rng(0).uniform(0.7, 1.04, (4, 20))  # within the 1.5x margin
    with SnapshotStore(tmp_path / "k", 20) as store:
        _fill(store, budget, 20, 4, cost=lambda i, epoch: float(noise[epoch, i]))
        assert sorted(store.costs()) == list(range(k))  # the first six to come
        assert (budget.evicted, budget.refused) == (0, 3 * (20 - k) + (20 - k))
        assert store.disk_bytes() == limit
    assert _folder_bytes(tmp_path / "k") == limit  # sealed: the index written as counted
    with SnapshotStore(tmp_path / "k", 20) as again:  # another run counts the same bytes
        assert again.disk_bytes() == limit and sorted(again.costs()) == list(range(k))
        later = Budget(limit)
        _fill(again, later, 20, 1)
        assert (later.evicted, later.refused, again.stored()) == (0, 20 - k, k)


def test_a_much_costlier_record_replaces_cheaper_ones_within_the_budget(tmp_path):
    one, k = _one_record(tmp_path), 6
    limit = k * (one + ENTRY.itemsize) + index_bytes(0)
    budget = Budget(limit)
    with SnapshotStore(tmp_path / "k", 20) as store, SnapshotStore(tmp_path / "k", 20) as other:
        _fill(store, budget, 20, 1)
        other.refresh()  # (as another process does on a miss, at most once a second)
        assert [other.get(i)[0] for i in range(k)] == [True] * k  # it reads them
        _fill(store, budget, 20, 1, cost=lambda i, epoch: 10.0 if i in (12, 15) else 1.0)
        assert sorted(store.costs()) == [2, 3, 4, 5, 12, 15]  # 0 and 1 (ties: lowest index)
        assert (budget.evicted, budget.refused) == (2, 20 - k + 20 - k - 2)
        assert [store.get(i)[1][1] for i in (12, 15)] == [12, 15]
        # the evicted records' bytes are reclaimed: one shard of the six live records
        assert store.disk_bytes() == limit and len(os.listdir(store.root)) == 2
        other.refresh()  # the other process finds the old shard gone, the new one there
        assert sorted(other.costs()) == [2, 3, 4, 5, 12, 15]
        same_value = other.get(12)[1]
        assert same_value[1] == 12 and same_value[0].tobytes() == _value(12)[0].tobytes()
        _fill(store, budget, 20, 2, cost=lambda i, epoch: 10.0 if i in (12, 15) else 1.4)
        assert budget.evicted == 2  # 1.4x is not enough to replace
    assert _folder_bytes(tmp_path / "k") <= limit


def test_the_budget_counts_compressed_bytes(tmp_path):
    one, k = _one_record(tmp_path), 6
    limit = k * (one + ENTRY.itemsize) + index_bytes(0)
    for compression, stored in ((None, k), ("lz4", 20), ("zstd", 20)):
        root = tmp_path / str(compression)
        budget = Budget(limit)
        with SnapshotStore(root, 20, compression=compression) as store:
            _fill(store, budget, 20, 2)
            assert store.stored() == stored and budget.evicted == 0
            small = sum(b for _, b in store.costs().values())
            assert small < (20 * one if compression else k * one + 1)
        assert _folder_bytes(root) <= limit


def test_snapshot_data_budget_is_a_bound_on_its_folder(tmp_path):
    one = _one_record(tmp_path)
    limit = 5 * (one + ENTRY.itemsize) + index_bytes(0)
    snap = SnapshotData(list(range(20)), tmp_path / "s", map_func=_value, budget=limit,
                        compression="lz4", verify=0)
    snap.reset_state()
    for _ in range(2):
        assert [x[1] for x in snap] == list(range(20))
    assert snap.stats()["stored"] == 20  # compressed, all fit: far under 5 raw records
    snap.close()
    assert _folder_bytes(snap.root) - os.path.getsize(os.path.join(snap.root, CHECKED)) <= limit


def _value_plus_one(i):
    return [np.full(1000, (i + 1) % 251, np.uint8), i]


def test_a_repaired_record_is_stored_only_within_the_budget(tmp_path):
    # a snapshot of another function under the same key=, repaired under a budget smaller
    # than one record: the recomputed outputs are given, and none is stored
    full = SnapshotData(list(range(4)), tmp_path, map_func=_value, key="k", verify=0)
    full.reset_state()
    assert [x[1] for x in full] == [0, 1, 2, 3]
    full.close()
    limit = _one_record(tmp_path) // 2
    fixed = SnapshotData(list(range(4)), tmp_path, map_func=_value_plus_one, key="k",
                         budget=limit, verify=("repair", 1.0))
    fixed.reset_state()
    assert [int(x[0][0]) for x in fixed] == [1, 2, 3, 4]
    s = fixed.stats()
    assert (s["repaired"], s["stored"], s["bytes_stored"]) == (1, 0, 0)
    fixed.close()
    assert _folder_bytes(fixed.root) - os.path.getsize(os.path.join(fixed.root, CHECKED)) <= limit


def test_admit_frees_room_for_the_next_ones_in_one_go():
    stored = dict.fromkeys(range(10), (1.0, 100))
    assert admit(100, 10.0, 0, stored, extra=250) == (True, [0, 1, 2])  # 200 bytes left over
    assert admit(100, 10.0, 0, stored, extra=99) == (True, [0])
    assert admit(100, 1.4, 0, stored, extra=250) == (False, [])  # beats none by 1.5x


def test_one_compaction_makes_room_for_several_costlier_records(tmp_path):
    one, k = _one_record(tmp_path), 32
    rec = one + ENTRY.itemsize
    limit = k * rec + index_bytes(0)  # EVICT_BATCH of it: two records and a bit
    assert 2 * rec <= limit * EVICT_BATCH < 3 * rec
    budget = Budget(limit)
    with SnapshotStore(tmp_path / "k", 60) as store:
        _fill(store, budget, k, 1)
        _fill(store, budget, 60, 1, cost=lambda i, epoch: 10.0 if i in (40, 50) else 1.0)
        # 40 evicts 0 and, to make room for the next ones, 1 and 2; the cheap ones after it
        # are refused even where there is room (they would only be evicted again); 50 takes
        # the room without evicting
        assert sorted(store.costs()) == [*range(3, k), 40, 50]
        assert (budget.evicted, store.disk_bytes()) == (3, limit - rec)
        assert budget.floor == 1.5 / rec
        _fill(store, budget, 60, 1, cost=lambda i, epoch: 1.6 if i == 51 else 1.0)
        assert sorted(store.costs()) == [*range(3, k), 40, 50, 51] and budget.evicted == 3
    assert _folder_bytes(tmp_path / "k") == limit


def test_reads_in_other_threads_are_right_while_the_shards_are_compacted(tmp_path):
    one, k = _one_record(tmp_path), 8
    limit = k * (one + ENTRY.itemsize) + index_bytes(0)
    budget = Budget(limit)
    errors, seen = [], set()
    with SnapshotStore(tmp_path / "k", 200) as store:
        _fill(store, budget, k, 1)
        stop = threading.Event()

        def read():
            while not stop.is_set():
                for i in range(200):
                    try:
                        ok, value = store.get(i)
                        if ok:
                            assert value[1] == i and value[0].tobytes() == _value(i)[0].tobytes()
                            seen.add(i)
                    except Exception as e:  # (reported in the main thread)
                        errors.append(e)

        readers = [threading.Thread(target=read) for _ in range(2)]
        for t in readers:
            t.start()
        try:  # each one 1.5x costlier per byte than the last: every one evicts
            _fill(store, budget, 200, 1, cost=lambda i, epoch: 1.5 ** (i // 8 + 1))
        finally:
            stop.set()
            for t in readers:
                t.join()
        assert errors == [] and store.stats()["corrupted"] == 0
        assert budget.evicted > 100 and store.stored() == k and len(seen) > k
        assert sorted(store.costs()) == list(range(192, 200))
    assert _folder_bytes(tmp_path / "k") == limit


def test_a_later_run_replaces_an_earlier_runs_records_claiming_its_shard(tmp_path):
    one, k = _one_record(tmp_path), 6
    limit = k * (one + ENTRY.itemsize) + 2 * index_bytes(0)  # (two shards: two indexes)
    root = tmp_path / "k"
    with SnapshotStore(root, 20) as first:  # an earlier run, sealed when it closed
        _fill(first, Budget(limit), 20, 1)
        earlier = first._writer.name
    with SnapshotStore(root, 20) as b, SnapshotStore(root, 20) as c:  # two later processes
        budget_b, budget_c = Budget(limit), Budget(limit)
        assert sorted(b.own_costs()) == list(range(k))  # the earlier run's, all evictable
        _fill(b, budget_b, 20, 1, cost=lambda i, epoch: 10.0 if i == 12 else 1.0)
        assert sorted(b.costs()) == [1, 2, 3, 4, 5, 12] and budget_b.evicted == 1
        assert earlier not in os.listdir(root)  # claimed, rewritten, deleted
        assert [n for n in os.listdir(root) if "claimed" in n] == []
        # c had seen the earlier shard sealed: b took it first, so c's claim fails and c
        # stores nothing (it never overshoots the budget)
        assert c.stored() == k and sorted(c.own_costs()) == list(range(k))
        _fill(c, budget_c, 20, 1, cost=lambda i, epoch: 10.0 if i == 15 else 1.0)
        c.refresh()
        assert sorted(c.costs()) == [1, 2, 3, 4, 5, 12] and budget_c.evicted == 0
        # once c sees b's rewritten shard (sealed only when b closes), it can claim that
    assert _folder_bytes(root) == limit
    with SnapshotStore(root, 20) as d:  # a third run: b's shards are sealed now
        budget_d = Budget(limit)
        _fill(d, budget_d, 20, 1, cost=lambda i, epoch: 10.0 if i == 15 else 1.0)
        # 15 needs a third shard (and its index's 28 bytes): two records make room
        assert sorted(d.costs()) == [3, 4, 5, 12, 15] and budget_d.evicted == 2
    assert _folder_bytes(root) == limit - (one + ENTRY.itemsize) + index_bytes(0)  # 3 shards
