"""Memory and cache stay bounded over many epochs of StreamingShards on a dataset larger than
the cache (shards served over HTTP on loopback)."""

from __future__ import annotations

import os

import psutil
import pytest

from dataflow import DataFromList
from dataflow.streaming.cache import ShardCache
from dataflow.streaming.source import StreamingShards
from dataflow.streaming.writer import TarShardSerializer
from tests.streaming.conftest import make_bytes
from tests.streaming.servers import RangeHTTPServer


@pytest.mark.slow
def test_ten_epochs_bounded_rss_and_cache(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    n, per_shard = 240, 20  # 12 shards of about 1 MB
    ds = DataFromList([{"__key__": f"s{i:05d}", "cls": i, "bin": make_bytes(50_000, i)}
                       for i in range(n)], shuffle=False)
    paths = TarShardSerializer.save(ds, f"{src}/t-%04d.tar", max_count=per_shard,
                                    progress=False)
    assert len(paths) == 12
    shard_bytes = sum(os.path.getsize(p) for p in paths)
    budget, limit = 2 << 20, 4_000_000
    assert shard_bytes > 2 * limit  # the dataset does not fit in the cache
    cache_dir = tmp_path / "cache"
    proc = psutil.Process()
    with RangeHTTPServer(str(src)) as server:
        stream = StreamingShards(f"{server.url}/t-{{0000..0011}}.tar", seed=3,
                                 prefetch_bytes=budget, cache_dir=str(cache_dir),
                                 cache_limit=limit)
        stream.reset_state()
        baseline = None
        growth, most = [], 0
        try:
            for _ in range(10):
                keys = []
                for j, dp in enumerate(stream):
                    keys.append(dp["__key__"])
                    assert dp["bin"] == make_bytes(50_000, int(dp["cls"]))
                    if j % 20 == 0:
                        most = max(most, ShardCache(cache_dir).usage())
                assert sorted(keys) == [f"s{i:05d}" for i in range(n)]
                rss = proc.memory_info().rss
                baseline = rss if baseline is None else baseline
                growth.append(rss - baseline)
        finally:
            stream.close()
    assert most <= limit
    assert ShardCache(cache_dir).usage() <= limit
    assert max(growth) <= budget + (64 << 20)
