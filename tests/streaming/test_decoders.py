"""Field decoders: bytes by default, per extension on request, the fused JPEG path."""

from __future__ import annotations

import numpy as np
import pytest

from dataflow.streaming.decoders import decode_field, encode_field, make_decoder

cv2 = pytest.importorskip("cv2")


def _image() -> np.ndarray:
    return (np.arange(16 * 24 * 3) % 251).astype(np.uint8).reshape(16, 24, 3)


@pytest.mark.parametrize(("field", "value"), [
    ("cls", 7), ("txt", "héllo"), ("json", {"a": [1, 2]}), ("msgpack", {"b": 3}),
    ("x.npy", np.arange(6, dtype=np.float32).reshape(2, 3)),
])
def test_round_trip(field, value):
    got = decode_field(field, encode_field(field, value))
    if isinstance(value, np.ndarray):
        assert got.dtype == value.dtype and got.tolist() == value.tolist()
    else:
        assert got == value


def test_png_is_lossless_and_jpeg_fused_matches_cv2():
    img = _image()
    assert decode_field("seg.png", encode_field("seg.png", img)).tolist() == img.tolist()
    data = encode_field("jpg", img)
    fused = decode_field("jpg", data, "jpeg")
    plain = decode_field("jpg", data, "auto")
    assert fused.shape == plain.shape == (16, 24, 3)
    assert np.array_equal(fused, plain)  # both libjpeg-turbo at scale 1


def test_make_decoder_per_field():
    sample = {"__key__": "k", "cls": b"3", "txt": b"hi", "bin": b"\x00"}
    assert make_decoder(None) is None
    assert make_decoder("auto")(dict(sample)) == {"__key__": "k", "cls": 3, "txt": "hi",
                                                   "bin": b"\x00"}
    dec = make_decoder({"cls": "auto", "txt": bytes.upper})
    assert dec(dict(sample)) == {"__key__": "k", "cls": 3, "txt": b"HI", "bin": b"\x00"}
    assert make_decoder("bytes")(dict(sample)) == sample


def test_errors_name_the_field():
    with pytest.raises(ValueError, match="`decode` of field 'cls' must be one of"):
        make_decoder({"cls": "int"})
    with pytest.raises(ValueError, match="`decode` must be None, one of"):
        make_decoder("jpg")
    from dataflow.errors import ImageDecodeError
    with pytest.raises(ImageDecodeError, match="field 'png': 3 bytes are not a readable image"):
        decode_field("png", b"abc")
