"""AugmentorList.augment_jpeg and decode="jpeg": the same parameters and (within the documented
tolerance) the same pixels as cv2.imdecode followed by the same augmentors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow import imgaug, jpeg
from dataflow.errors import ImageDecodeError
from dataflow.imgaug import fused
from dataflow.imgaug._cv2 import cv2
from dataflow.sources import DataFromList
from dataflow.wrappers.image import (
    AugmentImageComponent,
    AugmentImageComponents,
    AugmentImageCoordinates,
)
from tests.test_jpeg import FALLBACKS, _with_orientation, imdecode, make_jpeg

needs_turbo = pytest.mark.skipif(
    jpeg.fast_path_status() is not None, reason=f"fast path off: {jpeg.fast_path_status()}")


def twins(build):
    """Two copies of an augmentor list whose streams draw the same numbers."""
    a, b = imgaug.AugmentorList(build()), imgaug.AugmentorList(build())
    for k, (x, y) in enumerate(zip(a.augmentors, b.augmentors)):
        x.rng, y.rng = np.random.RandomState(k), np.random.RandomState(k)
    return a, b


def same_streams(a, b):
    return all(x.rng.randint(1 << 30) == y.rng.randint(1 << 30)
               for x, y in zip(a.augmentors, b.augmentors))


def smooth_jpeg(h, w, seed, quality=95):
    """An image without detail finer than a few pixels (low-frequency waves, faint noise)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    for _ in range(4):
        fx, fy = rng.uniform(-0.03, 0.03, 2)
        img += rng.uniform(10, 30, 3) * np.sin(xx * fx + yy * fy + rng.uniform(0, 6))[..., None]
    img = (img + 128 + rng.normal(0, 1, img.shape)).clip(0, 255).astype(np.uint8)
    return cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])[1].tobytes()


CHAINS = {
    "googlenet+flip": lambda t: [imgaug.GoogleNetRandomCropAndResize(target_shape=t),
                                 imgaug.Flip(horiz=True)],
    "googlenet-cubic": lambda t: [imgaug.GoogleNetRandomCropAndResize(
        (0.08, 1.0), target_shape=t, interp=cv2.INTER_CUBIC)],
    "randomcrop+vflip+brightness": lambda t: [imgaug.RandomCrop(t), imgaug.Flip(vert=True),
                                              imgaug.Brightness(30)],
    "centercrop": lambda t: [imgaug.CenterCrop(t)],
    "resize": lambda t: [imgaug.Resize((t, t + 3))],
    "randomshape+resize+flip": lambda t: [imgaug.RandomCropRandomShape(t // 2, t // 2),
                                          imgaug.Resize(t), imgaug.Flip(horiz=True, prob=1.0)],
    "flip+crop+transpose+resize": lambda t: [imgaug.Flip(horiz=True, prob=1.0),
                                             imgaug.RandomCrop(t), imgaug.Transpose(prob=1.0),
                                             imgaug.Resize(t // 2)],
    "lighting-only": lambda t: [imgaug.Lighting(0.1, np.ones(3), np.eye(3))],
    "googlenet+flip+lighting+brightness": lambda t: [
        imgaug.GoogleNetRandomCropAndResize(target_shape=t), imgaug.Flip(horiz=True),
        imgaug.Lighting(0.1, np.array([55.0, 4.8, 1.1]), np.eye(3)), imgaug.Brightness(20)],
    "resize+gamma+crop+contrast": lambda t: [imgaug.Resize((t + 9, t + 5)), imgaug.Gamma(),
                                             imgaug.CenterCrop(t), imgaug.Contrast((0.8, 1.2))],
}


@needs_turbo
@settings(max_examples=60, deadline=None)
@given(h=st.integers(40, 260), w=st.integers(40, 260), seed=st.integers(0, 5),
       chain=st.sampled_from(sorted(CHAINS)), color=st.sampled_from(["bgr", "rgb", "gray"]))
def test_scale_one_gives_the_same_pixels_and_draws(h, w, seed, chain, color):
    t = min(h, w) // 2 + 8
    data = make_jpeg(h, w, seed=seed, sampling="420" if seed % 2 else "422")
    if "lighting" in chain and color == "gray":
        return
    ref_augs, augs = twins(lambda: CHAINS[chain](t))
    flag = cv2.IMREAD_GRAYSCALE if color == "gray" else cv2.IMREAD_COLOR
    for _ in range(3):
        src = imdecode(data, flag)
        src = src[:, :, ::-1] if color == "rgb" else src
        ref = ref_augs.augment(src)
        out = augs.augment_jpeg(data, color=color, scale=False)
        assert out.shape == ref.shape and out.dtype == np.uint8
        np.testing.assert_array_equal(out, ref)
    assert same_streams(ref_augs, augs)


@needs_turbo
@settings(max_examples=40, deadline=None)
@given(h=st.integers(120, 420), w=st.integers(120, 420), seed=st.integers(0, 20))
def test_resize_then_crop_resamples_only_the_crop_exactly(h, w, seed):
    # ResizeShortestEdge then CenterCrop/RandomCrop: the kernel computes what cv2.resize does
    data = make_jpeg(h, w, seed=seed)
    for build in (lambda: [imgaug.ResizeShortestEdge(100), imgaug.CenterCrop(88)],
                  lambda: [imgaug.ResizeShortestEdge(64), imgaug.RandomCrop(31)],
                  lambda: [imgaug.Resize((h // 2, w // 2)), imgaug.RandomCrop(50),
                           imgaug.Flip(vert=True, prob=1.0)]):
        ref_augs, augs = twins(build)
        ref = ref_augs.augment(imdecode(data))
        np.testing.assert_array_equal(augs.augment_jpeg(data, scale=False), ref)


@needs_turbo
@settings(max_examples=40, deadline=None)
@given(h=st.integers(300, 700), w=st.integers(300, 700), seed=st.integers(0, 1000))
def test_dct_scaled_decode_within_the_documented_bound(h, w, seed):
    data = smooth_jpeg(h, w, seed)
    ref_augs, augs = twins(lambda: [imgaug.GoogleNetRandomCropAndResize(target_shape=64),
                                    imgaug.Flip(horiz=True)])
    for _ in range(3):
        ref = ref_augs.augment(imdecode(data))
        out = augs.augment_jpeg(data)
        diff = np.abs(ref.astype(int) - out)
        assert diff.mean() < 1.0
        assert np.mean(diff > 4) <= 0.001
    assert same_streams(ref_augs, augs)


@needs_turbo
def test_the_decoder_scales_only_windows_twice_the_output(monkeypatch):
    scales = []
    real, real_resize = fused._decode, fused._decode_resize

    def spy(data, win, d, *args):
        scales.append(d)
        return real(data, win, d, *args)

    def spy_resize(data, part, d, *args):
        scales.append(d)
        return real_resize(data, part, d, *args)

    monkeypatch.setattr(fused, "_decode", spy)
    monkeypatch.setattr(fused, "_decode_resize", spy_resize)
    data = smooth_jpeg(600, 800, 0)
    imgaug.AugmentorList([imgaug.Resize(150)]).augment_jpeg(data)  # 600 / 150 = 4
    imgaug.AugmentorList([imgaug.Resize(301)]).augment_jpeg(data)  # less than twice
    imgaug.AugmentorList([imgaug.Resize(150)]).augment_jpeg(data, scale=False)
    imgaug.AugmentorList([imgaug.Resize(70, interp=cv2.INTER_AREA)]).augment_jpeg(data)
    assert scales == [4, 1, 1, 1]


@needs_turbo
def test_pointwise_augmentors_after_the_resize_are_stored_through_one_table(monkeypatch):
    tables = []
    real = fused._decode_resize

    def spy(*args):
        tables.append(args[-1])
        return real(*args)

    monkeypatch.setattr(fused, "_decode_resize", spy)
    data = make_jpeg(120, 160, seed=2)
    build = lambda: [imgaug.Resize(64), imgaug.Flip(horiz=True, prob=1.0),  # noqa: E731
                     imgaug.Brightness(30), imgaug.Gamma()]
    ref_augs, augs = twins(build)
    np.testing.assert_array_equal(augs.augment_jpeg(data), ref_augs.augment(imdecode(data)))
    assert len(tables) == 1 and tables[0].shape == (256, 3) and tables[0].dtype == np.uint8
    # before the resize a table does not commute with it: applied as usual
    ref_augs, augs = twins(lambda: [imgaug.Brightness(30), imgaug.Resize(64)])
    np.testing.assert_array_equal(augs.augment_jpeg(data), ref_augs.augment(imdecode(data)))
    assert len(tables) == 1  # decoded whole window, then applied as usual
    # offset tables (brightness, lighting) are added with SIMD; others are looked up
    assert fused._offsets(tables[0]) is None  # gamma
    table = np.clip(np.arange(256)[:, None] + np.array([3, -20, 0]), 0, 255).astype(np.uint8)
    assert fused._offsets(table) == (3, -20, 0)


@needs_turbo
def test_coordinates_follow_exactly():
    data = make_jpeg(180, 240, seed=3)
    coords = np.array([[0.0, 0.0], [240.0, 180.0], [17.5, 33.25]], np.float32)
    build = lambda: [imgaug.GoogleNetRandomCropAndResize(target_shape=96),  # noqa: E731
                     imgaug.Flip(horiz=True, prob=1.0), imgaug.Brightness(10)]
    ref_flow = AugmentImageCoordinates(DataFromList([[imdecode(data), coords]], shuffle=False),
                                       imgaug.AugmentorList(build()))
    flow = AugmentImageCoordinates(DataFromList([[data, coords]], shuffle=False),
                                   imgaug.AugmentorList(build()), decode="jpeg")
    for f, k in ((ref_flow, 0), (flow, 0)):
        for i, a in enumerate(f.augs.augmentors):
            a.rng = np.random.RandomState(i + k)
    (ref_img, ref_coords), = list(ref_flow)
    (img, out_coords), = list(flow)
    np.testing.assert_array_equal(img, ref_img)
    np.testing.assert_array_equal(out_coords, ref_coords)


def test_images_the_plan_does_not_take_are_decoded_whole_like_cv2():
    build = lambda: [imgaug.RandomCrop(24), imgaug.Flip(horiz=True)]  # noqa: E731
    jpg = make_jpeg(40, 50, seed=1)
    png = cv2.imencode(".png", imdecode(jpg))[1].tobytes()
    rotated = _with_orientation(jpg, 6)
    for data, backend in ((png, "auto"), (rotated, "auto"), (jpg, "cv2"), (jpg, "auto")):
        ref_augs, augs = twins(build)
        ref = ref_augs.augment(imdecode(data))
        np.testing.assert_array_equal(augs.augment_jpeg(data, backend=backend), ref)
    with pytest.raises(ImageDecodeError, match=r"cv2\.imdecode does not read it"):
        imgaug.AugmentorList(build()).augment_jpeg(b"neither jpeg nor png")
    with pytest.raises(ImageDecodeError, match="truncated"):
        imgaug.AugmentorList(build()).augment_jpeg(jpg[: len(jpg) // 2])
    with pytest.raises(ValueError, match="`color` must be one of"):
        imgaug.AugmentorList(build()).augment_jpeg(jpg, color="yuv")


def test_without_the_extension_the_fused_path_decodes_whole_images(monkeypatch):
    monkeypatch.setattr(jpeg, "_jpeg", None)
    monkeypatch.setattr(jpeg, "_OFF_REASON", "the C extension dataflow.jpeg._jpeg is not available")
    monkeypatch.setattr(jpeg, "_logged_off", True)  # logged once per process; tested elsewhere
    data = make_jpeg(70, 90, seed=4)
    build = lambda: [imgaug.GoogleNetRandomCropAndResize(target_shape=40),  # noqa: E731
                     imgaug.Flip(horiz=True), imgaug.Brightness(20)]
    for _ in range(3):
        ref_augs, augs = twins(build)
        np.testing.assert_array_equal(augs.augment_jpeg(data), ref_augs.augment(imdecode(data)))
    flow = AugmentImageComponent(DataFromList([[data]], shuffle=False), build(), decode="jpeg")
    assert next(iter(flow))[0].shape == (40, 40, 3)


@pytest.mark.parametrize("backend", FALLBACKS)
@settings(max_examples=40, deadline=None)
@given(h=st.integers(40, 260), w=st.integers(40, 260), seed=st.integers(0, 5),
       chain=st.sampled_from(sorted(CHAINS)), color=st.sampled_from(["bgr", "rgb", "gray"]))
def test_without_the_extension_scale_one_gives_the_same_pixels_and_draws(h, w, seed, chain,
                                                                         color, backend):
    # without the fast path the plan runs on OpenCV after a whole decode (by OpenCV or by
    # simplejpeg; the header parsed in Python); at scale 1 the same pixels as decoding first,
    # then augmenting, and the same random draws
    t = min(h, w) // 2 + 8
    data = make_jpeg(h, w, seed=seed, sampling="420" if seed % 2 else "422")
    if "lighting" in chain and color == "gray":
        return
    ref_augs, augs = twins(lambda: CHAINS[chain](t))
    flag = cv2.IMREAD_GRAYSCALE if color == "gray" else cv2.IMREAD_COLOR
    for _ in range(3):
        src = imdecode(data, flag)
        src = src[:, :, ::-1] if color == "rgb" else src
        ref = ref_augs.augment(src)
        out = augs.augment_jpeg(data, color=color, scale=False, backend=backend)
        assert out.shape == ref.shape and out.dtype == np.uint8
        np.testing.assert_array_equal(out, ref)
    assert same_streams(ref_augs, augs)


@pytest.mark.parametrize("backend", FALLBACKS)
@settings(max_examples=20, deadline=None)
@given(h=st.integers(300, 700), w=st.integers(300, 700), seed=st.integers(0, 1000))
def test_without_the_extension_dct_scaled_within_the_documented_bound(h, w, seed, backend):
    data = smooth_jpeg(h, w, seed)
    build = lambda: [imgaug.GoogleNetRandomCropAndResize(target_shape=64),  # noqa: E731
                     imgaug.Flip(horiz=True), imgaug.Brightness(20)]
    ref_augs, augs = twins(build)
    fast_augs = twins(build)[0]
    for _ in range(3):
        ref = ref_augs.augment(imdecode(data))
        out = augs.augment_jpeg(data, backend=backend)
        diff = np.abs(ref.astype(int) - out)
        assert diff.mean() < 1.0
        assert np.mean(diff > 4) <= 0.001
        if jpeg.fast_path_status() is None:  # OpenCV's bilinear warp: within 1 of the kernel
            fast = fast_augs.augment_jpeg(data, backend="turbo")
            assert np.abs(fast.astype(int) - out).max() <= 1
    assert same_streams(ref_augs, augs)


@pytest.mark.parametrize("backend", FALLBACKS)
def test_without_the_extension_large_windows_are_decoded_at_a_dct_scale(monkeypatch, backend):
    scales = []
    real = jpeg.decode_whole

    def spy(data, d, gray, h, w, **kw):
        scales.append(d)
        img = real(data, d, gray, h, w, **kw)
        assert img.shape[:2] == (-(-h // d), -(-w // d))
        return img

    monkeypatch.setattr(jpeg, "decode_whole", spy)
    data = smooth_jpeg(400, 600, 3)
    # CenterCrop(360) of 400x600, resized to 90: 1/4; to 180: 1/2; to 200: 1 (less than 2x)
    for size, d in ((90, 4), (180, 2), (200, 1)):
        augs = imgaug.AugmentorList([imgaug.CenterCrop(360), imgaug.Resize(size),
                                     imgaug.Flip(horiz=True, prob=1.0), imgaug.Gamma((0.3, 0.3))])
        out = augs.augment_jpeg(data, backend=backend)
        assert out.shape == (size, size, 3) and scales[-1] == d
        ref = augs.augment(imdecode(data))
        diff = np.abs(ref.astype(int) - out)
        assert (diff.max() == 0) if d == 1 else (diff.mean() < 1.0)
    assert scales == [4, 2, 1]


def test_samples_from_shape_is_declared_and_not_inherited_by_overrides():
    for cls in (imgaug.RandomCrop, imgaug.CenterCrop, imgaug.GoogleNetRandomCropAndResize,
                imgaug.RandomCropRandomShape, imgaug.Resize, imgaug.ResizeShortestEdge,
                imgaug.RandomResize, imgaug.Flip, imgaug.Transpose):
        assert cls.samples_from_shape is True
    for cls in (imgaug.Brightness, imgaug.BrightnessScale, imgaug.Gamma, imgaug.Lighting):
        assert cls.samples_from_shape is True and cls.pointwise is True
    for cls in (imgaug.Contrast, imgaug.Saturation, imgaug.Rotation, imgaug.Flip):
        assert cls.pointwise is False
    assert imgaug.Contrast.samples_from_shape is False
    assert imgaug.Rotation.samples_from_shape is False

    class PixelLighting(imgaug.Lighting):
        def _get_augment_params(self, img):  # may read the pixels
            return super()._get_augment_params(img)

    assert PixelLighting.samples_from_shape is False and PixelLighting.pointwise is False

    class PixelCrop(imgaug.RandomCrop):
        def get_transform(self, img):  # looks at the pixels
            return super().get_transform(img)

    class DeclaredCrop(imgaug.RandomCrop):
        samples_from_shape = True

        def get_transform(self, img):
            return super().get_transform(img)

    assert PixelCrop.samples_from_shape is False
    assert DeclaredCrop.samples_from_shape is True


@needs_turbo
def test_augment_image_component_decodes_jpeg_components():
    datas = [make_jpeg(60 + 7 * i, 80, seed=i) for i in range(4)]
    build = lambda: [imgaug.GoogleNetRandomCropAndResize(target_shape=32)]  # noqa: E731
    ref = AugmentImageComponent(DataFromList([[imdecode(d), i] for i, d in enumerate(datas)],
                                             shuffle=False), build())
    flow = AugmentImageComponent(DataFromList([[np.frombuffer(d, np.uint8), i] for i, d in
                                               enumerate(datas)], shuffle=False), build(),
                                 decode="jpeg")
    for i, (a, b) in enumerate(zip(ref.augs.augmentors, flow.augs.augmentors)):
        a.rng, b.rng = np.random.RandomState(i), np.random.RandomState(i)
    for (r, ri), (o, oi) in zip(ref, flow):
        assert ri == oi
        np.testing.assert_array_equal(o, r)
    with pytest.raises(ValueError, match="`decode` must be None"):
        AugmentImageComponent(DataFromList([[datas[0]]]), build(), decode="png")
    bad = AugmentImageComponent(DataFromList([[imdecode(datas[0])]], shuffle=False), build(),
                                decode="jpeg")
    with pytest.raises(TypeError, match=r"must hold an encoded image .* got an array of shape"):
        next(iter(bad))


@needs_turbo
def test_augment_image_components_applies_the_transform_to_the_other_components():
    data = make_jpeg(90, 120, seed=5)
    mask = (np.arange(90 * 120).reshape(90, 120) % 7).astype(np.uint8)
    build = lambda: [imgaug.RandomCrop(50), imgaug.Flip(horiz=True, prob=1.0)]  # noqa: E731
    flow = AugmentImageComponents(DataFromList([[data, mask, data]], shuffle=False), build(),
                                  index=(0, 1, 2), decode="jpeg")
    flow.augs.augmentors[0].rng = np.random.RandomState(0)
    img, out_mask, again = next(iter(flow))
    r = np.random.RandomState(0)
    y0, x0 = r.randint(90 - 50 + 1), r.randint(120 - 50 + 1)
    np.testing.assert_array_equal(img, imdecode(data)[y0:y0 + 50, x0:x0 + 50][:, ::-1])
    np.testing.assert_array_equal(out_mask, mask[y0:y0 + 50, x0:x0 + 50][:, ::-1])
    np.testing.assert_array_equal(again, img)


@needs_turbo
@settings(max_examples=300, deadline=None)
@given(h=st.integers(1, 90), w=st.integers(1, 90), nh=st.integers(1, 90), nw=st.integers(1, 90),
       cn=st.sampled_from([1, 3]), half=st.booleans(), seed=st.integers(0, 3), data=st.data())
def test_resize_kernel_computes_what_cv2_resize_does(h, w, nh, nw, cn, half, seed, data):
    if half:
        h, w, nh, nw = 2 * h, 2 * w, h, w
    src = np.random.default_rng(seed).integers(0, 256, (h, w, cn)[: 2 if cn == 1 else 3],
                                               dtype=np.uint8)
    ref = cv2.resize(src, (nw, nh), interpolation=cv2.INTER_LINEAR)
    # any window of the output, from the part of the source the plan decodes for it
    px, py = data.draw(st.integers(0, nw - 1)), data.draw(st.integers(0, nh - 1))
    pw, ph = data.draw(st.integers(1, nw - px)), data.draw(st.integers(1, nh - py))
    out = fused._resize_window_from(src, (nh, nw), (px, py, pw, ph))
    np.testing.assert_array_equal(out, ref[py : py + ph, px : px + pw])
