"""Flip, Resize, RandomResize, ResizeShortestEdge, Transpose."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from dataflow.imgaug import functional as fn
from dataflow.imgaug._args import pair, shape2d
from dataflow.imgaug._cv2 import cv2
from dataflow.imgaug.base import ImageAugmentor, builtin
from dataflow.imgaug.transform import (
    BaseTransform,
    FlipTransform,
    NoOpTransform,
    ResizeTransform,
    TransposeTransform,
)

__all__ = ["Flip", "RandomResize", "Resize", "ResizeShortestEdge", "Transpose"]

logger = logging.getLogger(__name__)


@builtin("dataflow.imgaug.misc.Flip")
class Flip(ImageAugmentor):
    """Flip horizontally or vertically with probability ``prob``."""

    samples_from_shape = True

    def __init__(self, horiz: bool = False, vert: bool = False, prob: float = 0.5) -> None:
        if bool(horiz) == bool(vert):
            raise ValueError(
                f"Flip needs exactly one of `horiz` and `vert` to be True, got horiz={horiz!r}, "
                f"vert={vert!r}; use two Flip augmentors to flip both ways."
            )
        super().__init__()
        self.horiz, self.vert, self.prob = horiz, vert, prob

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        if self._uniform() < self.prob:
            return FlipTransform(img.shape[0], img.shape[1], bool(self.horiz))
        return NoOpTransform()

    def _augment_image(self, img: np.ndarray) -> np.ndarray:
        return fn.flip(img, bool(self.horiz)) if self._uniform() < self.prob else img


@builtin("dataflow.imgaug.misc.Resize")
class Resize(ImageAugmentor):
    """Resize to ``shape`` (an int for a square, or ``(h, w)``)."""

    samples_from_shape = True

    def __init__(self, shape: Any, interp: int = cv2.INTER_LINEAR) -> None:
        super().__init__()
        self._shape = shape2d(shape, "shape")
        self.shape, self.interp = shape, interp

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        fn.check_image(img)
        return ResizeTransform(img.shape[0], img.shape[1], *self._shape, self.interp)

    def _augment_image(self, img: np.ndarray) -> np.ndarray:
        return fn.resize(img, self._shape[0], self._shape[1], self.interp)


def _shortest_edge_size(h: int, w: int, size: int) -> tuple[int, int]:
    scale = size / min(h, w)
    if h < w:
        return size, int(scale * w + 0.5)
    return int(scale * h + 0.5), size


@builtin("dataflow.imgaug.misc.ResizeShortestEdge")
class ResizeShortestEdge(ImageAugmentor):
    """Resize so that the shorter side is ``size`` and the aspect ratio is kept (the longer
    side becomes ``int(scale * L + 0.5)``)."""

    samples_from_shape = True

    def __init__(self, size: int, interp: int = cv2.INTER_LINEAR) -> None:
        super().__init__()
        shape2d(size, "size")
        self.size, self.interp = int(size), interp

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        fn.check_image(img)
        h, w = img.shape[:2]
        return ResizeTransform(h, w, *_shortest_edge_size(h, w, self.size), self.interp)

    def _augment_image(self, img: np.ndarray) -> np.ndarray:
        new_h, new_w = _shortest_edge_size(img.shape[0], img.shape[1], self.size)
        return fn.resize(img, new_h, new_w, self.interp)


@builtin("dataflow.imgaug.misc.RandomResize")
class RandomResize(ImageAugmentor):
    """Resize to a random size.

    Float ranges are scale factors, int ranges target sizes in pixels (both ends inclusive);
    ``xrange`` and ``yrange`` must be of the same kind (``yrange=None`` uses ``xrange``).
    ``aspect_ratio_thres=0`` keeps the aspect ratio (``yrange`` is ignored); otherwise width and
    height are drawn independently until the relative aspect change
    ``|(new_w / new_h) / (w / h) - 1|`` is at most the threshold (after 50 failed tries the
    size is kept, with a warning). ``minimum = (min_w, min_h)`` floors the result.
    """

    samples_from_shape = True

    def __init__(
        self,
        xrange: Any,
        yrange: Any = None,
        minimum: tuple[int, int] = (0, 0),
        aspect_ratio_thres: float = 0.15,
        interp: int = cv2.INTER_LINEAR,
    ) -> None:
        super().__init__()
        pair(xrange, "xrange")
        self._float = isinstance(xrange[0], float | np.floating)
        for name, rng_ in (("xrange", xrange), ("yrange", yrange)):
            if rng_ is None:
                continue
            pair(rng_, name)
            if any(isinstance(v, float | np.floating) != self._float for v in rng_):
                raise ValueError(
                    f"`xrange` and `yrange` must both be floats (scale factors) or both ints "
                    f"(pixel sizes), got xrange={xrange!r}, yrange={yrange!r}."
                )
        if aspect_ratio_thres < 0:
            raise ValueError(f"`aspect_ratio_thres` must be >= 0, got {aspect_ratio_thres!r}.")
        self.xrange, self.yrange, self.minimum = xrange, yrange, minimum
        self.aspect_ratio_thres, self.interp = aspect_ratio_thres, interp

    def _draw(self, r: Any, size: int) -> float:
        if self._float:
            return float(self.rng.uniform(r[0], r[1])) * size
        return float(self.rng.randint(r[0], r[1] + 1))

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        fn.check_image(img)
        h, w = img.shape[:2]
        yrange = self.xrange if self.yrange is None else self.yrange
        if self.aspect_ratio_thres == 0:
            dest_x = self._draw(self.xrange, w)
            dest_y = dest_x * h / w
        else:
            for _ in range(50):
                dest_x, dest_y = self._draw(self.xrange, w), self._draw(yrange, h)
                if dest_y > 0 and abs((dest_x / dest_y) / (w / h) - 1.0) <= self.aspect_ratio_thres:
                    break
            else:
                logger.warning("RandomResize found no size within the aspect threshold; kept it.")
                dest_x, dest_y = float(w), float(h)
        dest_x = max(dest_x, self.minimum[0], 1.0)
        dest_y = max(dest_y, self.minimum[1], 1.0)
        return ResizeTransform(h, w, int(dest_y + 0.5), int(dest_x + 0.5), self.interp)


@builtin("dataflow.imgaug.misc.Transpose")
class Transpose(ImageAugmentor):
    """Swap height and width with probability ``prob``."""

    samples_from_shape = True

    def __init__(self, prob: float = 0.5) -> None:
        super().__init__()
        self.prob = prob

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        if self._uniform() < self.prob:
            return TransposeTransform()
        return NoOpTransform()
