"""The shard index: offsets, counts and sha256, built on the fly and by the CLI."""

from __future__ import annotations

import hashlib
import io

import pytest

from dataflow.__main__ import main
from dataflow.errors import CorruptFileError
from dataflow.streaming.index import ShardIndex, build_index, index_url, read_index
from dataflow.streaming.tar import iter_samples
from tests.streaming._shards import write_shards


def test_written_index_matches_a_built_one(tmp_path):
    (path,) = write_shards(tmp_path, 5, 10)
    with open(path, "rb") as f:
        data = f.read()
    built = build_index(io.BytesIO(data), path)
    assert read_index(index_url(path)) == built
    assert built.size == len(data)
    assert built.sha256 == hashlib.sha256(data).hexdigest()
    assert [s[0] for s in built.samples] == [f"s{i:05d}" for i in range(5)]
    assert len(built.members) == 10
    _key, start, end = built.samples[3]
    assert list(iter_samples(io.BytesIO(data[start:end]), path, start, end)) == [
        {"__key__": "s00003", "cls": b"3", "txt": b"ttt"}]


def test_json_round_trip_and_bad_index():
    idx = ShardIndex(2048, "ab", [("k", 0, 1024)], [("k.x", 512, 3)])
    assert ShardIndex.from_json(idx.to_json()) == idx
    with pytest.raises(CorruptFileError, match=r"index x\.idx\.json is not a dataflow\.tar-index"):
        ShardIndex.from_json('{"format": "other"}', "x.idx.json")


def test_index_shards_command(tmp_path, capsys):
    paths = write_shards(tmp_path, 6, 3)
    for p in paths:
        (tmp_path / (p.rsplit("/", 1)[1] + ".idx.json")).unlink()
    assert main(["index-shards", *paths]) == 0
    assert [len(read_index(index_url(p))) for p in paths] == [3, 3]
    assert "3 samples" in capsys.readouterr().out
    assert main(["index-shards", str(tmp_path / "missing.tar")]) == 2
    assert "missing.tar' does not exist" in capsys.readouterr().err
