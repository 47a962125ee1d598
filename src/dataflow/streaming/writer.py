"""``TarShardSerializer``: a DataFlow saved as WebDataset tar shards with their indexes.

::

    TarShardSerializer.save(ds, "out/train-%06d.tar", max_count=10000, max_bytes=256 << 20)
    ds = TarShardSerializer.load("out/train-{000000..000003}.tar")

A datapoint is a dict ``{"__key__": key, field: value, ...}`` (without ``__key__`` the key is
the datapoint's number, ``%09d``), or a list/tuple with ``fields=("jpg", "cls")`` naming its
components. Values are stored by :func:`~dataflow.streaming.decoders.encode_field` (bytes as
they are; str, int, and json/npy/msgpack/image fields encoded). Each member is a plain ustar
file, so the ``webdataset`` package and ``tar`` read the shards.

A shard is closed when it holds ``max_count`` samples or its size would pass ``max_bytes``
(a sample is never split; one sample larger than ``max_bytes`` gets a shard of its own). Every
shard and its index (``.idx.json``, see :mod:`dataflow.streaming.index`) are written atomically:
a temporary file renamed on success.

Keys are unique across a save: a key met again (in the same shard or another) raises a
``ValueError`` naming the key and both datapoints, as two samples of one key would give tar
members of the same names (which the ``webdataset`` package refuses: "duplicate file name in
tar file") and samples that no reader can tell apart. The shard being written is then removed;
the shards finished before stay. The keys seen are kept as 64-bit hashes (about 16 bytes a
sample, :class:`_KeyTable`).

The progress bar names the shard being written.
"""

from __future__ import annotations

import array
import hashlib
import os
from collections.abc import Sequence
from typing import Any

from dataflow.serialize._atomic import begin_save
from dataflow.serialize._atomic_write import atomic_output, check_output
from dataflow.streaming.decoders import encode_field
from dataflow.streaming.index import ShardIndex, index_url, read_index, write_index
from dataflow.streaming.tar import BLOCK, tar_header

__all__ = ["TarShardSerializer"]

_WHAT = "TarShardSerializer.save"


def _check_pattern(pattern: str) -> str:
    try:
        pattern % 0
    except TypeError:
        raise ValueError(
            f"{_WHAT}: `pattern` must hold one integer placeholder such as %06d, got "
            f"{pattern!r}; e.g. 'out/train-%06d.tar'."
        ) from None
    if pattern % 0 == pattern % 1:
        raise ValueError(f"{_WHAT}: `pattern` {pattern!r} names the same file for every shard; "
                         "put a placeholder such as %06d in it.")
    return pattern


class _KeyTable:
    """The keys written so far, as a set of 64-bit hashes (blake2b of the key) in an open
    addressing table of 8-byte slots, at most half full: about 16 bytes a key, whatever the
    keys' lengths. :meth:`add` says whether a key's hash was met before; two different keys
    may share a hash (about once in 2**64 pairs), so a hit is confirmed on the keys themselves
    (in the indexes) before it is reported."""

    def __init__(self) -> None:
        self._slots = array.array("Q", bytes(8 * 1024))  # 0: an empty slot
        self._count = 0

    @staticmethod
    def _hash(key: str) -> int:
        digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        return int.from_bytes(digest, "little") or 1  # 0 marks empty slots

    def _insert(self, h: int) -> bool:
        slots = self._slots
        mask = len(slots) - 1
        i = h & mask
        while True:
            v = slots[i]
            if v == h:
                return False
            if v == 0:
                slots[i] = h
                return True
            i = (i + 1) & mask

    def add(self, key: str) -> bool:
        """Record ``key``; False if its hash was already there."""
        if not self._insert(self._hash(key)):
            return False
        self._count += 1
        if 2 * self._count > len(self._slots):
            old = self._slots
            self._slots = array.array("Q", bytes(16 * len(old)))
            for h in old:
                if h:
                    self._insert(h)
        return True


def _members(dp: Any, number: int, fields: Sequence[str] | None
             ) -> tuple[str, list[tuple[str, bytes]]]:
    if isinstance(dp, dict):
        key = str(dp.get("__key__", f"{number:09d}"))
        items = [(k, v) for k, v in dp.items() if not k.startswith("__")]
    elif isinstance(dp, list | tuple) and fields is not None:
        if len(dp) != len(fields):
            raise ValueError(f"{_WHAT}: datapoint {number} has {len(dp)} components but "
                             f"`fields` names {len(fields)}: {tuple(fields)!r}")
        key = f"{number:09d}"
        items = list(zip(fields, dp, strict=True))
    else:
        raise TypeError(
            f"{_WHAT}: datapoint {number} is a {type(dp).__name__}; give dicts "
            "{'__key__': key, 'jpg': ..., 'cls': ...}, or lists with fields=('jpg', 'cls')."
        )
    if "." in key.rsplit("/", 1)[-1]:
        raise ValueError(f"{_WHAT}: key {key!r} of datapoint {number} has a dot in its last "
                         "component; WebDataset keys end at the first dot, remove it.")
    return key, [(f"{key}.{field}", encode_field(field, value)) for field, value in items]


class _ShardWriter:
    """One shard being written to a temporary file, with its index."""

    def __init__(self, path: str, overwrite: bool) -> None:
        self.path = path
        self._ctx = atomic_output(path, _WHAT, overwrite)
        self._file = open(self._ctx.__enter__(), "wb")  # noqa: SIM115 (closed in finish/abort)
        self.hash = hashlib.sha256()
        self.index = ShardIndex(0, "")

    def _write(self, data: bytes) -> None:
        self._file.write(data)
        self.hash.update(data)
        self.index.size += len(data)

    def add(self, key: str, members: list[tuple[str, bytes]]) -> None:
        start = self.index.size
        for name, data in members:
            self._write(tar_header(name, len(data)))
            self.index.members.append((name, self.index.size, len(data)))
            self._write(data + b"\0" * (-len(data) % BLOCK))
        self.index.samples.append((key, start, self.index.size))

    def finish(self) -> ShardIndex:
        self._write(b"\0" * (2 * BLOCK))
        self.index.sha256 = self.hash.hexdigest()
        self._file.close()
        self._ctx.__exit__(None, None, None)
        write_index(index_url(self.path), self.index)
        return self.index

    def abort(self, exc: BaseException) -> None:
        self._file.close()
        self._ctx.__exit__(type(exc), exc, exc.__traceback__)


def _earlier(key: str, finished: list[tuple[str, int]], writer: _ShardWriter | None
             ) -> tuple[int, str] | None:
    """``(datapoint number, shard path)`` of the sample of ``key`` written before, looked up
    in the indexes of the ``finished`` shards (``(path, samples)``, read back from disk) and
    of the shard being written; None if there is none (a hash shared by two keys)."""
    number = 0
    for path, count in finished:
        for j, sample in enumerate(read_index(index_url(path)).samples):
            if sample[0] == key:
                return number + j, path
        number += count
    if writer is not None:
        for j, sample in enumerate(writer.index.samples):
            if sample[0] == key:
                return number + j, writer.path
    return None


def _duplicate(key: str, number: int, earlier: tuple[int, str], path: str) -> ValueError:
    return ValueError(
        f"{_WHAT}: datapoint {number} has the key {key!r}, as datapoint {earlier[0]} had "
        f"(datapoint {earlier[0]} is in shard {earlier[1]!r}, datapoint {number} would be in "
        f"{path!r}). Keys must be unique: "
        "samples of one key give tar members of the same names, which the webdataset package "
        "refuses ('duplicate file name in tar file') and which no reader can tell apart. "
        "Give every datapoint its own '__key__' (or leave it out: the datapoint's number is "
        "used)."
    )


class TarShardSerializer:
    """Save a DataFlow as WebDataset tar shards / stream them back."""

    @staticmethod
    def save(df: Any, pattern: str | os.PathLike, *, max_count: int = 10000,
             max_bytes: int | None = None, fields: Sequence[str] | None = None,
             overwrite: bool = True, progress: bool = True) -> list[str]:
        """Write one epoch of ``df`` (after ``df.reset_state()``) into shards named
        ``pattern % 0``, ``pattern % 1``, ...; returns their paths."""
        pattern = _check_pattern(os.fspath(pattern))
        for name, value in (("max_count", max_count), ("max_bytes", max_bytes)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ValueError(f"{_WHAT}: `{name}` must be a positive int, got {value!r}")
        if fields is not None:
            repeated = sorted({f for f in fields if list(fields).count(f) > 1})
            if repeated:
                raise ValueError(f"{_WHAT}: `fields` names {repeated[0]!r} more than once: "
                                 f"{tuple(fields)!r}; give each component its own field.")
        _, meter = begin_save(df, pattern % 0, _WHAT, "tar", overwrite, progress, check_output)
        paths: list[str] = []
        finished: list[tuple[str, int]] = []  # (path, samples) of the shards written
        keys = _KeyTable()
        writer: _ShardWriter | None = None
        try:
            for number, dp in enumerate(df):
                key, members = _members(dp, number, fields)
                nbytes = sum(BLOCK + len(d) + (-len(d) % BLOCK) for _, d in members)
                full = writer is not None and (
                    len(writer.index) >= max_count
                    or (max_bytes is not None
                        and writer.index.size + nbytes + 2 * BLOCK > max_bytes))
                if not keys.add(key):
                    earlier = _earlier(key, finished, writer)
                    if earlier is not None:
                        target = pattern % len(paths) if writer is None or full else writer.path
                        raise _duplicate(key, number, earlier, target)
                if writer is not None and full:
                    writer.finish()
                    finished.append((writer.path, len(writer.index)))
                    writer = None
                if writer is None:
                    writer = _ShardWriter(check_output(pattern % len(paths), _WHAT, overwrite),
                                          overwrite)
                    paths.append(writer.path)
                    if meter.bar is not None:  # the bar names the shard being written
                        meter.bar.set_description_str(f"tar {os.path.basename(writer.path)}")
                writer.add(key, members)
                meter.update(1, nbytes)
            if writer is not None:
                writer.finish()
                writer = None
        except BaseException as e:
            if writer is not None:
                writer.abort(e)
            raise
        finally:
            meter.close()
        return paths

    @staticmethod
    def load(urls: Any, shuffle: bool = False, *, seed: int = 0, **kwargs: Any) -> Any:
        """A :class:`~dataflow.streaming.source.StreamingShards` over ``urls`` (a list, a
        brace pattern, or the ``%06d`` pattern of the save: its existing shards)."""
        if isinstance(urls, str | os.PathLike) and "%" in os.fspath(urls):
            pattern = os.fspath(urls)
            found: list[str] = []
            while os.path.exists(pattern % len(found)):
                found.append(pattern % len(found))
            if not found:
                raise FileNotFoundError(f"TarShardSerializer.load: no shard {pattern % 0!r}")
            urls = found
        from dataflow.streaming.source import StreamingShards
        return StreamingShards(urls, shuffle=shuffle, seed=seed, **kwargs)
