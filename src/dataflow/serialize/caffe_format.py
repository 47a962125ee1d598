"""``CaffeLMDB``: images and labels from a Caffe LMDB of ``Datum`` protobufs.

The ``Datum`` message is parsed by a tiny protobuf wire-format decoder (no ``caffe.proto``
download, no ``protoc``; tensorpack's loader needed both and the removed ``imp`` module)::

    message Datum {
      optional int32 channels = 1;  optional int32 height = 2;  optional int32 width = 3;
      optional bytes data = 4;      optional int32 label = 5;   repeated float float_data = 6;
      optional bool encoded = 7; }

Raw ``uint8`` data (CHW) becomes an HWC ``uint8`` image; ``float_data`` becomes an HWC
``float32`` image; ``encoded`` data (JPEG/PNG) is decoded with OpenCV when it is installed.
Entries that cannot be decoded are dropped, with one warning.
"""

from __future__ import annotations

import logging
import os
import struct
from typing import Any

import numpy as np

from dataflow._optional import install_hint
from dataflow.serialize._protobuf import varint as _varint
from dataflow.serialize.lmdb_data import LMDBData, LMDBDataDecoder

__all__ = ["CaffeLMDB", "parse_datum"]

logger = logging.getLogger(__name__)


def _int32(v: int) -> int:
    v &= 0xFFFFFFFFFFFFFFFF
    return v - (1 << 64) if v >= 1 << 63 else v


def parse_datum(buf: bytes) -> dict[str, Any]:
    """Decode a serialized Caffe ``Datum`` into a dict of its fields (proto2 defaults)."""
    out: dict[str, Any] = {
        "channels": 0,
        "height": 0,
        "width": 0,
        "data": b"",
        "label": 0,
        "float_data": [],
        "encoded": False,
    }
    names = {1: "channels", 2: "height", 3: "width", 5: "label"}
    pos, n = 0, len(buf)
    while pos < n:
        tag, pos = _varint(buf, pos)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            v, pos = _varint(buf, pos)
            if field in names:
                out[names[field]] = _int32(v)
            elif field == 7:
                out["encoded"] = bool(v)
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > n:
                raise ValueError(f"field {field} needs {size} bytes, {n - pos} left")
            chunk = buf[pos : pos + size]
            pos += size
            if field == 4:
                out["data"] = bytes(chunk)
            elif field == 6:  # packed floats
                out["float_data"].extend(struct.unpack(f"<{size // 4}f", chunk))
        elif wire == 5:
            if pos + 4 > n:
                raise ValueError("truncated 32-bit field")
            if field == 6:
                out["float_data"].append(struct.unpack_from("<f", buf, pos)[0])
            pos += 4
        elif wire == 1:
            pos += 8
        else:
            raise ValueError(f"unsupported wire type {wire} (field {field})")
    if pos != n:
        raise ValueError("truncated message")
    return out


def decode_datum(value: bytes) -> list[Any]:
    """``[image_hwc, label]`` from a serialized ``Datum``."""
    d = parse_datum(value)
    c, h, w = d["channels"], d["height"], d["width"]
    if d["encoded"]:
        try:
            import cv2
        except ImportError as e:
            raise ImportError(
                f"CaffeLMDB: encoded (JPEG/PNG) datums need OpenCV; {install_hint('cv2')}"
            ) from e
        img = cv2.imdecode(np.frombuffer(d["data"], np.uint8), cv2.IMREAD_UNCHANGED)
        if img is None:
            raise ValueError("OpenCV could not decode the encoded image")
    elif d["data"]:
        img = np.frombuffer(d["data"], np.uint8).reshape(c, h, w).transpose(1, 2, 0).copy()
    else:
        arr = np.asarray(d["float_data"], dtype=np.float32)
        img = arr.reshape(c, h, w).transpose(1, 2, 0).copy()
    return [img, d["label"]]


class _DatumDecoder:
    """Picklable decoder that drops undecodable entries with one warning."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.warned = False

    def __call__(self, key: bytes, value: bytes) -> list[Any] | None:
        try:
            return decode_datum(value)
        except ImportError:
            raise
        except Exception as e:
            if not self.warned:
                self.warned = True
                logger.warning(
                    "CaffeLMDB: entry %r of %r is not a decodable Datum (%s: %s); dropping it "
                    "(and later ones like it, silently).",
                    key,
                    self.path,
                    type(e).__name__,
                    e,
                )
            return None


def CaffeLMDB(
    lmdb_path: str | os.PathLike,
    shuffle: bool = True,
    keys: list[Any] | str | None = None,
    *,
    seed: int | None = None,
) -> LMDBDataDecoder:
    """A flow of ``[image_hwc, label]`` read from a Caffe LMDB (see the module docstring).

    ``len`` is the number of entries (an upper bound if some are dropped). Caffe databases
    have no ``__keys__``: ``shuffle=True`` without ``keys`` scans the keys once (slow).
    """
    lmdb_data = LMDBData(lmdb_path, shuffle, keys, seed=seed)
    return LMDBDataDecoder(lmdb_data, _DatumDecoder(os.fspath(lmdb_path)))
