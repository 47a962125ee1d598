"""Interop with the real ``webdataset`` package, both ways; plain tars without our index."""

from __future__ import annotations

import gc
import os
import warnings

import pytest

from dataflow import DataFromList
from dataflow.streaming.source import StreamingShards
from dataflow.streaming.writer import TarShardSerializer
from tests.streaming._shards import write_shards

# webdataset imports PyTorch: the module is imported in the tests (see tests/conftest.py)
pytestmark = pytest.mark.loads_frameworks


def _wds():
    return pytest.importorskip("webdataset")


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
        got = list(_wds().WebDataset(paths, shardshuffle=False))
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
        with _wds().TarWriter(url) as w:
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


def test_webdataset_reads_the_shards_a_refused_save_left(tmp_path):
    # two datapoints of one key are refused before they reach a shard (webdataset would stop
    # at them with "duplicate file name in tar file"); the shards finished before stay readable
    dps = [{"__key__": k, "cls": i} for i, k in enumerate(["a", "b", "c", "d", "e", "a"])]
    with pytest.raises(ValueError, match="datapoint 5 has the key 'a', as datapoint 0 had"):
        TarShardSerializer.save(DataFromList(dps, shuffle=False), tmp_path / "t-%d.tar",
                                max_count=2, progress=False)
    paths = [str(tmp_path / "t-0.tar"), str(tmp_path / "t-1.tar")]
    assert sorted(os.listdir(tmp_path)) == ["t-0.tar", "t-0.tar.idx.json", "t-1.tar",
                                            "t-1.tar.idx.json"]
    got = _read_webdataset(paths)
    assert [(d["__key__"], d["cls"]) for d in got] == [("a", b"0"), ("b", b"1"), ("c", b"2"),
                                                        ("d", b"3")]
