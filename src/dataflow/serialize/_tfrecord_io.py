"""TFRecord framing: writing frames and scanning them back with checks (no TensorFlow).

A record is framed as ``uint64 length``, ``uint32 masked_crc32c(length)``, ``data``,
``uint32 masked_crc32c(data)`` (little-endian).
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import Any

import numpy as np

from dataflow.serialize._atomic import CorruptFileError
from dataflow.serialize._crc32c import masked_crc32c_lengths, masked_crc32c_many

__all__ = ["Scanner", "frame_parts", "frame_records", "map_file"]

_BATCH_RECORDS = 1024
_BATCH_BYTES = 8 << 20
_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")


def frame_records(records: list[bytes]) -> bytes:
    """The TFRecord framing of ``records``, concatenated."""
    return b"".join(frame_parts(records))


def frame_parts(records: list[bytes]) -> list[bytes]:
    """The pieces of the TFRecord framing of ``records``, in file order (no big copy)."""
    n = len(records)
    lens = np.array([len(r) for r in records], dtype="<u8")
    len_bytes = lens.tobytes()
    len_views = [len_bytes[8 * i : 8 * i + 8] for i in range(n)]
    len_crc = masked_crc32c_lengths(lens).astype("<u4").tobytes()
    data_crc = masked_crc32c_many(records).astype("<u4").tobytes()
    parts: list[bytes] = []
    add = parts.append
    for i in range(n):
        add(len_views[i])
        add(len_crc[4 * i : 4 * i + 4])
        add(records[i])
        add(data_crc[4 * i : 4 * i + 4])
    return parts

class Scanner:
    """Walks the records of a TFRecord file held in a buffer, checking framing and CRCs."""

    def __init__(self, buf: Any, path: str, verify: bool) -> None:
        self.buf = buf
        self.size = len(buf)
        self.path = path
        self.verify = verify
        self.off = 0
        self.index = 0
        self.pending: CorruptFileError | None = None

    def _bad_header(self, i: int, off: int, why: str) -> CorruptFileError:
        hint = " (it is not a TFRecord file)" if i == 0 else ""
        return CorruptFileError(
            f"TFRecord file {self.path!r}: record {i} at byte {off} {why}{hint}; the file is "
            "corrupt or truncated."
        )

    def _check_header(self, i: int, off: int) -> None:
        n, stored = _HEADER.unpack_from(self.buf, off)
        if int(masked_crc32c_lengths([n])[0]) != stored:
            raise self._bad_header(i, off, "has a bad length checksum")

    def next_batch(self, limit: int | None, want_data: bool = True) -> list[Any]:
        """Up to a batch of records (``bytes``; or ``None`` when not ``want_data``).

        The records before a damaged one are returned first; the error is raised by the next
        call, so a consumer gets every good record and then an error naming the bad one.
        """
        if self.pending is not None:
            err, self.pending = self.pending, None
            raise err
        buf, size, off, i = self.buf, self.size, self.off, self.index
        recs: list[Any] = []
        hdrs: list[int] = []
        hcrc: list[int] = []
        dcrc: list[int] = []
        offsets: list[int] = []
        nbytes = 0
        unpack, unfoot = _HEADER.unpack_from, _FOOTER.unpack_from
        keep = self.verify or want_data
        try:
            while off < size and len(recs) < _BATCH_RECORDS and nbytes < _BATCH_BYTES:
                if limit is not None and i >= limit:
                    break
                if off + 12 > size:
                    raise self._bad_header(i, off, f"is cut short ({size - off} header bytes)")
                n, hc = unpack(buf, off)
                end = off + 16 + n
                if end > size:
                    self._check_header(i, off)
                    raise self._bad_header(i, off, f"is cut short (needs {n} bytes of data)")
                offsets.append(off)
                hdrs.append(n)  # length checksums are always checked
                hcrc.append(hc)
                if self.verify:
                    dcrc.append(unfoot(buf, end - 4)[0])
                recs.append(buf[off + 12 : end - 4] if keep else None)
                nbytes += n
                off = end
                i += 1
        except CorruptFileError as e:
            if not recs:
                raise
            self.pending = e
        if recs:
            bad, damaged = self._verify(hdrs, hcrc, recs, dcrc, offsets)
            if damaged is not None:
                if not bad:
                    raise damaged
                self.pending = damaged
                del recs[bad:]
                i = self.index + bad
                off = offsets[bad]
        if not want_data:
            recs = [None] * len(recs)
        self.off, self.index = off, i
        return recs

    def _verify(
        self, hdrs: list, hcrc: list, recs: list, dcrc: list, offsets: list
    ) -> tuple[int, CorruptFileError | None]:
        """(index in the batch of the first damaged record, its error) or (0, None)."""
        bad = np.flatnonzero(masked_crc32c_lengths(hdrs) != np.array(hcrc, dtype=np.uint32))
        if bad.size:
            j = int(bad[0])
            return j, self._bad_header(self.index + j, offsets[j], "has a bad length checksum")
        if not self.verify:
            return 0, None
        bad = np.flatnonzero(masked_crc32c_many(recs) != np.array(dcrc, dtype=np.uint32))
        if bad.size:
            j = int(bad[0])
            return j, CorruptFileError(
                f"TFRecord file {self.path!r}: record {self.index + j} at byte {offsets[j]} has a "
                "bad data checksum; the file is corrupt."
            )
        return 0, None


def map_file(path: str) -> tuple[Any, Any]:
    """``(buffer, closer)`` over the file's bytes (an mmap; ``b''`` for an empty file)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b"", None
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return mm, mm.close
