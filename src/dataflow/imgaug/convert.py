"""ColorSpace, Grayscale, ToUint8, ToFloat32 (photometric: coordinates are unchanged)."""

from __future__ import annotations

from typing import Any

import numpy as np

from dataflow.imgaug import functional as fn
from dataflow.imgaug._cv2 import cv2
from dataflow.imgaug.base import PhotometricAugmentor, builtin

__all__ = ["ColorSpace", "Grayscale", "ToFloat32", "ToUint8"]


@builtin("dataflow.imgaug.convert.ColorSpace")
class ColorSpace(PhotometricAugmentor):
    """``cv2.cvtColor(img, mode)``; with ``keepdims`` a channel axis dropped by OpenCV is put
    back (``(h, w, 1)``). float64 images are converted in float32 and cast back."""

    def __init__(self, mode: int, keepdims: bool = True) -> None:
        super().__init__()
        self.mode, self.keepdims = mode, keepdims

    def _augment(self, img: np.ndarray, _: Any) -> np.ndarray:
        return fn.color_convert(img, self.mode, self.keepdims)


@builtin("dataflow.imgaug.convert.Grayscale")
class Grayscale(ColorSpace):
    """Convert a BGR (or RGB, with ``rgb=True``) image to gray. ``keepdims`` keeps an
    ``(h, w, 1)`` shape; ``keepshape`` tiles the result to 3 channels (needs ``keepdims``)."""

    def __init__(self, keepdims: bool = True, rgb: bool = False, keepshape: bool = False) -> None:
        if keepshape and not keepdims:
            raise ValueError("Grayscale(keepshape=True) needs keepdims=True.")
        super().__init__(cv2.COLOR_RGB2GRAY if rgb else cv2.COLOR_BGR2GRAY, keepdims)
        self.rgb, self.keepshape = rgb, keepshape

    def _augment(self, img: np.ndarray, _: Any) -> np.ndarray:
        if img.ndim != 3 or img.shape[2] != 3:
            raise ValueError(
                f"Grayscale needs an image of shape (h, w, 3), got shape {img.shape}."
            )
        out = fn.color_convert(img, self.mode, self.keepdims)
        if self.keepshape:
            out = np.concatenate([out, out, out], axis=2)
        return out


@builtin("dataflow.imgaug.convert.ToUint8")
class ToUint8(PhotometricAugmentor):
    """Clip to [0, 255] and cast to uint8, truncating the fraction as tensorpack does
    (``np.clip(img, 0, 255).astype(np.uint8)``: 254.9 becomes 254). ``round=True`` rounds to
    the nearest integer first (254.5 becomes 254, 254.6 becomes 255). A uint8 image is
    returned as it is."""

    def __init__(self, round: bool = False) -> None:
        super().__init__()
        if not isinstance(round, bool):
            raise TypeError(f"`round` must be a bool, got {round!r} (type {type(round).__name__}).")
        self.round = round

    def _augment(self, img: np.ndarray, _: Any) -> np.ndarray:
        if img.dtype == np.uint8:
            return img
        if self.round:
            return fn.finish(img.astype(np.float64), np.dtype(np.uint8), True)
        return np.clip(img, 0, 255).astype(np.uint8)


@builtin("dataflow.imgaug.convert.ToFloat32")
class ToFloat32(PhotometricAugmentor):
    """Cast to float32 (values unchanged)."""

    def _augment(self, img: np.ndarray, _: Any) -> np.ndarray:
        return img.astype(np.float32)
