"""Shard-writing helpers shared by the streaming format tests."""

from __future__ import annotations

from dataflow import DataFromList
from dataflow.streaming.writer import TarShardSerializer


def samples(n: int, start: int = 0) -> list[dict]:
    """``n`` samples: key ``s%05d``, ``cls`` its number, ``txt`` of varying length."""
    return [{"__key__": f"s{i:05d}", "cls": i, "txt": "t" * (i % 13)}
            for i in range(start, start + n)]


def write_shards(directory, n: int, per_shard: int, name: str = "t") -> list[str]:
    ds = DataFromList(samples(n), shuffle=False)
    return TarShardSerializer.save(ds, f"{directory}/{name}-%04d.tar", max_count=per_shard,
                                   progress=False)
