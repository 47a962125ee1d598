"""``TarShardData``: the samples of local tar shards, read by position through their indexes.

::

    ds = TarShardData("/data/train-{0000..0127}.tar", decode={"jpg": "bytes", "cls": "auto"})
    len(ds), ds[12345]          # every sample of every shard; sample 12345 in shard order
    snap = SnapshotData(ds, "/snapshots", map_func=decode)
    svc = DataService(ds, augment)

The index of each shard (its ``.idx.json``, written by :class:`~dataflow.streaming.writer.
TarShardSerializer` or ``python -m dataflow index-shards``; else built by one scan of the shard
here) says where each sample's bytes lie, so ``ds[i]`` is one ``os.pread`` of that byte range
and a parse of its members. That makes the shards a source that a
:class:`~dataflow.snapshot.SnapshotData` and a :class:`~dataflow.service.DataService` read in
place, by position (the class says ``by_position = True``), each reader in its own process:
the files are opened at the first read, in the process that reads, and a pickled copy carries
the indexes, not the open files.

Where :class:`~dataflow.streaming.source.StreamingShards` serves ranks and object stores (its
``len()`` is a rank's share, its order a shuffled plan), ``TarShardData`` is the whole set in
shard order, local files only: ``len()`` is the number of samples of all shards, iteration
yields them in that order (``shuffle=True``: a permutation per epoch derived from ``seed``),
resumable through ``state_dict()``.
"""

from __future__ import annotations

import bisect
import contextlib
import operator
import os
from collections.abc import Iterator
from typing import Any

from dataflow.base import RNGDataFlow
from dataflow.errors import CorruptFileError
from dataflow.state import ReaderState
from dataflow.streaming.decoders import make_decoder
from dataflow.streaming.index import (
    ShardIndex,
    build_index,
    index_url,
    member_field,
    read_index,
    truncated_error,
)
from dataflow.streaming.tar import ByteReader, iter_members
from dataflow.streaming.urls import LOCAL, expand_urls, scheme_of, strip_file_scheme

__all__ = ["TarShardData"]


def _local_index(url: str, path: str) -> ShardIndex:
    """The index of the local shard ``path``: its ``.idx.json``, else one scan of the shard.
    An index whose size is not the shard's is refused (the shard changed since)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"TarShardData: shard {url!r} does not exist; check `urls`.")
    if os.path.isfile(index_url(path)):
        index = read_index(index_url(path))
    else:
        with open(path, "rb") as f:
            index = build_index(f, url)
    size = os.path.getsize(path)
    if index.size != size:
        raise CorruptFileError(
            f"TarShardData: the index {index_url(path)!r} is of a shard of {index.size} bytes, "
            f"but {url!r} has {size}: the shard changed since it was indexed. Rebuild the index "
            "(python -m dataflow index-shards SHARD).")
    return index


class TarShardData(ReaderState, RNGDataFlow):
    """The samples (dicts ``{"__key__", "__url__", field: bytes|decoded}``) of local tar
    shards with indexes, read by position: ``len()`` samples, ``ds[i]`` the ``i``-th in shard
    order. ``decode`` as :class:`~dataflow.streaming.source.StreamingShards` takes it."""

    #: read in place by position (``len()`` and ``[i]``): see ``dataflow.snapshot.source``
    by_position = True

    def __init__(self, urls: Any, *, decode: Any = None, shuffle: bool = False,
                 seed: int | None = None) -> None:
        self.urls = expand_urls(urls)
        if not self.urls:
            raise ValueError(f"`urls` names no shard: {urls!r}; pass a path, a brace pattern "
                             "(/data/train-{0000..0127}.tar) or a list of paths.")
        remote = [u for u in self.urls if scheme_of(u) != LOCAL]
        if remote:
            raise ValueError(
                f"`urls`: TarShardData reads local shards by position, got {remote[0]!r}; read "
                "remote shards with StreamingShards(urls, cache_dir=...), or copy them here.")
        self._paths = [strip_file_scheme(u) for u in self.urls]
        self._samples = [_local_index(u, p).samples for u, p in zip(self.urls, self._paths)]
        self._starts = [0]  # the position of each shard's first sample
        for samples in self._samples:
            self._starts.append(self._starts[-1] + len(samples))
        self.decode = decode
        self._decode = make_decoder(decode)
        self._files: dict[int, int] = {}  # shard -> descriptor, opened at its first read
        self._init_reader(shuffle, seed)

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, i: int) -> dict[str, Any]:
        """Sample ``i`` (``0 <= i < len(self)``, or negative from the end), read from its
        shard by one ``os.pread`` of the byte range its index gives."""
        n = len(self)
        try:
            i = operator.index(i)
        except TypeError:
            raise TypeError(f"TarShardData: an index must be an int, got {type(i).__name__} "
                            f"{i!r:.40}; pass an int in [0, {n}).") from None
        if not -n <= i < n:
            raise IndexError(f"TarShardData: index {i} is out of range for {n} samples; pass "
                             f"an int in [0, {n}).")
        i %= n
        s = bisect.bisect_right(self._starts, i) - 1
        url = self.urls[s]
        key, lo, hi = self._samples[s][i - self._starts[s]]
        fd = self._files.get(s)
        if fd is None:
            fd = self._files[s] = os.open(self._paths[s], os.O_RDONLY)
        data = os.pread(fd, hi - lo, lo)
        sample: dict[str, Any] = {"__key__": key, "__url__": url}
        end = lo
        for m in iter_members(ByteReader.of_bytes(data), url, lo, hi):
            sample[member_field(m.name, key, url, m.header_offset)] = m.data
            end = m.end
        if end < hi:
            raise truncated_error(url, key, hi)
        return self._decode(sample) if self._decode is not None else sample

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self._run(*self._begin_epoch())

    def _run(self, token: object, epoch: int, start: int) -> Iterator[dict[str, Any]]:
        with self._guard:
            n = len(self)
            order = (self._epoch_rng(epoch).permutation(n)[start:].tolist() if self._shuffle
                     else range(start, n))
            for self._pos, i in enumerate(order, start + 1):
                yield self[i]
            self._end(token)

    def close(self) -> None:
        """Close the shards' files (they open again at the next read). Idempotent."""
        files, self._files = self._files, {}
        for fd in files.values():
            os.close(fd)

    def __getstate__(self) -> dict[str, Any]:
        """A copy for another process: the indexes, without the open files (opened again
        there)."""
        return {**self.__dict__, "_files": {}}

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # (best effort, at interpreter exit too)
            self.close()
