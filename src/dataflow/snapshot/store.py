"""The on-disk store of one snapshot key: records by dataset index, written by many processes.

``root`` holds ``meta.json`` (what the snapshot is: its size, the format's and the library's
versions, the caller's ``meta``; written once, atomically) and shard files
(:mod:`dataflow.snapshot.shard`). Each process that stores records appends to shards of its
own (named from its pid and a random token); nothing is locked, so ranks, the data service's
workers and jobs fill one snapshot at once, and each reads what the others wrote
(:meth:`SnapshotStore.refresh`, which also runs on a miss, at most once a second).

Crash safety: a writer killed at any point leaves whole records and at most one torn record at
the end of its shard, which readers do not read; there are no lock files to go stale. Every
record carries CRC-32s of its header and payload: the first read of a record in a process checks
them (and its length), and a record that fails (flipped bits, a file cut short) is logged on the
``dataflow`` logger, counted in ``stats()["corrupted"]`` and forgotten, for the caller to
recompute. A full disk raises :class:`SnapshotFullError` (an ``OSError`` with ``errno.ENOSPC``
that names the path), or with ``on_full="read"`` warns once (:class:`SnapshotFullWarning`) and
stores nothing more; the record being written is cut off, so the snapshot stays valid.

Records are forgotten with a tombstone (:meth:`SnapshotStore.discard`, seen by every process),
or evicted (:meth:`SnapshotStore.evict`): the shards that held them are compacted
(:mod:`dataflow.snapshot.compaction`).

Reads are zero-copy: arrays come back as read-only views of the shard's memory map (aligned to
64 bytes), except for records compressed (``compression="lz4"`` or ``"zstd"``), whose payload is
decompressed into memory of its own first. A record that compression would not make at least
10% smaller is stored uncompressed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from dataflow.errors import DataFlowError
from dataflow.snapshot import codec
from dataflow.snapshot.compaction import CLAIMED, Compaction
from dataflow.snapshot.locations import Locations
from dataflow.snapshot.shard import (
    FORMAT_VERSION,
    HEADER,
    INDEX_SUFFIX,
    KIND_RECORD,
    KIND_TOMBSTONE,
    SUFFIX,
    Payload,
    ShardReader,
    ShardWriter,
    frame_tombstone,
    index_bytes,
    is_full_error,
    meta_dict,
    open_meta,
    shard_names,
)

__all__ = ["FORMAT_VERSION", "SnapshotFullError", "SnapshotFullWarning", "SnapshotStore"]

logger = logging.getLogger("dataflow")

#: a writer starts a new shard once its current one holds this many bytes
DEFAULT_SHARD_BYTES = 1 << 30
#: a miss looks for what other processes wrote at most this often (seconds)
MISS_REFRESH_S = 1.0
#: a listing of the folder is reused while its modification time stays what it was, if the
#: listing was made at least this long after that time (file systems' clocks are coarse)
MTIME_SLACK_NS = 1_000_000_000
_ALIGN = codec.ALIGN


class SnapshotFullError(DataFlowError, OSError):
    """The disk under a snapshot's path is full: nothing more can be stored there. It is an
    ``OSError`` with ``errno.ENOSPC`` (or ``EDQUOT``) and ``filename`` the snapshot's path."""


class SnapshotFullWarning(RuntimeWarning):
    """With ``on_full="read"``: the disk under a snapshot's path is full, so the snapshot reads
    what it holds and stores nothing more."""


class SnapshotStore(Compaction):
    """The records of one snapshot key, stored under ``root`` (a directory), one per index in
    ``range(size)``.

    ``get(i)`` is ``(True, value)`` for a stored record (``value`` may be None: a stored drop)
    and ``(False, None)`` otherwise; ``put(i, value, cost)`` stores a record once. ``cost``
    (seconds the value took to compute) is kept with the record. ``compression`` is None,
    ``"lz4"`` or ``"zstd"`` (the ``lz4`` / ``zstd`` extras). ``on_full`` is ``"raise"`` or
    ``"read"`` (see the module docstring). ``shard_bytes``: the size at which a writer starts
    a new shard. A store is picklable: the copy reopens ``root`` as a new writer (shards of its
    own). A process forked with an open store writes shards of its own too. ``info`` is the
    content of ``meta.json`` (``format``, ``size``, ``library``, ``meta``).

    Errors: a ``root`` holding a snapshot of another size is a ValueError; a value that cannot
    be stored without pickle a TypeError naming the index and where in the value; a full disk a
    :class:`SnapshotFullError` (``on_full="raise"``); any other failed write an ``OSError``
    naming ``root``.
    """

    def __init__(self, root: str | os.PathLike, size: int, *, compression: str | None = None,
                 on_full: str = "raise", meta: dict | None = None,
                 shard_bytes: int = DEFAULT_SHARD_BYTES) -> None:
        self._args = {"root": root, "size": size, "compression": compression,
                      "on_full": on_full, "meta": meta, "shard_bytes": shard_bytes}
        try:
            self.root = os.path.abspath(os.fspath(root))
        except TypeError:
            raise TypeError(f"SnapshotStore: `root` must be a str or os.PathLike, got {root!r} "
                            f"(type {type(root).__name__})") from None
        if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 0:
            raise ValueError(f"SnapshotStore: `size` must be an int >= 0 (the number of "
                             f"indices), got {size!r}")
        if compression not in codec.CODECS:
            raise ValueError(f"SnapshotStore: `compression` must be None, 'lz4' or 'zstd', got "
                             f"{compression!r}")
        if on_full not in ("raise", "read"):
            raise ValueError(f"SnapshotStore: `on_full` must be 'raise' (a full disk is an "
                             f"error) or 'read' (warn and read on without storing), got "
                             f"{on_full!r}")
        if isinstance(shard_bytes, bool) or not isinstance(shard_bytes, int) or shard_bytes < 1:
            raise ValueError(f"SnapshotStore: `shard_bytes` must be a positive int, got "
                             f"{shard_bytes!r}")
        self._size, self._on_full, self._shard_bytes = int(size), on_full, shard_bytes
        self._codec = codec.CODECS[compression]
        if self._codec:
            codec.load_codec(self._codec)
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._closed = self._full = False
        self._writer: ShardWriter | None = None
        self._own = -1  # the shard this process appends to, as a reader sees it
        self._reset_index()
        self._counts = {"bytes_written": 0, "bytes_read": 0, "hits": 0, "misses": 0,
                        "corrupted": 0}
        self._last_refresh = 0.0
        self._dir_mtime, self._dir_listed = -1, 0
        self._names: tuple[list[str], set[str]] = ([], set())
        try:
            os.makedirs(self.root, exist_ok=True)
            self.info = open_meta(self.root, self._size, meta)
        except OSError as e:
            if not is_full_error(e) or self._on_full == "raise":
                raise self._write_error(e) from e
            self._disk_full(e)
            self.info = meta_dict(self._size, meta)
        self.refresh()

    # -- reading -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._size

    def get(self, i: int) -> tuple[bool, Any]:
        """``(True, value)`` if index ``i`` is stored, else ``(False, None)``. A record that
        fails its checks is reported, forgotten and answered ``(False, None)`` (or, if another
        writer stored the index too, read from that copy)."""
        if not 0 <= i < self._size:
            raise IndexError(f"SnapshotStore.get: index {i!r} is out of range(0, {self._size})")
        loc = self._loc
        sid = loc.sid.item(i)
        if sid < 0:
            if self._closed:
                raise self._closed_error()
            if time.monotonic() - self._last_refresh >= MISS_REFRESH_S:
                self.refresh(MISS_REFRESH_S)
                loc = self._loc
                sid = loc.sid.item(i)
            if sid < 0:
                self._counts["misses"] += 1
                return False, None
        shard: ShardReader = self._shards[sid]  # type: ignore[assignment]  # (indexed: there)
        off = loc.off.item(i)
        if not loc.checked[i]:  # the first read of this record in this process
            problem = self._check(shard, off, i)
            if problem:
                return self._gone(i) if shard.size_on_disk() < 0 else self._corrupt(i, problem)
            loc.checked[i] = True
        elif off + loc.rsize.item(i) > shard.mapped:  # our own shard, grown since mapped
            self._remap(shard)
            if off + loc.rsize.item(i) > shard.mapped:
                return self._gone(i) if shard.size_on_disk() < 0 else self._corrupt(
                    i, "the shard is cut short before the record's end")
        mm = shard.mm
        _, _, cd, _, _, plen, raw_len, _, _, _ = HEADER.unpack_from(mm, off)
        try:
            if cd:
                start = off + _ALIGN
                value = codec.decode(codec.decompress(cd, mm[start: start + plen], raw_len))
            else:
                value = codec.decode(mm, off + _ALIGN)
        except Exception as e:  # a record that passed its checksums but does not decode
            return self._corrupt(i, f"it does not decode ({type(e).__name__}: {e})")
        counts = self._counts
        counts["hits"] += 1
        counts["bytes_read"] += plen
        return True, value

    def has(self, i: int) -> bool:
        return bool(self._loc.sid[i] >= 0)

    def stored(self) -> int:
        """How many indices are stored."""
        return self._loc.n

    def complete(self) -> bool:
        return self._loc.n == self._size

    def nbytes(self) -> int:
        """Bytes on disk of the stored records."""
        return self._loc.nbytes()

    def costs(self) -> dict[int, tuple[float, int]]:
        """Index -> (seconds it took to compute, bytes on disk) of every stored record."""
        return self._loc.costs()

    def new_shard_bytes(self) -> int:
        """What the next record adds besides itself and its index entry: a new shard's index
        header when this process has no shard open."""
        return 0 if self._writer is not None and self._writer.fd is not None else index_bytes(0)

    def version(self) -> tuple[int, int, int]:
        """Changes whenever this process's own records may have changed (records indexed or
        forgotten, bytes written, records killed)."""
        return self._loc.n, self._counts["bytes_written"], len(self._loc.dead)

    def disk_bytes(self) -> int:
        """The bytes the snapshot's shards take on disk, as far as this process has seen them
        (records read or evicted alike, tombstones), with their index files (written when a
        shard is sealed: a shard's that is not yet is counted as it will be)."""
        names = self._loc.by_name
        return sum(s.walked + index_bytes(s.count) for s in self._shards
                   if s is not None and s.name in names)

    def stats(self) -> dict[str, int]:
        """records, bytes_written, bytes_read, hits, misses, corrupted, shards."""
        return {"records": self._loc.n, **self._counts,
                "shards": sum(s is not None for s in self._shards)}

    def refresh(self, min_interval: float = 0.0) -> None:
        """Read what other processes wrote since the last refresh (new shards, new records,
        shards removed by :meth:`drop`): a listing of ``root`` and a ``stat`` per shard still
        being written. With ``min_interval`` (seconds), nothing is done if the last refresh was
        more recent (a miss refreshes so, at most once a second)."""
        if min_interval and time.monotonic() - self._last_refresh < min_interval:
            return
        with self._guard():
            if self._closed:
                raise self._closed_error()
            names, sealed = self._listing()
            present = set(names)
            for sid, shard in enumerate(self._shards):
                if shard is None:
                    continue
                if shard.name not in present:  # deleted by drop() in some process
                    self._lose(sid)
                elif sid != self._own and not shard.sealed:
                    done = shard.name in sealed  # its writer has sealed it: walk it one last time
                    if done or shard.size_on_disk() >= shard.walked + _ALIGN:
                        self._add(sid, *shard.walk())
                    shard.sealed = done
            for name in names:
                if name not in self._loc.by_name:
                    sid, new = self._new_reader(name)
                    got = new.load_index()
                    self._add(sid, *(got if got is not None else new.walk()))
            self._last_refresh = time.monotonic()

    # -- writing -----------------------------------------------------------------------------

    def put(self, i: int, value: Any, cost: float | None = None,
            admit: Callable[[int], bool] | None = None) -> int:
        """Store ``value`` at index ``i``; the bytes written, or 0 if ``i`` is stored already
        or nothing is stored any more (``on_full="read"`` after a full disk). ``admit``: called
        with the record's size on disk (compressed, if it is) before it is written, under the
        store's lock; it may :meth:`evict`, and the record is written only if it says True."""
        if not 0 <= i < self._size:
            raise IndexError(f"SnapshotStore.put: index {i!r} is out of range(0, {self._size})")
        if self._closed:
            raise self._closed_error()
        if self._loc.sid[i] >= 0 or self._full:
            return 0
        payload = Payload(int(i), value, self._codec)  # (its checksum once it is admitted)
        return self._append(int(i), payload, payload.size, float(cost or 0.0), KIND_RECORD,
                            admit)

    def discard(self, i: int) -> None:
        """Forget the record of index ``i`` (it will be recomputed), here and, through a
        tombstone in this process's shard, in every process that refreshes."""
        if not 0 <= i < self._size:
            raise IndexError(f"SnapshotStore.discard: index {i!r} is out of range(0, "
                             f"{self._size})")
        with self._guard():
            if self._loc.sid[i] < 0:
                return
            head, parts, size = frame_tombstone(int(i), *self._loc.where(i))
            self._loc.kill(int(i))
            if not self._full:
                self._append(int(i), (head, parts), size, 0.0, KIND_TOMBSTONE)

    def drop(self) -> None:
        """Delete every record of this snapshot (all processes' shards; ``meta.json`` stays)."""
        with self._guard():
            if self._closed:
                raise self._closed_error()
            if self._writer is not None:
                self._writer.abandon()
                self._writer = None
            for name in os.listdir(self.root):  # shards, their indexes, indexes half-written
                if (name.endswith((SUFFIX, INDEX_SUFFIX)) or f"{INDEX_SUFFIX}.tmp-" in name
                        or CLAIMED in name):
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(os.path.join(self.root, name))
            self._reset_index()  # (the maps close once no thread reads them)

    def flush(self) -> None:
        """Make every record this process put so far durable, in its rolled shards too (they
        are visible to other processes once put; the disk has them after this)."""
        with self._guard():
            if self._writer is not None:
                self._writer.sync()
            for sid in self._mine:
                shard = self._shards[sid]
                if sid == self._own or shard is None:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    fd = os.open(shard.path, os.O_RDONLY)
                    try:
                        getattr(os, "fdatasync", os.fsync)(fd)
                    finally:
                        os.close(fd)

    def close(self) -> None:
        """Seal this process's shard (write its index) and unmap the shards. Idempotent."""
        with self._guard():
            if self._closed:
                return
            self._closed = True
            writer, self._writer = self._writer, None
            if writer is not None:  # (a forked child has none: the parent's is the parent's)
                self._seal(writer)
            for shard in self._shards:
                if shard is not None:
                    shard.close()

    def __enter__(self) -> SnapshotStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def __getstate__(self) -> dict[str, Any]:
        return dict(self._args)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"SnapshotStore({self.root!r}, size={self._size}, stored={self._loc.n})"

    # -- internals ---------------------------------------------------------------------------

    def _reset_index(self) -> None:
        self._shards: list[ShardReader | None] = []  # by shard number, as in self._loc
        self._loc = Locations(self._size)
        self._own = -1
        self._mine: list[int] = []  # the shards this process rewrites (its own, rolled, claimed)
        self._tombs: dict[int, list[tuple[int, int, int]]] = {}  # shards' tombstones
        self._claims: dict[int, str] = {}  # claimed shards: their renamed index files

    def _new_reader(self, name: str) -> tuple[int, ShardReader]:
        shard = ShardReader(self.root, name)
        self._shards.append(shard)
        return self._loc.add_shard(name), shard

    def _add(self, sid: int, table: np.ndarray, problems: list[str]) -> None:
        if not len(table) and not problems:
            return
        shard = self._shards[sid]
        assert shard is not None
        tombs = table[table["kind"] == KIND_TOMBSTONE]
        if len(tombs):  # (kept if a compaction rewrites this shard)
            self._tombs.setdefault(sid, []).extend(
                zip(tombs["index"].tolist(), tombs["offset"].tolist(), tombs["size"].tolist(),
                    strict=True))
        for p in problems + self._loc.add(sid, table, shard.tombstone_target):
            self._report(shard.name, p)

    def _remap(self, shard: ShardReader) -> None:
        with self._guard():
            if self._closed:
                raise self._closed_error()
            shard.remap()

    def _check(self, shard: ShardReader, off: int, i: int) -> str:
        size = self._loc.rsize.item(i)
        if off + size > shard.mapped:
            self._remap(shard)
        return shard.check(off, size, i)

    def _lose(self, sid: int) -> None:
        """Forget a shard deleted by drop() in another process, and its records; if it was
        this process's, the next record starts a new one."""
        if sid == self._own and self._writer is not None:
            self._writer.abandon()
            self._writer, self._own = None, -1
        if sid in self._mine:
            self._mine.remove(sid)
        self._tombs.pop(sid, None)
        self._claims.pop(sid, None)
        self._loc.lose_shard(sid)
        self._shards[sid] = None  # (its map closes once no thread reads it)

    def _gone(self, i: int) -> tuple[bool, Any]:
        """The record's shard was deleted (drop() in another process): forget its records,
        then answer from what is left."""
        self.refresh()
        return self.get(i)

    def _corrupt(self, i: int, problem: str) -> tuple[bool, Any]:
        with self._guard():
            loc = self._loc
            if loc.sid[i] >= 0:
                name, off = loc.where(i)
                self._report(name, f"record of index {i} at byte {off}: {problem}")
                loc.kill(i)
        if self._loc.sid[i] >= 0:  # another writer's copy
            return self.get(i)
        self._counts["misses"] += 1
        return False, None

    def _report(self, shard: str, problem: str) -> None:
        self._counts["corrupted"] += 1
        logger.warning("SnapshotStore %s: shard %s: %s; the record is not used (it will be "
                       "recomputed).", self.root, shard, problem)

    def _guard(self) -> threading.RLock:
        """The lock, after :meth:`_after_fork` in a forked process (the parent's lock may have
        been held by a thread that the child does not have)."""
        if self._pid != os.getpid():
            self._after_fork()
        return self._lock

    def _after_fork(self) -> None:
        """In a process forked with this store: the parent's shard is the parent's to write."""
        self._pid = os.getpid()
        self._lock = threading.RLock()
        if self._writer is not None:
            self._writer.abandon()
            self._writer = None
        self._own = -1
        self._mine, self._claims = [], {}  # (the tombstones seen stay known)

    def _append(self, i: int, record: Payload | tuple[bytes, list[Any]], size: int,
                cost: float, kind: int, admit: Callable[[int], bool] | None = None) -> int:
        with self._guard():
            if self._closed:
                raise self._closed_error()
            if self._writer is not None and self._writer.deleted():  # by drop() elsewhere
                self._lose(self._own)
            if self._full or (kind == KIND_RECORD and self._loc.sid[i] >= 0):
                return 0
            try:
                if admit is not None and not admit(size):
                    return 0
                if self._writer is None or self._writer.fd is None:  # none yet, or abandoned
                    self._writer = ShardWriter(self.root)
                    self._own = self._new_reader(self._writer.name)[0]
                    self._mine.append(self._own)
                w = self._writer
                off = w.offset
                head, parts, _ = (record.frame(i, cost) if isinstance(record, Payload)
                                  else (*record, size))
                w.append(head, parts, (i, off, size, cost, kind))
                mine = self._shards[self._own]
                assert mine is not None
                mine.walked, mine.count = w.offset, len(w.entries)
            except OSError as e:
                if not is_full_error(e) or self._on_full == "raise":
                    raise self._write_error(e) from e
                self._disk_full(e)
                return 0
            if kind == KIND_RECORD:
                self._loc.index(i, self._own, off, size, cost)
                self._loc.checked[i] = True
            else:
                self._tombs.setdefault(self._own, []).append((i, off, size))
            self._counts["bytes_written"] += size
            if w.offset >= self._shard_bytes:
                self._roll()
            return size

    def _listing(self) -> tuple[list[str], set[str]]:
        """:func:`shard_names` of ``root``, listed again only when the folder changed since
        (its modification time moved): a ``stat`` instead of a listing on most refreshes. A
        listing made less than :data:`MTIME_SLACK_NS` after the folder's time is not trusted
        (a coarse clock could give a later change the same time)."""
        try:
            mtime = os.stat(self.root).st_mtime_ns
        except FileNotFoundError:
            return [], set()
        if mtime != self._dir_mtime or self._dir_listed - mtime < MTIME_SLACK_NS:
            now = time.time_ns()
            self._names = shard_names(self.root)
            self._dir_mtime, self._dir_listed = mtime, now
        return self._names

    def _roll(self) -> None:
        """Seal this process's shard; the next record starts a new one."""
        writer, self._writer = self._writer, None
        own, self._own = self._own, -1
        shard = self._shards[own]
        if shard is not None:
            shard.sealed = True
        if writer is not None:
            self._seal(writer)

    def _seal(self, writer: ShardWriter) -> None:
        try:
            writer.seal()
        except OSError as e:  # the shard stays readable without its index
            logger.debug("SnapshotStore %s: shard %s not sealed (%s)", self.root, writer.name, e)

    def _disk_full(self, e: OSError) -> None:
        self._full = True
        warnings.warn(
            f"SnapshotStore: the disk under `path` {self.root!r} is full ({e.strerror}); the "
            f"snapshot stores nothing more and reads on ({self._loc.n} of {self._size} indices "
            "stored). Free space, or give a path on a larger disk, or a budget.",
            SnapshotFullWarning, stacklevel=4)

    def _write_error(self, e: OSError) -> OSError:
        if is_full_error(e):
            return SnapshotFullError(
                e.errno, f"SnapshotStore: the disk under `path` {self.root!r} is full "
                f"({e.strerror}) after {self._loc.n} of {self._size} indices were stored; free "
                "space, give a path on a larger disk or a budget, or pass on_full='read' to read "
                "on without storing more", self.root)
        return OSError(e.errno, f"SnapshotStore: cannot write the snapshot at `path` "
                       f"{self.root!r}: {e.strerror} ({e.filename})", self.root)

    def _closed_error(self) -> ValueError:
        return ValueError(f"SnapshotStore {self.root!r} is closed; open a new one.")

