"""Wrappers for the external libraries ``imgaug`` (aleju) and ``albumentations``.

Each library is imported when a wrapper is constructed; a missing one raises an ImportError
naming it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dataflow._optional import import_optional
from dataflow.imgaug import functional as fn
from dataflow.imgaug.base import ImageAugmentor, builtin
from dataflow.imgaug.transform import BaseTransform, Transform

__all__ = ["Albumentations", "AlbumentationsTransform", "IAATransform", "IAAugmentor"]


def _require(module: str, pip_name: str, who: str) -> Any:
    return import_optional(module, who)


class IAATransform(Transform):
    """A deterministic aleju-imgaug augmenter applied to images and keypoints."""

    def __init__(self, aug: Any, img_shape: tuple[int, ...]) -> None:
        self.aug, self.img_shape = aug, img_shape

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        return self.aug.augment_image(img)

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        fn.check_coords(coords)
        ia = _require("imgaug", "imgaug", "IAAugmentor")
        points = [ia.Keypoint(x=float(x), y=float(y)) for x, y in coords]
        kps = ia.KeypointsOnImage(points, shape=self.img_shape)
        out = self.aug.augment_keypoints([kps])[0].keypoints
        return np.asarray([[p.x, p.y] for p in out], dtype=coords.dtype).reshape(-1, 2)


@builtin("dataflow.imgaug.external.IAAugmentor", keeps_input=False)
class IAAugmentor(ImageAugmentor):
    """Wrap an aleju ``imgaug`` augmenter; one ``to_deterministic()`` copy per image.
    Keypoints go through its Keypoint API (documented by it as approximate)."""

    def __init__(self, augmentor: Any) -> None:
        super().__init__()
        _require("imgaug", "imgaug", "IAAugmentor")
        self.augmentor = augmentor

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        return IAATransform(self.augmentor.to_deterministic(), img.shape)


class AlbumentationsTransform(Transform):
    """An albumentations transform with fixed parameters; images only."""

    def __init__(self, aug: Any, params: dict[str, Any]) -> None:
        self.aug, self.params = aug, params

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        return self.aug.apply(img, **self.params)


@builtin("dataflow.imgaug.external.Albumentations", keeps_input=False)
class Albumentations(ImageAugmentor):
    """Wrap an ``albumentations`` transform: parameters are drawn once per image (from
    albumentations' own random state), the image goes through ``aug.apply(img, **params)``.
    Coordinates are not supported."""

    def __init__(self, augmentor: Any) -> None:
        super().__init__()
        _require("albumentations", "albumentations", "Albumentations")
        self.augmentor = augmentor

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        aug, data = self.augmentor, {"image": img}
        params = dict(aug.get_params())
        params.setdefault("shape", img.shape)  # albumentations >= 1.4 passes it to apply()
        update = getattr(aug, "update_transform_params", None)  # albumentations >= 2
        if update is not None:
            params = dict(update(params, data))
        dependent = getattr(aug, "get_params_dependent_on_data", None)  # >= 1.4.12
        if dependent is not None:
            params.update(dependent(params=params, data=data))
        return AlbumentationsTransform(aug, params)
