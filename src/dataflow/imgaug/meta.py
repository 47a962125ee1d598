"""Identity, RandomApplyAug, RandomChooseAug, RandomOrderAug, MapImage."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dataflow.imgaug.base import ImageAugmentor, builtin
from dataflow.imgaug.transform import (
    BaseTransform,
    NoOpTransform,
    TransformFactory,
    TransformList,
)

__all__ = ["Identity", "MapImage", "RandomApplyAug", "RandomChooseAug", "RandomOrderAug"]


def _check_aug(aug: Any, name: str) -> ImageAugmentor:
    if not isinstance(aug, ImageAugmentor):
        raise TypeError(f"`{name}` must hold ImageAugmentor objects, got {type(aug).__name__}.")
    return aug


@builtin("dataflow.imgaug.meta.Identity")
class Identity(ImageAugmentor):
    """Returns a :class:`NoOpTransform`."""

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        return NoOpTransform()


@builtin("dataflow.imgaug.meta.RandomApplyAug")
class RandomApplyAug(ImageAugmentor):
    """Apply ``aug``'s transform with probability ``prob``, else nothing."""

    def __init__(self, aug: ImageAugmentor, prob: float) -> None:
        super().__init__()
        if not 0 <= prob <= 1:
            raise ValueError(f"`prob` must be in [0, 1], got {prob!r}.")
        self.aug, self.prob = _check_aug(aug, "aug"), prob

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        if self._uniform() < self.prob:
            return self.aug.get_transform(img)
        return NoOpTransform()


@builtin("dataflow.imgaug.meta.RandomChooseAug")
class RandomChooseAug(ImageAugmentor):
    """Use one augmentor per image, chosen among ``aug_lists``: augmentors (equal chances) or
    ``(augmentor, prob)`` pairs (probabilities are normalized to sum to 1)."""

    def __init__(self, aug_lists: Sequence[Any]) -> None:
        super().__init__()
        if not isinstance(aug_lists, list | tuple) or not aug_lists:
            raise ValueError(f"`aug_lists` must be a non-empty list, got {aug_lists!r}.")
        if isinstance(aug_lists[0], list | tuple):
            augs = [_check_aug(a, "aug_lists") for a, _ in aug_lists]
            prob = np.asarray([p for _, p in aug_lists], dtype=np.float64)
            if (prob < 0).any() or prob.sum() <= 0:
                raise ValueError(f"probabilities in `aug_lists` must be >= 0 with a positive sum, "
                                 f"got {prob.tolist()}.")
            self._prob = prob / prob.sum()
        else:
            augs = [_check_aug(a, "aug_lists") for a in aug_lists]
            self._prob = None
        self._augs = augs
        self.aug_lists = aug_lists

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        idx = self.rng.choice(len(self._augs), p=self._prob)
        return self._augs[idx].get_transform(img)


@builtin("dataflow.imgaug.meta.RandomOrderAug")
class RandomOrderAug(ImageAugmentor):
    """Create every augmentor's transform on the *original* image, then apply them in a random
    order (meant for shape-preserving augmentors)."""

    def __init__(self, aug_lists: Sequence[ImageAugmentor]) -> None:
        super().__init__()
        if not isinstance(aug_lists, list | tuple):
            raise TypeError(f"`aug_lists` must be a list of augmentors, got {aug_lists!r}.")
        self.aug_lists = [_check_aug(a, "aug_lists") for a in aug_lists]

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        order = self.rng.permutation(len(self.aug_lists))
        tfms = [a.get_transform(img) for a in self.aug_lists]
        return TransformList([tfms[i] for i in order])


def _no_coords(coords: np.ndarray) -> np.ndarray:
    raise NotImplementedError(
        "MapImage was built without `coord_func`, so it cannot map coordinates; pass "
        "MapImage(func, coord_func=...)."
    )


@builtin("dataflow.imgaug.meta.MapImage", keeps_input=False)
class MapImage(ImageAugmentor):
    """Apply ``func`` to images and ``coord_func`` (if given) to coordinates."""

    def __init__(
        self,
        func: Callable[[np.ndarray], np.ndarray],
        coord_func: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        super().__init__()
        if not callable(func) or (coord_func is not None and not callable(coord_func)):
            raise TypeError("`func` and `coord_func` must be callables.")
        self.func, self.coord_func = func, coord_func

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        return TransformFactory(
            name="MapImage", apply_image=self.func, apply_coords=self.coord_func or _no_coords
        )
