"""SnapshotData: the outputs of the uncached pipeline (values, dtypes, order, drops, under
shuffle and resume), read through and stored once, read back by another process without one
map_func call; a random map_func refused; a stale snapshot caught by verify; a budget."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import dataflow as df
from dataflow.snapshot import NondeterministicError, SnapshotData, StaleSnapshotError
from dataflow.snapshot.shard import ENTRY, index_bytes
from tests.helpers import check_resume, epoch, to_plain
from tests.snapshot import pipelines

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def calls(tmp_path, monkeypatch):
    monkeypatch.setenv("SNAPSHOT_CALLS", str(tmp_path / "calls"))
    return pipelines.calls


def _uncached(n):
    return df.MapData(df.DataFromList(pipelines.records(n), shuffle=False), pipelines.decode)


def test_outputs_are_the_uncached_pipelines_and_are_computed_once(tmp_path, calls):
    uncached = _uncached(20)
    uncached.reset_state()
    want = epoch(uncached)
    start = calls()
    snap = SnapshotData(pipelines.records(20), tmp_path, map_func=pipelines.decode, verify=0)
    assert calls() - start == 6  # the randomness test: 3 inputs, twice
    pickle.loads(pickle.dumps(snap))
    snap.reset_state()
    assert epoch(snap) == want and len(want) == 18  # drops (6, 13) skipped as MapData does
    assert epoch(snap) == want and len(snap) == 20
    assert calls() - start == 6 + 20  # each index once, the second epoch all hits
    assert snap[6] is None and to_plain(snap[5]) == to_plain(pipelines.decode([5]))
    assert snap[-1].__class__ is list and snap[5][0].dtype == np.uint8
    assert type(snap[5][2]) is np.float32
    s = snap.stats()
    assert (s["hits"], s["misses"], s["stored"], s["size"]) == (20 + 5, 20, 20, 20)
    assert s["bytes_stored"] > 0 and s["bytes_read"] > 0
    m = snap.profile_metrics()
    assert (m["snapshot hits"], m["snapshot misses"]) == (25.0, 20.0)
    snap.close()
    snap.close()


_READ_BACK = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    from dataflow.snapshot import SnapshotData
    from tests.snapshot import pipelines
    snap = SnapshotData(pipelines.records(20), sys.argv[2], map_func=pipelines.decode,
                        verify=0)
    snap.reset_state()
    out = [[dp[0].sum(), dp[1]] for dp in snap]
    print(pipelines.calls(), len(out), int(sum(a for a, _ in out)), snap.stats()["hits"])
""")


def test_a_second_process_reads_a_complete_snapshot_without_calling_map_func(tmp_path, calls):
    snap = SnapshotData(pipelines.records(20), tmp_path / "snaps", map_func=pipelines.decode)
    snap.reset_state()
    want = [[int(dp[0].sum()), dp[1]] for dp in snap]
    snap.close()
    before = calls()
    out = subprocess.run([sys.executable, "-c", _READ_BACK, ROOT, str(tmp_path / "snaps")],
                         capture_output=True, text=True, check=True, env=os.environ)
    n_calls, n, total, hits = out.stdout.split()
    assert int(n_calls) - before == 0
    assert (int(n), int(total), int(hits)) == (18, sum(a for a, _ in want), 20)


def random_decode(dp):
    return [np.random.rand(2) + dp[0]]


def test_a_random_map_func_is_refused_at_once(tmp_path):
    with pytest.raises(NondeterministicError, match=r"test_data\.random_decode is random"):
        SnapshotData([[1], [2]], tmp_path, map_func=random_decode)
    assert not os.listdir(tmp_path) or not any(
        os.path.exists(os.path.join(tmp_path, d, "deterministic.json"))
        for d in os.listdir(tmp_path))


def _offset(k):
    def f(dp):
        return [np.int64(dp[0] + k)]
    return f


def test_a_changed_closure_is_a_new_key_and_explain_says_what_changed(tmp_path):
    a = SnapshotData([[1], [2]], tmp_path, map_func=_offset(1))
    a.reset_state()
    assert [int(x[0]) for x in a] == [2, 3]
    a.close()
    b = SnapshotData([[1], [2]], tmp_path, map_func=_offset(2))
    assert b.key != a.key
    text = b.explain()
    assert f"{a.key}: func.closure:k: changed" in text and "this one: 0 of 2" in text
    c = SnapshotData([[1], [5]], tmp_path, map_func=_offset(1))
    assert "source.items: changed" in c.explain() and c.key != a.key


def test_a_forced_stale_key_is_caught_by_verify_or_repaired(tmp_path):
    a = SnapshotData([[i] for i in range(6)], tmp_path, map_func=_offset(1), key="mine")
    a.reset_state()
    list(a)
    a.close()
    stale = SnapshotData([[i] for i in range(6)], tmp_path, map_func=_offset(2), key="mine",
                         verify=1.0)
    stale.reset_state()
    with pytest.raises(StaleSnapshotError, match="stored output at index 0 differs"):
        list(stale)
    stale.close()
    fixed = SnapshotData([[i] for i in range(6)], tmp_path, map_func=_offset(2), key="mine",
                         verify=("repair", 1.0))
    fixed.reset_state()
    assert [int(x[0]) for x in fixed] == [2, 3, 4, 5, 6, 7]
    assert [int(x[0]) for x in fixed] == [2, 3, 4, 5, 6, 7]  # now from the repaired snapshot
    s = fixed.stats()
    assert (s["repaired"], s["verify_failed"], s["verified"], s["stored"]) == (1, 1, 6, 6)
    fixed.close()


def test_shuffle_and_resume_are_exact_also_after_a_break(tmp_path):
    def plain():
        return SnapshotData(pipelines.records(9), tmp_path, map_func=pipelines.decode,
                            shuffle=True, seed=3)

    seq = check_resume(plain, epochs=2)  # the first run fills the snapshot as it goes
    assert len(seq) == 2 * 8  # 8 outputs an epoch (index 6 is a drop)
    first = plain()
    first.reset_state()
    e0, e1 = epoch(first), epoch(first)
    assert [e0, e1] == [seq[:8], seq[8:]] and e0 != e1  # a new permutation each epoch
    order = first._epoch_rng(0).permutation(9).tolist()
    assert [dp[1] for dp in seq[:8]] == [i % 10 for i in order if i != 6]
    uncached = df.MapData(df.DataFromList(pipelines.records(9), shuffle=True, seed=3),
                          pipelines.decode)  # the same seed gives the same orders
    uncached.reset_state()
    assert [epoch(uncached), epoch(uncached)] == [e0, e1]
    batched = check_resume(lambda: df.BatchData(plain(), 2), epochs=2)
    assert len(batched) == 2 * 4


def test_it_pickles_and_a_copy_reads_the_same(tmp_path):
    snap = SnapshotData(pipelines.records(8), tmp_path, map_func=pipelines.decode)
    snap.reset_state()
    want = epoch(snap)
    clone = pickle.loads(pickle.dumps(snap))
    clone.reset_state()
    assert epoch(clone) == want and clone.stats()["hits"] == 8
    snap.close()
    clone.close()


def slow_even(dp):
    if dp[0] % 2 == 0:
        time.sleep(0.02)
    return [np.full(100, dp[0], np.uint8)]


def test_a_budget_keeps_the_most_expensive_outputs_per_byte(tmp_path):
    probe = SnapshotData([[0]], tmp_path / "probe", map_func=slow_even, verify=0)
    probe[0]
    one = probe._store.nbytes()
    probe.close()
    limit = 4 * (one + ENTRY.itemsize) + index_bytes(0)  # four records and their index
    # one thread: the order of the puts (and so the evictions counted) is the reading order
    snap = SnapshotData([[i] for i in range(8)], tmp_path, map_func=slow_even, budget=limit,
                        verify=0, num_workers=1)
    snap.reset_state()
    for _ in range(2):
        assert [int(x[0][0]) for x in snap] == list(range(8))
    costs = snap._store.costs()
    assert sorted(costs) == [0, 2, 4, 6] and snap._store.disk_bytes() == limit
    s = snap.stats()
    assert (s["evicted"], s["stored"]) == (2, 4)  # 1 and 3 (fast) gave way to 4 and 6
    snap.close()
    shards = [n for n in os.listdir(snap.root) if n.startswith("w")]
    assert sum(os.path.getsize(os.path.join(snap.root, n)) for n in shards) == limit


def test_bad_arguments_name_the_parameter(tmp_path):
    with pytest.raises(TypeError, match="`path`"):
        SnapshotData([[1]], 5)
    with pytest.raises(ValueError, match="`verify`"):
        SnapshotData([[1]], tmp_path, verify=2)
    with pytest.raises(ValueError, match="`key`"):
        SnapshotData([[1]], tmp_path, key="../x")
    with pytest.raises(ValueError, match="`compression`"):
        SnapshotData([[1]], tmp_path, compression="gzip")
    with pytest.raises(ValueError, match=r"no len\(\)"):
        SnapshotData(df.DataFromGenerator(lambda: iter([[1]])), tmp_path)


def random_after_three(dp):
    """Deterministic on the randomness test's three inputs, random after them."""
    return [np.float64(dp[0]) + (np.random.rand() if dp[0] >= 3 else 0.0)]


def test_verify_runs_the_randomness_test_on_a_mismatch(tmp_path):
    snap = SnapshotData([[i] for i in range(5)], tmp_path, map_func=random_after_three,
                        verify=1.0)
    snap.reset_state()
    list(snap)  # stores one draw of indices 3 and 4
    with pytest.raises(NondeterministicError, match="random_after_three is random"):
        list(snap)
    snap.close()
    # under a key of the user's, another function's pass of the test does not count
    with pytest.raises(NondeterministicError):
        SnapshotData([[1], [2]], tmp_path, map_func=random_decode, key=snap.key)


def test_it_is_read_in_place_by_position_and_profiled(tmp_path):
    from dataflow.snapshot.source import positional

    # one thread: with threads computing ahead, a profile's warm-up pass also computes a few
    # positions it does not read, and the hits below would count them
    snap = SnapshotData(pipelines.records(10), tmp_path, map_func=pipelines.decode,
                        num_workers=1)
    reader = positional(snap)
    assert reader.items is snap and to_plain(reader.get(4)) == to_plain(pipelines.decode([4]))
    report = df.profile(df.MapData(snap, pipelines.augment), num=6, warmup=1)
    metrics = next(s.metrics for s in report.stages if s.name == "SnapshotData")
    assert metrics == snap.profile_metrics()
    s = snap.stats()
    assert (metrics["snapshot misses"], metrics["snapshot hits"]) == (s["misses"], s["hits"])
    assert (s["misses"], s["hits"]) == (6, 2)  # (index 4 was read above, 6 is a drop)
    assert "snapshot hit rate" in report.format()
    snap.close()


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_compressed_snapshots_read_back_the_same(tmp_path, compression):
    snap = SnapshotData(pipelines.records(8), tmp_path, map_func=pipelines.decode,
                        compression=compression, verify=0)
    snap.reset_state()
    first = epoch(snap)
    assert epoch(snap) == first == epoch(_uncached_reset(8))
    assert snap.stats()["hits"] == 8
    snap.close()


def _uncached_reset(n):
    flow = _uncached(n)
    flow.reset_state()
    return flow


def test_the_public_signature():
    import inspect

    assert str(inspect.signature(df.SnapshotData)).replace("'", "") == (
        "(ds: Any, path: str | os.PathLike[str], *, map_func: Callable[[Any], Any] | None = "
        "None, key: str | None = None, budget: int | str | None = None, verify: float | str = "
        "0.01, compression: str | None = None, shuffle: bool = False, seed: int | None = None, "
        "on_full: str = raise, num_workers: int | str = auto) -> None")
    assert df.SnapshotData is SnapshotData and callable(df.snapshot)
