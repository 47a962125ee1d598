"""Kernels: validation messages, purity, dtype and layout."""

from __future__ import annotations

import numpy as np
import pytest

from dataflow.imgaug import functional as fn


def test_check_image_messages():
    with pytest.raises(TypeError, match=r"`img` must be a numpy.ndarray.*got list"):
        fn.check_image([1])
    with pytest.raises(ValueError, match=r"got shape \(3,\)"):
        fn.check_image(np.zeros(3, np.uint8))
    with pytest.raises(TypeError, match="got dtype bool"):
        fn.check_image(np.zeros((2, 2), bool))
    img = np.zeros((2, 2), np.float64)
    assert fn.check_image(img) is img


def test_check_coords_messages():
    with pytest.raises(ValueError, match=r"reshape\(-1, 2\)"):
        fn.check_coords(np.zeros((2, 3), np.float32))
    with pytest.raises(TypeError, match="must have a float or integer dtype, got bool"):
        fn.check_coords(np.zeros((2, 2), np.bool_))
    ints = np.array([[1, 2], [3, 4]], np.int32)
    out = fn.check_coords(ints)
    assert out.dtype == np.float32 and out.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    f64 = np.zeros((1, 2), np.float64)
    assert fn.check_coords(f64) is f64


def test_finish_rounds_and_saturates_uint8():
    out = fn.finish(np.array([-1.0, 0.5, 1.5, 2.49, 300.0]), np.dtype(np.uint8), clip=False)
    assert out.dtype == np.uint8 and out.tolist() == [0, 0, 2, 2, 255]
    out = fn.finish(np.array([-1.0, 300.0]), np.dtype(np.float32), clip=True)
    assert out.dtype == np.float32 and out.tolist() == [0.0, 255.0]


@pytest.mark.parametrize(
    ("kernel", "args"),
    [
        (fn.add_scalar, (3.3,)), (fn.multiply, (1.7,)), (fn.gamma, (0.3,)), (fn.clip, (3, 50)),
        (fn.gaussian_blur, ((3, 5), (1.0, 2.0))), (fn.resize, (7, 3)), (fn.crop, (1, 1, 2, 2)),
        (fn.flip, (False,)), (fn.transpose, ()), (fn.cutout, (0, 0, 2, 2, 9.0)),
        (fn.warp_affine, (np.array([[1.0, 0.2, 1.0], [0.0, 1.0, 0.0]]), (5, 4))),
        (fn.gaussian_noise, (1, 3.0)), (fn.salt_pepper, (1, 0.3, 0.3)), (fn.jpeg, (50,)),
        (fn.contrast, (1.5, None)), (fn.mean_variance_normalize, ()),
        (fn.min_max_normalize, (0, 1)),
    ],
)
@pytest.mark.parametrize("shape", [(4, 5), (4, 5, 1), (4, 5, 3)])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.float64])
def test_kernels_are_pure_and_keep_layout(kernel, args, shape, dtype):
    img = (np.random.RandomState(0).rand(*shape) * 255).astype(dtype)
    img.flags.writeable = False  # any write into the input raises
    out = kernel(img, *args)
    assert out.ndim == img.ndim
    if kernel not in (fn.mean_variance_normalize, fn.min_max_normalize):
        assert out.dtype == img.dtype


def test_paste_and_affine_coords():
    bg = np.zeros((3, 3, 1), np.uint8)
    out = fn.paste(np.ones((1, 1), np.uint8), bg[:, :, 0], 1, 1)
    assert out.tolist() == [[0, 0, 0], [0, 1, 0], [0, 0, 0]]
    mat = np.array([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
    c = np.array([[0.5, 1.5]], np.float32)
    out = fn.affine_coords(c, mat)
    assert out.dtype == np.float32 and out.tolist() == [[0.5, 2.5]]


def test_uint8_brightness_paths_agree():
    img = np.random.RandomState(0).randint(0, 256, (4, 5, 6)).astype(np.uint8)
    many = fn.add_scalar(img, 7.6)
    few = np.concatenate([fn.add_scalar(img[..., :3], 7.6), fn.add_scalar(img[..., 3:], 7.6)], 2)
    np.testing.assert_array_equal(many, few)
    np.testing.assert_array_equal(many, np.clip(img.astype(int) + 8, 0, 255))
    assert fn.add_scalar(img[..., :1], -300.0).max() == 0
    np.testing.assert_array_equal(fn.add_scalar(img[..., 0], 0.4), img[..., 0])


@pytest.mark.parametrize("shape", [(6, 7), (6, 7, 1), (6, 7, 2), (6, 7, 3), (6, 7, 4)])
@pytest.mark.parametrize("delta", [-300.0, -17.4, -17.5, -0.4, 0.0, 2.5, 17.0, 300.0])
def test_uint8_brightness_of_either_sign_on_views_and_arrays(shape, delta):
    # negative offsets go through cv2.subtract, views may be copied first: the same pixels
    big = np.random.RandomState(0).randint(0, 256, (10, 12, *shape[2:])).astype(np.uint8)
    view = big[2 : 2 + shape[0], 3 : 3 + shape[1]]
    expected = np.clip(view.astype(int) + int(np.rint(delta)), 0, 255).astype(np.uint8)
    for img in (view, np.ascontiguousarray(view)):
        out = fn.add_scalar(img, delta)
        assert out.shape == shape and out.dtype == np.uint8 and out.flags["C_CONTIGUOUS"]
        np.testing.assert_array_equal(out, expected)
    assert np.array_equal(big[2 : 2 + shape[0], 3 : 3 + shape[1]], view)  # input untouched


def test_uint8_lighting_on_a_view_matches_the_contiguous_image():
    big = np.random.RandomState(1).randint(0, 256, (10, 12, 3)).astype(np.uint8)
    view = big[1:9, 2:11]
    for inc in ([9.2, -13.3, 4.0], [-40.0, -1.2, -0.7], [250.0, 3.0, -260.0]):
        expected = np.clip(np.rint(view.astype(np.float32) + np.float32(inc)), 0, 255)
        np.testing.assert_array_equal(fn.lighting(view, inc), expected.astype(np.uint8))
        np.testing.assert_array_equal(fn.lighting(np.ascontiguousarray(view), inc),
                                      expected.astype(np.uint8))


def test_flip_and_transpose_return_contiguous_arrays():
    img = np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)
    for out, ref in ((fn.flip(img), img[:, ::-1]), (fn.flip(img[..., :1], False), img[::-1, :, :1]),
                     (fn.transpose(img), img.swapaxes(0, 1)),
                     (fn.transpose(img[..., :1]), img[..., :1].swapaxes(0, 1))):
        assert out.flags["C_CONTIGUOUS"]
        np.testing.assert_array_equal(out, ref)


def test_lighting_uint8_table_matches_the_float_path():
    rng = np.random.default_rng(0)
    for _ in range(50):
        img = rng.integers(0, 256, (7, 9, 3), dtype=np.uint8)
        inc = rng.normal(0, 40, 3)
        inc[1] = np.floor(inc[1]) + 0.5  # exact halves round to even, as np.rint does
        expected = np.clip(np.rint(img.astype(np.float32) + inc.astype(np.float32)), 0, 255)
        out = fn.lighting(img, inc)
        assert out.dtype == np.uint8
        assert np.array_equal(out, expected.astype(np.uint8))


def test_lighting_uint8_integer_path_matches_the_float_path():
    rng = np.random.default_rng(1)
    for _ in range(300):
        img = rng.integers(0, 256, (5, 6, 3), dtype=np.uint8)
        inc = rng.normal(0, 60, 3)
        expected = np.clip(np.rint(img.astype(np.float32) + inc.astype(np.float32)), 0, 255)
        assert np.array_equal(fn.lighting(img, inc), expected.astype(np.uint8))
    img = rng.integers(0, 256, (5, 6, 3), dtype=np.uint8)
    assert np.array_equal(fn.lighting(img, [0.2, -0.3, 0.0]), img)
    assert fn.lighting(img, [0.2, -0.3, 0.0]) is not img


def test_lighting_uint8_says_what_lighting_applies():
    img = np.random.default_rng(2).integers(0, 256, (6, 7, 3), dtype=np.uint8)
    assert fn.lighting_uint8([3.2, -7.7, 0.1]) == (3, -8, 0)  # away from a tie: offsets
    table = fn.lighting_uint8([2.5, -1.5, 0.4])  # a tie: the float32 table
    assert table.dtype == np.uint8 and table.shape == (256, 3)
    assert table[0].tolist() == [2, 0, 0] and table[255].tolist() == [255, 254, 255]
    for inc in ([3.2, -7.7, 0.1], [2.5, -1.5, 0.4]):
        how = fn.lighting_uint8(inc)
        expected = (np.clip(img.astype(int) + np.array(how), 0, 255) if isinstance(how, tuple)
                    else how[img, np.arange(3)])
        np.testing.assert_array_equal(fn.lighting(img, inc), expected.astype(np.uint8))
