"""A tiny protobuf wire-format reader, enough for Caffe's ``Datum`` and ``BlobProto`` (no protoc,
no generated code)."""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["fields", "varint"]


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode the varint at ``buf[pos]``: ``(value, position after it)``."""
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """Yield ``(field_number, wire_type, value)``; value is an int or a bytes slice."""
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value: int | bytes
            value, pos = varint(buf, pos)
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, pos = buf[pos : pos + width], pos + width
        elif wire == 2:
            length, pos = varint(buf, pos)
            value, pos = buf[pos : pos + length], pos + length
        else:
            raise ValueError(f"unsupported wire type {wire} (field {field})")
        if pos > len(buf):
            raise ValueError(f"field {field} runs past the end of the message")
        yield field, wire, value
