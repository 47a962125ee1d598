"""RandomCrop, CenterCrop, RandomCropRandomShape, GoogleNetRandomCropAndResize, RandomCutout."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dataflow.imgaug import functional as fn
from dataflow.imgaug._args import check_fits, pair, shape2d
from dataflow.imgaug._cv2 import cv2
from dataflow.imgaug.base import ImageAugmentor, builtin
from dataflow.imgaug.misc import _shortest_edge_size
from dataflow.imgaug.transform import (
    BaseTransform,
    CropTransform,
    CutoutTransform,
    ResizeTransform,
    TransformList,
)

__all__ = [
    "CenterCrop",
    "GoogleNetRandomCropAndResize",
    "RandomCrop",
    "RandomCropRandomShape",
    "RandomCutout",
]


class _FixedCrop(ImageAugmentor):
    """What the crops of one ``crop_shape`` (int or ``(h, w)``) share."""

    def __init__(self, crop_shape: Any) -> None:
        super().__init__()
        self._shape = shape2d(crop_shape, "crop_shape")
        self.crop_shape = crop_shape


@builtin("dataflow.imgaug.crop.RandomCrop")
class RandomCrop(_FixedCrop):
    """Crop a ``crop_shape`` (int or ``(h, w)``) window at a uniform random position; every
    offset in ``[0, H - h] x [0, W - w]`` is possible."""

    samples_from_shape = True  # (declared by each crop: it overrides get_transform)

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        fn.check_image(img)
        check_fits(self._shape, img, "RandomCrop `crop_shape`")
        h, w = self._shape
        y0 = self.rng.randint(img.shape[0] - h + 1)
        x0 = self.rng.randint(img.shape[1] - w + 1)
        return CropTransform(y0, x0, h, w)

    def _augment_image(self, img: np.ndarray) -> np.ndarray:
        h, w = self._shape
        if h > img.shape[0] or w > img.shape[1]:
            check_fits(self._shape, img, "RandomCrop `crop_shape`")
        y0 = self.rng.randint(img.shape[0] - h + 1)
        x0 = self.rng.randint(img.shape[1] - w + 1)
        return fn.crop(img, y0, x0, h, w)


@builtin("dataflow.imgaug.crop.CenterCrop")
class CenterCrop(_FixedCrop):
    """Crop the centre ``crop_shape`` window at ``(int((H - h) / 2), int((W - w) / 2))``."""

    samples_from_shape = True  # (declared by each crop: it overrides get_transform)

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        fn.check_image(img)
        check_fits(self._shape, img, "CenterCrop `crop_shape`")
        h, w = self._shape
        return CropTransform(int((img.shape[0] - h) / 2), int((img.shape[1] - w) / 2), h, w)

    def _augment_image(self, img: np.ndarray) -> np.ndarray:
        h, w = self._shape
        ih, iw = img.shape[:2]
        if h > ih or w > iw:
            check_fits(self._shape, img, "CenterCrop `crop_shape`")
        return fn.crop(img, int((ih - h) / 2), int((iw - w) / 2), h, w)


@builtin("dataflow.imgaug.crop.RandomCropRandomShape")
class RandomCropRandomShape(ImageAugmentor):
    """Crop a random ``h in [hmin, hmax]``, ``w in [wmin, wmax]`` window (inclusive; the maxima
    default to the image size) at a random position.

    Unlike tensorpack, every position is possible (tensorpack never chose the last offset).
    ``max_aspect_ratio`` is accepted and ignored, as in tensorpack.
    """

    samples_from_shape = True

    def __init__(
        self,
        wmin: int,
        hmin: int,
        wmax: int | None = None,
        hmax: int | None = None,
        max_aspect_ratio: float | None = None,
    ) -> None:
        super().__init__()
        if wmin <= 0 or hmin <= 0:
            raise ValueError(f"`wmin` and `hmin` must be positive, got wmin={wmin}, hmin={hmin}.")
        if (wmax is not None and wmax < wmin) or (hmax is not None and hmax < hmin):
            raise ValueError(
                f"need wmin <= wmax and hmin <= hmax, got wmin={wmin}, wmax={wmax}, "
                f"hmin={hmin}, hmax={hmax}."
            )
        self.wmin, self.hmin, self.wmax, self.hmax = wmin, hmin, wmax, hmax
        self.max_aspect_ratio = max_aspect_ratio

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        fn.check_image(img)
        ih, iw = img.shape[:2]
        check_fits((self.hmin, self.wmin), img, "RandomCropRandomShape minimum (hmin, wmin)")
        hmax = ih if self.hmax is None else min(self.hmax, ih)
        wmax = iw if self.wmax is None else min(self.wmax, iw)
        h = self.rng.randint(self.hmin, hmax + 1)
        w = self.rng.randint(self.wmin, wmax + 1)
        y0 = self.rng.randint(ih - h + 1)
        x0 = self.rng.randint(iw - w + 1)
        return CropTransform(y0, x0, h, w)


@builtin("dataflow.imgaug.crop.GoogleNetRandomCropAndResize")
class GoogleNetRandomCropAndResize(ImageAugmentor):
    """The Inception-style crop: up to 10 tries of a crop with area fraction uniform in
    ``crop_area_fraction`` and aspect ratio uniform in ``aspect_ratio_range`` (sides rounded,
    swapped with probability 0.5); the first that fits is cropped at a random position and
    resized to ``target_shape`` (a square). Otherwise: shortest edge to ``target_shape`` and a
    centre crop. Returns a ``TransformList``."""

    samples_from_shape = True

    def __init__(
        self,
        crop_area_fraction: tuple[float, float] = (0.08, 1.0),
        aspect_ratio_range: tuple[float, float] = (0.75, 1.333),
        target_shape: int = 224,
        interp: int = cv2.INTER_LINEAR,
    ) -> None:
        super().__init__()
        pair(crop_area_fraction, "crop_area_fraction")
        pair(aspect_ratio_range, "aspect_ratio_range")
        shape2d(target_shape, "target_shape")
        self.crop_area_fraction, self.aspect_ratio_range = crop_area_fraction, aspect_ratio_range
        self.target_shape, self.interp = target_shape, interp

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        fn.check_image(img)
        ih, iw = img.shape[:2]
        t = int(self.target_shape)
        area = ih * iw
        uniform = self._uniform  # the values of rng.uniform, at a fraction of the cost
        for _ in range(10):
            target_area = uniform(*self.crop_area_fraction) * area
            ratio = uniform(*self.aspect_ratio_range)
            ww = int(math.sqrt(target_area * ratio) + 0.5)
            hh = int(math.sqrt(target_area / ratio) + 0.5)
            if uniform() < 0.5:
                ww, hh = hh, ww
            if 0 < hh <= ih and 0 < ww <= iw:
                y0 = self.rng.randint(ih - hh + 1)
                x0 = self.rng.randint(iw - ww + 1)
                return TransformList(
                    [CropTransform(y0, x0, hh, ww), ResizeTransform(hh, ww, t, t, self.interp)]
                )
        nh, nw = _shortest_edge_size(ih, iw, t)
        return TransformList(
            [
                ResizeTransform(ih, iw, nh, nw, self.interp),
                CropTransform(int((nh - t) / 2), int((nw - t) / 2), t, t),
            ]
        )


@builtin("dataflow.imgaug.crop.RandomCutout")
class RandomCutout(ImageAugmentor):
    """Fill a random rectangle with ``fill`` (on a copy; tensorpack wrote into the input).

    ``h_range``/``w_range``: an int is a fixed size, a ``(low, high)`` pair draws
    ``randint(low, high)`` (high exclusive). The position is uniform over the image.
    Coordinates are unchanged.
    """

    def __init__(self, h_range: Any, w_range: Any, fill: float = 0.0) -> None:
        super().__init__()
        for name, r in (("h_range", h_range), ("w_range", w_range)):
            if not isinstance(r, int | np.integer):
                pair(r, name)
        self.h_range, self.w_range, self.fill = h_range, w_range, fill

    def _size(self, r: Any) -> int:
        if isinstance(r, int | np.integer):
            return int(r)
        return int(self.rng.randint(r[0], r[1]))

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        fn.check_image(img)
        h, w = self._size(self.h_range), self._size(self.w_range)
        check_fits((h, w), img, "RandomCutout size")
        y0 = self.rng.randint(img.shape[0] - h + 1)
        x0 = self.rng.randint(img.shape[1] - w + 1)
        return CutoutTransform(y0, x0, h, w, self.fill)
