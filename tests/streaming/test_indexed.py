"""TarShardData: local tar shards read by position through their indexes; a source that the
snapshot and the data service read in place."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

import dataflow as df
from dataflow.errors import CorruptFileError
from dataflow.service import DataService, ServiceData
from dataflow.snapshot import SnapshotData
from dataflow.snapshot.source import positional, reads_in_place
from dataflow.streaming import StreamingShards, TarShardData
from dataflow.streaming.index import index_url
from tests.streaming._shards import write_shards


def _want(n, start=0):
    """The samples of _shards.samples(n) as the shards give them back (fields as bytes)."""
    return [(f"s{i:05d}", str(i).encode(), b"t" * (i % 13)) for i in range(start, start + n)]


def _plain(sample):
    return (sample["__key__"], sample["cls"], sample["txt"])


def _label(dp):
    return [int(dp["cls"]), dp["__key__"]]


@pytest.fixture
def shards(tmp_path):
    return write_shards(tmp_path, 11, 4)  # 3 shards: 4 + 4 + 3 samples


def test_it_reads_every_sample_by_position_as_streaming_reads_them_in_order(shards):
    ds = TarShardData(shards)
    assert len(ds) == 11
    assert [_plain(ds[i]) for i in range(11)] == _want(11)
    assert _plain(ds[-1]) == _want(11)[-1] and ds[5]["__url__"] == shards[1]
    ds.reset_state()
    assert [_plain(s) for s in ds] == _want(11)
    stream = StreamingShards(shards, shuffle=False)
    stream.reset_state()
    try:
        assert list(stream) == [ds[i] for i in range(11)]
    finally:
        stream.close()
        ds.close()
    with pytest.raises(IndexError, match=r"index 11 is out of range for 11 samples"):
        ds[11]
    with pytest.raises(TypeError, match=r"an index must be an int, got str"):
        ds["3"]


def test_positional_reads_it_in_place_and_a_pickled_copy_opens_its_own_files(shards):
    ds = TarShardData(shards, decode={"cls": "auto"})
    assert reads_in_place(ds)
    reader = positional(ds)
    assert len(reader) == 11 and reader.get(7)["cls"] == 7
    copy = pickle.loads(pickle.dumps(ds))  # (after a read: the open files stay here)
    assert [copy[i]["cls"] for i in range(11)] == list(range(11))
    copy.close()
    ds.close()


def test_a_shard_without_its_index_is_indexed_by_one_scan_and_a_stale_index_is_refused(shards):
    os.remove(index_url(shards[2]))
    ds = TarShardData(shards)
    assert [_plain(ds[i]) for i in range(8, 11)] == _want(3, 8)
    ds.close()
    with open(shards[0], "ab") as f:
        f.write(b"\0" * 512)
    with pytest.raises(CorruptFileError, match=r"the shard changed since it was indexed"):
        TarShardData(shards)
    with pytest.raises(ValueError, match=r"TarShardData reads local shards by position, got "
                                         r"'s3://b/x\.tar'"):
        TarShardData(["s3://b/x.tar"])


def test_a_shuffled_epoch_is_a_permutation_and_resumes_exactly(shards):
    ds = TarShardData(shards, shuffle=True, seed=3)
    ds.reset_state()
    first = [s["__key__"] for s in ds]
    assert sorted(first) == [k for k, _, _ in _want(11)] and first != sorted(first)
    itr = iter(ds)
    head = [next(itr)["__key__"] for _ in range(4)]
    state = ds.state_dict()
    itr.close()
    again = TarShardData(shards, shuffle=True, seed=3)
    again.reset_state()
    again.load_state_dict(state)
    rest = [s["__key__"] for s in again]
    full = TarShardData(shards, shuffle=True, seed=3)
    full.reset_state()
    list(full)
    assert head + rest == [s["__key__"] for s in full]
    for d in (ds, again, full):
        d.close()


def test_a_snapshot_over_it_gives_what_iterating_it_gives(shards, tmp_path):
    ds = TarShardData(shards)
    snap = SnapshotData(ds, tmp_path / "snap", map_func=_label)
    snap.reset_state()
    ds.reset_state()
    try:
        assert list(snap) == [_label(s) for s in ds] == [[i, f"s{i:05d}"] for i in range(11)]
        assert snap.stats()["misses"] == 11
        assert list(snap) == [[i, f"s{i:05d}"] for i in range(11)]
        assert snap.stats()["hits"] == 11
    finally:
        snap.close()
        ds.close()
    raw = SnapshotData(TarShardData(shards), tmp_path / "raw")  # the samples themselves
    raw.reset_state()
    ds.reset_state()
    try:
        assert list(raw) == list(ds) and list(raw) == list(ds)
        assert raw.stats()["hits"] == 11 and _plain(list(raw)[10]) == _want(11)[10]
    finally:
        raw.close()
        ds.close()


def _shuffle_label(dp):
    return [dp[0], dp[1], np.random.randint(1000)]


def test_dataflow_snapshot_cuts_a_chain_over_it(shards, tmp_path):
    def chain():
        return df.MapData(df.MapData(TarShardData(shards), _label), _shuffle_label)

    df.set_seed(4)
    try:
        want = [dp[:2] for dp in _epoch(chain())]
        flow = df.snapshot(chain(), tmp_path)
        assert flow.ds.cut.stored == ["TarShardData", "MapData(tests.streaming.test_indexed."
                                      "_label)"]
        assert [dp[:2] for dp in _epoch(flow)] == want == [[i, f"s{i:05d}"] for i in range(11)]
    finally:
        df.set_seed(None)


def _epoch(flow):
    flow.reset_state()
    try:
        return list(flow)
    finally:
        flow.close()


def _served_epoch(ds, shuffle):
    """One epoch of ``ds`` served by a DataService of two workers to one consumer."""
    with DataService(ds, _label, num_workers=2, seed=5, shuffle=shuffle) as svc:
        client = ServiceData(svc.address, rank=0, world_size=1, timeout=30)
        client.reset_state()
        try:
            return list(client)
        finally:
            client.close()


def test_a_data_service_over_it_serves_an_exact_epoch(shards):
    ds = TarShardData(shards)
    got = _served_epoch(ds, shuffle=False)
    assert got == [[i, f"s{i:05d}"] for i in range(11)]
    shuffled = _served_epoch(ds, shuffle=True)
    assert shuffled != got and sorted(shuffled) == got  # each sample once, in another order
