"""Photometric augmentors: Hue, Brightness, BrightnessScale, Contrast, MeanVarianceNormalize,
GaussianBlur, Gamma, Clip, Saturation, Lighting, MinMaxNormalize.

All keep the image dtype (uint8 results are rounded and saturated) except the two
normalizers, which return float32 as in tensorpack. None modifies its input.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import numpy as np

from dataflow.imgaug import functional as fn
from dataflow.imgaug._args import pair
from dataflow.imgaug.base import PhotometricAugmentor, builtin
from dataflow.imgaug.transform import BaseTransform, PhotometricTransform

__all__ = [
    "Brightness",
    "BrightnessScale",
    "Clip",
    "Contrast",
    "Gamma",
    "GaussianBlur",
    "Hue",
    "Lighting",
    "MeanVarianceNormalize",
    "MinMaxNormalize",
    "Saturation",
]

logger = logging.getLogger(__name__)


class _Kernel(functools.partial):
    """``functools.partial(kernel, **params)`` that exposes its first keyword as ``params``,
    like the generic photometric transforms do (``tfm.func.params``)."""

    @property
    def params(self) -> Any:
        return next(iter(self.keywords.values()))


def _need_channels(img: np.ndarray, n: int, who: str) -> None:
    if img.ndim != 3 or img.shape[2] != n:
        raise ValueError(
            f"{who} needs an image of shape (h, w, {n}), got shape {img.shape}; convert a gray "
            "image with ColorSpace(cv2.COLOR_GRAY2RGB) first."
        )


@builtin("dataflow.imgaug.imgproc.Hue")
class Hue(PhotometricAugmentor):
    """Shift the hue by ``uniform(range)`` in OpenCV units (180 per turn; useful range +-90)."""

    def __init__(self, range: tuple[float, float] = (0, 180), rgb: bool = True) -> None:
        super().__init__()
        pair(range, "range")
        self.range, self.rgb = range, rgb

    def _get_augment_params(self, img: np.ndarray) -> float:
        return self._uniform(*self.range)

    def _augment(self, img: np.ndarray, offset: float) -> np.ndarray:
        _need_channels(img, 3, "Hue")
        return fn.hue_shift(img, offset, self.rgb)


@builtin("dataflow.imgaug.imgproc.Brightness")
class Brightness(PhotometricAugmentor):
    """Add ``uniform(-delta, delta)``; clip to [0, 255] if ``clip`` (always for uint8)."""

    samples_from_shape = pointwise = True

    def __init__(self, delta: float, clip: bool = True) -> None:
        super().__init__()
        if not delta > 0:
            raise ValueError(f"`delta` must be > 0, got {delta!r}.")
        self.delta, self.clip = delta, clip

    def _get_augment_params(self, img: np.ndarray) -> float:
        return self._uniform(-self.delta, self.delta)

    def _augment(self, img: np.ndarray, v: float) -> np.ndarray:
        return fn.add_scalar(img, v, self.clip)

    @staticmethod
    def _table(v: float, channels: int) -> tuple[int, ...]:
        """What ``_augment(img, v)`` does to a uint8 image: add ``round(v)`` to every channel,
        saturated (as offsets per channel)."""
        return (round(float(v)),) * channels

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        # the hot path of most pipelines: a C-level partial instead of two Python frames
        v = self._get_augment_params(img)
        return PhotometricTransform(_Kernel(fn.add_scalar, delta=v, clip=self.clip), "Brightness")

    def _augment_image(self, img: np.ndarray) -> np.ndarray:
        return fn.add_scalar(img, self._uniform(-self.delta, self.delta), self.clip)


@builtin("dataflow.imgaug.imgproc.BrightnessScale")
class BrightnessScale(PhotometricAugmentor):
    """Multiply by ``uniform(range)``; clip to [0, 255] if ``clip`` (always for uint8)."""

    samples_from_shape = pointwise = True

    def __init__(self, range: tuple[float, float], clip: bool = True) -> None:
        super().__init__()
        pair(range, "range")
        self.range, self.clip = range, clip

    def _get_augment_params(self, img: np.ndarray) -> float:
        return self._uniform(*self.range)

    def _augment(self, img: np.ndarray, v: float) -> np.ndarray:
        return fn.multiply(img, v, self.clip)


@builtin("dataflow.imgaug.imgproc.Contrast")
class Contrast(PhotometricAugmentor):
    """``x * r + mean * (1 - r)`` with ``r = uniform(factor_range)``; the mean is per channel
    (``rgb=None``), of the gray image (``rgb`` True/False, 3-channel images) or global."""

    def __init__(
        self, factor_range: tuple[float, float], rgb: bool | None = None, clip: bool = True
    ) -> None:
        super().__init__()
        pair(factor_range, "factor_range")
        self.factor_range, self.rgb, self.clip = factor_range, rgb, clip

    def _get_augment_params(self, img: np.ndarray) -> float:
        return self._uniform(*self.factor_range)

    def _augment(self, img: np.ndarray, r: float) -> np.ndarray:
        return fn.contrast(img, r, self.rgb, self.clip)


@builtin("dataflow.imgaug.imgproc.MeanVarianceNormalize")
class MeanVarianceNormalize(PhotometricAugmentor):
    """float32 ``(x - mean) / max(std, 1 / sqrt(numel))``, globally or per channel."""

    def __init__(self, all_channel: bool = True) -> None:
        super().__init__()
        self.all_channel = all_channel

    def _augment(self, img: np.ndarray, _: Any) -> np.ndarray:
        return fn.mean_variance_normalize(img, self.all_channel)


@builtin("dataflow.imgaug.imgproc.GaussianBlur")
class GaussianBlur(PhotometricAugmentor):
    """Blur with a ``(2k+1)`` kernel, ``k = randint(*size_range)`` (high exclusive) per axis and
    sigma uniform in ``sigma_range`` per axis (0: OpenCV's default for the kernel size);
    ``symmetric`` uses the same values for both axes. A scalar ``size_range`` n means
    ``(0, n)``; ``max_size`` is a deprecated alias of that."""

    def __init__(
        self,
        size_range: Any = (0, 3),
        sigma_range: tuple[float, float] = (0, 0),
        symmetric: bool = True,
        max_size: int | None = None,
    ) -> None:
        super().__init__()
        if max_size is not None:
            logger.warning("GaussianBlur(max_size=) is deprecated; use size_range=(0, max_size).")
            size_range = (0, max_size)
        if isinstance(size_range, int | np.integer):
            size_range = (0, int(size_range))
        pair(size_range, "size_range")
        pair(sigma_range, "sigma_range")
        self.size_range, self.sigma_range = size_range, sigma_range
        self.symmetric, self.max_size = symmetric, max_size

    def _get_augment_params(self, img: np.ndarray) -> tuple[tuple[int, int], tuple[float, float]]:
        n = 1 if self.symmetric else 2
        k = self.rng.randint(self.size_range[0], max(self.size_range[1], self.size_range[0] + 1),
                             size=n)
        s = self.rng.uniform(*self.sigma_range, size=n)
        k = np.repeat(k, 2 // n) * 2 + 1
        s = np.repeat(s, 2 // n)
        return (int(k[0]), int(k[1])), (float(s[0]), float(s[1]))

    def _augment(self, img: np.ndarray, p: Any) -> np.ndarray:
        return fn.gaussian_blur(img, *p)


@builtin("dataflow.imgaug.imgproc.Gamma")
class Gamma(PhotometricAugmentor):
    """``255 * (x / 255) ** (1 / (1 + g))``, ``g = uniform(range)``, on values clipped to
    [0, 255]. Float images keep their precision (tensorpack cast them through uint8)."""

    samples_from_shape = pointwise = True

    def __init__(self, range: tuple[float, float] = (-0.5, 0.5)) -> None:
        super().__init__()
        pair(range, "range")
        if range[0] <= -1:
            raise ValueError(f"`range` must stay above -1, got {range!r}.")
        self.range = range

    def _get_augment_params(self, img: np.ndarray) -> float:
        return self._uniform(*self.range)

    def _augment(self, img: np.ndarray, g: float) -> np.ndarray:
        return fn.gamma(img, g)


@builtin("dataflow.imgaug.imgproc.Clip")
class Clip(PhotometricAugmentor):
    """Clip values to ``[min, max]`` keeping the dtype."""

    def __init__(self, min: float = 0, max: float = 255) -> None:
        super().__init__()
        if min > max:
            raise ValueError(f"`min` must be <= `max`, got min={min!r}, max={max!r}.")
        self.min, self.max = min, max

    def _augment(self, img: np.ndarray, _: Any) -> np.ndarray:
        return fn.clip(img, self.min, self.max)


@builtin("dataflow.imgaug.imgproc.Saturation")
class Saturation(PhotometricAugmentor):
    """Blend a 3-channel image with its gray version: factor ``1 + uniform(-alpha, alpha)``."""

    def __init__(self, alpha: float = 0.4, rgb: bool = True, clip: bool = True) -> None:
        super().__init__()
        if not 0 <= alpha < 1:
            raise ValueError(f"`alpha` must be in [0, 1), got {alpha!r}.")
        self.alpha, self.rgb, self.clip = alpha, rgb, clip

    def _get_augment_params(self, img: np.ndarray) -> float:
        return 1.0 + self._uniform(-self.alpha, self.alpha)

    def _augment(self, img: np.ndarray, v: float) -> np.ndarray:
        _need_channels(img, 3, "Saturation")
        return fn.blend_gray(img, v, self.rgb, self.clip)


@builtin("dataflow.imgaug.imgproc.Lighting")
class Lighting(PhotometricAugmentor):
    """AlexNet-style PCA lighting noise: adds ``eigvec @ (randn(3) * std * eigval)`` to every
    pixel of a 3-channel image (``eigvec`` columns are the eigenvectors)."""

    samples_from_shape = pointwise = True

    def __init__(self, std: float, eigval: Any, eigvec: Any, clip: bool = True) -> None:
        super().__init__()
        eigval, eigvec = np.asarray(eigval, dtype=np.float64), np.asarray(eigvec, dtype=np.float64)
        if eigval.shape != (3,) or eigvec.shape != (3, 3):
            raise ValueError(
                f"`eigval` must have shape (3,) and `eigvec` (3, 3), got {eigval.shape} and "
                f"{eigvec.shape}."
            )
        self.std, self.eigval, self.eigvec, self.clip = std, eigval, eigvec, clip

    def _get_augment_params(self, img: np.ndarray) -> np.ndarray:
        v = self.rng.randn(3) * self.std * self.eigval
        return self.eigvec @ v

    def _augment(self, img: np.ndarray, inc: np.ndarray) -> np.ndarray:
        _need_channels(img, 3, "Lighting")
        return fn.lighting(img, inc, self.clip)

    @staticmethod
    def _table(inc: np.ndarray, channels: int) -> Any:
        """What ``_augment(img, inc)`` does to a uint8 3-channel image (``fn.lighting``'s uint8
        result is the float32 sum, rounded and saturated): away from a tie, the offsets
        ``rint(inc)``; near one, the (256, 3) table."""
        if channels != 3:
            return None  # applied as usual, where it raises its own error
        return fn.lighting_uint8(inc)  # (fn.lighting's own rule)


@builtin("dataflow.imgaug.imgproc.MinMaxNormalize")
class MinMaxNormalize(PhotometricAugmentor):
    """float32 linear rescale of the value range to ``[min, max]`` (a flat image maps to
    ``min``; tensorpack divided by zero)."""

    def __init__(self, min: float = 0, max: float = 255, all_channel: bool = True) -> None:
        super().__init__()
        self.min, self.max, self.all_channel = min, max, all_channel

    def _augment(self, img: np.ndarray, _: Any) -> np.ndarray:
        return fn.min_max_normalize(img, self.min, self.max, self.all_channel)
