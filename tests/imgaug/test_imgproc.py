"""Photometric augmentors: exact outputs and seeded golden parameters."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from dataflow import imgaug
from dataflow.rng import set_seed

IMG = np.arange(4 * 5, dtype=np.uint8).reshape(4, 5) * 12
RGB = np.array([[[255, 0, 0], [0, 255, 0]], [[0, 0, 255], [40, 80, 120]]], dtype=np.uint8)


def _params(aug, n=3, img=IMG):
    return [aug.get_transform(img).func.params for _ in range(n)]


def test_brightness_golden_exact_uint8_and_float():
    set_seed(0)
    assert _params(imgaug.Brightness(30)) == pytest.approx(
        [-29.689601265732712, 15.374805233998401, -13.772886295746282]
    )
    set_seed(0)
    aug = imgaug.Brightness(30)
    out = aug.augment(IMG)
    expected = np.clip(np.rint(IMG.astype(np.float64) - 29.689601265732712), 0, 255)
    np.testing.assert_array_equal(out, expected.astype(np.uint8))
    big = np.array([[250, 3]], np.uint8)
    aug.rng = np.random.RandomState(0)
    v = np.random.RandomState(0).uniform(-30, 30)
    np.testing.assert_array_equal(aug.augment(big), np.clip(np.rint(big + v), 0, 255))
    f = np.array([[250.0, 3.0]], np.float32)
    aug.rng = np.random.RandomState(0)
    np.testing.assert_allclose(aug.augment(f), np.clip(f + v, 0, 255), rtol=1e-6)
    aug = imgaug.Brightness(30, clip=False)
    aug.rng = np.random.RandomState(0)
    np.testing.assert_allclose(aug.augment(f), f + v, rtol=1e-6)
    with pytest.raises(ValueError, match="`delta` must be > 0"):
        imgaug.Brightness(0)


def test_brightness_scale_exact():
    np.testing.assert_array_equal(
        imgaug.BrightnessScale((2, 2)).augment(IMG), np.clip(IMG.astype(int) * 2, 0, 255)
    )
    np.testing.assert_array_equal(
        imgaug.BrightnessScale((0.5, 0.5), clip=False).augment(IMG.astype(np.float32) * 30),
        IMG.astype(np.float32) * 15,
    )


def test_contrast_exact():
    out = imgaug.Contrast((0.5, 0.5)).augment(IMG)
    np.testing.assert_array_equal(out, IMG // 2 + 57)  # mean 114
    rgb = RGB.astype(np.float32)
    out = imgaug.Contrast((2.0, 2.0), clip=False).augment(rgb)
    np.testing.assert_allclose(out, rgb * 2 - rgb.mean(axis=(0, 1)), rtol=1e-6)
    gray_mean = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY).mean()
    out = imgaug.Contrast((2.0, 2.0), rgb=True, clip=False).augment(rgb)
    np.testing.assert_allclose(out, rgb * 2 - gray_mean, rtol=1e-5)


def test_hue_exact():
    red = np.array([[[255, 0, 0]]], np.uint8)
    np.testing.assert_array_equal(imgaug.Hue((60, 60)).augment(red), [[[0, 255, 0]]])
    # read as BGR, [255, 0, 0] is blue (240 deg); +120 deg is red, [0, 0, 255] in BGR
    np.testing.assert_array_equal(imgaug.Hue((60, 60), rgb=False).augment(red), [[[0, 0, 255]]])
    redf = red.astype(np.float32) / 255
    np.testing.assert_allclose(imgaug.Hue((60, 60)).augment(redf), [[[0, 1, 0]]], atol=1e-6)
    np.testing.assert_array_equal(imgaug.Hue((90, 90)).augment(red), [[[0, 255, 255]]])
    set_seed(0)
    assert _params(imgaug.Hue(), img=RGB) == pytest.approx(
        [44.55486672905374, 162.13464465391363, 7.577787127676996]
    )
    with pytest.raises(ValueError, match=r"needs an image of shape \(h, w, 3\)"):
        imgaug.Hue().augment(IMG)


def test_gamma_exact():
    np.testing.assert_array_equal(imgaug.Gamma((0, 0)).augment(IMG), IMG)
    expected = np.rint(255 * (IMG / 255.0) ** 0.5).astype(np.uint8)
    np.testing.assert_array_equal(imgaug.Gamma((1, 1)).augment(IMG), expected)
    f = IMG.astype(np.float32) + 0.25
    np.testing.assert_allclose(imgaug.Gamma((1, 1)).augment(f), 255 * (f / 255) ** 0.5, rtol=1e-6)
    with pytest.raises(ValueError, match="above -1"):
        imgaug.Gamma((-1, 0))


def test_clip_exact():
    np.testing.assert_array_equal(imgaug.Clip(30, 100).augment(IMG), np.clip(IMG, 30, 100))
    np.testing.assert_array_equal(imgaug.Clip(-5, 300.5).augment(IMG), IMG)
    f = np.array([[-1.5, 0.5, 2.5]], np.float64)
    out = imgaug.Clip(0, 1).augment(f)
    assert out.dtype == np.float64 and out.tolist() == [[0.0, 0.5, 1.0]]
    with pytest.raises(ValueError, match="`min` must be <= `max`"):
        imgaug.Clip(3, 1)


def test_saturation_exact():
    rgb = RGB.astype(np.float32)
    set_seed(0)
    aug = imgaug.Saturation(0.4)
    out = aug.augment(rgb)
    v = 1.3661901629729472
    gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)[:, :, None]
    np.testing.assert_allclose(out, np.clip(rgb * v + gray * (1 - v), 0, 255), rtol=1e-5)
    np.testing.assert_array_equal(imgaug.Saturation(0.0).augment(RGB), RGB)
    with pytest.raises(ValueError, match=r"`alpha` must be in \[0, 1\)"):
        imgaug.Saturation(1.0)


def test_lighting_exact():
    set_seed(0)
    aug = imgaug.Lighting(0.5, [10.0, 5.0, 1.0], np.eye(3))
    inc = [-0.27438358, -0.63830369, 0.2502397]
    rgb = RGB.astype(np.float32)
    np.testing.assert_allclose(aug.augment(rgb), np.clip(rgb + inc, 0, 255), rtol=1e-6)
    with pytest.raises(ValueError, match=r"`eigval` must have shape \(3,\)"):
        imgaug.Lighting(0.1, [1, 2], np.eye(3))


def test_mean_variance_normalize_exact():
    x = IMG.astype(np.float64)
    out = imgaug.MeanVarianceNormalize().augment(IMG)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, (x - x.mean()) / x.std(), rtol=1e-5)
    flat = np.full((2, 2), 7, np.uint8)
    np.testing.assert_array_equal(imgaug.MeanVarianceNormalize().augment(flat), np.zeros((2, 2)))
    rgb = RGB.astype(np.float64)
    out = imgaug.MeanVarianceNormalize(all_channel=False).augment(RGB)
    np.testing.assert_allclose(out, (rgb - rgb.mean((0, 1))) / rgb.std((0, 1)), rtol=1e-5)


def test_min_max_normalize_exact_and_flat():
    out = imgaug.MinMaxNormalize(0, 1).augment(IMG)
    np.testing.assert_allclose(out, IMG / 228.0, rtol=1e-6)
    flat = np.full((2, 2, 3), 9, np.uint8)
    np.testing.assert_array_equal(imgaug.MinMaxNormalize(5, 6).augment(flat), np.full((2, 2, 3), 5))
    out = imgaug.MinMaxNormalize(all_channel=False).augment(RGB)
    assert out[..., 0].min() == 0 and out[..., 0].max() == 255


def test_gaussian_blur_golden_and_exact():
    set_seed(0)
    assert _params(imgaug.GaussianBlur(3, (0.5, 1.5), symmetric=False)) == [
        ((3, 1), pytest.approx((0.6977537375371725, 0.9628863582259058))),
        ((5, 3), pytest.approx((0.5062814740482974, 1.3900392784610576))),
        ((3, 5), pytest.approx((0.8356614195405203, 1.1625077363588485))),
    ]
    np.testing.assert_array_equal(imgaug.GaussianBlur((0, 1)).augment(IMG), IMG)
    aug = imgaug.GaussianBlur((1, 2), (1.0, 1.0))
    expected = cv2.GaussianBlur(IMG, (3, 3), 1.0, sigmaY=1.0, borderType=cv2.BORDER_REPLICATE)
    np.testing.assert_array_equal(aug.augment(IMG), expected)
    assert aug.augment(IMG[:, :, None]).shape == (4, 5, 1)
    assert imgaug.GaussianBlur(max_size=2).size_range == (0, 2)
