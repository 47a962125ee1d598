"""The streaming tar reader: members and samples as bytes arrive, offsets, corrupt input."""

from __future__ import annotations

import io
import tarfile

import pytest

from dataflow.errors import CorruptFileError
from dataflow.streaming.tar import iter_members, iter_samples, split_key, tar_header


class Trickle(io.RawIOBase):
    """A stream that returns at most 7 bytes per read (a slow network)."""

    def __init__(self, data: bytes) -> None:
        self.buf = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        return self.buf.read(min(n, 7) if n >= 0 else 7)


def _tar(members: list[tuple[str, bytes]], fmt=tarfile.GNU_FORMAT) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tf:
        info = tarfile.TarInfo("somedir")
        info.type = tarfile.DIRTYPE
        tf.addfile(info)
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT])
def test_samples_group_members_by_key(fmt):
    long = "d/" + "x" * 90 + "/k2"
    data = _tar([("d/k1.jpg", b"J1"), ("d/k1.seg.png", b"P"), (long + ".cls", b"7"),
                 ("k3", b"")], fmt)
    got = list(iter_samples(Trickle(data), "mem.tar"))
    assert got == [{"__key__": "d/k1", "jpg": b"J1", "seg.png": b"P"},
                   {"__key__": long, "cls": b"7"}, {"__key__": "k3", "": b""}]


def test_samples_arrive_before_the_stream_ends():
    data = _tar([("a.x", b"1"), ("b.x", b"2")])
    stream = Trickle(data)  # bytes arrive 7 at a time
    it = iter_samples(stream)
    assert next(it) == {"__key__": "a", "x": b"1"}
    assert stream.buf.tell() < len(data)  # the rest was not needed yet


def test_member_offsets_allow_range_reads():
    data = _tar([("a.x", b"1" * 700), ("b.x", b"22"), ("b.y", b"3")])
    members = list(iter_members(io.BytesIO(data)))
    b = members[1]
    assert data[b.data_offset:b.data_offset + 2] == b"22"
    part = io.BytesIO(data[b.header_offset:members[2].end])
    got = list(iter_samples(part, "mem", offset=b.header_offset, end=members[2].end))
    assert got == [{"__key__": "b", "x": b"22", "y": b"3"}]


def test_split_key():
    assert split_key("a/b.c/d.seg.png") == ("a/b.c/d", "seg.png")
    assert split_key("noext") == ("noext", "")


def test_truncated_shard_names_file_and_member():
    data = _tar([("a.x", b"1" * 2000)])
    with pytest.raises(CorruptFileError, match=r"s3://b/t\.tar is truncated in member 'a\.x'"):
        list(iter_samples(io.BytesIO(data[:1500]), "s3://b/t.tar"))
    with pytest.raises(CorruptFileError, match="truncated: a member header at byte 0"):
        list(iter_members(io.BytesIO(data[:100]), "t.tar"))


def test_bad_checksum_and_repeated_field():
    with pytest.raises(CorruptFileError, match="bad header checksum at byte 0"):
        list(iter_members(io.BytesIO(b"x" * 1024), "t.tar"))
    data = _tar([("a.x", b"1"), ("a.x", b"2")])
    with pytest.raises(CorruptFileError, match="repeats field 'x' of sample 'a'"):
        list(iter_samples(io.BytesIO(data), "t.tar"))


def test_our_headers_read_with_tarfile():
    name = "k/" + "n" * 120 + ".bin"
    raw = tar_header(name, 3) + b"abc" + b"\0" * 509 + b"\0" * 1024
    with tarfile.open(fileobj=io.BytesIO(raw)) as tf:
        assert tf.getnames() == [name]
        assert tf.extractfile(name).read() == b"abc"
