"""RandomCrop, CenterCrop, RandomCropRandomShape, GoogleNetRandomCropAndResize, RandomCutout."""

from __future__ import annotations

import numpy as np
import pytest

from dataflow import imgaug
from dataflow.rng import set_seed

IMG = np.arange(4 * 5, dtype=np.uint8).reshape(4, 5) * 12


def _seq(aug, n=4, img=IMG):
    return [repr(aug.get_transform(img)) for _ in range(n)]


def _crop(y0, x0, h, w):
    return f"imgaug.CropTransform(y0={y0}, x0={x0}, h={h}, w={w})"


def test_center_crop_exact():
    np.testing.assert_array_equal(imgaug.CenterCrop((2, 3)).augment(IMG), IMG[1:3, 1:4])
    np.testing.assert_array_equal(imgaug.CenterCrop(3).augment(IMG), IMG[0:3, 1:4])
    np.testing.assert_array_equal(imgaug.CenterCrop((4, 5)).augment(IMG), IMG)


@pytest.mark.parametrize(
    "aug",
    [imgaug.CenterCrop((5, 2)), imgaug.RandomCrop((2, 6)), imgaug.RandomCropRandomShape(6, 1)],
)
def test_crop_larger_than_image_names_both_sizes(aug):
    msg = r"\(h, w\)=\(\d, \d\) is larger than the image \(h, w\)=\(4, 5\)"
    with pytest.raises(ValueError, match=msg):
        aug.augment(IMG)


def test_random_crop_golden_and_covers_every_offset():
    set_seed(0)
    assert _seq(imgaug.RandomCrop((2, 3))) == [
        _crop(0, 0, 2, 3), _crop(1, 0, 2, 3), _crop(2, 2, 2, 3), _crop(0, 1, 2, 3)
    ]
    aug = imgaug.RandomCrop((3, 4))
    seen = {(t.y0, t.x0) for t in (aug.get_transform(IMG) for _ in range(200))}
    assert seen == {(0, 0), (0, 1), (1, 0), (1, 1)}  # inclusive bounds
    out = imgaug.RandomCrop((4, 5)).augment(IMG)
    np.testing.assert_array_equal(out, IMG)


def test_random_crop_random_shape():
    set_seed(0)
    assert _seq(imgaug.RandomCropRandomShape(2, 2)) == [
        _crop(1, 1, 3, 4), _crop(0, 2, 3, 3), _crop(0, 2, 4, 2), _crop(1, 0, 2, 4)
    ]
    aug = imgaug.RandomCropRandomShape(2, 2, wmax=3, hmax=3)
    for _ in range(50):
        t = aug.get_transform(IMG)
        assert 2 <= t.h <= 3 and 2 <= t.w <= 3
        assert t.y0 + t.h <= 4 and t.x0 + t.w <= 5
    full = imgaug.RandomCropRandomShape(4, 4, 4, 4)  # one: fresh ones share their class stream
    seen = {(t.y0, t.x0) for t in (full.get_transform(IMG) for _ in range(100))}
    assert seen == {(0, 0), (0, 1)}  # the last offset is reachable (tensorpack never chose it)
    with pytest.raises(ValueError, match="wmin <= wmax"):
        imgaug.RandomCropRandomShape(3, 3, wmax=2)
    with pytest.raises(ValueError, match="must be positive"):
        imgaug.RandomCropRandomShape(0, 3)


def test_googlenet_crop_golden_and_fallback():
    set_seed(0)
    resize = "imgaug.ResizeTransform(h={0}, w={1}, new_h=3, new_w=3, interp=1)"
    assert _seq(imgaug.GoogleNetRandomCropAndResize(target_shape=3)) == [
        f"imgaug.TransformList([{_crop(1, 1, 3, 3)}, {resize.format(3, 3)}])",
        f"imgaug.TransformList([{_crop(0, 1, 4, 3)}, {resize.format(4, 3)}])",
        f"imgaug.TransformList([{_crop(0, 0, 2, 3)}, {resize.format(2, 3)}])",
        f"imgaug.TransformList([{_crop(0, 0, 4, 5)}, {resize.format(4, 5)}])",
    ]
    # an impossible area fraction falls back to shortest-edge resize + centre crop
    aug = imgaug.GoogleNetRandomCropAndResize((2.0, 3.0), target_shape=2)
    assert repr(aug.get_transform(IMG)) == (
        "imgaug.TransformList([imgaug.ResizeTransform(h=4, w=5, new_h=2, new_w=3, interp=1), "
        f"{_crop(0, 0, 2, 2)}])"
    )
    assert aug.augment(IMG).shape == (2, 2)


def test_random_cutout_exact_golden_and_copy():
    set_seed(0)
    aug = imgaug.RandomCutout((1, 3), 2, fill=255)
    assert _seq(aug) == [
        "imgaug.CutoutTransform(y0=0, x0=0, h=2, w=2, fill=255)",
        "imgaug.CutoutTransform(y0=3, x0=2, h=1, w=2, fill=255)",
        "imgaug.CutoutTransform(y0=1, x0=3, h=2, w=2, fill=255)",
        "imgaug.CutoutTransform(y0=2, x0=0, h=2, w=2, fill=255)",
    ]
    before = IMG.copy()
    out = imgaug.RandomCutout(4, 5, fill=7.0).augment(IMG)
    np.testing.assert_array_equal(out, np.full((4, 5), 7, np.uint8))
    np.testing.assert_array_equal(IMG, before)
    with pytest.raises(ValueError, match="larger than the image"):
        imgaug.RandomCutout(5, 1).augment(IMG)
