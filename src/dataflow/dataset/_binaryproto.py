"""A minimal reader of Caffe's ``BlobProto`` (``.binaryproto``) files, without protobuf.

Only the fields a mean file uses are decoded: ``num``/``channels``/``height``/``width`` (1-4),
``data`` (5, float, packed or not), ``shape`` (7, a ``BlobShape`` with ``dim`` = 1) and
``double_data`` (8). Other fields are skipped.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dataflow.serialize._protobuf import fields as _fields
from dataflow.serialize._protobuf import varint as _varint

__all__ = ["read_blob_proto"]


def _packed_varints(buf: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(buf):
        value, pos = _varint(buf, pos)
        out.append(value)
    return out


def read_blob_proto(data: bytes) -> np.ndarray:
    """Decode a serialized ``BlobProto`` into a ``float32`` array of its shape.

    Raises ``ValueError`` when the bytes are not a well-formed blob.
    """
    legacy = {1: 1, 2: 1, 3: 1, 4: 1}
    seen_legacy = False
    shape: list[int] | None = None
    chunks: list[np.ndarray] = []
    value: Any
    for field, wire, value in _fields(bytes(data)):
        if field in legacy and wire == 0:
            legacy[field] = value
            seen_legacy = True
        elif field == 5 and wire in (2, 5):  # packed, or one float per field
            chunks.append(np.frombuffer(value, dtype="<f4"))
        elif field == 8 and wire in (1, 2):
            chunks.append(np.frombuffer(value, dtype="<f8").astype(np.float32))
        elif field == 7 and wire == 2:
            shape = []
            sub_value: Any
            for sub, sub_wire, sub_value in _fields(value):
                if sub == 1 and sub_wire == 0:
                    shape.append(sub_value)
                elif sub == 1 and sub_wire == 2:
                    shape.extend(_packed_varints(sub_value))
    values = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    if shape is None:
        if not seen_legacy:
            raise ValueError("the blob has neither a `shape` nor num/channels/height/width")
        shape = [legacy[1], legacy[2], legacy[3], legacy[4]]
    if int(np.prod(shape)) != values.size:
        raise ValueError(f"the blob's shape {tuple(shape)} does not match its {values.size} values")
    return values.astype(np.float32, copy=False).reshape(shape)
