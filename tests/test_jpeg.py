"""dataflow.jpeg: the region decoder (C extension) and its cv2 fallback."""

from __future__ import annotations

import logging
import os
import struct
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow import jpeg
from dataflow.errors import DataFlowError, ImageDecodeError
from dataflow.imgaug._cv2 import cv2
from dataflow.imgaug.fused import decode_image
from dataflow.jpeg import decode_jpeg, jpeg_shape

TURBO = jpeg.fast_path_status() is None
needs_turbo = pytest.mark.skipif(not TURBO, reason=f"fast path off: {jpeg.fast_path_status()}")
HAS_SIMPLEJPEG = jpeg._load_simplejpeg() is not None
#: the fallback's whole-image decoders (simplejpeg where installed: the imgaug extra's)
FALLBACKS = ["cv2", pytest.param("simplejpeg", marks=pytest.mark.skipif(
    not HAS_SIMPLEJPEG, reason="simplejpeg not installed (the imgaug extra installs it)"))]
SAMPLING = {
    "420": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420,
    "422": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_422,
    "444": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444,
}


def make_jpeg(h, w, seed=0, sampling="420", progressive=False, gray=False, quality=90):
    """A textured image (smooth waves and pixel noise) encoded by OpenCV."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([np.sin(xx * 0.07 + c) * np.cos(yy * 0.05 - c) for c in range(3)], -1)
    img = (img * 90 + 128 + rng.normal(0, 10, img.shape)).clip(0, 255).astype(np.uint8)
    if gray:
        img = img[:, :, 0]
    params = [cv2.IMWRITE_JPEG_QUALITY, quality, cv2.IMWRITE_JPEG_SAMPLING_FACTOR,
              SAMPLING[sampling], cv2.IMWRITE_JPEG_PROGRESSIVE, int(progressive)]
    ok, buf = cv2.imencode(".jpg", img, params)
    assert ok
    return buf.tobytes()


def imdecode(data, flag=cv2.IMREAD_COLOR):
    return cv2.imdecode(np.frombuffer(data, np.uint8), flag)


KINDS = [{"sampling": s, "progressive": p} for s in SAMPLING for p in (False, True)]


def test_fast_path_is_built_under_make_test():
    # `make test` sets this: a CI machine that silently fell back to cv2 fails here
    if os.environ.get("DATAFLOW_EXPECT_JPEG_EXT") != "1":
        pytest.skip("DATAFLOW_EXPECT_JPEG_EXT is not set (only `make test` requires the build)")
    assert jpeg.fast_path_status() is None


def test_error_class():
    assert issubclass(ImageDecodeError, DataFlowError)
    assert issubclass(ImageDecodeError, ValueError)


@pytest.mark.parametrize("backend", ["auto", "cv2"])
def test_jpeg_shape_reads_the_header(backend):
    assert jpeg_shape(make_jpeg(37, 53), backend=backend) == (37, 53, 3)
    assert jpeg_shape(make_jpeg(20, 9, gray=True), backend=backend) == (20, 9, 1)
    assert jpeg_shape(make_jpeg(16, 24, progressive=True), backend=backend) == (16, 24, 3)
    assert jpeg_shape(bytearray(make_jpeg(5, 7)), backend=backend) == (5, 7, 3)
    with pytest.raises(ImageDecodeError, match="bytes"):
        jpeg_shape(b"\x89PNG\r\n\x1a\n" + bytes(40), backend=backend)


@pytest.mark.parametrize("backend", ["auto", *FALLBACKS])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("color", ["bgr", "rgb", "gray"])
def test_full_decode_is_cv2_imdecode(kind, color, backend):
    data = make_jpeg(61, 83, **kind)
    ref = imdecode(data, cv2.IMREAD_GRAYSCALE if color == "gray" else cv2.IMREAD_COLOR)
    if color == "rgb":
        ref = ref[:, :, ::-1]
    out = decode_jpeg(data, color=color, backend=backend)
    assert out.dtype == np.uint8 and out.shape == ref.shape and out.flags["C_CONTIGUOUS"]
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("backend", ["auto", *FALLBACKS])
def test_gray_jpeg_decodes_to_bgr_like_cv2(backend):
    data = make_jpeg(30, 41, gray=True)
    np.testing.assert_array_equal(decode_jpeg(data, backend=backend), imdecode(data))


FULL = {}


def _full(kind_index, d):
    key = (kind_index, d)
    if key not in FULL:
        data = make_jpeg(97, 130, seed=kind_index, **KINDS[kind_index])
        FULL[key] = data, decode_jpeg(data, scale=d)
    return FULL[key]


@needs_turbo
@settings(max_examples=150, deadline=None)
@given(kind=st.integers(0, len(KINDS) - 1), d=st.sampled_from([1, 2, 4, 8]), data=st.data())
def test_region_at_scale_is_the_same_region_of_the_full_decode(kind, d, data):
    jpg, full = _full(kind, d)
    h, w = full.shape[:2]
    assert (h, w) == (-(-97 // d), -(-130 // d))
    x = data.draw(st.integers(0, w - 1))
    y = data.draw(st.integers(0, h - 1))
    cw = data.draw(st.integers(1, w - x))
    ch = data.draw(st.integers(1, h - y))
    # the crop in full-resolution pixels whose scaled cover is exactly this window
    crop = (x * d, y * d, min(cw * d, 130 - x * d), min(ch * d, 97 - y * d))
    assert jpeg.scaled_window(crop, d) == (x, y, cw, ch)
    out = decode_jpeg(jpg, crop, scale=d)
    np.testing.assert_array_equal(out, full[y : y + ch, x : x + cw])


def test_dct_scale_picks_the_coarsest_scale_that_is_large_enough():
    assert jpeg.dct_scale((1536, 2048), 224) == 4
    assert jpeg.dct_scale((1792, 1792), 224) == 8
    assert jpeg.dct_scale((1791, 1792), 224) == 8  # ceil(1791 / 8) = 224
    assert jpeg.dct_scale((1783, 1792), 224) == 4
    assert jpeg.dct_scale((446, 1000), 224) == 1
    assert jpeg.dct_scale((447, 1000), 224) == 2  # ceil(447 / 2) = 224
    assert jpeg.dct_scale((448, 1000), (224, 100)) == 2
    assert jpeg.dct_scale((100, 100), 224) == 1
    assert jpeg.scaled_window((3, 5, 10, 4), 4) == (0, 1, 4, 2)


@needs_turbo
def test_decodes_into_a_callers_strided_buffer():
    data = make_jpeg(40, 50)
    batch = np.zeros((3, 20, 60, 3), np.uint8)
    out = decode_jpeg(data, (10, 5, 30, 20), out=batch[1, :, 5:35])
    assert out.base is not None
    np.testing.assert_array_equal(batch[1, :, 5:35], imdecode(data)[5:25, 10:40])
    assert not batch[0].any() and not batch[2].any() and not batch[1, :, :5].any()
    with pytest.raises(ValueError, match=r"`out` must be a uint8 array of shape \(20, 30, 3\)"):
        decode_jpeg(data, (10, 5, 30, 20), out=np.zeros((20, 31, 3), np.uint8))


def test_argument_errors_name_the_parameter():
    data = make_jpeg(40, 50)
    with pytest.raises(ValueError, match=r"`crop` \(x, y, w, h\)=\(45, 0, 10, 10\) must be"):
        decode_jpeg(data, (45, 0, 10, 10))
    with pytest.raises(ValueError, match="`crop` must be"):
        decode_jpeg(data, (1, 2))
    with pytest.raises(ValueError, match="`color` must be one of"):
        decode_jpeg(data, color="hsv")
    with pytest.raises(ValueError, match="`backend` must be one of"):
        decode_jpeg(data, backend="pil")
    with pytest.raises(TypeError, match="`data` must be the encoded JPEG"):
        decode_jpeg(12345)


@pytest.mark.parametrize("backend", ["auto", *FALLBACKS])
def test_corrupt_and_truncated_data_raise(backend):
    data = make_jpeg(64, 64)
    with pytest.raises(ImageDecodeError, match="cannot decode the JPEG data"):
        decode_jpeg(b"not a jpeg at all", backend=backend)
    cut = data[: len(data) // 2]
    with pytest.raises(ImageDecodeError, match="truncated"):
        decode_jpeg(cut, backend=backend)
    # the window lies above the missing part: still an error
    with pytest.raises(ImageDecodeError, match="truncated"):
        decode_jpeg(cut, (0, 0, 8, 8), backend=backend)
    decoder = "turbo" if jpeg._turbo(backend) else jpeg._fallback(backend)
    if decoder == "cv2" and imdecode(cut) is None:  # OpenCV 5 refuses truncated data
        with pytest.raises(ImageDecodeError, match=r"cv2\.imdecode failed"):
            decode_jpeg(cut, strict=False, backend=backend)
        return
    # lenient: libjpeg fills the missing rows with grey (the fast path, simplejpeg); the cv2
    # fallback gives what OpenCV gives (OpenCV 4.8 does not fill them with grey)
    out = decode_jpeg(cut, strict=False, backend=backend)
    assert out.shape == (64, 64, 3)
    if decoder == "cv2":
        np.testing.assert_array_equal(out, imdecode(cut))
    else:
        assert (out[-1] == 128).all()


@pytest.mark.parametrize("backend", [
    pytest.param("turbo", marks=needs_turbo), FALLBACKS[1]])
def test_corrupt_entropy_data_is_a_libjpeg_warning_turned_error(backend):
    data = bytearray(make_jpeg(64, 64))
    sos = data.rfind(b"\xff\xda")
    data[sos + 40 : sos + 44] = b"\xff\xd0\xff\xd3"  # restart markers where none belong
    why = "libjpeg warning" if backend == "turbo" else "Corrupt JPEG data.*simplejpeg"
    with pytest.raises(ImageDecodeError, match=f"{why}; pass strict=False"):
        decode_jpeg(bytes(data), backend=backend)
    assert decode_jpeg(bytes(data), strict=False, backend=backend).shape == (64, 64, 3)


@pytest.mark.parametrize("backend", FALLBACKS)
def test_fallback_gives_the_same_shapes_and_window_pixels(backend):
    data = make_jpeg(97, 130)
    full = imdecode(data)
    out = decode_jpeg(data, (7, 9, 50, 40), backend=backend)
    np.testing.assert_array_equal(out, full[9:49, 7:57])
    scaled = decode_jpeg(data, (8, 4, 100, 80), min_size=40, backend=backend)
    assert scaled.shape == (40, 50, 3)  # scale 1/2: window (4, 2, 50, 40)
    # OpenCV's reduced decode is libjpeg-turbo's DCT scaling, as the fast path's
    ref = imdecode(data, cv2.IMREAD_REDUCED_COLOR_2)
    assert ref.shape == (49, 65, 3)
    np.testing.assert_array_equal(scaled, ref[2:42, 4:54])
    np.testing.assert_array_equal(decode_jpeg(data, color="gray", backend=backend),
                                  imdecode(data, cv2.IMREAD_GRAYSCALE))


@needs_turbo
@pytest.mark.parametrize("backend", FALLBACKS)
@pytest.mark.parametrize("d", [1, 2, 4, 8])
@pytest.mark.parametrize("color", ["bgr", "rgb", "gray"])
@pytest.mark.parametrize("kind", [{"sampling": "420"}, {"sampling": "444", "progressive": True},
                                  {"sampling": "422", "gray": True}])
def test_fallback_gives_the_fast_paths_pixels_at_every_scale(d, color, kind, backend):
    data = make_jpeg(301, 457, seed=d, **kind)
    for crop in (None, (10, 21, 100, 90), (400, 290, 57, 11)):
        fast = decode_jpeg(data, crop, scale=d, color=color, backend="turbo")
        slow = decode_jpeg(data, crop, scale=d, color=color, backend=backend)
        assert slow.shape == fast.shape and slow.flags["C_CONTIGUOUS"]
        np.testing.assert_array_equal(slow, fast)


@pytest.mark.parametrize("fallback", FALLBACKS)
def test_environment_variable_turns_the_extension_off_and_the_note_says_how_to_get_it(fallback):
    code = ("import logging, sys; logging.basicConfig(stream=sys.stdout); "
            "from dataflow import jpeg; print(jpeg.fast_path_status()); "
            "print(jpeg.fast_path_note()); print(jpeg.fast_path_note(only_if_used=False)); "
            "data = sys.stdin.buffer.read(); "
            "jpeg.decode_jpeg(data); jpeg.decode_jpeg(data); print(jpeg.fast_path_note()); "
            "print(sorted(m for m in ('cv2', 'simplejpeg') if m in sys.modules))")
    env = dict(os.environ, DATAFLOW_NO_JPEG_EXT="1", DATAFLOW_JPEG_FALLBACK=fallback)
    out = subprocess.run([sys.executable, "-c", code], input=make_jpeg(20, 30), env=env,
                         capture_output=True, check=True, timeout=120).stdout.decode()
    lines = out.splitlines()
    reason = "the C extension dataflow.jpeg._jpeg is disabled by DATAFLOW_NO_JPEG_EXT=1"
    assert lines[0] == reason
    name = {"cv2": "OpenCV's DCT-scaled cv2.imdecode",
            "simplejpeg": "simplejpeg (DCT-scaled)"}[fallback]
    note = (f"JPEG fast path off ({reason}): decoding whole images with {name} instead; to get "
            f"it, {jpeg.HOW_TO_GET}.")
    assert lines[1] == "None"  # nothing decoded yet
    assert lines[2] == note
    assert lines[3] == ("WARNING:dataflow.jpeg:dataflow.jpeg: the region-decoding fast path is "
                        f"off ({reason}); decoding whole images with {name} (at 1/2, 1/4 or 1/8 "
                        f"scale where a window allows). To get it, {jpeg.HOW_TO_GET}.")
    assert lines[4] == note
    # the decoder that was named is the one that decoded (simplejpeg: OpenCV never imported)
    assert lines[5] == str(["cv2"] if fallback == "cv2" else ["simplejpeg"])
    assert len(lines) == 6  # the warning once


def test_simplejpeg_backend_without_the_package_names_the_extra(monkeypatch):
    monkeypatch.setattr(jpeg, "_simplejpeg_module", None)
    with pytest.raises(ImportError, match=r"pip install 'opencv-python-headless>=4\.8' "
                                          r"'simplejpeg>=1\.7\.6' \(the extra \[imgaug\]"):
        decode_jpeg(make_jpeg(8, 8), backend="simplejpeg")
    if not TURBO:  # "auto" then decodes with OpenCV
        np.testing.assert_array_equal(decode_jpeg(make_jpeg(8, 8)), imdecode(make_jpeg(8, 8)))


def test_auto_falls_back_without_the_extension_and_logs_once(monkeypatch, caplog):
    monkeypatch.setattr(jpeg, "_jpeg", None)
    monkeypatch.setattr(jpeg, "_OFF_REASON", "the C extension dataflow.jpeg._jpeg is not available")
    monkeypatch.setattr(jpeg, "_logged_off", False)
    data = make_jpeg(30, 40)
    with caplog.at_level(logging.WARNING, logger="dataflow.jpeg"):
        a = decode_jpeg(data)
        b = decode_jpeg(data, (0, 0, 10, 10))
    off = [r for r in caplog.records if "fast path is off" in r.getMessage()]
    assert len(off) == 1
    assert "dataflow.jpeg._jpeg is not available" in off[0].getMessage()
    np.testing.assert_array_equal(a, imdecode(data))
    np.testing.assert_array_equal(b, a[:10, :10])
    assert jpeg.fast_path_status() == "the C extension dataflow.jpeg._jpeg is not available"
    with pytest.raises(ImportError, match="`backend='turbo'` needs the fast path"):
        decode_jpeg(data, backend="turbo")


def _with_orientation(data: bytes, value: int, order: str = ">") -> bytes:
    """Insert an APP1 Exif segment whose first IFD holds only the orientation tag (big-endian
    TIFF, or little-endian with ``order="<"``)."""
    tiff = (b"MM\x00\x2a" if order == ">" else b"II\x2a\x00") + struct.pack(order + "I", 8)
    tiff += struct.pack(order + "H", 1)
    tiff += struct.pack(order + "HHIHH", 0x0112, 3, 1, value, 0) + struct.pack(order + "I", 0)
    payload = b"Exif\x00\x00" + tiff
    return data[:2] + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload + data[2:]


def test_exif_orientation_is_read_and_decode_image_applies_it_like_cv2():
    data = _with_orientation(make_jpeg(30, 50), 6)
    stored = decode_jpeg(data)
    assert stored.shape == (30, 50, 3)  # the stored grid
    np.testing.assert_array_equal(
        stored, imdecode(data, cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION))
    assert jpeg.jpeg_orientation(data) == 6
    assert jpeg.jpeg_orientation(make_jpeg(8, 8)) == 1
    for value in range(1, 9):  # the header parsed in Python (the fallback's) reads it too
        assert jpeg._header(_with_orientation(make_jpeg(8, 8), value), False) == (8, 8, 3, 0,
                                                                                 value)
        little = _with_orientation(make_jpeg(8, 8), value, "<")
        assert jpeg._header(little, False)[4] == value
        if TURBO:
            assert jpeg._header(little, True)[4] == value
    assert jpeg._header(_with_orientation(make_jpeg(8, 8), 9), False)[4] == 1  # out of range
    rotated = decode_image(data)
    assert rotated.shape == (50, 30, 3)
    np.testing.assert_array_equal(rotated, imdecode(data))


@needs_turbo
def test_decoding_in_threads_gives_the_same_pixels():
    datas = [make_jpeg(120, 160, seed=i) for i in range(4)]
    refs = [imdecode(d)[10:90, 20:140] for d in datas]
    errors = []

    def work(k):
        try:
            for _ in range(20):
                np.testing.assert_array_equal(decode_jpeg(datas[k], (20, 10, 120, 80)), refs[k])
        except AssertionError as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


@pytest.mark.parametrize("backend", ["auto", *FALLBACKS])
def test_decode_image_gives_cv2_imdecode_pixels_with_every_decoder(backend):
    png = cv2.imencode(".png", imdecode(make_jpeg(9, 11)))[1].tobytes()
    for data in (make_jpeg(45, 67, seed=2), make_jpeg(33, 20, gray=True), png,
                 _with_orientation(make_jpeg(30, 50), 3)):
        for color, flag in (("bgr", cv2.IMREAD_COLOR), ("rgb", cv2.IMREAD_COLOR),
                            ("gray", cv2.IMREAD_GRAYSCALE)):
            ref = imdecode(data, flag)
            out = decode_image(data, color, backend=backend)
            np.testing.assert_array_equal(out, ref[:, :, ::-1] if color == "rgb" else ref)
    data = make_jpeg(40, 40)
    with pytest.raises(ImageDecodeError, match="truncated"):
        decode_image(data[: len(data) // 2], backend=backend)


def test_no_c_ext_turns_off_every_extension_of_ours():
    code = ("from dataflow import jpeg; from dataflow.wrappers import batch; "
            "print(jpeg.fast_path_status()); print(batch._fill)")
    env = dict(os.environ, DATAFLOW_NO_C_EXT="1")
    env.pop("DATAFLOW_NO_JPEG_EXT", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=120).stdout.splitlines()
    assert out == ["the C extension dataflow.jpeg._jpeg is disabled by DATAFLOW_NO_C_EXT=1",
                   "None"]
