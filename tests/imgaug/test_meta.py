"""Identity, RandomApplyAug, RandomChooseAug, RandomOrderAug, MapImage."""

from __future__ import annotations

import numpy as np
import pytest

from dataflow import imgaug
from dataflow.rng import set_seed

IMG = np.arange(4 * 5, dtype=np.uint8).reshape(4, 5) * 12


def _seq(aug, n=4, img=IMG):
    return [repr(aug.get_transform(img)) for _ in range(n)]


def test_identity():
    assert imgaug.Identity().augment(IMG) is IMG


def test_random_apply_golden_and_reset_cascades():
    set_seed(0)
    crop = "imgaug.CropTransform(y0=1, x0=1, h=2, w=2)"
    aug = imgaug.RandomApplyAug(imgaug.CenterCrop(2), 0.5)
    noop = "imgaug.NoOpTransform()"
    assert _seq(aug) == [noop, crop, noop, noop]
    inner = imgaug.RandomCrop(2)
    outer = imgaug.RandomApplyAug(inner, 1.0)
    outer.reset_state()  # gives `inner` its path: before that it draws from its class's stream
    first = [(t.y0, t.x0) for t in (outer.get_transform(IMG) for _ in range(5))]
    outer.reset_state()
    assert [(t.y0, t.x0) for t in (outer.get_transform(IMG) for _ in range(5))] == first
    with pytest.raises(ValueError, match=r"`prob` must be in \[0, 1\]"):
        imgaug.RandomApplyAug(inner, 2)
    with pytest.raises(TypeError, match="ImageAugmentor"):
        imgaug.RandomApplyAug(len, 0.5)


def test_random_choose_golden_and_probabilities():
    set_seed(0)
    resize = "imgaug.ResizeTransform(h=4, w=5, new_h=3, new_w=3, interp=1)"
    crop = "imgaug.CropTransform(y0=1, x0=1, h=2, w=2)"
    aug = imgaug.RandomChooseAug([(imgaug.CenterCrop(2), 0.3), (imgaug.Resize(3), 0.7)])
    assert _seq(aug, 6) == [resize, resize, resize, resize, resize, crop]
    only = imgaug.RandomChooseAug([(imgaug.CenterCrop(2), 0.0), (imgaug.Resize(3), 5.0)])
    assert set(_seq(only, 10)) == {resize}
    equal = imgaug.RandomChooseAug([imgaug.CenterCrop(2), imgaug.Resize(3)])
    assert set(_seq(equal, 30)) == {resize, crop}
    with pytest.raises(ValueError, match="positive sum"):
        imgaug.RandomChooseAug([(imgaug.CenterCrop(2), 0.0)])
    with pytest.raises(ValueError, match="non-empty list"):
        imgaug.RandomChooseAug([])


def test_random_order_uses_the_original_image_and_permutes():
    set_seed(0)
    aug = imgaug.RandomOrderAug([imgaug.Brightness(3), imgaug.Contrast((0.5, 1.5)), imgaug.Gamma()])
    names = [
        [t.name for t in aug.get_transform(IMG).tfms] for _ in range(4)
    ]
    assert names == [
        ["Brightness", "Gamma", "Contrast"], ["Contrast", "Brightness", "Gamma"],
        ["Contrast", "Gamma", "Brightness"], ["Gamma", "Contrast", "Brightness"],
    ]
    flips = imgaug.RandomOrderAug([imgaug.Flip(horiz=True, prob=1.0),
                                   imgaug.Flip(vert=True, prob=1.0)])
    np.testing.assert_array_equal(flips.augment(IMG), IMG[::-1, ::-1])


def test_map_image():
    aug = imgaug.MapImage(np.fliplr, lambda c: c + 1)
    tfm = aug.get_transform(IMG)
    np.testing.assert_array_equal(tfm.apply_image(IMG), IMG[:, ::-1])
    np.testing.assert_array_equal(tfm.apply_coords(np.zeros((1, 2))), [[1.0, 1.0]])
    with pytest.raises(NotImplementedError, match="coord_func"):
        imgaug.MapImage(np.fliplr).get_transform(IMG).apply_coords(np.zeros((1, 2)))
    with pytest.raises(TypeError, match="callables"):
        imgaug.MapImage(3)


def test_reset_state_cascades_in_choose_and_order():
    for make in (
        lambda: imgaug.RandomChooseAug([imgaug.RandomCrop(2), imgaug.RandomCrop(3)]),
        lambda: imgaug.RandomOrderAug([imgaug.RandomCrop(2), imgaug.Brightness(5)]),
        lambda: imgaug.AugmentorList([imgaug.AugmentorList([imgaug.RandomCrop(3)]),
                                      imgaug.RandomCrop(2)]),
    ):
        set_seed(3)
        aug = make()
        aug.reset_state()  # gives the inner augmentors their paths (positions)
        first = [aug.augment(IMG) for _ in range(6)]
        aug.reset_state()
        for a, b in zip(first, [aug.augment(IMG) for _ in range(6)]):
            np.testing.assert_array_equal(a, b)


def test_nested_augmentor_lists():
    set_seed(0)
    inner = imgaug.AugmentorList([imgaug.Flip(horiz=True, prob=1.0), imgaug.CenterCrop(3)])
    outer = imgaug.AugmentorList([inner, imgaug.Resize(6)])
    out = outer.augment(IMG)
    assert out.shape == (6, 6)
    tfm = outer.get_transform(IMG)
    np.testing.assert_array_equal(tfm.apply_image(IMG), out)
    assert len(outer) == 2 and list(outer) == [inner, outer.augmentors[1]]
