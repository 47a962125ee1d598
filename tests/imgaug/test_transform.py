"""Transforms: exact outputs on small images, coordinates, boxes, masks, lists, factories."""

from __future__ import annotations

import pickle

import cv2
import numpy as np
import pytest

from dataflow.imgaug import (
    CropTransform,
    CutoutTransform,
    FlipTransform,
    NoOpTransform,
    PasteTransform,
    PhotometricTransform,
    ResizeTransform,
    TransformFactory,
    TransformList,
    TransposeTransform,
    WarpAffineTransform,
)
from dataflow.imgaug.paste import ConstantBackgroundFiller
from dataflow.imgaug.transform import LazyTransform

IMG = np.arange(12, dtype=np.uint8).reshape(3, 4)
PTS = np.array([[0.5, 0.5], [3.5, 2.5]], dtype=np.float32)


def test_crop_is_exact_and_shifts_coords():
    t = CropTransform(1, 2, 2, 2)
    np.testing.assert_array_equal(t.apply_image(IMG), [[6, 7], [10, 11]])
    np.testing.assert_array_equal(t.apply_coords(PTS), [[-1.5, -0.5], [1.5, 1.5]])
    np.testing.assert_array_equal(t.apply_mask(IMG > 5), [[True, True], [True, True]])
    np.testing.assert_array_equal(
        t.apply_boxes(np.array([[2.0, 1.0, 4.0, 3.0]])), [[0.0, 0.0, 2.0, 2.0]]
    )
    with pytest.raises(ValueError, match=r"at least \(h, w\)=\(3, 4\), got shape \(2, 2\)"):
        t.apply_image(IMG[:2, :2])


def test_flip_is_exact_and_uses_continuous_coordinates():
    h = FlipTransform(3, 4, horiz=True)
    np.testing.assert_array_equal(h.apply_image(IMG), IMG[:, ::-1])
    np.testing.assert_array_equal(h.apply_coords(PTS), [[3.5, 0.5], [0.5, 2.5]])
    v = FlipTransform(3, 4, horiz=False)
    np.testing.assert_array_equal(v.apply_image(IMG), IMG[::-1])
    np.testing.assert_array_equal(v.apply_coords(PTS), [[0.5, 2.5], [3.5, 0.5]])
    np.testing.assert_array_equal(
        h.apply_boxes(np.array([[0.0, 0.0, 1.0, 3.0]])), [[3.0, 0.0, 4.0, 3.0]]
    )


def test_resize_exact_and_keeps_channel_axis():
    img = np.array([[0, 100], [200, 255]], dtype=np.uint8)
    t = ResizeTransform(2, 2, 4, 4, cv2.INTER_NEAREST)
    np.testing.assert_array_equal(t.apply_image(img), np.repeat(np.repeat(img, 2, 0), 2, 1))
    out = t.apply_image(img[:, :, None])
    assert out.shape == (4, 4, 1)
    lin = ResizeTransform(2, 2, 1, 1, cv2.INTER_AREA).apply_image(img.astype(np.float32))
    np.testing.assert_allclose(lin, [[138.75]])
    np.testing.assert_array_equal(
        ResizeTransform(3, 4, 6, 2, cv2.INTER_LINEAR).apply_coords(PTS), [[0.25, 1.0], [1.75, 5.0]]
    )
    mask = np.array([[0, 1], [2, 3]], dtype=np.int32)
    np.testing.assert_array_equal(
        ResizeTransform(2, 2, 4, 4, cv2.INTER_LINEAR).apply_mask(mask),
        np.repeat(np.repeat(mask, 2, 0), 2, 1),
    )
    with pytest.raises(ValueError, match=r"\(h, w\)=\(2, 2\) but got shape \(3, 4\)"):
        t.apply_image(IMG)


def test_transpose():
    t = TransposeTransform()
    np.testing.assert_array_equal(t.apply_image(IMG), IMG.T)
    np.testing.assert_array_equal(t.apply_coords(PTS), [[0.5, 0.5], [2.5, 3.5]])
    assert t.apply_image(np.zeros((3, 4, 2))).shape == (4, 3, 2)


def test_warp_affine_integer_shift_is_exact():
    mat = np.array([[1, 0, 1], [0, 1, 0]], dtype=np.float64)
    t = WarpAffineTransform(mat, (4, 3), cv2.INTER_LINEAR, cv2.BORDER_CONSTANT, 7)
    np.testing.assert_array_equal(
        t.apply_image(IMG), [[7, 0, 1, 2], [7, 4, 5, 6], [7, 8, 9, 10]]
    )
    np.testing.assert_array_equal(t.apply_coords(PTS), [[1.5, 0.5], [4.5, 2.5]])
    assert t.apply_image(IMG[:, :, None]).shape == (3, 4, 1)
    np.testing.assert_array_equal(t.apply_mask(IMG > 5)[:, 0], [False, False, False])


def test_warp_affine_rotation_coords_use_pixel_centres():
    # 180 degrees about the centre of a 4x4 image maps pixel (0, 0) to (3, 3)
    mat = cv2.getRotationMatrix2D((1.5, 1.5), 180, 1.0)
    t = WarpAffineTransform(mat, (4, 4))
    img = np.zeros((4, 4), np.float32)
    img[0, 0] = 1
    out = t.apply_image(img)
    assert out[3, 3] == pytest.approx(1.0)
    np.testing.assert_allclose(t.apply_coords(np.array([[0.5, 0.5]])), [[3.5, 3.5]])


def test_paste_and_cutout():
    t = PasteTransform((4, 6), 1, 2, ConstantBackgroundFiller(9))
    out = t.apply_image(IMG[:2, :2])
    np.testing.assert_array_equal(
        out, [[9, 9, 9, 9, 9, 9], [9, 9, 0, 1, 9, 9], [9, 9, 4, 5, 9, 9], [9, 9, 9, 9, 9, 9]]
    )
    np.testing.assert_array_equal(t.apply_coords(PTS), [[2.5, 1.5], [5.5, 3.5]])
    assert t.apply_mask(np.ones((2, 2), bool)).sum() == 4
    with pytest.raises(ValueError, match="cannot paste an image of shape"):
        t.apply_image(np.zeros((4, 4), np.uint8))
    c = CutoutTransform(0, 1, 2, 2, fill=300.0)
    np.testing.assert_array_equal(
        c.apply_image(IMG), [[0, 255, 255, 3], [4, 255, 255, 7], [8, 9, 10, 11]]
    )
    assert c.apply_coords(PTS) is PTS
    assert repr(c) == "imgaug.CutoutTransform(y0=0, x0=1, h=2, w=2, fill=300.0)"


def test_noop_and_photometric():
    n = NoOpTransform()
    assert n.apply_image(IMG) is IMG and n.apply_coords(PTS) is PTS
    assert n.apply_anything(5) == 5
    p = PhotometricTransform(np.negative, name="neg")
    np.testing.assert_array_equal(p.apply_image(np.ones(2)), [-1, -1])
    assert p.apply_coords(PTS) is PTS and p.apply_mask(IMG) is IMG
    assert repr(p) == "imgaug.PhotometricTransform(neg)"


def test_missing_apply_raises_not_implemented_and_repr():
    t = CropTransform(1, 2, 2, 2)
    with pytest.raises(NotImplementedError, match="apply_depth"):
        t.apply_depth(IMG)
    with pytest.raises(AttributeError):
        _ = t.something
    assert repr(t) == "imgaug.CropTransform(y0=1, x0=2, h=2, w=2)"
    assert repr(FlipTransform(3, 4)) == "imgaug.FlipTransform(h=3, w=4)"
    assert pickle.loads(pickle.dumps(t)).apply_image(IMG).tolist() == [[6, 7], [10, 11]]


def test_transform_list_and_arithmetic():
    a, b = CropTransform(0, 1, 3, 3), FlipTransform(3, 3)
    tl = TransformList([a, b])
    np.testing.assert_array_equal(tl.apply_image(IMG), IMG[:, 1:][:, ::-1])
    np.testing.assert_array_equal(tl.apply_coords(PTS), [[3.5, 0.5], [0.5, 2.5]])
    assert tl.apply_mask(IMG).shape == (3, 3)
    np.testing.assert_array_equal(
        tl.apply_boxes(np.array([[1.0, 0.0, 2.0, 1.0]])), [[2.0, 0.0, 3.0, 1.0]]
    )
    assert [type(t) for t in (tl + a).tfms] == [CropTransform, FlipTransform, CropTransform]
    assert [type(t) for t in (b + tl).tfms] == [FlipTransform, CropTransform, FlipTransform]
    assert len(tl + tl) == 4
    tl += b
    assert len(tl) == 3
    with pytest.raises(TypeError):
        _ = tl + 1
    with pytest.raises(TypeError, match="Transform objects"):
        TransformList([1])
    with pytest.raises(NotImplementedError):
        tl.apply_depth(IMG)
    assert repr(TransformList([b])) == "imgaug.TransformList([imgaug.FlipTransform(h=3, w=3)])"


def test_transform_factory():
    t = TransformFactory(name="twice", apply_image=lambda x: x * 2)
    np.testing.assert_array_equal(t.apply_image(IMG), IMG * 2)
    with pytest.raises(NotImplementedError):
        t.apply_coords(PTS)
    with pytest.raises(KeyError, match="apply_<x>"):
        TransformFactory(image=lambda x: x)
    with pytest.raises(KeyError, match="callable"):
        TransformFactory(apply_image=3)
    assert repr(t) == "imgaug.TransformFactory(name='twice')"


def test_lazy_transform():
    t = LazyTransform(lambda img: CropTransform(0, 0, 1, 1))
    with pytest.raises(RuntimeError, match="before `apply_image`"):
        t.apply_mask(IMG)
    assert t.apply_image(IMG).tolist() == [[0]]
    assert t.apply_mask(IMG).tolist() == [[0]]
    assert t.apply_boxes(np.array([[0.0, 0.0, 1.0, 1.0]])).tolist() == [[0.0, 0.0, 1.0, 1.0]]


def test_coords_are_validated_with_clear_errors():
    t = FlipTransform(3, 4)
    with pytest.raises(ValueError, match=r"shape \(N, 2\).*got shape \(3,\)"):
        t.apply_coords(np.zeros(3, np.float32))
    with pytest.raises(TypeError, match=r"float or integer dtype, got bool.*astype\(np.float32\)"):
        t.apply_coords(np.zeros((2, 2), np.bool_))
    with pytest.raises(TypeError, match="got list"):
        t.apply_coords([[1.0, 2.0]])
    assert t.apply_coords(np.zeros((0, 2), np.float32)).shape == (0, 2)


def test_bool_masks_keep_their_dtype():
    mask = np.array([[True, False], [False, True]])
    out = ResizeTransform(2, 2, 4, 4, cv2.INTER_LINEAR).apply_mask(mask)
    assert out.dtype == np.bool_ and out.sum() == 8
    out = WarpAffineTransform(np.array([[1.0, 0, 1], [0, 1, 0]]), (2, 2)).apply_mask(mask)
    assert out.dtype == np.bool_ and out.tolist() == [[False, True], [False, False]]
    assert PhotometricTransform(np.negative).apply_boxes(np.zeros((1, 4))).shape == (1, 4)


@pytest.mark.parametrize(("make", "expected"), [
    (lambda: FlipTransform(3, 4), [[4.0, 0.0], [2.0, 1.0]]),
    (lambda: ResizeTransform(3, 4, 6, 8, cv2.INTER_LINEAR), [[0.0, 0.0], [4.0, 2.0]]),
    (lambda: NoOpTransform(), [[0.0, 0.0], [2.0, 1.0]]),
    (lambda: TransformList([FlipTransform(3, 4), NoOpTransform()]), [[4.0, 0.0], [2.0, 1.0]]),
])
def test_integer_coords_are_accepted_and_come_back_float32(make, expected):
    ints = np.array([[0, 0], [2, 1]], np.int64)  # tensorpack's transform demo passes ints
    out = make().apply_coords(ints)
    assert out.dtype == np.float32 and out.tolist() == expected
    assert ints.tolist() == [[0, 0], [2, 1]]  # the input is untouched
