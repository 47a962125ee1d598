"""The files of a snapshot's directory: ``meta.json`` and the shards (append-only records, each
with its checksums, and a sealed index).

A shard has one writer (one process), which only appends; any process reads it. A record::

    header (64 bytes) | payload | zero padding to a multiple of 64

The header (little-endian) is ``magic "DFS1" | u8 kind | u8 codec | u16 0 | u64 index |
u64 payload length | u64 decoded length | f64 cost | u32 payload checksum | u32 header CRC-32``
(the last over the 44 bytes before it), then zeros. The payload's checksum is the low 32 bits
of its XXH3-64 hash (``xxhash``): it runs at memory speed (~10 GB/s, where zlib's CRC-32 runs
at ~1 GB/s here), so that checking a record on its first read in a process costs a small part
of what decoding it again would. ``kind`` is a record or a *tombstone*
(whose payload names a record, ``"<shard name>\\n<offset>"``, that readers must forget).
``codec`` is how the payload is compressed (none, lz4, zstd: a payload is stored compressed
only if that makes it at least 10% smaller).

Records are written with one ``writev`` each, so a reader sees a record only once it is whole
(the file's size grows as the data lands); a record that does not fit in the file (a writer
still writing, or killed while writing: a torn tail) is not read. A failed write (a full disk)
is cut off again (``ftruncate``), so the file never holds a partial record followed by others.

When its writer closes a shard (or rolls over to a new one) it writes ``<shard>.idx``
atomically: ``magic "DFSI" | u32 version | u64 shard length | u64 count`` then one entry per
record (index, offset, size on disk, cost, kind: five ``<i8``/``<f8``) and a CRC-32 of all
that. A reader loads the index of a sealed shard instead of walking its headers; an unsealed
shard (its writer alive, or killed) is walked from where the last walk stopped.
"""

from __future__ import annotations

import contextlib
import errno
import json
import mmap
import os
import secrets
import struct
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import xxhash

from dataflow._version import __version__
from dataflow.serialize._atomic_write import atomic_output
from dataflow.snapshot import codec
from dataflow.snapshot.codec import ALIGN, align

__all__ = ["COMPRESSED_AT_MOST", "ENTRY", "FORMAT_VERSION", "HEADER", "KIND_RECORD",
           "KIND_TOMBSTONE", "Payload", "ShardReader", "ShardWriter", "frame_record",
           "frame_tombstone", "header_bytes", "header_ok", "index_bytes", "is_full_error",
           "meta_dict", "open_meta", "shard_names"]

FORMAT_VERSION = 2  # (1: payloads checked by CRC-32)
META = "meta.json"
MAGIC = b"DFS2"
INDEX_MAGIC = b"DFSI"
INDEX_VERSION = 1
SUFFIX = ".shard"
INDEX_SUFFIX = ".idx"
KIND_RECORD, KIND_TOMBSTONE = 0, 1
#: a record is stored compressed only if that makes it at most this fraction of its size;
#: otherwise (decoded photos, noise) it is stored as it is, and read back without a copy
COMPRESSED_AT_MOST = 0.9

#: magic, kind, codec, reserved, index, payload length, decoded length, cost, payload CRC,
#: header CRC
HEADER = struct.Struct("<4sBBHQQQdII")
_HEADER_CRC_SPAN = HEADER.size - 4
_PAD = bytes(ALIGN - HEADER.size)
_INDEX_HEAD = struct.Struct("<4sIQQ")
ENTRY = np.dtype([("index", "<i8"), ("offset", "<i8"), ("size", "<i8"), ("cost", "<f8"),
                  ("kind", "<i8")])
_IOV_MAX = 512

#: one record of a shard, as the store indexes it: (index, offset, size on disk, cost, kind)
Entry = tuple[int, int, int, float, int]


def index_bytes(count: int) -> int:
    """The size of the index file of a shard of ``count`` records (tombstones included)."""
    return _INDEX_HEAD.size + count * ENTRY.itemsize + 4


def header_bytes(kind: int, codec: int, index: int, plen: int, raw_len: int, cost: float,
                 crc: int) -> bytes:
    """The 64 header bytes of a record (see the module docstring)."""
    head = HEADER.pack(MAGIC, kind, codec, 0, index, plen, raw_len, cost, crc, 0)
    hcrc = zlib.crc32(memoryview(head)[:_HEADER_CRC_SPAN])
    return head[:_HEADER_CRC_SPAN] + struct.pack("<I", hcrc) + _PAD


class Payload:
    """A record's payload before its checksum: the buffers (encoded, maybe compressed), the
    codec used, their length and the decoded length. ``size``: the record's bytes on disk."""

    __slots__ = ("cd", "parts", "plen", "raw_len")

    def __init__(self, index: int, value: Any, codec_id: int) -> None:
        parts, raw_len = codec.encode(value, index)
        cd, plen = 0, raw_len
        if codec_id:
            packed = codec.compress(codec_id, b"".join(parts))
            if len(packed) <= COMPRESSED_AT_MOST * raw_len:
                cd, plen, parts = codec_id, len(packed), [packed]
        self.cd, self.parts, self.plen, self.raw_len = cd, parts, plen, raw_len

    @property
    def size(self) -> int:
        return ALIGN + align(self.plen)

    def frame(self, index: int, cost: float) -> tuple[bytes, list[Any], int]:
        """The header (with the payload's CRC-32, computed here), the payload's buffers
        (padding included) and the size on disk."""
        parts = list(self.parts)
        crc = payload_checksum(parts)
        pad = align(self.plen) - self.plen
        if pad:
            parts.append(bytes(pad))
        head = header_bytes(KIND_RECORD, self.cd, index, self.plen, self.raw_len, cost, crc)
        return head, parts, self.size


def frame_record(index: int, value: Any, codec_id: int, cost: float
                 ) -> tuple[bytes, list[Any], int]:
    """The header, the payload's buffers (padding included) and the size on disk of the record
    of ``value`` at ``index``. It is compressed with ``codec_id`` only if that makes it at most
    :data:`COMPRESSED_AT_MOST` of its size."""
    return Payload(index, value, codec_id).frame(index, cost)


def frame_tombstone(index: int, shard: str, offset: int) -> tuple[bytes, list[Any], int]:
    """A tombstone for the record of ``index`` at ``offset`` in ``shard``, as
    :func:`frame_record`."""
    target = f"{shard}\n{offset}".encode()
    pad = bytes(align(len(target)) - len(target))
    head = header_bytes(KIND_TOMBSTONE, 0, index, len(target), len(target), 0.0,
                        payload_checksum([target]))
    return head, [target, pad], ALIGN + len(target) + len(pad)


def payload_checksum(parts: Sequence[Any]) -> int:
    """The checksum of a payload made of ``parts`` (buffers): the low 32 bits of XXH3-64."""
    if len(parts) == 1:
        return xxhash.xxh3_64_intdigest(parts[0]) & 0xFFFFFFFF
    h = xxhash.xxh3_64()
    for p in parts:
        h.update(p)
    return h.intdigest() & 0xFFFFFFFF


def header_ok(buf: Any, off: int) -> bool:
    """Whether the header at ``buf[off:]`` has the magic and its checksum matches."""
    return (buf[off: off + 4] == MAGIC and zlib.crc32(buf[off: off + _HEADER_CRC_SPAN])
            == struct.unpack_from("<I", buf, off + _HEADER_CRC_SPAN)[0])


def is_full_error(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


def shard_names(root: str) -> tuple[list[str], set[str]]:
    """The shard files in ``root``, and those of them that are sealed (have an index file).
    Temporary files start with a dot and are not listed."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return [], set()
    shards = sorted(n for n in names if n.endswith(SUFFIX) and not n.startswith("."))
    sealed = {n[: -len(INDEX_SUFFIX)] + SUFFIX for n in names
              if n.endswith(INDEX_SUFFIX) and not n.startswith(".")}
    return shards, sealed


def _write_all(fd: int, parts: Sequence[Any]) -> None:
    """``writev`` every byte of ``parts``, however many calls the kernel needs."""
    views = [memoryview(p).cast("B") for p in parts if len(p)]
    while views:
        n = os.writev(fd, views[:_IOV_MAX])
        while n and views:
            if n >= len(views[0]):
                n -= len(views.pop(0))
            else:
                views[0] = views[0][n:]
                n = 0


class ShardWriter:
    """The one writer of a new shard in ``root``, named from the pid and a random token, so
    that many processes append at once, each to its own file, with no lock."""

    def __init__(self, root: str) -> None:
        self.name = f"w{os.getpid()}-{secrets.token_hex(6)}{SUFFIX}"
        self.path = os.path.join(root, self.name)
        self.fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self.offset = 0
        self.entries: list[Entry] = []

    def append(self, header: bytes, parts: Sequence[Any], entry: Entry) -> None:
        """Write one record at :attr:`offset`; on any error the file is cut back to where the
        record began (nothing partial is left before a later record), and the error raised."""
        assert self.fd is not None
        start = self.offset
        try:
            _write_all(self.fd, [header, *parts])
        except BaseException:
            try:
                os.ftruncate(self.fd, start)
                os.lseek(self.fd, start, os.SEEK_SET)
            except OSError:  # cannot cut it back: never append to this shard again
                self.abandon()
            raise
        self.offset = start + entry[2]
        self.entries.append(entry)

    def deleted(self) -> bool:
        """Whether the file was deleted (by drop() in another process)."""
        return self.fd is not None and os.fstat(self.fd).st_nlink == 0

    def sync(self) -> None:
        if self.fd is not None:
            getattr(os, "fdatasync", os.fsync)(self.fd)

    def seal(self) -> None:
        """Write the shard's index atomically and close it. The index is a shortcut: a shard
        without one (its writer killed, the disk full) is read by walking it. Neither is synced
        to the disk (:meth:`sync` does that): a process killed at any point loses nothing the
        kernel has, and after a power loss a record the index names but the disk lost fails its
        checksum on its first read, and is recomputed."""
        if self.fd is None:
            return
        try:
            entries = np.array(self.entries, dtype=ENTRY)
            body = _INDEX_HEAD.pack(INDEX_MAGIC, INDEX_VERSION, self.offset, len(entries))
            body += entries.tobytes()
            with atomic_output(self.path[: -len(SUFFIX)] + INDEX_SUFFIX, "SnapshotStore",
                               overwrite=True) as tmp, open(tmp, "wb") as f:
                f.write(body + struct.pack("<I", zlib.crc32(body)))
        finally:
            self.abandon()

    def abandon(self) -> None:
        """Close the file without an index."""
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)


class ShardReader:
    """One shard as a reader sees it: a read-only memory map (remapped as the file grows),
    how far it has been walked, and whether its writer sealed it."""

    def __init__(self, root: str, name: str) -> None:
        self.name = name
        self.path = os.path.join(root, name)
        self.mm: Any = None
        self.mapped = 0
        self.walked = 0  # the bytes known to hold whole records (or this process's own length)
        self.count = 0  # how many entries those bytes hold (tombstones included)
        self.sealed = False

    def remap(self) -> int:
        """Map the file if it has grown; its current size (-1 if it is gone). The map may be
        longer than the file (a writer cut back a failed record): never read past the size."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return -1
        try:
            size = os.fstat(fd).st_size
            if size > self.mapped:
                self.mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
                self.mapped = size
        finally:
            os.close(fd)
        return size

    def size_on_disk(self) -> int:
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            return -1

    def load_index(self) -> tuple[np.ndarray, list[str]] | None:
        """The entries of a sealed shard's index and what is wrong with them (records that
        the shard, cut short, no longer holds), or None if there is no index, or it is
        unreadable (then the shard is walked)."""
        try:
            with open(self.path[: -len(SUFFIX)] + INDEX_SUFFIX, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        if len(data) < _INDEX_HEAD.size + 4 or zlib.crc32(data[:-4]) != struct.unpack(
                "<I", data[-4:])[0]:
            return None
        magic, version, length, count = _INDEX_HEAD.unpack_from(data)
        if (magic != INDEX_MAGIC or version != INDEX_VERSION
                or len(data) != _INDEX_HEAD.size + count * ENTRY.itemsize + 4):
            return None
        table = np.frombuffer(data, ENTRY, count, _INDEX_HEAD.size)
        size = self.size_on_disk()
        problems = []
        if size < length:
            lost = table[table["offset"] + table["size"] > size]
            table = table[table["offset"] + table["size"] <= size]
            problems = [f"record of index {int(e['index'])} at byte {int(e['offset'])}: the "
                        f"shard is cut short ({size} of {length} bytes)" for e in lost]
        self.sealed = True
        self.walked, self.count = length, count
        return table, problems

    def walk(self) -> tuple[np.ndarray, list[str]]:
        """The whole records past :attr:`walked` (advanced to the first one that is not whole
        yet) and what was wrong on the way: a header that fails its checksum is reported and
        skipped to the next valid header at a multiple of 64."""
        size = self.remap()
        if size < 0:
            return np.zeros(0, ENTRY), []
        mm, end, pos = self.mm, min(size, self.mapped), self.walked
        entries: list[Entry] = []
        problems: list[str] = []
        while pos + ALIGN <= end:
            if not header_ok(mm, pos):
                nxt = _next_header(mm, pos + ALIGN, end)
                problems.append(f"bytes {pos}-{nxt if nxt >= 0 else end}: not a valid record "
                                "header (corrupted)")
                if nxt < 0:
                    pos = end
                    break
                pos = nxt
                continue
            _, kind, _, _, index, plen, _, cost, _, _ = HEADER.unpack_from(mm, pos)
            size = ALIGN + align(plen)
            if pos + size > end:
                break
            entries.append((index, pos, size, cost, kind))
            pos += size
        self.walked = pos
        self.count += len(entries)
        return np.array(entries, dtype=ENTRY), problems

    def check(self, off: int, size: int, i: int) -> str:
        """What is wrong with the record of index ``i`` at ``off``, ``size`` bytes on disk
        ('' if nothing): the file cut short before its end, its header or payload checksum."""
        if off + size > self.mapped or off + size > self.size_on_disk():
            return "the shard is cut short before the record's end"
        mm = self.mm
        if not header_ok(mm, off):
            return "its header fails its checksum"
        _, kind, cd, _, index, plen, _, _, crc, _ = HEADER.unpack_from(mm, off)
        if index != i or kind != KIND_RECORD or cd not in (0, 1, 2):
            return f"its header says index {index}, kind {kind}, codec {cd}"
        if ALIGN + align(plen) != size:
            return "its length does not match the index"
        with memoryview(mm) as view:
            if payload_checksum([view[off + ALIGN: off + ALIGN + plen]]) != crc:
                return "its payload fails its checksum"
        return ""

    def tombstone_target(self, offset: int) -> tuple[str, int] | None:
        """The (shard name, offset) that the tombstone at ``offset`` names."""
        if offset + ALIGN > self.mapped and self.remap() < offset + ALIGN:
            return None
        plen = HEADER.unpack_from(self.mm, offset)[5]
        try:
            name, at = bytes(self.mm[offset + ALIGN: offset + ALIGN + plen]).decode().split("\n")
            return name, int(at)
        except ValueError:
            return None

    def close(self) -> None:
        mm, self.mm = self.mm, None
        self.mapped = 0
        if mm is not None:
            try:
                mm.close()
            except BufferError:  # arrays still look at it; it closes when they are gone
                pass


def meta_dict(size: int, meta: dict | None) -> dict[str, Any]:
    """What ``meta.json`` holds."""
    return {"format": FORMAT_VERSION, "size": size, "library": __version__,
            "meta": {} if meta is None else meta}


def open_meta(root: str, size: int, meta: dict | None) -> dict[str, Any]:
    """The ``meta.json`` of the snapshot in ``root``, written first if there is none (atomic:
    the first process to link its complete file wins, the others read it); a ValueError if it
    is not a snapshot of ``size`` indices in this format."""
    path = os.path.join(root, META)
    if not os.path.exists(path):
        try:
            body = json.dumps(meta_dict(size, meta), sort_keys=True, indent=1)
        except (TypeError, ValueError) as e:
            raise TypeError(f"SnapshotStore: `meta` must be a dict of JSON values, got {meta!r} "
                            f"({e})") from None
        tmp = os.path.join(root, f".{META}.tmp-{secrets.token_hex(6)}")
        try:
            with open(tmp, "w") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
            except OSError as e:  # a file system without hard links
                if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
                    raise
                os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
    try:
        with open(path) as f:
            info = json.load(f)
        fmt, stored = info["format"], info["size"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"SnapshotStore: {path!r} is not a snapshot's meta.json ({e}); remove "
                         f"the directory `root` {root!r} or give another.") from e
    if fmt != FORMAT_VERSION:
        raise ValueError(f"SnapshotStore: the snapshot in `root` {root!r} has format {fmt!r}, "
                         f"this library reads {FORMAT_VERSION}; remove it (it will be written "
                         "again) or give another path.")
    if stored != size:
        raise ValueError(f"SnapshotStore: the snapshot in `root` {root!r} has {stored} indices, "
                         f"not `size`={size}; it belongs to another dataset: give another "
                         "path, or remove it.")
    return info


def _next_header(mm: Any, pos: int, end: int) -> int:
    """The next offset >= ``pos``, a multiple of 64 before ``end``, with a valid header; -1."""
    while True:
        pos = mm.find(MAGIC, pos, end)
        if pos < 0:
            return -1
        if pos % ALIGN == 0 and pos + ALIGN <= end and header_ok(mm, pos):
            return pos
        pos += 1
