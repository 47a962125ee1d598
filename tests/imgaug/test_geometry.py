"""Shift, Rotation, RotationAndCropValid, Affine."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from dataflow import imgaug
from dataflow.rng import set_seed

IMG = np.arange(4 * 5, dtype=np.uint8).reshape(4, 5) * 12
SQ = np.arange(25, dtype=np.uint8).reshape(5, 5)


def _mats(aug, n=4, img=IMG):
    return [np.round(aug.get_transform(img).mat, 4).tolist() for _ in range(n)]


def test_shift_golden_and_exact():
    set_seed(0)
    assert _mats(imgaug.Shift(0.4, 0.5)) == [
        [[1, 0, -1], [0, 1, -2]], [[1, 0, 2], [0, 1, -1]],
        [[1, 0, 0], [0, 1, 2]], [[1, 0, 0], [0, 1, -2]],
    ]
    set_seed(0)
    aug = imgaug.Shift(0.4, 0.5, border=cv2.BORDER_CONSTANT, border_value=255)
    aug.get_transform(IMG)
    out = aug.augment(IMG)  # dx=2, dy=-1
    expected = np.full_like(IMG, 255)
    expected[:3, 2:] = IMG[1:, :3]
    np.testing.assert_array_equal(out, expected)
    with pytest.raises(ValueError, match=r"`horiz_frac` must be in \[0, 1\), got 1"):
        imgaug.Shift(1, 0)


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_rotation_by_quarter_turns_is_exact(dtype):
    set_seed(0)
    aug = imgaug.Rotation(180, center_range=(0.5, 0.5), step_deg=90, interp=cv2.INTER_NEAREST)
    img = SQ.astype(dtype)
    for _ in range(8):
        tfm = aug.get_transform(img)
        out = tfm.apply_image(img)
        k = round(np.degrees(np.arctan2(tfm.mat[0, 1], tfm.mat[0, 0])) / 90)
        np.testing.assert_array_equal(out, np.rot90(img, k))


def test_rotation_golden_and_errors():
    set_seed(0)
    assert _mats(imgaug.Rotation(30), n=2) == [
        [[0.982, -0.189, 0.1929], [0.189, 0.982, -0.3525]],
        [[0.9967, -0.0815, 0.1425], [0.0815, 0.9967, -0.2954]],
    ]
    with pytest.raises(ValueError, match="`step_deg` needs max_deg=180"):
        imgaug.Rotation(30, step_deg=10)
    with pytest.raises(ValueError, match="`step_deg` needs max_deg=180"):
        imgaug.RotationAndCropValid(30, step_deg=10)
    with pytest.raises(ValueError, match="`center_range` must have low <= high"):
        imgaug.Rotation(30, center_range=(1, 0))


@pytest.mark.parametrize(
    ("w", "h", "deg", "expected"),
    [(100, 50, 0, (100, 50)), (100, 100, 45, (70, 70)), (100, 50, 90, (50, 100)),
     (100, 50, -90, (50, 100)), (0, 5, 10, (0, 0)), (200, 100, 10, (191, 67))],
)
def test_largest_rotated_rect(w, h, deg, expected):
    assert imgaug.RotationAndCropValid.largest_rotated_rect(w, h, deg) == expected


def test_rotation_and_crop_valid_has_no_border_pixels():
    set_seed(0)
    aug = imgaug.RotationAndCropValid(45, interp=cv2.INTER_NEAREST)
    img = np.full((40, 60), 200, np.uint8)
    for _ in range(10):
        tfm = aug.get_transform(img)
        tfm.tfms[0].borderMode = cv2.BORDER_CONSTANT  # make border pixels visible
        out = tfm.apply_image(img)
        assert (out == 200).all()
        assert out.shape[0] <= 40 and out.shape[1] <= 60


def test_affine_identity_and_integer_translation_are_exact():
    np.testing.assert_array_equal(imgaug.Affine().augment(IMG), IMG)
    np.testing.assert_array_equal(imgaug.Affine(scale=(1, 1)).augment(IMG), IMG)
    set_seed(0)
    aug = imgaug.Affine(translate_frac=(0.4, 0.5), border=cv2.BORDER_CONSTANT)
    tfm = aug.get_transform(IMG)
    dx, dy = tfm.mat[:, 2]
    assert tfm.mat[:, :2].tolist() == [[1, 0], [0, 1]] and dx == int(dx) and dy == int(dy)
    expected = np.zeros_like(IMG)
    dx, dy = int(dx), int(dy)
    src = IMG[max(0, -dy): 4 - max(0, dy), max(0, -dx): 5 - max(0, dx)]
    expected[max(0, dy): max(0, dy) + src.shape[0], max(0, dx): max(0, dx) + src.shape[1]] = src
    np.testing.assert_array_equal(tfm.apply_image(IMG), expected)


def test_affine_golden_and_errors():
    set_seed(0)
    assert _mats(imgaug.Affine((0.8, 1.2), (0.2, 0.2), 20, 10), n=2) == [
        [[0.9509, 0.3017, -0.3544], [-0.2232, 0.9324, 0.5477]],
        [[0.8604, -0.1399, -0.511], [0.2913, 0.9117, 0.55]],
    ]
    with pytest.raises(ValueError, match="`shear` must be >= 0"):
        imgaug.Affine(shear=-1)
    with pytest.raises(ValueError, match="`translate_frac` must be a"):
        imgaug.Affine(translate_frac=0.1)
    with pytest.raises(ValueError, match="`scale` must be a"):
        imgaug.Affine(scale=1.1)
