"""The shard index: where each sample of a tar shard lies, its sample count and its sha256.

The index of ``train-000000.tar`` is the JSON file ``train-000000.tar.idx.json`` next to it::

    {"format": "dataflow.tar-index", "version": 1,
     "size": 10240,                      # bytes of the shard
     "sha256": "9f86d0...",              # of the whole shard
     "samples": [["key0", 0, 2048], ...],          # key, first header offset, end offset
     "members": [["key0.jpg", 512, 1000], ...]}    # name, data offset, size

:class:`~dataflow.streaming.writer.TarShardSerializer` writes it with every shard; for a plain
WebDataset tar without one, :func:`build_index` makes it by reading the shard once (the streaming
source does so on the fly; ``python -m dataflow index-shards URL...`` writes it next to local
shards). A sample's ``[start, end)`` byte range is a valid tar stream of its members alone, so
a reader can range-read exactly the samples it needs.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from dataflow.errors import CorruptFileError
from dataflow.serialize._atomic_write import atomic_output
from dataflow.streaming.tar import iter_members, split_key

__all__ = ["INDEX_SUFFIX", "ShardIndex", "build_index", "index_url", "member_field", "read_index",
           "truncated_error", "write_index"]

INDEX_SUFFIX = ".idx.json"
_FORMAT = "dataflow.tar-index"
_VERSION = 1


def index_url(url: str) -> str:
    """Where the index of shard ``url`` lives."""
    return url + INDEX_SUFFIX


def member_field(name: str, key0: str, url: str, offset: int) -> str:
    """The field of member ``name`` of sample ``key0``; a member of another key means the
    index no longer describes the shard."""
    key, field = split_key(name)
    if key != key0:
        raise CorruptFileError(
            f"tar shard {url}: member {name!r} at byte {offset} is not part of sample "
            f"{key0!r} that its index puts there; the index is stale: rebuild it "
            "(python -m dataflow index-shards)."
        )
    return field


def truncated_error(url: str, key: str, end: int) -> CorruptFileError:
    """The error for shard ``url`` ending before the end (byte ``end``) of sample ``key``."""
    return CorruptFileError(f"tar shard {url} ended before the end of sample {key!r} "
                            f"(byte {end}): truncated")


@dataclass
class ShardIndex:
    """The index of one shard (see the module docstring for the JSON layout)."""

    size: int
    sha256: str
    samples: list[tuple[str, int, int]] = field(default_factory=list)
    members: list[tuple[str, int, int]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.samples)

    def to_json(self) -> str:
        return json.dumps({
            "format": _FORMAT, "version": _VERSION, "size": self.size, "sha256": self.sha256,
            "samples": [list(s) for s in self.samples],
            "members": [list(m) for m in self.members],
        }, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes, source: str = "<index>") -> ShardIndex:
        try:
            d = json.loads(text)
            if d.get("format") != _FORMAT or d.get("version") != _VERSION:
                raise ValueError(f"format {d.get('format')!r} version {d.get('version')!r}")
            return cls(int(d["size"]), str(d["sha256"]),
                       [(str(k), int(a), int(b)) for k, a, b in d["samples"]],
                       [(str(n), int(a), int(b)) for n, a, b in d.get("members", [])])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptFileError(
                f"shard index {source} is not a {_FORMAT} v{_VERSION} file ({e}); delete it "
                "and rebuild it with `python -m dataflow index-shards SHARD`."
            ) from e


class _Hashing:
    """A read-through wrapper that hashes and counts every byte read."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.hash = hashlib.sha256()
        self.count = 0

    def read(self, n: int = -1) -> bytes:
        data = self.stream.read(n)
        self.hash.update(data)
        self.count += len(data)
        return bytes(data)


def build_index(stream: Any, source: str = "<stream>") -> ShardIndex:
    """Index a whole tar shard read from ``stream`` (once, front to back)."""
    h = _Hashing(stream)
    index = ShardIndex(0, "")
    current: list[Any] | None = None
    for m in iter_members(h, source):
        key, _ = split_key(m.name)
        index.members.append((m.name, m.data_offset, len(m.data)))
        if current is not None and current[0] == key:
            current[2] = m.end
        else:
            if current is not None:
                index.samples.append((current[0], current[1], current[2]))
            current = [key, m.header_offset, m.end]
    if current is not None:
        index.samples.append((current[0], current[1], current[2]))
    while h.read(1 << 20):  # the end-of-archive blocks and padding count in size and sha256
        pass
    index.size, index.sha256 = h.count, h.hash.hexdigest()
    return index


def write_index(path: str, index: ShardIndex) -> None:
    """Write ``index`` to ``path`` atomically."""
    with atomic_output(path, "shard index", True) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(index.to_json())


def read_index(path: str) -> ShardIndex:
    with open(path, "rb") as f:
        return ShardIndex.from_json(f.read(), path)


def index_local_shards(paths: list[str]) -> Iterator[tuple[str, ShardIndex]]:
    """Build and write the index of each local shard (the ``index-shards`` command)."""
    for p in paths:
        path = p[len("file://"):] if p.startswith("file://") else p
        if not os.path.isfile(path):
            raise FileNotFoundError(f"index-shards: shard {p!r} does not exist; check the path.")
        with open(path, "rb") as f:
            index = build_index(f, path)
        write_index(index_url(path), index)
        yield path, index
