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
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Any

from dataflow.serialize._atomic import begin_save
from dataflow.serialize._atomic_write import atomic_output, check_output
from dataflow.streaming.decoders import encode_field
from dataflow.streaming.index import ShardIndex, index_url, write_index
from dataflow.streaming.tar import BLOCK, split_key, tar_header

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


def _members(dp: Any, number: int, fields: Sequence[str] | None) -> list[tuple[str, bytes]]:
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
    return [(f"{key}.{field}", encode_field(field, value)) for field, value in items]


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

    def add(self, members: list[tuple[str, bytes]]) -> None:
        start = self.index.size
        for name, data in members:
            self._write(tar_header(name, len(data)))
            self.index.members.append((name, self.index.size, len(data)))
            self._write(data + b"\0" * (-len(data) % BLOCK))
        key = split_key(members[0][0])[0] if members else ""
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
        _, meter = begin_save(df, pattern % 0, _WHAT, "tar", overwrite, progress, check_output)
        paths: list[str] = []
        writer: _ShardWriter | None = None
        try:
            for number, dp in enumerate(df):
                members = _members(dp, number, fields)
                nbytes = sum(BLOCK + len(d) + (-len(d) % BLOCK) for _, d in members)
                if writer is not None and (
                    len(writer.index) >= max_count
                    or (max_bytes is not None
                        and writer.index.size + nbytes + 2 * BLOCK > max_bytes)
                ):
                    writer.finish()
                    writer = None
                if writer is None:
                    writer = _ShardWriter(check_output(pattern % len(paths), _WHAT, overwrite),
                                          overwrite)
                    paths.append(writer.path)
                writer.add(members)
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
