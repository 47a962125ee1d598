from __future__ import annotations

import struct

import lmdb
import numpy as np
import pytest

from dataflow.serialize import CaffeLMDB
from dataflow.serialize.caffe_format import parse_datum
from tests.helpers import check_dataflow


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _datum(c, h, w, data=b"", label=0, floats=(), packed=True, encoded=None) -> bytes:
    """A Caffe Datum in protobuf wire format (fields in a shuffled order, as allowed)."""
    msg = _varint(5 << 3) + _varint(label)
    msg += _varint(1 << 3) + _varint(c) + _varint(2 << 3) + _varint(h)
    if data:
        msg += _varint(4 << 3 | 2) + _varint(len(data)) + data
    if floats and packed:
        body = struct.pack(f"<{len(floats)}f", *floats)
        msg += _varint(6 << 3 | 2) + _varint(len(body)) + body
    for f in floats if not packed else ():
        msg += _varint(6 << 3 | 5) + struct.pack("<f", f)
    msg += _varint(3 << 3) + _varint(w)
    msg += _varint(99 << 3 | 2) + _varint(3) + b"xyz"  # an unknown field is skipped
    if encoded is not None:
        msg += _varint(7 << 3) + _varint(int(encoded))
    return msg


def test_parse_datum_fields_and_negative_label():
    d = parse_datum(_datum(3, 2, 1, data=bytes(6), label=-7, encoded=False))
    assert d == {
        "channels": 3,
        "height": 2,
        "width": 1,
        "data": bytes(6),
        "label": -7,
        "float_data": [],
        "encoded": False,
    }
    assert parse_datum(_datum(1, 1, 2, floats=(1.5, -2.0), packed=False))["float_data"] == [
        1.5,
        -2.0,
    ]
    with pytest.raises(ValueError, match=r"field 4 needs 6 bytes, 5 left"):
        parse_datum(_datum(3, 2, 1, data=bytes(6))[:-9])


def test_caffe_lmdb_yields_hwc_images_and_labels(tmp_path, caplog):
    chw = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    floats = np.linspace(0, 1, 6, dtype=np.float32).reshape(1, 2, 3)
    env = lmdb.open(str(tmp_path / "caffe"), map_size=1 << 22)
    with env.begin(write=True) as txn:
        txn.put(b"00000000", _datum(2, 3, 4, data=chw.tobytes(), label=1))
        txn.put(b"00000001", _datum(1, 2, 3, floats=tuple(floats.ravel()), label=2))
        txn.put(b"00000002", b"\xff\xff garbage")
        txn.put(b"00000003", _datum(2, 3, 4, data=chw.tobytes()[::-1], label=3))
    env.close()
    df = CaffeLMDB(tmp_path / "caffe", shuffle=False)
    assert len(df) == 4  # an upper bound: the undecodable entry is dropped
    df.reset_state()
    assert [dp[1] for dp in df] == [1, 2, 3] == [dp[1] for dp in df]
    assert "not a decodable Datum" in caplog.text
    assert caplog.text.count("not a decodable Datum") == 1
    df.reset_state()
    img, label = next(iter(df))
    assert img.shape == (3, 4, 2) and img.dtype == np.uint8 and img.flags.writeable
    assert np.array_equal(img, chw.transpose(1, 2, 0)) and label == 1
    second = list(df)[1][0]
    assert second.dtype == np.float32 and np.array_equal(second, floats.transpose(1, 2, 0))
    shuffled = CaffeLMDB(tmp_path / "caffe", shuffle=True, keys=["00000000", "00000003"], seed=0)
    assert sorted(dp[1] for dp in check_dataflow(shuffled)) == [1, 3]
    by_format = CaffeLMDB(tmp_path / "caffe", shuffle=False, keys="{:0>8d}")
    by_format.reset_state()
    assert [dp[1] for dp in by_format] == [1, 2, 3]
