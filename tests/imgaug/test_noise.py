"""JpegNoise, GaussianNoise, SaltPepperNoise."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from dataflow import imgaug
from dataflow.rng import set_seed

R = np.random.RandomState(0)
RGB = R.randint(0, 256, (8, 8, 3)).astype(np.uint8)


def _params(aug, n=3, img=RGB):
    return [aug.get_transform(img).func.params for _ in range(n)]


def test_jpeg_noise_golden_exact_and_gray_keeps_shape():
    set_seed(0)
    assert _params(imgaug.JpegNoise()) == [92, 61, 52]
    set_seed(0)
    out = imgaug.JpegNoise().augment(RGB)
    _, buf = cv2.imencode(".jpg", RGB, [cv2.IMWRITE_JPEG_QUALITY, 92])
    np.testing.assert_array_equal(out, cv2.imdecode(buf, cv2.IMREAD_COLOR))
    gray = RGB[:, :, 0].copy()
    assert imgaug.JpegNoise().augment(gray).shape == (8, 8)
    assert imgaug.JpegNoise().augment(gray[:, :, None]).shape == (8, 8, 1)
    with pytest.raises(ValueError, match="quality_range"):
        imgaug.JpegNoise((50, 200))
    with pytest.raises(ValueError, match="1- or 3-channel"):
        imgaug.JpegNoise().augment(np.zeros((4, 4, 2), np.uint8))


def test_gaussian_noise_exact():
    set_seed(0)
    assert _params(imgaug.GaussianNoise(3)) == [1584708122, 1948562517, 85157104]
    set_seed(0)
    f = RGB.astype(np.float32)
    out = imgaug.GaussianNoise(3, clip=False).augment(f)
    noise = np.random.default_rng(1584708122).standard_normal(f.shape, dtype=np.float32) * 3
    np.testing.assert_array_equal(out, f + noise)
    set_seed(0)
    out = imgaug.GaussianNoise(3).augment(RGB)
    np.testing.assert_array_equal(out, np.clip(np.rint(f + noise), 0, 255).astype(np.uint8))
    with pytest.raises(ValueError, match="`sigma` must be >= 0"):
        imgaug.GaussianNoise(-1)


def test_salt_pepper_exact_and_not_in_place():
    set_seed(0)
    before = RGB.copy()
    out = imgaug.SaltPepperNoise(0.2, 0.2).augment(RGB)
    np.testing.assert_array_equal(RGB, before)
    r = np.random.default_rng(1818958540).random(RGB.shape, dtype=np.float32)
    expected = RGB.copy()
    expected[r > 0.8] = 255
    expected[r < 0.2] = 0
    np.testing.assert_array_equal(out, expected)
    assert (out == 0).sum() > 0 and (out == 255).sum() > 0
    with pytest.raises(ValueError, match="`white_prob` must be a probability"):
        imgaug.SaltPepperNoise(2, 0)
