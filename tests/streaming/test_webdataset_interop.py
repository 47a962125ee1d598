"""Interop with the real ``webdataset`` package, both ways; plain tars without our index."""

from __future__ import annotations

import gc
import os
import warnings

import pytest

from dataflow.streaming.source import StreamingShards
from tests.streaming._shards import write_shards

wds = pytest.importorskip("webdataset")


def _read_ours(urls, **kwargs):
    ds = StreamingShards(urls, **kwargs)
    try:
        ds.reset_state()
        return list(ds)
    finally:
        ds.close()


def _read_webdataset(paths):
    """All samples through webdataset (it leaves its shard files to the garbage collector:
    collected here, with their ResourceWarning, which is webdataset's, silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        got = list(wds.WebDataset(paths, shardshuffle=False))
        gc.collect()
    return got


def test_webdataset_reads_our_shards(tmp_path):
    paths = write_shards(tmp_path, 9, 4)
    got = _read_webdataset(paths)
    assert [(d["__key__"], d["cls"], d["txt"]) for d in got] == [
        (f"s{i:05d}", str(i).encode(), b"t" * i) for i in range(9)]


def test_we_read_webdataset_shards_without_index(tmp_path):
    urls = []
    for s in range(3):
        url = str(tmp_path / f"w-{s}.tar")
        with wds.TarWriter(url) as w:
            for i in range(5):
                w.write({"__key__": f"k{s}_{i}", "cls": i, "seg.png": b"P" * i,
                         "json": {"i": i}})
        urls.append(url)
    assert not any(os.path.exists(u + ".idx.json") for u in urls)
    got = _read_ours(str(tmp_path / "w-{0..2}.tar"), shuffle=False, decode={"cls": "auto"})
    assert [(d["__key__"], d["cls"], d["seg.png"]) for d in got] == [
        (f"k{s}_{i}", i, b"P" * i) for s in range(3) for i in range(5)]
    assert got[0]["json"] == b'{"i": 0}'
    shuffled = _read_ours(urls, seed=3, window=6, world_size=2, rank=1)
    assert len(shuffled) == 7
