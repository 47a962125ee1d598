"""ColorSpace, Grayscale, ToUint8, ToFloat32."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from dataflow import imgaug

RGB = np.array([[[255, 0, 0], [0, 255, 0]], [[0, 0, 255], [40, 80, 120]]], dtype=np.uint8)


def test_color_space_exact_and_keepdims():
    out = imgaug.ColorSpace(cv2.COLOR_RGB2GRAY).augment(RGB)
    assert out.shape == (2, 2, 1)
    np.testing.assert_array_equal(out[:, :, 0], cv2.cvtColor(RGB, cv2.COLOR_RGB2GRAY))
    assert imgaug.ColorSpace(cv2.COLOR_RGB2GRAY, keepdims=False).augment(RGB).shape == (2, 2)
    back = imgaug.ColorSpace(cv2.COLOR_GRAY2RGB).augment(out)
    assert back.shape == (2, 2, 3)
    f64 = RGB.astype(np.float64) / 255
    hsv = imgaug.ColorSpace(cv2.COLOR_RGB2HSV).augment(f64)
    assert hsv.dtype == np.float64
    np.testing.assert_allclose(hsv[0, 0], [0, 1, 1], atol=1e-6)
    with pytest.raises(ValueError, match=r"conversion code 6 to an image of shape \(2, 2\)"):
        imgaug.ColorSpace(cv2.COLOR_BGR2GRAY).augment(RGB[:, :, 0])


def test_grayscale_exact():
    bgr_gray = np.rint(0.114 * RGB[..., 0] + 0.587 * RGB[..., 1] + 0.299 * RGB[..., 2])
    out = imgaug.Grayscale().augment(RGB)
    np.testing.assert_array_equal(out[:, :, 0], bgr_gray)
    rgb_gray = imgaug.Grayscale(rgb=True, keepdims=False).augment(RGB)
    np.testing.assert_array_equal(rgb_gray, [[76, 150], [29, 73]])
    tiled = imgaug.Grayscale(rgb=True, keepshape=True).augment(RGB)
    assert tiled.shape == (2, 2, 3)
    np.testing.assert_array_equal(tiled[..., 2], rgb_gray)
    with pytest.raises(ValueError, match="keepshape=True\\) needs keepdims=True"):
        imgaug.Grayscale(keepdims=False, keepshape=True)


def test_to_uint8_clips_and_truncates_like_tensorpack():
    f = np.array([[-3.0, 0.4, 0.6, 1.99, 254.5, 254.9, 300.0]], np.float32)
    out = imgaug.ToUint8().augment(f)
    # np.clip(f, 0, 255).astype(np.uint8), what tensorpack's ToUint8 returns
    assert out.dtype == np.uint8 and out.tolist() == [[0, 0, 0, 1, 254, 254, 255]]
    f64 = np.array([[-0.5, 127.999]], np.float64)
    assert imgaug.ToUint8().augment(f64).tolist() == [[0, 127]]
    u = np.array([[1, 2]], np.uint8)
    assert imgaug.ToUint8().augment(u) is u


def test_to_uint8_round_true_rounds_half_to_even_then_clips():
    f = np.array([[-3.0, 0.4, 0.6, 1.99, 254.5, 254.9, 300.0]], np.float32)
    out = imgaug.ToUint8(round=True).augment(f)
    assert out.dtype == np.uint8 and out.tolist() == [[0, 0, 1, 2, 254, 255, 255]]
    with pytest.raises(TypeError, match=r"`round` must be a bool, got 1 \(type int\)"):
        imgaug.ToUint8(round=1)


def test_to_float32():
    out = imgaug.ToFloat32().augment(RGB)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, RGB)
