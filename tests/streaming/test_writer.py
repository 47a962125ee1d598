"""TarShardSerializer: shard limits, atomic writes, clear errors, load."""

from __future__ import annotations

import os
import re
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


# ---- keys are unique -----------------------------------------------------------------------

def _duplicate_message(key, earlier, earlier_path, number, path):
    return re.escape(
        f"TarShardSerializer.save: datapoint {number} has the key {key!r}, as datapoint "
        f"{earlier} had (datapoint {earlier} is in shard {earlier_path!r}, datapoint {number} "
        f"would be in {path!r}). Keys must be unique: samples of one key give tar members of "
        "the same names, which the webdataset package refuses ('duplicate file name in tar "
        "file') and which no reader can tell apart. Give every datapoint its own '__key__' (or "
        "leave it out: the datapoint's number is used).")


def _keyed(keys):
    return DataFromList([{"__key__": k, "cls": i} for i, k in enumerate(keys)], shuffle=False)


def test_a_repeated_key_in_one_shard_is_refused_and_nothing_is_left(tmp_path):
    p0 = str(tmp_path / "t-0000.tar")
    with pytest.raises(ValueError, match=f"^{_duplicate_message('a', 0, p0, 3, p0)}$"):
        TarShardSerializer.save(_keyed(["a", "b", "c", "a"]), tmp_path / "t-%04d.tar",
                                progress=False)
    assert os.listdir(tmp_path) == []  # the shard being written is removed, temporary file too


def test_a_repeated_key_across_shards_is_refused(tmp_path):
    p = [str(tmp_path / f"t-{i:04d}.tar") for i in range(4)]
    with pytest.raises(ValueError, match=f"^{_duplicate_message('s1', 1, p[0], 5, p[2])}$"):
        TarShardSerializer.save(_keyed(["s0", "s1", "s2", "s3", "s4", "s1"]),
                                tmp_path / "t-%04d.tar", max_count=2, progress=False)
    # the finished shards stay, whole, with their indexes; the one being written is gone
    assert sorted(os.listdir(tmp_path)) == ["t-0000.tar", "t-0000.tar.idx.json", "t-0001.tar",
                                            "t-0001.tar.idx.json"]
    assert [s[0] for s in read_index(index_url(p[1])).samples] == ["s2", "s3"]
    # the repeat falls on a shard's first sample: the shard it would open is named
    with pytest.raises(ValueError, match=f"^{_duplicate_message('s0', 0, p[0], 2, p[1])}$"):
        TarShardSerializer.save(_keyed(["s0", "s1", "s0"]), tmp_path / "t-%04d.tar",
                                max_count=2, progress=False)
    # a datapoint without a key is named by its number, which a given key may repeat
    dps = [{"cls": 0}, {"__key__": "000000000", "cls": 1}]
    with pytest.raises(ValueError, match=f"^{_duplicate_message('000000000', 0, p[0], 1, p[0])}$"):
        TarShardSerializer.save(DataFromList(dps, shuffle=False), tmp_path / "t-%04d.tar",
                                progress=False)


def test_repeated_fields_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"^TarShardSerializer\.save: `fields` names 'jpg' more "
                                         r"than once: \('jpg', 'cls', 'jpg'\); give each "
                                         r"component its own field\.$"):
        TarShardSerializer.save(DataFromList([[b"", 1, b""]]), tmp_path / "t-%d.tar",
                                fields=("jpg", "cls", "jpg"), progress=False)
    assert os.listdir(tmp_path) == []


def test_key_table_grows_and_finds_every_key():
    from dataflow.streaming.writer import _KeyTable

    table = _KeyTable()
    keys = [f"dir{i % 7}/k{i}" for i in range(5000)]
    assert [table.add(k) for k in keys] == [True] * 5000
    assert len(table._slots) == 16384  # doubled while more than half full
    assert [table.add(k) for k in keys[::-1]] == [False] * 5000
    assert table.add("dir0/k5000") is True


def test_the_progress_bar_names_the_shard_being_written(tmp_path, capsys):
    TarShardSerializer.save(DataFromList(samples(10), shuffle=False), tmp_path / "t-%04d.tar",
                            max_count=4, progress=True)
    shown = re.findall(r"tar (t-\d{4}\.tar)", capsys.readouterr().err)
    assert [s for i, s in enumerate(shown) if i == 0 or shown[i - 1] != s] == [
        "t-0000.tar", "t-0001.tar", "t-0002.tar"]
