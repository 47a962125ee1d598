"""The shard cache: one download per shard per node, readers of a growing file, LRU eviction,
and a limit never exceeded, across real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dataflow.streaming.cache import ShardCache
from dataflow.streaming.fetch import ShardFetcher
from tests.streaming.conftest import make_bytes
from tests.streaming.servers import FaultProxy, RangeHTTPServer


@pytest.fixture(scope="module")
def many_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("many")
    for i in range(6):
        (d / f"s{i}.bin").write_bytes(make_bytes(100_000 + i, 10 + i))
    return d


@pytest.fixture
def many_proxy(many_files):
    with RangeHTTPServer(str(many_files)) as server, FaultProxy(server.port) as proxy:
        yield proxy


def _cached_files(cache_dir) -> list[str]:
    return sorted(n for n in os.listdir(cache_dir) if n.endswith(".data"))


def test_second_open_is_a_hit_and_downloads_nothing(http_proxy, data_dir, tmp_path):
    url = f"{http_proxy.url}/a.bin"
    expected = (data_dir / "a.bin").read_bytes()
    with ShardFetcher(cache_dir=str(tmp_path / "c")) as f:
        with f.open(url) as s:
            assert s.read() == expected
        with f.open(url, 5, 1000) as s:
            assert s.read() == expected[5:1000]
        stats = f.stats()
    assert (stats["cache_misses"], stats["cache_hits"]) == (1, 1)
    assert http_proxy.body_bytes == len(expected)
    assert len(_cached_files(tmp_path / "c")) == 1
    with ShardFetcher(cache_dir=str(tmp_path / "c")) as f2, f2.open(url, 3_000_000) as s:
        assert s.read() == expected[3_000_000:]
    assert http_proxy.body_bytes == len(expected)


def test_lru_eviction_keeps_the_limit(many_proxy, many_files, tmp_path):
    cache_dir = tmp_path / "c"
    limit = 350_000  # three files fit
    with ShardFetcher(cache_dir=str(cache_dir), cache_limit=limit) as f:
        for i in [0, 1, 2, 0, 3, 4]:  # 0 is used again before 3 comes: 1 goes first
            with f.open(f"{many_proxy.url}/s{i}.bin") as s:
                assert s.read() == (many_files / f"s{i}.bin").read_bytes()
            assert ShardCache(cache_dir).usage() <= limit
        assert f.stats()["cache_hits"] == 1
    names = [n.split("-", 1)[1] for n in _cached_files(cache_dir)]
    assert sorted(names) == ["s0.bin.data", "s3.bin.data", "s4.bin.data"]


def test_a_shard_larger_than_the_limit_is_read_uncached(many_proxy, many_files, tmp_path):
    with ShardFetcher(cache_dir=str(tmp_path / "c"), cache_limit=50_000) as f:
        with f.open(f"{many_proxy.url}/s1.bin") as s:
            assert s.read() == (many_files / "s1.bin").read_bytes()
        assert f.stats()["cache_misses"] == 1
    assert _cached_files(tmp_path / "c") == []


def _run_readers(url, cache_dir, limit, orders, data_dir) -> list[dict]:
    """Run one reader process per order at once; their JSON reports."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.path.join(root, "src")])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.streaming._cache_reader", url, cache_dir,
             str(limit).lower(), str(data_dir), ",".join(map(str, o))],
            stdout=subprocess.PIPE, env=env, cwd=root,
        )
        for o in orders
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * len(procs)
    return [json.loads(o) for o in outs]


def test_processes_share_one_download_per_shard(many_proxy, many_files, tmp_path):
    expected = [(many_files / f"s{i}.bin").read_bytes() for i in range(6)]
    orders = [[0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0], [2, 3, 0, 1, 5, 4]]
    results = _run_readers(f"{many_proxy.url}/s{{}}.bin", str(tmp_path / "c"), None,
                           orders, many_files)
    assert [r["ok"] for r in results] == [True, True, True]
    assert many_proxy.body_bytes == sum(map(len, expected))  # each shard downloaded once


@pytest.mark.slow
def test_limit_holds_across_processes(many_proxy, many_files, tmp_path):
    limit = 250_000  # two files fit
    orders = [[0, 1, 2, 3, 4, 5, 0, 1], [5, 4, 3, 2, 1, 0, 5], [2, 3, 0, 1, 5, 4, 2]]
    results = _run_readers(f"{many_proxy.url}/s{{}}.bin", str(tmp_path / "c"), limit,
                           orders, many_files)
    assert [r["ok"] for r in results] == [True, True, True]
    assert max(r["most"] for r in results) <= limit
    assert ShardCache(tmp_path / "c").usage() <= limit


@pytest.mark.slow
def test_memory_and_cache_stay_bounded_over_ten_epochs(tmp_path):
    """A dataset larger than the cache, read for 10 epochs: RSS grows by at most the prefetch
    budget plus 64 MB, and the cache never holds more than its limit."""
    import psutil

    src = tmp_path / "src"
    src.mkdir()
    sizes = [1_000_000 + 1000 * i for i in range(12)]
    for i, n in enumerate(sizes):
        (src / f"s{i}.bin").write_bytes(make_bytes(n, 100 + i))
    digests = [hash((src / f"s{i}.bin").read_bytes()) for i in range(len(sizes))]
    budget, limit = 2 << 20, 4_000_000  # the cache holds 3 of the 12 shards
    proc = psutil.Process()
    with RangeHTTPServer(str(src)) as server, ShardFetcher(
        prefetch_bytes=budget, cache_dir=str(tmp_path / "c"), cache_limit=limit,
    ) as f:
        urls = [f"{server.url}/s{i}.bin" for i in range(len(sizes))]
        baseline = None
        growth = []
        for epoch in range(10):
            order = urls[epoch % 3:] + urls[:epoch % 3]
            f.prefetch([(u, 0, None) for u in order])
            for u in order:
                with f.open(u) as s:
                    assert hash(s.read()) == digests[urls.index(u)]
                assert ShardCache(tmp_path / "c").usage() <= limit
            rss = proc.memory_info().rss
            baseline = rss if baseline is None else baseline
            growth.append(rss - baseline)
        assert f.stats()["bytes_in_flight"] == 0
    assert max(growth) <= budget + (64 << 20)
