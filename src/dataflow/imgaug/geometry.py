"""Shift, Rotation, RotationAndCropValid, Affine (all through ``cv2.warpAffine``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dataflow.imgaug import functional as fn
from dataflow.imgaug._args import pair
from dataflow.imgaug._cv2 import cv2
from dataflow.imgaug.base import ImageAugmentor, builtin
from dataflow.imgaug.transform import (
    BaseTransform,
    CropTransform,
    TransformList,
    WarpAffineTransform,
)

__all__ = ["Affine", "Rotation", "RotationAndCropValid", "Shift"]


def _check_step(max_deg: float, step_deg: float | None) -> None:
    if step_deg is not None and max_deg != 180:
        raise ValueError(
            f"`step_deg` needs max_deg=180 (a full turn of steps), got max_deg={max_deg!r}, "
            f"step_deg={step_deg!r}; drop step_deg or set max_deg=180."
        )


@builtin("dataflow.imgaug.geometry.Shift")
class Shift(ImageAugmentor):
    """Shift by an integer number of pixels, uniform in ``+-frac * size``; same output size."""

    def __init__(
        self,
        horiz_frac: float = 0,
        vert_frac: float = 0,
        border: int = cv2.BORDER_REPLICATE,
        border_value: Any = 0,
    ) -> None:
        super().__init__()
        for name, v in (("horiz_frac", horiz_frac), ("vert_frac", vert_frac)):
            if not 0 <= v < 1:
                raise ValueError(f"`{name}` must be in [0, 1), got {v!r}.")
        self.horiz_frac, self.vert_frac = horiz_frac, vert_frac
        self.border, self.border_value = border, border_value

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        fn.check_image(img)
        h, w = img.shape[:2]
        dx = round(self.rng.uniform(-self.horiz_frac, self.horiz_frac) * w)
        dy = round(self.rng.uniform(-self.vert_frac, self.vert_frac) * h)
        mat = np.array([[1, 0, dx], [0, 1, dy]], dtype=np.float64)
        return WarpAffineTransform(
            mat, (w, h), cv2.INTER_NEAREST, self.border, self.border_value
        )


@builtin("dataflow.imgaug.geometry.Rotation")
class Rotation(ImageAugmentor):
    """Rotate by an angle uniform in ``+-max_deg`` (floored to a multiple of ``step_deg``,
    which needs ``max_deg=180``) about a centre at ``size * uniform(center_range)`` per axis;
    same output size."""

    def __init__(
        self,
        max_deg: float,
        center_range: tuple[float, float] = (0, 1),
        interp: int = cv2.INTER_LINEAR,
        border: int = cv2.BORDER_REPLICATE,
        step_deg: float | None = None,
        border_value: Any = 0,
    ) -> None:
        super().__init__()
        _check_step(max_deg, step_deg)
        pair(center_range, "center_range")
        self.max_deg, self.center_range, self.interp = max_deg, center_range, interp
        self.border, self.step_deg, self.border_value = border, step_deg, border_value

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        fn.check_image(img)
        h, w = img.shape[:2]
        center = (
            np.array([w, h], dtype=np.float64) * self.rng.uniform(*self.center_range, size=2)
            - 0.5
        )
        deg = self.rng.uniform(-self.max_deg, self.max_deg)
        if self.step_deg:
            deg = deg // self.step_deg * self.step_deg
        mat = cv2.getRotationMatrix2D((float(center[0]), float(center[1])), float(deg), 1.0)
        return WarpAffineTransform(mat, (w, h), self.interp, self.border, self.border_value)


@builtin("dataflow.imgaug.geometry.RotationAndCropValid")
class RotationAndCropValid(ImageAugmentor):
    """Rotate about the centre by an angle uniform in ``+-max_deg``, then crop the largest
    axis-aligned rectangle that holds no border pixels (output shapes vary)."""

    def __init__(
        self, max_deg: float, interp: int = cv2.INTER_LINEAR, step_deg: float | None = None
    ) -> None:
        super().__init__()
        _check_step(max_deg, step_deg)
        self.max_deg, self.interp, self.step_deg = max_deg, interp, step_deg

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        fn.check_image(img)
        h, w = img.shape[:2]
        deg = self.rng.uniform(-self.max_deg, self.max_deg)
        if self.step_deg:
            deg = deg // self.step_deg * self.step_deg
        mat = cv2.getRotationMatrix2D((w * 0.5 - 0.5, h * 0.5 - 0.5), float(deg), 1.0)
        nw, nh = self.largest_rotated_rect(w, h, deg)
        nw, nh = max(1, min(nw, w)), max(1, min(nh, h))
        return TransformList(
            [
                WarpAffineTransform(mat, (w, h), self.interp, cv2.BORDER_REPLICATE),
                CropTransform(int((h - nh) / 2), int((w - nw) / 2), nh, nw),
            ]
        )

    @staticmethod
    def largest_rotated_rect(w: int, h: int, angle_deg: float) -> tuple[int, int]:
        """``(width, height)`` of the largest axis-aligned rectangle inside a ``w x h``
        rectangle rotated by ``angle_deg`` about its centre, rounded down so that the crop
        holds no border pixel (tensorpack rounds to nearest: sometimes one pixel larger)."""
        if w <= 0 or h <= 0:
            return 0, 0
        a = math.radians(angle_deg)
        sin_a, cos_a = abs(math.sin(a)), abs(math.cos(a))
        long_side, short_side = (w, h) if w >= h else (h, w)
        if short_side <= 2.0 * sin_a * cos_a * long_side or abs(sin_a - cos_a) < 1e-10:
            # two corners of the crop touch the longer side: a half-constrained case
            x = 0.5 * short_side
            wr, hr = (x / sin_a, x / cos_a) if w >= h else (x / cos_a, x / sin_a)
        else:
            cos_2a = cos_a * cos_a - sin_a * sin_a
            wr, hr = (w * cos_a - h * sin_a) / cos_2a, (h * cos_a - w * sin_a) / cos_2a
        return math.floor(wr + 1e-6), math.floor(hr + 1e-6)


@builtin("dataflow.imgaug.geometry.Affine")
class Affine(ImageAugmentor):
    """Random affine: scale uniform in ``scale``, translation ``round(uniform(+-frac) * size)``,
    rotation uniform in ``+-rotate_max_deg`` and shear uniform in ``+-shear`` degrees, about the
    image centre; same output size."""

    def __init__(
        self,
        scale: tuple[float, float] | None = None,
        translate_frac: tuple[float, float] | None = None,
        rotate_max_deg: float = 0.0,
        shear: float = 0.0,
        interp: int = cv2.INTER_LINEAR,
        border: int = cv2.BORDER_REPLICATE,
        border_value: Any = 0,
    ) -> None:
        super().__init__()
        if scale is not None:
            pair(scale, "scale")
        if translate_frac is not None and (
            not isinstance(translate_frac, list | tuple) or len(translate_frac) != 2
        ):
            raise ValueError(
                f"`translate_frac` must be a (horiz, vert) pair, got {translate_frac!r}."
            )
        if shear < 0:
            raise ValueError(f"`shear` must be >= 0 (a maximum in degrees), got {shear!r}.")
        self.scale, self.translate_frac = scale, translate_frac
        self.rotate_max_deg, self.shear = rotate_max_deg, shear
        self.interp, self.border, self.border_value = interp, border, border_value

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        fn.check_image(img)
        h, w = img.shape[:2]
        s = self.rng.uniform(*self.scale) if self.scale is not None else 1.0
        tx = ty = 0.0
        if self.translate_frac is not None:
            fx, fy = self.translate_frac
            tx = round(self.rng.uniform(-fx, fx) * w)
            ty = round(self.rng.uniform(-fy, fy) * h)
        theta = self.rng.uniform(-self.rotate_max_deg, self.rotate_max_deg) if (
            self.rotate_max_deg
        ) else 0.0
        sh = self.rng.uniform(-self.shear, self.shear) if self.shear else 0.0
        cx, cy = w * 0.5 - 0.5, h * 0.5 - 0.5
        t, r = math.radians(theta), math.tan(math.radians(sh))
        rot = np.array(
            [[math.cos(t), math.sin(t), 0], [-math.sin(t), math.cos(t), 0], [0, 0, 1]]
        )
        shear_m = np.array([[1, r, 0], [0, 1, 0], [0, 0, 1]], dtype=np.float64)
        scale_m = np.diag([s, s, 1.0])
        to_origin = np.array([[1, 0, -cx], [0, 1, -cy], [0, 0, 1]], dtype=np.float64)
        back = np.array([[1, 0, cx + tx], [0, 1, cy + ty], [0, 0, 1]], dtype=np.float64)
        mat = (back @ rot @ shear_m @ scale_m @ to_origin)[:2]
        return WarpAffineTransform(mat, (w, h), self.interp, self.border, self.border_value)
