"""Flip, Resize, RandomResize, ResizeShortestEdge, Transpose."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from dataflow import imgaug
from dataflow.rng import set_seed

IMG = np.arange(4 * 5, dtype=np.uint8).reshape(4, 5) * 12


def _seq(aug, n=4, img=IMG):
    return [repr(aug.get_transform(img)) for _ in range(n)]


def test_flip_exact_and_golden_sequence():
    out = imgaug.Flip(horiz=True, prob=1.0).augment(IMG)
    np.testing.assert_array_equal(out, IMG[:, ::-1])
    np.testing.assert_array_equal(imgaug.Flip(vert=True, prob=1.0).augment(IMG), IMG[::-1])
    assert imgaug.Flip(vert=True, prob=0.0).augment(IMG) is IMG
    set_seed(0)
    flip, noop = "imgaug.FlipTransform(h=4, w=5)", "imgaug.NoOpTransform()"
    assert _seq(imgaug.Flip(horiz=True)) == [flip, flip, noop, flip]


@pytest.mark.parametrize(("horiz", "vert"), [(False, False), (True, True)])
def test_flip_needs_exactly_one_direction(horiz, vert):
    with pytest.raises(ValueError, match="exactly one of `horiz` and `vert`"):
        imgaug.Flip(horiz=horiz, vert=vert)


def test_resize_exact():
    img = np.array([[0, 100], [200, 250]], dtype=np.uint8)
    out = imgaug.Resize(4, interp=cv2.INTER_NEAREST).augment(img)
    np.testing.assert_array_equal(out, np.repeat(np.repeat(img, 2, 0), 2, 1))
    out = imgaug.Resize((1, 2), interp=cv2.INTER_AREA).augment(img)
    np.testing.assert_array_equal(out, [[100, 175]])
    assert imgaug.Resize((3, 7)).augment(np.zeros((5, 5, 1), np.float32)).shape == (3, 7, 1)
    with pytest.raises(ValueError, match=r"`shape` must be an int or a \(h, w\) pair"):
        imgaug.Resize((1, 2, 3))
    with pytest.raises(ValueError, match="`shape` must be positive"):
        imgaug.Resize(0)
    assert repr(imgaug.Resize(4, interp=0)) == "imgaug.Resize(shape=4, interp=0)"


@pytest.mark.parametrize(
    ("shape", "size", "expected"),
    [((4, 5), 2, (2, 3)), ((5, 4), 2, (3, 2)), ((6, 6), 3, (3, 3)), ((256, 320), 256, (256, 320)),
     ((3, 10), 5, (5, 17))],
)
def test_resize_shortest_edge(shape, size, expected):
    tfm = imgaug.ResizeShortestEdge(size).get_transform(np.zeros(shape, np.uint8))
    assert (tfm.new_h, tfm.new_w) == expected
    assert imgaug.ResizeShortestEdge(size).augment(np.zeros(shape, np.uint8)).shape == expected


def test_random_resize_golden_sequences():
    set_seed(0)
    assert _seq(imgaug.RandomResize((0.5, 2.0))) == [
        f"imgaug.ResizeTransform(h=4, w=5, new_h={h}, new_w={w}, interp=1)"
        for h, w in [(7, 8), (6, 7), (8, 9), (8, 10)]
    ]
    set_seed(0)
    assert _seq(imgaug.RandomResize((3, 9), (3, 9), aspect_ratio_thres=0.3)) == [
        f"imgaug.ResizeTransform(h=4, w=5, new_h={h}, new_w={w}, interp=1)"
        for h, w in [(4, 5), (5, 8), (6, 7), (9, 8)]
    ]
    set_seed(0)
    assert _seq(imgaug.RandomResize((3, 9), aspect_ratio_thres=0)) == [
        f"imgaug.ResizeTransform(h=4, w=5, new_h={h}, new_w={w}, interp=1)"
        for h, w in [(4, 5), (3, 4), (2, 3), (6, 8)]
    ]


def test_random_resize_aspect_threshold_minimum_and_errors():
    set_seed(1)
    aug = imgaug.RandomResize((0.5, 2.0), (0.5, 2.0), aspect_ratio_thres=0.1)
    for _ in range(20):
        t = aug.get_transform(np.zeros((40, 50), np.uint8))
        assert abs((t.new_w / t.new_h) / (50 / 40) - 1) <= 0.1 + 0.05  # rounding
    t = imgaug.RandomResize((0.1, 0.2), minimum=(30, 20)).get_transform(np.zeros((40, 50)))
    assert (t.new_h, t.new_w) == (20, 30)
    with pytest.raises(ValueError, match="both be floats"):
        imgaug.RandomResize((0.5, 2.0), (3, 9))
    with pytest.raises(ValueError, match="low <= high"):
        imgaug.RandomResize((2.0, 0.5))
    with pytest.raises(ValueError, match="aspect_ratio_thres"):
        imgaug.RandomResize((0.5, 2.0), aspect_ratio_thres=-1)


def test_random_resize_gives_up_and_keeps_the_size(caplog):
    set_seed(0)
    aug = imgaug.RandomResize((10, 10), (100, 100), aspect_ratio_thres=0.01)
    t = aug.get_transform(np.zeros((4, 5)))
    assert (t.new_h, t.new_w) == (4, 5)
    assert "no size within the aspect threshold" in caplog.text


def test_transpose():
    np.testing.assert_array_equal(imgaug.Transpose(prob=1.0).augment(IMG), IMG.T)
    set_seed(0)
    tr, noop = "imgaug.TransposeTransform()", "imgaug.NoOpTransform()"
    assert _seq(imgaug.Transpose()) == [noop, tr, noop, noop]
    assert imgaug.Transpose(1.0).augment(np.zeros((2, 3, 4))).shape == (3, 2, 4)
