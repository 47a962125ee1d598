"""CenterPaste, RandomPaste, background fillers."""

from __future__ import annotations

import numpy as np
import pytest

from dataflow import imgaug
from dataflow.rng import set_seed

IMG = np.arange(1, 7, dtype=np.uint8).reshape(2, 3)


def test_center_paste_exact():
    out = imgaug.CenterPaste((4, 5)).augment(IMG)
    expected = np.zeros((4, 5), np.uint8)
    expected[1:3, 1:4] = IMG
    np.testing.assert_array_equal(out, expected)
    filled = imgaug.CenterPaste(4, imgaug.ConstantBackgroundFiller(9)).augment(IMG[:, :, None])
    assert filled.shape == (4, 4, 1) and filled[0, 0, 0] == 9
    msg = r"\(h, w\)=\(1, 5\) is smaller than the image \(h, w\)=\(2, 3\)"
    with pytest.raises(ValueError, match=msg):
        imgaug.CenterPaste((1, 5)).augment(IMG)


def test_random_paste_works_standalone_and_golden():
    # tensorpack raised AttributeError here unless reset_state() had been called
    set_seed(0)
    aug = imgaug.RandomPaste((6, 8))
    offs = [(t.y0, t.x0) for t in (aug.get_transform(np.zeros((4, 5))) for _ in range(4))]
    assert offs == [(2, 0), (1, 3), (2, 2), (1, 0)]
    np.testing.assert_array_equal(imgaug.RandomPaste((2, 3)).augment(IMG), IMG)
    tall = imgaug.RandomPaste((3, 3))  # one instance: fresh ones share their class's stream
    seen = {(t.y0, t.x0) for t in (tall.get_transform(IMG) for _ in range(50))}
    assert seen == {(0, 0), (1, 0)}


def test_background_filler_is_abstract():
    with pytest.raises(TypeError):
        imgaug.BackgroundFiller()

    class Ramp(imgaug.BackgroundFiller):
        def _fill(self, shape, img):
            return np.arange(shape[0] * shape[1], dtype=img.dtype).reshape(shape)

    out = imgaug.CenterPaste((2, 5), Ramp()).augment(IMG)
    np.testing.assert_array_equal(out, [[0, 1, 2, 3, 4], [5, 4, 5, 6, 9]])
