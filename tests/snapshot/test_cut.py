"""dataflow.snapshot(ds, path): the snapshot goes at the end of the deterministic prefix of a
chain; the pipeline's outputs, order and seeds stay the same; it says where it cut and why."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dataflow as df
from dataflow.serialize.npz_format import NumpyData
from dataflow.snapshot import SnapshotData
from tests.helpers import check_resume, epoch
from tests.snapshot import pipelines


def _double(x):
    return x * 2


def _chain(n, shuffle=True):
    src = df.DataFromList(pipelines.records(n), shuffle=shuffle)
    decoded = df.MapDataComponent(df.MapData(src, pipelines.decode), _double, index=1)
    return df.BatchData(df.MultiThreadMapData(decoded, 2, map_func=pipelines.augment,
                                              strict=True, ordered=True), 3)


def _epochs(flow, k=2):
    flow.reset_state()
    try:
        return [epoch(flow) for _ in range(k)]
    finally:
        flow.close()


def test_the_cut_keeps_outputs_order_and_seeds(tmp_path):
    df.set_seed(11)
    try:
        want = _epochs(_chain(12))
        flow = df.snapshot(_chain(12), tmp_path)
        snap = flow.ds.ds
        assert isinstance(snap, SnapshotData) and isinstance(flow.ds, df.MultiThreadMapData)
        assert snap.cut.stored == ["DataFromList", "MapData(tests.snapshot.pipelines.decode)",
                                   "MapDataComponent(tests.snapshot.test_cut._double)"]
        assert snap.cut.above == ["MultiThreadMapData", "BatchData"]
        assert "MultiThreadMapData(tests.snapshot.pipelines.augment) is random" in str(snap.cut)
        assert _epochs(flow) == want
        again = df.snapshot(_chain(12), tmp_path)  # a new process would see the same
        assert _epochs(again) == want and again.ds.ds.stats()["misses"] == 0
        assert want[0] != want[1]  # (the epochs differ: shuffled, augmented)
    finally:
        df.set_seed(None)


def test_a_deterministic_chain_is_one_snapshot_and_a_random_one_is_refused(tmp_path):
    chain = df.MapData(df.DataFromList(pipelines.records(5), shuffle=False), pipelines.decode)
    snap = df.snapshot(chain, tmp_path)
    assert isinstance(snap, SnapshotData) and snap.cut.above == []
    assert snap.cut.reason == "the whole chain is deterministic"
    with pytest.raises(ValueError, match=r"nothing to snapshot in MapData: MapData\("
                                         r"tests\.snapshot\.pipelines\.augment\) is random"):
        df.snapshot(df.MapData(df.DataFromList([[pipelines.decode([1])[0], 1]]),
                               pipelines.augment), tmp_path)
    with pytest.raises(ValueError, match="shuffles in its own order"):
        df.snapshot(df.MapData(NumpyData(pipelines.records(3), shuffle=True), pipelines.decode),
                    tmp_path)
    with pytest.raises(ValueError, match="FakeData is not read by position"):
        df.snapshot(df.MapData(df.FakeData([[2]], 4), len), tmp_path)
    with pytest.raises(TypeError, match="unknown arguments"):
        df.snapshot(chain, tmp_path, shuffle=True)
    assert df.snapshot(chain, tmp_path, num_workers=1).num_workers == 1
    with pytest.raises(ValueError, match="`num_workers` must be 'auto' or an int >= 1"):
        df.snapshot(chain, tmp_path, num_workers=0)


def test_dataflow_snapshot_is_the_package_and_the_function():
    store = importlib.import_module("dataflow.snapshot.store")
    assert df.snapshot.store is store and callable(df.snapshot)
    assert "snapshot" in df.__all__ and "SnapshotData" in df.__all__
    code = ("import dataflow.snapshot.store, dataflow\n"
            "print(dataflow.snapshot.store.SnapshotStore.__name__, callable(dataflow.snapshot))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["SnapshotStore", "True"]


def test_a_cut_pipeline_resumes_exactly(tmp_path):
    def make():
        return df.snapshot(_chain(8), tmp_path)  # shuffled and augmented, from the global seed

    df.set_seed(4)
    try:
        seq = check_resume(make, epochs=2, every=2)
    finally:
        df.set_seed(None)
    assert len(seq) == 2 * 2  # 7 outputs an epoch (one drop): 2 batches of 3


def _add(k):
    def add(dp):
        return [dp[0] + k, dp[1]]
    return add


def _scale(k):
    def scale(x):
        return x * k
    return scale


def _jitter(dp):
    return [dp[0] + np.random.randint(0, 100), dp[1]]


def _build(kinds, n=6):
    flow = df.DataFromList([[i, i % 3] for i in range(n)], shuffle=False)
    for k, kind in enumerate(kinds):
        if kind == "add":
            flow = df.MapData(flow, _add(k + 1))
        elif kind == "scale":
            flow = df.MapDataComponent(flow, _scale(k + 2), index=1)
        else:
            flow = df.MapData(flow, _jitter)
    return flow


@settings(max_examples=12, deadline=None)
@given(st.lists(st.sampled_from(["add", "scale", "random"]), min_size=1, max_size=5))
def test_the_cut_is_at_the_first_random_stage_and_keeps_the_outputs(kinds):
    deterministic = next((k for k, kind in enumerate(kinds) if kind == "random"), len(kinds))
    np.random.seed(0)
    want = _epochs(_build(kinds))
    with tempfile.TemporaryDirectory() as folder:
        if deterministic == 0:
            with pytest.raises(ValueError, match="is random"):
                df.snapshot(_build(kinds), folder)
            return
        flow = df.snapshot(_build(kinds), folder)
        snap = flow
        while not isinstance(snap, SnapshotData):
            snap = snap.ds
        assert len(snap.cut.stored) == 1 + deterministic
        assert len(snap.cut.above) == len(kinds) - deterministic
        np.random.seed(0)
        assert _epochs(flow) == want


class OffsetStage(df.DataFlow):
    """A stage that keeps its child as `source` (not `ds`) and says how to replace it."""

    def __init__(self, source):
        self.source = source

    def children(self):
        return [self.source]

    def _replace_child(self, old, new):
        self.source = new

    def __len__(self):
        return len(self.source)

    def __iter__(self):
        for dp in self.source:
            yield [*dp, "offset"]


class OpaqueStage(OffsetStage):
    """The same, without saying how to replace its child."""

    _replace_child = df.DataFlow._replace_child


def test_the_stage_above_the_cut_is_rewired_by_its_replace_child(tmp_path):
    def chain(kind):
        src = df.DataFromList([[i, i] for i in range(6)], shuffle=False)
        return kind(df.MapDataComponent(df.MapData(src, pipelines.decode), _double, index=1))

    want = _epochs(chain(OffsetStage), 1)
    flow = df.snapshot(chain(OffsetStage), tmp_path)
    assert isinstance(flow.source, SnapshotData) and flow.source.cut.above == ["OffsetStage"]
    assert _epochs(flow, 1) == want
    with pytest.raises(ValueError, match=r"the stage above the cut cannot be made to read the "
                                         r"snapshot: OpaqueStage cannot replace its child "
                                         r"MapDataComponent"):
        df.snapshot(chain(OpaqueStage), tmp_path)


def _vec(x):
    """A fixed-shape array per input; input 3 dropped."""
    return None if x == 3 else np.full((2,), x * 1.5, np.float32)


def _noisy_vec(x):
    return np.full((2,), x + np.random.randint(0, 100), np.float32)


def _shared(func, n=6):
    src = df.MapData(df.DataFromList([[i, i] for i in range(n)], shuffle=False), _add(0))
    return df.MultiProcessMapDataComponentSharedArray(src, 2, func, (2,), np.float32)


def test_the_shared_array_mapper_is_one_stage_of_the_chain(tmp_path):
    df.set_seed(5)
    try:
        # deterministic: stored with the stages below it; the random stage above reads it (the
        # global np.random, which this process's MapData uses, seeded alike for both runs)
        np.random.seed(0)
        want = _epochs(df.MapData(_shared(_vec), _jitter))
        flow = df.snapshot(df.MapData(_shared(_vec), _jitter), tmp_path / "a")
        assert isinstance(flow.ds, SnapshotData)
        assert flow.ds.cut.stored == [
            "DataFromList", "MapData(tests.snapshot.test_cut._add.<locals>.add)",
            "MultiProcessMapDataComponentSharedArray(tests.snapshot.test_cut._vec)"]
        assert flow.ds.cut.above == ["MapData"]
        np.random.seed(0)
        got = _epochs(flow)
        assert got == want and len(want[0]) == 5  # (input 3 dropped; values and dtypes)
        assert want[0][0][0] == {"__array__": [44.0, 44.0], "dtype": "float32"}
        # random: the cut is below it, and its mapper inside reads the snapshot
        want = _epochs(_shared(_noisy_vec))
        flow = df.snapshot(_shared(_noisy_vec), tmp_path / "b")
        assert isinstance(flow.ds.ds, SnapshotData) and flow.ds.ds.cut.above == [
            "MultiProcessMapDataComponentSharedArray"]
        assert ("MultiProcessMapDataComponentSharedArray(tests.snapshot.test_cut._noisy_vec) "
                "is random") in flow.ds.ds.cut.reason
        assert _epochs(flow) == want
    finally:
        df.set_seed(None)
    # the shape and dtype are still checked, by the test for randomness before anything else
    with pytest.raises(ValueError, match=r"returned an array of shape \(2,\) and dtype float32, "
                                         r"but output_shape=\(3,\)"):
        df.snapshot(df.MultiProcessMapDataComponentSharedArray(
            df.DataFromList([[1], [2]], shuffle=False), 2, _vec, (3,), np.float32), tmp_path)
