"""JpegNoise, GaussianNoise, SaltPepperNoise (photometric: coordinates are unchanged).

The noise transforms store a seed drawn from the augmentor's stream, so one transform gives
the same noise every time it is applied.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dataflow.imgaug import functional as fn
from dataflow.imgaug._args import pair
from dataflow.imgaug.base import PhotometricAugmentor, builtin

__all__ = ["GaussianNoise", "JpegNoise", "SaltPepperNoise"]

_SEED_HIGH = 2**31 - 1


@builtin("dataflow.imgaug.noise.JpegNoise")
class JpegNoise(PhotometricAugmentor):
    """JPEG round trip at quality ``randint(*quality_range)`` (high exclusive). Shape and dtype
    are kept (tensorpack turned gray images into 3 channels); float images are taken to be in
    [0, 255] and come back rounded to integers."""

    def __init__(self, quality_range: tuple[int, int] = (40, 100)) -> None:
        super().__init__()
        lo, hi = pair(quality_range, "quality_range")
        if not 0 <= lo < hi <= 101:
            raise ValueError(
                f"`quality_range` must satisfy 0 <= low < high <= 101, got {quality_range!r}."
            )
        self.quality_range = quality_range

    def _get_augment_params(self, img: np.ndarray) -> int:
        return int(self.rng.randint(*self.quality_range))

    def _augment(self, img: np.ndarray, q: int) -> np.ndarray:
        return fn.jpeg(img, q)


@builtin("dataflow.imgaug.noise.GaussianNoise")
class GaussianNoise(PhotometricAugmentor):
    """Add ``sigma * N(0, 1)`` element-wise noise; clip to [0, 255] if ``clip`` (always for
    uint8)."""

    def __init__(self, sigma: float = 1, clip: bool = True) -> None:
        super().__init__()
        if sigma < 0:
            raise ValueError(f"`sigma` must be >= 0, got {sigma!r}.")
        self.sigma, self.clip = sigma, clip

    def _get_augment_params(self, img: np.ndarray) -> int:
        return int(self.rng.randint(_SEED_HIGH))

    def _augment(self, img: np.ndarray, seed: int) -> np.ndarray:
        return fn.gaussian_noise(img, seed, self.sigma, self.clip)


@builtin("dataflow.imgaug.noise.SaltPepperNoise")
class SaltPepperNoise(PhotometricAugmentor):
    """Set each element (not pixel) to 255 with ``white_prob`` and to 0 with ``black_prob``,
    on a copy (tensorpack wrote into the input)."""

    def __init__(self, white_prob: float = 0.05, black_prob: float = 0.05) -> None:
        super().__init__()
        for name, p in (("white_prob", white_prob), ("black_prob", black_prob)):
            if not 0 <= p <= 1:
                raise ValueError(f"`{name}` must be a probability in [0, 1], got {p!r}.")
        self.white_prob, self.black_prob = white_prob, black_prob

    def _get_augment_params(self, img: np.ndarray) -> int:
        return int(self.rng.randint(_SEED_HIGH))

    def _augment(self, img: np.ndarray, seed: Any) -> np.ndarray:
        return fn.salt_pepper(img, seed, self.white_prob, self.black_prob)
