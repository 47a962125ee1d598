"""TarShardSerializer: shard limits, atomic writes, clear errors, load."""

from __future__ import annotations

import os
import tarfile

import numpy as np
import pytest

from dataflow import DataFromGenerator, DataFromList
from dataflow.streaming.index import index_url, read_index
from dataflow.streaming.writer import TarShardSerializer
from tests.streaming._shards import samples, write_shards


def test_max_count_and_index_per_shard(tmp_path):
    paths = write_shards(tmp_path, 10, 4)
    assert [os.path.basename(p) for p in paths] == ["t-0000.tar", "t-0001.tar", "t-0002.tar"]
    assert [len(read_index(index_url(p))) for p in paths] == [4, 4, 2]
    with tarfile.open(paths[2]) as tf:
        assert tf.getnames() == ["s00008.cls", "s00008.txt", "s00009.cls", "s00009.txt"]
        assert tf.extractfile("s00009.txt").read() == b"ttttttttt"


def test_max_bytes_never_splits_a_sample(tmp_path):
    dps = [{"__key__": f"k{i}", "bin": bytes(1000)} for i in range(6)]
    paths = TarShardSerializer.save(DataFromList(dps, shuffle=False), tmp_path / "b-%d.tar",
                                    max_bytes=4096, progress=False)
    # a sample is 512 + 1024 bytes; with the 1024 end blocks two fit in 4096
    assert [len(read_index(index_url(p))) for p in paths] == [2, 2, 2]
    assert all(os.path.getsize(p) <= 4096 for p in paths)


def test_lists_with_fields_and_encodings(tmp_path):
    dps = [[np.arange(3, dtype=np.int16), {"a": 1}, "hi", 5]]
    (p,) = TarShardSerializer.save(DataFromList(dps, shuffle=False), tmp_path / "f-%d.tar",
                                   fields=("npy", "json", "txt", "cls"), progress=False)
    ds = TarShardSerializer.load(tmp_path / "f-%d.tar", decode="auto")
    ds.reset_state()
    (got,) = list(ds)
    ds.close()
    assert got["npy"].tolist() == [0, 1, 2] and got["npy"].dtype == np.int16
    assert (got["json"], got["txt"], got["cls"], got["__key__"]) == ({"a": 1}, "hi", 5,
                                                                      "000000000")
    assert got["__url__"] == p


def test_failed_save_leaves_nothing(tmp_path):
    def gen():
        yield from samples(3)
        raise RuntimeError("source broke")
    with pytest.raises(RuntimeError, match="source broke"):
        TarShardSerializer.save(DataFromGenerator(gen), tmp_path / "x-%d.tar", progress=False)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"pattern": "out.tar"}, "placeholder such as %06d"),
    ({"max_count": 0}, "`max_count` must be a positive int, got 0"),
])
def test_bad_arguments(tmp_path, kwargs, match):
    pattern = str(tmp_path / kwargs.pop("pattern", "o-%d.tar"))
    with pytest.raises(ValueError, match=match):
        TarShardSerializer.save(DataFromList(samples(1)), pattern, progress=False, **kwargs)


def test_bad_datapoints(tmp_path):
    with pytest.raises(TypeError, match="datapoint 0 is a int"):
        TarShardSerializer.save(DataFromList([1]), tmp_path / "a-%d.tar", progress=False)
    with pytest.raises(ValueError, match=r"key 'a\.b' of datapoint 0 has a dot"):
        TarShardSerializer.save(DataFromList([{"__key__": "a.b", "x": b""}]),
                                tmp_path / "a-%d.tar", progress=False)
    with pytest.raises(TypeError, match="field 'x': cannot store a float"):
        TarShardSerializer.save(DataFromList([{"x": 1.5}]), tmp_path / "a-%d.tar",
                                progress=False)


def test_exported_at_the_top_and_by_the_streaming_package():
    import dataflow
    import dataflow.serialize
    import dataflow.streaming

    assert dataflow.TarShardSerializer is TarShardSerializer
    assert dataflow.streaming.TarShardSerializer is TarShardSerializer
    # the file formats' layer sits below streaming and does not reach up to it
    with pytest.raises(AttributeError, match=r"use dataflow\.TarShardSerializer or dataflow\."
                                             r"streaming\.TarShardSerializer"):
        _ = dataflow.serialize.TarShardSerializer
