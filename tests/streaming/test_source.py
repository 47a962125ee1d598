"""StreamingShards: epochs over the plan, state and resume, workers, errors, composition."""

from __future__ import annotations

import json
import re
import tarfile

import pytest

from dataflow import MultiThreadMapData, TestDataSpeed, shard
from dataflow.errors import CorruptFileError, ErrorBudgetError, StateMismatchError
from dataflow.streaming.plan import global_order
from dataflow.streaming.source import StreamingShards, world_from_env
from tests.streaming._shards import write_shards

SIZES = (7, 7, 7, 7, 2)  # 30 samples, shard sizes as written by write_shards(.., 30, 7)


@pytest.fixture
def shards(tmp_path):
    return write_shards(tmp_path, 30, 7)


def _open(urls, **kwargs):
    ds = StreamingShards(urls, **kwargs)
    ds.reset_state()
    return ds


def _cls(dps):
    return [int(d["cls"]) for d in dps]


def test_epoch_follows_the_plan(shards):
    ds = _open(shards, seed=5, window=8, rank=1, world_size=4)
    try:
        assert ds.sizes == SIZES
        assert len(ds) == 7
        order = global_order(SIZES, 5, 0, 8).tolist()
        assert _cls(ds) == order[1:28:4]
        order1 = global_order(SIZES, 5, 1, 8).tolist()
        assert _cls(ds) == order1[1:28:4]  # the next epoch, a new order
    finally:
        ds.close()


def test_pad_policy(shards):
    ds = _open(shards, seed=0, rank=3, world_size=4, partial="pad")
    try:
        order = global_order(SIZES, 0, 0, 4096).tolist()
        assert _cls(ds) == [order[p % 30] for p in range(3, 32, 4)]
    finally:
        ds.close()


def test_resume_onto_another_world_size(shards):
    first = [_open(shards, seed=2, window=5, rank=r, world_size=2) for r in range(2)]
    its = [iter(d) for d in first]
    seen = [int(next(it)["cls"]) for _ in range(4) for it in its]
    state = json.loads(json.dumps(first[0].state_dict()))
    assert state["consumed"] == 8 and state["epoch"] == 0
    for it, d in zip(its, first, strict=True):
        it.close()
        d.close()
    rest = []
    second = [_open(shards, seed=2, window=5, rank=r, world_size=4) for r in range(4)]
    try:
        for d in second:
            d.load_state_dict(state)
        streams = [_cls(d) for d in second]
        assert {len(s) for s in streams} == {5}  # (30 - 8) // 4 each
        rest = [s[i] for i in range(5) for s in streams]
        after = [_cls(d) for d in second]  # then the next epoch starts from its beginning
    finally:
        for d in second:
            d.close()
    order = global_order(SIZES, 2, 0, 5).tolist()
    assert seen == order[:8] and rest == order[8:28]
    assert [len(a) for a in after] == [7, 7, 7, 7]


def test_state_checks_the_dataset(shards):
    ds = _open(shards, seed=1)
    state = ds.state_dict()
    ds.close()
    other = _open(shards, seed=2)
    try:
        with pytest.raises(StateMismatchError, match="expected seed=2, found seed=1"):
            other.load_state_dict(state)
    finally:
        other.close()


def test_workers_split_a_rank_through_shard(shards):
    order = global_order(SIZES, 4, 0, 4096).tolist()
    rank_seq = order[0:30:2][:15]
    parts = []
    for w in range(2):
        ds = shard(StreamingShards(shards, seed=4, rank=0, world_size=2), w, 2,
                   drop_remainder=False)
        ds.reset_state()
        parts.append(_cls(ds))
        ds.close()
    assert parts == [rank_seq[0::2], rank_seq[1::2]]


def test_identity_from_environment(shards, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert world_from_env() == (2, 3)
    ds = _open(shards, seed=0)
    try:
        assert (ds.rank, ds.world_size, len(ds)) == (2, 3, 10)
    finally:
        ds.close()


def test_decoded_and_mapped_in_threads(shards):
    ds = StreamingShards(shards, shuffle=False, decode="auto")
    flow = MultiThreadMapData(ds, 2, lambda d: d["cls"] * 2, strict=True)
    flow.reset_state()
    try:
        assert sorted(flow) == [2 * i for i in range(30)]
        speed = TestDataSpeed(flow, size=45, warmup=0)
        speed.reset_state()
        assert speed.start(progress=False) > 0
        assert speed.result.items == 45  # across epochs: 30 + 15
    finally:
        flow.close()
        ds.close()


def _truncate(path, keep):
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:keep])


def test_truncated_shard_names_url_and_member(shards):
    _truncate(shards[1], 3000)  # samples 7..13 lie in shard 1; 3000 bytes hold sample 7 only
    ds = _open(shards, shuffle=False)
    try:
        with pytest.raises(CorruptFileError,
                           match=r"t-0001\.tar .*member 's00008\.txt' of sample 's00008'"):
            list(ds)
    finally:
        ds.close()
    ds = _open(shards, shuffle=False, on_error="skip")
    try:
        assert _cls(ds) == [*range(8), *range(14, 30)]
        assert ds.state_dict()["errors"]["skipped"] == 6
    finally:
        ds.close()
    ds = _open(shards, shuffle=False, on_error="skip", max_errors=2)
    try:
        with pytest.raises(ErrorBudgetError, match=r"3 inputs failed.*First: an input: .*s00008.*"
                           r"Last: an input: .*s00010"):
            list(ds)
    finally:
        ds.close()


def test_bad_arguments(shards):
    with pytest.raises(ValueError, match="`partial` must be one of"):
        StreamingShards(shards, partial="wrap")
    with pytest.raises(ValueError, match="`rank` must be < world_size"):
        StreamingShards(shards, rank=2, world_size=2)
    with pytest.raises(ValueError, match="`decode` must be None"):
        StreamingShards(shards, decode="png")


def test_profiler_shows_network_counters(shards):
    from dataflow import profile

    ds = StreamingShards(shards, shuffle=False)
    try:
        report = profile(ds, num=25, warmup=0)
    finally:
        ds.close()
    (stage,) = report.stages
    assert stage.metrics is not None
    assert set(stage.metrics) >= {"bytes_read", "mb_per_s", "bytes_in_flight", "cache_hits"}
    assert stage.metrics["bytes_read"] > 0
    assert report.bottleneck == 0
    assert report.suggestion.startswith("the network is the bottleneck: StreamingShards waits")
    assert "stage 0 (StreamingShards): bytes_read" in report.format()


@pytest.mark.parametrize("decode", [None, "auto", {"cls": "auto"}])
def test_process_mapper_and_pickled_copies(shards, decode):
    import pickle

    from dataflow import MultiProcessMapDataZMQ

    ds = _open(shards, shuffle=False, decode=decode)
    try:
        copy = pickle.loads(pickle.dumps(ds))
        assert copy.sizes == SIZES  # the indexes travel; the fetcher does not
        copy.reset_state()
        got = list(copy)
        assert _cls(got) == list(range(30))
        # the copy decodes as the original does: ints when asked, else the stored bytes
        assert {type(d["cls"]) for d in got} == {bytes if decode is None else int}
        copy.close()
        flow = MultiProcessMapDataZMQ(ds, 2, _double_cls, strict=True)
        flow.reset_state()
        try:
            assert sorted(flow) == [2 * i for i in range(30)]
        finally:
            flow.close()
    finally:
        ds.close()


def _double_cls(dp):
    return int(dp["cls"]) * 2


# ---- more ranks than samples ---------------------------------------------------------------

def test_more_ranks_than_samples_under_drop_is_refused(tmp_path, monkeypatch):
    paths = write_shards(tmp_path, 250, 100)
    expected = (
        "StreamingShards: 300 ranks (world_size=300) over 250 samples: under partial='drop' "
        "every rank would yield 0 samples per epoch (a rank yields one sample per full round "
        "of 300 positions of the global order, and 250 samples make no full round). Use at "
        "most 250 ranks, add samples (more shards or larger ones: ranks split the samples, "
        "not the shards), or pass partial='pad' (each rank then yields 1 sample per epoch, 50 "
        "of the 300 being repeats).")
    ds = StreamingShards(paths, world_size=300, rank=7)
    try:
        with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
            ds.reset_state()
    finally:
        ds.close()
    monkeypatch.setenv("WORLD_SIZE", "251")
    monkeypatch.setenv("RANK", "0")
    ds = StreamingShards(paths)
    try:
        with pytest.raises(ValueError, match=r"^StreamingShards: 251 ranks \(WORLD_SIZE=251\) "
                                             r"over 250 samples: .* 1 of the 251 being "
                                             r"repeats\)\.$"):
            ds.reset_state()
    finally:
        ds.close()


def test_as_many_ranks_as_samples_or_pad(tmp_path):
    paths = write_shards(tmp_path, 25, 10)
    sizes = (10, 10, 5)
    order = global_order(sizes, 0, 0, 4096).tolist()
    ds = _open(paths, world_size=25, rank=24)
    try:
        assert (len(ds), _cls(ds)) == (1, [order[24]])
    finally:
        ds.close()
    got = []
    for rank in (0, 26, 29):
        ds = _open(paths, world_size=30, rank=rank, partial="pad")
        try:
            got.append((len(ds), _cls(ds)))
        finally:
            ds.close()
    assert got == [(1, [order[0]]), (1, [order[1]]), (1, [order[4]])]


def test_shards_without_samples_are_refused(tmp_path):
    path = tmp_path / "empty.tar"
    with tarfile.open(path, "w"):
        pass
    ds = StreamingShards([str(path), str(path)])
    try:
        with pytest.raises(ValueError, match=(
                r"^StreamingShards: 2 shards of `urls` \(the first: "
                f"{re.escape(repr(str(path)))}\\) hold no sample, so every epoch would be "
                r"empty; check the shards and their \.idx\.json indexes\.$")):
            ds.reset_state()
    finally:
        ds.close()
