"""Every public augmentor: pickles, never modifies its input, keeps dtype and layout, gives the
same result when one transform is applied twice, and maps coordinates without mutating them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow import imgaug
from dataflow.rng import set_seed
from tests.imgaug.helpers import check_augmentor

EIG = np.eye(3)


def _all_augmentors():
    return {
        "Affine": imgaug.Affine((0.8, 1.2), (0.1, 0.1), 20, 10),
        "AugmentorList": imgaug.AugmentorList([imgaug.Flip(horiz=True), imgaug.Brightness(5)]),
        "Brightness": imgaug.Brightness(30),
        "BrightnessScale": imgaug.BrightnessScale((0.5, 1.5)),
        "CenterCrop": imgaug.CenterCrop((5, 7)),
        "CenterPaste": imgaug.CenterPaste((16, 20)),
        "Clip": imgaug.Clip(10, 200),
        "Contrast": imgaug.Contrast((0.5, 1.5)),
        "Contrast-rgb": imgaug.Contrast((0.5, 1.5), rgb=True),
        "Flip": imgaug.Flip(vert=True, prob=1.0),
        "Gamma": imgaug.Gamma(),
        "GaussianBlur": imgaug.GaussianBlur(3, (0.5, 2.0), symmetric=False),
        "GaussianNoise": imgaug.GaussianNoise(5),
        "GoogleNetRandomCropAndResize": imgaug.GoogleNetRandomCropAndResize(target_shape=6),
        "Identity": imgaug.Identity(),
        "JpegNoise": imgaug.JpegNoise(),
        "MapImage": imgaug.MapImage(np.fliplr, np.copy),
        "RandomApplyAug": imgaug.RandomApplyAug(imgaug.Shift(0.2, 0.2), 0.7),
        "RandomChooseAug": imgaug.RandomChooseAug([(imgaug.Rotation(30), 0.5),
                                                   (imgaug.Transpose(), 0.5)]),
        "RandomCrop": imgaug.RandomCrop(5),
        "RandomCropRandomShape": imgaug.RandomCropRandomShape(3, 3),
        "RandomCutout": imgaug.RandomCutout((2, 4), 3, fill=77),
        "RandomOrderAug": imgaug.RandomOrderAug([imgaug.Brightness(9), imgaug.Contrast((1, 2))]),
        "RandomPaste": imgaug.RandomPaste((16, 20)),
        "RandomResize": imgaug.RandomResize((0.5, 2.0)),
        "Resize": imgaug.Resize((7, 9)),
        "ResizeShortestEdge": imgaug.ResizeShortestEdge(6),
        "Rotation": imgaug.Rotation(90),
        "RotationAndCropValid": imgaug.RotationAndCropValid(30),
        "SaltPepperNoise": imgaug.SaltPepperNoise(0.2, 0.2),
        "Shift": imgaug.Shift(0.3, 0.3),
        "Transpose": imgaug.Transpose(1.0),
    }


COLOR_ONLY = {
    "Hue": lambda: imgaug.Hue((-30, 30)),
    "Saturation": lambda: imgaug.Saturation(0.5),
    "Lighting": lambda: imgaug.Lighting(10, [1, 2, 3], EIG),
    "Grayscale": lambda: imgaug.Grayscale(keepshape=True),
    "ColorSpace": lambda: imgaug.ColorSpace(imgaug.convert.cv2.COLOR_RGB2HSV),
}
TO_FLOAT = {
    "MeanVarianceNormalize": lambda: imgaug.MeanVarianceNormalize(all_channel=False),
    "MinMaxNormalize": lambda: imgaug.MinMaxNormalize(0, 1, all_channel=False),
    "ToFloat32": imgaug.ToFloat32,
}


def _images():
    r = np.random.RandomState(0)
    color = r.randint(0, 256, (12, 15, 3)).astype(np.uint8)
    images = {
        "uint8-rgb": color,
        "float32-rgb": color.astype(np.float32),
        "float64-rgb": color.astype(np.float64) / 255.0,
        "uint8-gray2d": color[:, :, 0].copy(),
        "float32-gray1": color[:, :, :1].astype(np.float32),
        "uint8-rgb-mirrored-view": np.pad(color, 2)[2:-2, ::-1, 2:-2],  # negative strides
    }
    for img in images.values():
        img.flags.writeable = False  # an in-place write anywhere raises
    return images


IMAGES = _images()
COORDS = np.array([[1.5, 2.5], [10.0, 3.0], [0.0, 11.5]], dtype=np.float32)


@pytest.mark.parametrize("img_name", sorted(IMAGES))
@pytest.mark.parametrize("name", sorted(_all_augmentors()))
def test_augmentor_contract(name, img_name):
    set_seed(1)
    aug = _all_augmentors()[name]
    img = IMAGES[img_name]
    for _ in range(3):  # several draws
        out, _tfm = check_augmentor(aug, img, COORDS)
        assert out.shape[2:] == img.shape[2:]


@pytest.mark.parametrize(
    "img_name", ["uint8-rgb", "float32-rgb", "float64-rgb", "uint8-rgb-mirrored-view"]
)
@pytest.mark.parametrize("name", sorted(COLOR_ONLY))
def test_color_augmentor_contract(name, img_name):
    set_seed(2)
    aug = COLOR_ONLY[name]()
    out, tfm = check_augmentor(aug, IMAGES[img_name], COORDS)
    assert out.shape == IMAGES[img_name].shape
    assert tfm.apply_coords(COORDS) is COORDS


@pytest.mark.parametrize("img_name", sorted(IMAGES))
@pytest.mark.parametrize("name", sorted(TO_FLOAT))
def test_to_float_contract(name, img_name):
    out, _ = check_augmentor(TO_FLOAT[name](), IMAGES[img_name], COORDS, dtype=np.float32)
    assert out.shape == IMAGES[img_name].shape


@pytest.mark.parametrize("img_name", sorted(IMAGES))
def test_to_uint8_contract(img_name):
    out, _ = check_augmentor(imgaug.ToUint8(), IMAGES[img_name], COORDS, dtype=np.uint8)
    assert out.shape == IMAGES[img_name].shape


def test_every_public_augmentor_is_covered():
    covered = set(_all_augmentors()) | set(COLOR_ONLY) | set(TO_FLOAT) | {"ToUint8"}
    covered |= {"Albumentations", "IAAugmentor"}  # tested in test_external.py
    public = {
        n for n in imgaug.__all__
        if isinstance(getattr(imgaug, n), type)
        and issubclass(getattr(imgaug, n), imgaug.ImageAugmentor)
        and n not in ("ImageAugmentor", "Augmentor", "PhotometricAugmentor")
    }
    assert public - covered == set()


@pytest.mark.parametrize("img_name", ["uint8-rgb", "float32-gray1"])
@pytest.mark.parametrize("name", sorted(_all_augmentors()))
def test_augment_fast_path_matches_the_transform(name, img_name):
    img = IMAGES[img_name]
    set_seed(4)
    aug = _all_augmentors()[name]
    fast = [aug.augment(img) for _ in range(4)]
    set_seed(4)
    aug = _all_augmentors()[name]
    slow = [aug.get_transform(img).apply_image(img) for _ in range(4)]
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a, b)


def test_subclass_overriding_get_transform_is_used_by_augment():
    class Always(imgaug.Flip):
        def get_transform(self, img):
            return imgaug.FlipTransform(img.shape[0], img.shape[1], True)

    img = IMAGES["uint8-gray2d"]
    for _ in range(5):
        np.testing.assert_array_equal(Always(horiz=True).augment(img), img[:, ::-1])
        np.testing.assert_array_equal(imgaug.AugmentorList([Always(horiz=True)]).augment(img),
                                      img[:, ::-1])


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    name=st.sampled_from(sorted(_all_augmentors())),
    h=st.integers(8, 16),
    w=st.integers(10, 20),
    channels=st.sampled_from([None, 1, 3]),
    dtype=st.sampled_from([np.uint8, np.float32, np.float64]),
    seed=st.integers(0, 1000),
)
def test_contract_on_random_images(name, h, w, channels, dtype, seed):
    shape = (h, w) if channels is None else (h, w, channels)
    img = (np.random.RandomState(seed).rand(*shape) * 255).astype(dtype)
    img.flags.writeable = False
    set_seed(seed)
    check_augmentor(_all_augmentors()[name], img, COORDS)
