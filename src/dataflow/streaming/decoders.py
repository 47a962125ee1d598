"""Field encoders and decoders of WebDataset samples, chosen by the field's last extension.

A field ``"jpg"``, ``"JPEG"`` or ``"seg.png"`` is an image, ``"cls"``/``"index"``/``"id"`` an
integer, ``"txt"`` text, ``"json"`` JSON, ``"npy"`` a NumPy array, ``"msgpack"`` msgpack.
Members stay ``bytes`` unless a decoder is asked for (``decode=``):

* ``None``: every field as bytes;
* ``"auto"``: every known extension decoded (images with ``cv2.imdecode`` to BGR uint8);
* ``"jpeg"``: as ``"auto"``, JPEG images through the fused decoder
  :func:`dataflow.jpeg.decode_jpeg` (libjpeg-turbo, BGR);
* a dict ``{field: decoder}``: only those fields, each by a name above (``"bytes"``,
  ``"auto"``, ``"jpeg"``) or a callable ``bytes -> value``.

:func:`encode_field` is the inverse used by the tar writer (bytes pass unchanged).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = ["IMAGE_EXTENSIONS", "decode_field", "encode_field", "make_decoder"]

IMAGE_EXTENSIONS = frozenset({"jpg", "jpeg", "png", "ppm", "pgm", "bmp", "webp"})
_INT_EXTENSIONS = frozenset({"cls", "cls2", "index", "inx", "id"})
_TEXT_EXTENSIONS = frozenset({"txt", "text", "transcript"})
_NAMES = ("bytes", "auto", "jpeg")


def _ext(field: str) -> str:
    return field.rsplit(".", 1)[-1].lower()


def encode_field(field: str, value: Any) -> bytes:
    """The member bytes of ``value`` stored as field ``field``."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    ext = _ext(field)
    if ext == "json":
        return json.dumps(value).encode("utf-8")
    if ext == "npy":
        buf = io.BytesIO()
        np.save(buf, np.asarray(value), allow_pickle=False)
        return buf.getvalue()
    if ext == "msgpack":
        from dataflow.serialize.codec import dumps
        return dumps(value, "msgpack")
    if ext in IMAGE_EXTENSIONS and isinstance(value, np.ndarray):
        import cv2
        ok, encoded = cv2.imencode("." + ("jpg" if ext == "jpeg" else ext), value)
        if not ok:
            raise ValueError(f"field {field!r}: cv2 could not encode an image of shape "
                             f"{value.shape}, dtype {value.dtype}")
        return encoded.tobytes()
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        return str(int(value)).encode("ascii")
    raise TypeError(
        f"field {field!r}: cannot store a {type(value).__name__} ({value!r:.60}); give bytes, "
        "str, int, or use the extension json/npy/msgpack (or an image extension for an ndarray)."
    )


def decode_field(field: str, data: bytes, how: str = "auto") -> Any:
    """``data`` of field ``field`` decoded by the extension (``how``: ``"auto"`` or
    ``"jpeg"``, see the module docstring); an unknown extension stays bytes."""
    ext = _ext(field)
    if ext in IMAGE_EXTENSIONS:
        if how == "jpeg" and ext in ("jpg", "jpeg"):
            from dataflow.jpeg import decode_jpeg
            return decode_jpeg(data)
        import cv2
        img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if img is None:
            from dataflow.errors import ImageDecodeError
            raise ImageDecodeError(f"field {field!r}: {len(data)} bytes are not a readable image")
        return img
    if ext in _INT_EXTENSIONS:
        return int(data)
    if ext in _TEXT_EXTENSIONS:
        return data.decode("utf-8")
    if ext == "json":
        return json.loads(data)
    if ext == "npy":
        return np.load(io.BytesIO(data), allow_pickle=False)
    if ext == "msgpack":
        from dataflow.serialize.codec import loads
        return loads(data, "msgpack")
    return data


def _one(field: str, spec: Any) -> Callable[[bytes], Any]:
    if callable(spec):
        return spec
    if spec not in _NAMES:
        raise ValueError(
            f"`decode` of field {field!r} must be one of {_NAMES} or a callable, got {spec!r}"
        )
    if spec == "bytes":
        return bytes
    return _FieldDecoder(field, spec)


# The decoders are instances of module-level classes, not closures, so that a flow holding one
# (StreamingShards, TarShardData) pickles into worker processes as it is, with the user's own
# decoding functions when those pickle.
class _FieldDecoder:
    """One field's bytes decoded by name (``"auto"`` or ``"jpeg"``)."""

    def __init__(self, field: str, how: str) -> None:
        self.field, self.how = field, how

    def __call__(self, data: bytes) -> Any:
        return decode_field(self.field, data, self.how)


class _DecodeAll:
    """Every field of a sample (but the ``__key__``-style ones) decoded by one name."""

    def __init__(self, how: str) -> None:
        self.how = how

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        if self.how != "bytes":
            for k, v in sample.items():
                if not k.startswith("__"):
                    sample[k] = decode_field(k, v, self.how)
        return sample


class _DecodeSome:
    """The fields of a table decoded each by its own decoder; the others left as bytes."""

    def __init__(self, table: dict[str, Callable[[bytes], Any]]) -> None:
        self.table = table

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        for f, fn in self.table.items():
            if f in sample:
                sample[f] = fn(sample[f])
        return sample


def make_decoder(decode: Any) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
    """A function that decodes a sample dict in place per ``decode`` (``None``: no decoding)."""
    if decode is None:
        return None
    if isinstance(decode, str):
        if decode not in _NAMES:
            raise ValueError(
                f"`decode` must be None, one of {_NAMES}, or a dict {{field: decoder}}, got "
                f"{decode!r}; e.g. decode='jpeg' or decode={{'jpg': 'jpeg', 'cls': 'auto'}}."
            )
        return _DecodeAll(decode)
    if isinstance(decode, Mapping):
        return _DecodeSome({f: _one(f, s) for f, s in decode.items()})
    raise TypeError(f"`decode` must be None, a str or a dict, got {type(decode).__name__}")
