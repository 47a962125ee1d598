"""Coordinates follow the image: for every geometric augmentor, random marks on a synthetic
image land at their transformed coordinates (within one pixel) under one transform."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow import imgaug
from dataflow.rng import set_seed
from tests.imgaug.helpers import check_marks

SETTINGS = settings(max_examples=30, deadline=None, derandomize=True)


@st.composite
def scene(draw, min_side: int = 16, max_side: int = 48):
    """(shape, points, seed): an image shape and up to 4 marks at least 3 px inside it."""
    h = draw(st.integers(min_side, max_side))
    w = draw(st.integers(min_side, max_side))
    pts = draw(
        st.lists(
            st.tuples(st.integers(3, h - 4), st.integers(3, w - 4)), min_size=1, max_size=4
        )
    )
    seed = draw(st.integers(0, 2**20))
    return (h, w), pts, seed


def _run(make_aug, data) -> int:
    shape, pts, seed = data
    set_seed(seed)
    aug = make_aug(shape)
    tfm = aug.get_transform(np.zeros(shape, dtype=np.float32))
    tfm.apply_image(np.zeros(shape, dtype=np.float32))  # an AugmentorList creates its rest here
    return check_marks(tfm, shape, pts)


AUGMENTORS = {
    "Flip-h": lambda s: imgaug.Flip(horiz=True, prob=1.0),
    "Flip-v": lambda s: imgaug.Flip(vert=True, prob=1.0),
    "Resize": lambda s: imgaug.Resize((s[0] + 7, max(s[1] - 5, 12))),
    "ResizeShortestEdge": lambda s: imgaug.ResizeShortestEdge(20),
    "RandomResize": lambda s: imgaug.RandomResize((0.7, 1.6), (0.7, 1.6), aspect_ratio_thres=0.3),
    "RandomResize-int": lambda s: imgaug.RandomResize((20, 60), aspect_ratio_thres=0),
    "CenterCrop": lambda s: imgaug.CenterCrop((s[0] - 3, s[1] - 5)),
    "RandomCrop": lambda s: imgaug.RandomCrop((s[0] // 2 + 2, s[1] // 2 + 3)),
    "RandomCropRandomShape": lambda s: imgaug.RandomCropRandomShape(8, 8),
    "GoogleNetRandomCropAndResize": lambda s: imgaug.GoogleNetRandomCropAndResize(
        (0.4, 1.0), target_shape=24
    ),
    "GoogleNet-fallback": lambda s: imgaug.GoogleNetRandomCropAndResize(
        (5.0, 6.0), target_shape=14
    ),
    "Shift": lambda s: imgaug.Shift(0.3, 0.3),
    "Rotation": lambda s: imgaug.Rotation(180),
    "Rotation-step": lambda s: imgaug.Rotation(180, step_deg=90),
    "RotationAndCropValid": lambda s: imgaug.RotationAndCropValid(40),
    "Affine": lambda s: imgaug.Affine(
        scale=(0.8, 1.3), translate_frac=(0.2, 0.2), rotate_max_deg=30, shear=15
    ),
    "Transpose": lambda s: imgaug.Transpose(prob=1.0),
    "CenterPaste": lambda s: imgaug.CenterPaste((s[0] + 9, s[1] + 4)),
    "RandomPaste": lambda s: imgaug.RandomPaste((s[0] + 9, s[1] + 14)),
    "AugmentorList": lambda s: imgaug.AugmentorList(
        [imgaug.Flip(horiz=True), imgaug.Resize(40), imgaug.Rotation(20), imgaug.RandomCrop(30)]
    ),
}


@pytest.mark.parametrize("name", sorted(AUGMENTORS))
@SETTINGS
@given(data=scene())
def test_marks_land_on_transformed_coordinates(name, data):
    _run(AUGMENTORS[name], data)


@pytest.mark.parametrize("name", sorted(AUGMENTORS))
def test_marks_are_checked_for_every_augmentor(name):
    # the property above skips marks that leave the image; make sure many are checked
    shape = (30, 40)
    grid = [(i, j) for i in range(3, 27, 4) for j in range(3, 37, 4)]
    checked = sum(_run(AUGMENTORS[name], (shape, grid, seed)) for seed in range(6))
    assert checked >= 20


def test_marks_are_checked_at_all():
    # guard against a vacuous property: a plain flip checks every mark
    tfm = imgaug.Flip(horiz=True, prob=1.0).get_transform(np.zeros((20, 30), np.float32))
    assert check_marks(tfm, (20, 30), [(5, 5), (10, 20), (14, 7)]) == 3
    rot = imgaug.Rotation(180, step_deg=90, center_range=(0.5, 0.5))
    set_seed(3)
    tfm = rot.get_transform(np.zeros((31, 31), np.float32))
    assert check_marks(tfm, (31, 31), [(10, 10), (15, 15), (20, 8)]) == 3
