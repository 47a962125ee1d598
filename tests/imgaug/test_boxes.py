"""Box formats, conversion, clipping and transforms of boxes."""

from __future__ import annotations

import numpy as np
import pytest

from dataflow.imgaug import BoxFormat, FlipTransform, ResizeTransform, WarpAffineTransform
from dataflow.imgaug.boxes import (
    boxes_from_corners,
    boxes_to_corners,
    check_boxes,
    clip_boxes,
    convert_boxes,
)

XYXY = np.array([[1.0, 2.0, 4.0, 6.0]])


def test_convert_round_trip():
    xywh = convert_boxes(XYXY, BoxFormat.XYXY, BoxFormat.XYWH)
    assert xywh.tolist() == [[1.0, 2.0, 3.0, 4.0]]
    assert convert_boxes(xywh, "xywh", "xyxy").tolist() == XYXY.tolist()
    same = convert_boxes(XYXY, BoxFormat.XYXY, BoxFormat.XYXY)
    assert same.tolist() == XYXY.tolist() and same is not XYXY


def test_clip_and_corners():
    assert clip_boxes(np.array([[-1.0, 2.0, 9.0, 9.0]]), (5, 8, 3)).tolist() == [
        [0.0, 2.0, 8.0, 5.0]
    ]
    corners = boxes_to_corners(XYXY)
    assert corners.tolist() == [[1, 2], [4, 2], [1, 6], [4, 6]]
    assert boxes_from_corners(corners[::-1]).tolist() == XYXY.tolist()


def test_check_boxes_errors():
    with pytest.raises(ValueError, match=r"shape \(N, 4\)"):
        check_boxes(np.zeros((2, 3)))
    with pytest.raises(TypeError, match="float dtype"):
        check_boxes(np.zeros((2, 4), np.int32))


def test_transforms_move_boxes():
    assert FlipTransform(10, 10).apply_boxes(XYXY).tolist() == [[6.0, 2.0, 9.0, 6.0]]
    assert ResizeTransform(10, 10, 20, 5, 1).apply_boxes(XYXY).tolist() == [[0.5, 4.0, 2.0, 12.0]]
    # a 90 degree rotation about the centre of a 10x10 image: the box stays a box
    mat = np.array([[0.0, 1.0, 0.0], [-1.0, 0.0, 9.0]])
    out = WarpAffineTransform(mat, (10, 10)).apply_boxes(XYXY)
    np.testing.assert_allclose(out, [[2.0, 6.0, 6.0, 9.0]])
