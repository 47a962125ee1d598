"""A streaming reader of WebDataset tar shards: samples as their bytes arrive.

A WebDataset shard is a plain tar file whose members are grouped into samples by key: the
member ``dir/n01440764_10026.JPEG.cls`` has the key ``dir/n01440764_10026`` (the path up to the
first dot of its last component) and the field ``JPEG.cls`` (the rest, without the dot).
The members of one sample are adjacent in the file.

:func:`iter_members` reads a binary file-like object (``read(n)`` only: no seeks, so a network
stream works) one header and one body at a time, and :func:`iter_samples` groups members into
sample dicts ``{"__key__": key, field: bytes, ...}`` yielded as soon as the next key starts:
nothing ever needs the whole shard. Both take ``offset``, the position of the stream's first
byte in the shard, so that a reader opened at a sample's offset (from the shard index, see
:mod:`dataflow.streaming.index`) reports true offsets. ustar, GNU long names (``L``) and pax
headers (``x``, ``path=``) are understood; directories and other non-file members are skipped.

A stream that ends inside a member, or a header whose checksum is wrong, raises
:class:`~dataflow.errors.CorruptFileError` naming the shard and the member.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from dataflow.errors import CorruptFileError

__all__ = ["ByteReader", "Member", "iter_members", "iter_samples", "split_key", "tar_header"]

BLOCK = 512


class _Empty:
    @staticmethod
    def read(n: int) -> bytes:
        return b""


_EMPTY = _Empty()
_FILE_TYPES = (b"0", b"\0", b"7")


@dataclass(frozen=True)
class Member:
    """One file member: its name, bytes, and where it lies in the shard."""

    name: str
    data: bytes
    header_offset: int  # offset of its first header (long-name/pax headers included)
    data_offset: int
    end: int  # offset after its padded body: where the next member starts


def split_key(name: str) -> tuple[str, str]:
    """``(key, field)`` of a member name, WebDataset's way (first dot of the last component)."""
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot < 0:
        return name, ""
    return name[:dot], name[dot + 1:]


class ByteReader:
    """Exact reads over a stream, refilled with whatever bytes have arrived (``read1`` where
    the stream has it: never waits for more than the next member needs)."""

    _CHUNK = 1 << 20

    def __init__(self, stream: Any) -> None:
        self._read = getattr(stream, "read1", None) or stream.read
        self._buf = b""
        self._pos = 0

    @classmethod
    def of_bytes(cls, data: bytes) -> ByteReader:
        """A reader over bytes already in memory (its reads slice ``data``, never copy it
        whole)."""
        reader = cls(_EMPTY)
        reader._buf = data
        return reader

    def read_exact(self, n: int) -> bytes:
        """``n`` bytes, or fewer only at the end of the stream."""
        end = self._pos + n
        if end <= len(self._buf):
            out = self._buf[self._pos:end]
            self._pos = end
            return out
        parts = [self._buf[self._pos:]]
        got = len(parts[0])
        self._buf, self._pos = b"", 0
        while got < n:
            chunk = self._read(max(n - got, self._CHUNK))
            if not chunk:
                return b"".join(parts)
            chunk = bytes(chunk)
            take = min(len(chunk), n - got)
            parts.append(chunk[:take] if take < len(chunk) else chunk)
            got += take
            if take < len(chunk):
                self._buf, self._pos = chunk, take
        return b"".join(parts)

    def skip(self, n: int) -> int:
        """Drop the next ``n`` bytes; returns how many there were (fewer only at the end)."""
        got = 0
        while got < n:
            part = self.read_exact(min(n - got, self._CHUNK))
            if not part:
                break
            got += len(part)
        return got


def _octal(field: bytes) -> int:
    if field[:1] and field[0] & 0x80:  # GNU base-256 for sizes >= 8 GiB
        return int.from_bytes(field[1:], "big")
    text = field.split(b"\0", 1)[0].strip(b" \0")
    return int(text, 8) if text else 0


def _checksum_ok(header: bytes) -> bool:
    try:
        stored = _octal(header[148:156])
    except ValueError:  # not octal digits: not a tar header
        return False
    computed = sum(header[:148]) + 8 * 32 + sum(header[156:])
    return stored == computed


def _pax_path(data: bytes) -> str | None:
    path = None
    pos = 0
    while pos < len(data):
        space = data.index(b" ", pos)
        length = int(data[pos:space])
        record = data[space + 1:pos + length - 1]
        key, _, value = record.partition(b"=")
        if key == b"path":
            path = value.decode("utf-8")
        pos += length
    return path


def iter_members(stream: BinaryIO | Any, source: str = "<stream>",
                 offset: int = 0, end: int | None = None) -> Iterator[Member]:
    """The file members of a tar stream, in file order.

    ``stream`` is a binary file-like object or a :class:`ByteReader` over one (to go on reading
    the same stream after ``end``; a plain stream may be read past ``end``). ``source`` names
    the shard in errors; ``offset`` is the shard position of the stream's first byte; reading
    stops at shard position ``end`` (``None``: the end-of-archive blocks or the end of the
    stream).
    """
    pos = offset
    long_name: str | None = None
    first = offset
    reader = stream if isinstance(stream, ByteReader) else ByteReader(stream)
    while end is None or pos < end:
        header = reader.read_exact(BLOCK)
        if not header and end is None:
            return  # a stream without end-of-archive blocks (e.g. a range read) ends here
        if len(header) < BLOCK:
            raise CorruptFileError(
                f"tar shard {source} is truncated: a member header at byte {pos} has "
                f"{len(header)} of {BLOCK} bytes; re-download or re-write the shard."
            )
        if header == b"\0" * BLOCK:
            return
        if not _checksum_ok(header):
            raise CorruptFileError(
                f"tar shard {source} is corrupt: bad header checksum at byte {pos} (not a tar "
                "file, or damaged); re-download or re-write the shard."
            )
        try:
            size = _octal(header[124:136])
        except ValueError:
            raise CorruptFileError(
                f"tar shard {source} is corrupt: the header at byte {pos} has no valid size"
            ) from None
        kind = header[156:157]
        name = header[:100].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        prefix = header[345:500].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        if prefix and header[257:262] == b"ustar":
            name = f"{prefix}/{name}"
        padded = -(-size // BLOCK) * BLOCK
        body = reader.read_exact(size)  # the body alone: one copy out of the read buffer
        if len(body) < size:
            raise CorruptFileError(
                f"tar shard {source} is truncated in member {long_name or name!r}: its body "
                f"at byte {pos + BLOCK} has {len(body)} of {size} bytes; re-download or "
                "re-write the shard."
            )
        if padded > size:
            reader.skip(padded - size)  # the padding (a shard may end without it)
        data_offset = pos + BLOCK
        pos = data_offset + padded
        if kind in (b"L",):
            long_name = body.rstrip(b"\0").decode("utf-8", "surrogateescape")
            continue
        if kind in (b"x",):
            long_name = _pax_path(body) or long_name
            continue
        if kind in (b"g",):
            continue
        if kind in _FILE_TYPES:
            yield Member(long_name or name, body, first, data_offset, pos)
        long_name = None
        first = pos


def iter_samples(stream: BinaryIO | Any, source: str = "<stream>", offset: int = 0,
                 end: int | None = None) -> Iterator[dict[str, Any]]:
    """Samples of a tar stream: ``{"__key__": key, field: bytes, ...}``, in file order.

    A field that occurs twice in one sample raises :class:`CorruptFileError` (WebDataset
    shards never repeat a field: a repeated one means two samples share a key).
    """
    sample: dict[str, Any] | None = None
    for m in iter_members(stream, source, offset, end):
        key, field = split_key(m.name)
        if sample is not None and key != sample["__key__"]:
            yield sample
            sample = None
        if sample is None:
            sample = {"__key__": key}
        if field in sample:
            raise CorruptFileError(
                f"tar shard {source}: member {m.name!r} repeats field {field!r} of sample "
                f"{key!r}; give each sample a unique key."
            )
        sample[field] = m.data
    if sample is not None:
        yield sample


def tar_header(name: str, size: int, mtime: int = 0) -> bytes:
    """A ustar header block of a regular file (GNU base-256 size above 8 GiB). Names longer
    than 100 bytes get a pax header before it."""
    raw = name.encode("utf-8")
    out = b""
    if len(raw) > 100:
        record = b" path=" + raw + b"\n"
        n = len(record)
        length = n + len(str(n))
        if len(str(length)) != len(str(n)):
            length += 1
        pax = str(length).encode() + record
        out = _block(b"././@PaxHeader", len(pax), b"x", mtime) + pax
        out += b"\0" * (-len(pax) % BLOCK)
        raw = raw[-100:]
    return out + _block(raw, size, b"0", mtime)


def _block(raw: bytes, size: int, kind: bytes, mtime: int) -> bytes:
    h = bytearray(BLOCK)
    h[:len(raw)] = raw
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    if size < 8 ** 11:
        h[124:136] = b"%011o\0" % size
    else:
        h[124:136] = b"\x80" + size.to_bytes(11, "big")
    h[136:148] = b"%011o\0" % mtime
    h[148:156] = b" " * 8
    h[156:157] = kind
    h[257:263] = b"ustar\0"
    h[263:265] = b"00"
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)
