"""Local shards are read in place, sample by sample: the same samples, in the same order, as
the streamed path (the same shards served over HTTP) gives, for any plan."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow import shard
from dataflow.streaming.plan import global_order
from dataflow.streaming.source import StreamingShards
from tests.streaming._shards import write_shards
from tests.streaming.servers import RangeHTTPServer

N, PER_SHARD = 40, 7  # 6 shards: 5 of 7 samples and 1 of 5


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``(local paths, the same shards' http URLs)``."""
    d = tmp_path_factory.mktemp("local-reads")
    paths = write_shards(d, N, PER_SHARD)
    with RangeHTTPServer(str(d)) as server:
        yield paths, [f"{server.url}/{os.path.basename(p)}" for p in paths]


def _samples(urls, worker=None, **kwargs):
    ds = StreamingShards(urls, **kwargs)
    if worker is not None:
        ds = shard(ds, worker[0], worker[1], drop_remainder=False)
    ds.reset_state()
    try:
        return [{k: (os.path.basename(v) if k == "__url__" else v) for k, v in dp.items()}
                for dp in ds]
    finally:
        ds.close()


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**16), window=st.integers(1, 60), world=st.integers(1, 4),
       data=st.data(), shuffle=st.booleans(), partial=st.sampled_from(["drop", "pad"]))
def test_local_reads_match_the_streamed_path(served, seed, window, world, data, shuffle,
                                              partial):
    paths, urls = served
    rank = data.draw(st.integers(0, world - 1))
    kw = {"seed": seed, "window": window, "rank": rank, "world_size": world,
          "shuffle": shuffle, "partial": partial}
    local = _samples(paths, **kw)
    assert local == _samples(urls, **kw)
    assert local == _samples([f"file://{p}" for p in paths], **kw)
    if world == 1 and partial == "drop":
        order = global_order((7, 7, 7, 7, 7, 5), seed, 0, window, shuffle).tolist()
        assert [int(d["cls"]) for d in local] == order
    workers = data.draw(st.integers(1, 3))
    split = [_samples(paths, worker=(w, workers), **kw) for w in range(workers)]
    assert split == [local[w::workers] for w in range(workers)]  # every workers-th sample


def test_mixed_local_and_remote_shards(served):
    paths, urls = served
    mixed = [p if i % 2 else u for i, (p, u) in enumerate(zip(paths, urls, strict=True))]
    assert _samples(mixed, seed=3, window=16) == _samples(paths, seed=3, window=16)


def test_truncated_local_shard_shuffled(served, tmp_path):
    paths, _ = served
    copies = []
    for p in paths:
        data = Path(p).read_bytes()
        copy = tmp_path / os.path.basename(p)
        copy.write_bytes(data[:3000] if len(copies) == 2 else data)  # shard 2 keeps sample 14
        index = os.path.basename(p) + ".idx.json"
        (tmp_path / index).write_bytes(Path(p + ".idx.json").read_bytes())
        copies.append(str(copy))
    order = global_order((7, 7, 7, 7, 7, 5), 1, 0, 4096).tolist()
    ds = StreamingShards(copies, seed=1, on_error="skip")
    ds.reset_state()
    try:
        got = [int(d["cls"]) for d in ds]
        assert got == [i for i in order if not 15 <= i < 21]  # each lost sample alone
        assert ds.state_dict()["errors"]["skipped"] == 6
    finally:
        ds.close()
