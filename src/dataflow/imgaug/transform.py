"""Deterministic transforms: what an augmentor's ``get_transform(img)`` returns.

A :class:`Transform` holds fully sampled parameters and applies them to every target the same
way: ``apply_image(img)``, ``apply_coords(coords)`` (float ``Nx2`` of ``(x, y)``; integer
coordinates are accepted and come back as float32),
``apply_boxes(boxes)`` (float ``Nx4`` XYXY, see :mod:`dataflow.imgaug.boxes`) and
``apply_mask(mask)`` (nearest-neighbour, any dtype). Applying the same transform twice gives the
same result. Transforms never modify their inputs; crops return views of them.

Coordinates are continuous: the centre of pixel ``(i, j)`` is ``(j + 0.5, i + 0.5)``, so a
horizontal flip maps ``x -> w - x`` (as in tensorpack). Unlike tensorpack,
:class:`WarpAffineTransform` maps coordinates in that same frame (tensorpack applied the
pixel-index matrix to continuous coordinates, which is off by up to a pixel or more).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from dataflow.imgaug import functional as fn
from dataflow.imgaug._cv2 import cv2
from dataflow.imgaug._repr import _default_repr
from dataflow.imgaug.boxes import boxes_from_corners, boxes_to_corners, check_boxes

__all__ = [
    "BaseTransform",
    "CropTransform",
    "CutoutTransform",
    "FlipTransform",
    "LazyTransform",
    "NoOpTransform",
    "PasteTransform",
    "PhotometricTransform",
    "ResizeTransform",
    "Transform",
    "TransformFactory",
    "TransformList",
    "TransposeTransform",
    "WarpAffineTransform",
]

def _raise_not_implemented(owner: str, name: str) -> Callable[[Any], Any]:
    def missing(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{owner} does not implement `{name}`.")

    return missing


class BaseTransform:
    """Type-check base of every transform (users subclass :class:`Transform`)."""

    def __getattr__(self, name: str) -> Any:
        # any missing apply_<x> resolves to a function that raises NotImplementedError
        if name.startswith("apply_"):
            return _raise_not_implemented(type(self).__name__, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def apply_boxes(self, boxes: np.ndarray) -> np.ndarray:
        """XYXY boxes -> the XYXY boxes enclosing their four transformed corners."""
        check_boxes(boxes)
        return boxes_from_corners(self.apply_coords(boxes_to_corners(boxes)))

    def __repr__(self) -> str:
        return _default_repr(self)

    __str__ = __repr__


class Transform(BaseTransform):
    """Base class of deterministic transforms. Implement ``apply_image`` and ``apply_coords``."""


class NoOpTransform(Transform):
    """Every ``apply_<x>`` returns its input unchanged."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("apply_"):
            return _identity
        return super().__getattr__(name)

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        return img

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        return fn.check_coords(coords)  # (integer coordinates come back as float32)


def _identity(x: Any) -> Any:
    return x


class ResizeTransform(Transform):
    """Resize an ``(h, w)`` image to ``(new_h, new_w)``."""

    def __init__(self, h: int, w: int, new_h: int, new_w: int, interp: int) -> None:
        self.h, self.w, self.new_h, self.new_w = int(h), int(w), int(new_h), int(new_w)
        self.interp = interp

    def _check(self, img: np.ndarray) -> None:
        if img.shape[0] != self.h or img.shape[1] != self.w:
            raise ValueError(
                f"{self!r} was built for an image of size (h, w)=({self.h}, {self.w}) but got "
                f"shape {img.shape}; get a new transform for this image."
            )

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        if img.shape[0] != self.h or img.shape[1] != self.w:
            self._check(img)
        return fn.resize(img, self.new_h, self.new_w, self.interp)

    def apply_mask(self, mask: np.ndarray) -> np.ndarray:
        self._check(mask)
        if mask.dtype == np.bool_:
            return self.apply_mask(mask.view(np.uint8)).astype(np.bool_)
        return fn.resize(mask, self.new_h, self.new_w, cv2.INTER_NEAREST)

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        coords = fn.check_coords(coords)
        return fn.resize_coords(coords, self.new_w / self.w, self.new_h / self.h)


class CropTransform(Transform):
    """Crop the ``h x w`` window at ``(y0, x0)`` (returns a view)."""

    def __init__(self, y0: int, x0: int, h: int, w: int) -> None:
        self.y0, self.x0, self.h, self.w = int(y0), int(x0), int(h), int(w)

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        if self.y0 + self.h > img.shape[0] or self.x0 + self.w > img.shape[1]:
            raise ValueError(
                f"{self!r} needs an image of at least (h, w)=({self.y0 + self.h}, "
                f"{self.x0 + self.w}), got shape {img.shape}."
            )
        return fn.crop(img, self.y0, self.x0, self.h, self.w)

    apply_mask = apply_image

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        coords = fn.check_coords(coords)
        return fn.shift_coords(coords, -self.x0, -self.y0)


class FlipTransform(Transform):
    """Mirror horizontally (``x -> w - x``) or vertically (``y -> h - y``)."""

    def __init__(self, h: int, w: int, horiz: bool = True) -> None:
        self.h, self.w, self.horiz = h, w, horiz

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        return fn.flip(img, self.horiz)

    apply_mask = apply_image

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        coords = fn.check_coords(coords)
        return fn.flip_coords(coords, self.h, self.w, self.horiz)


class TransposeTransform(Transform):
    """Swap the height and width axes; coordinates swap x and y."""

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        return fn.transpose(img)

    apply_mask = apply_image

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        coords = fn.check_coords(coords)
        return fn.transpose_coords(coords)


class WarpAffineTransform(Transform):
    """``cv2.warpAffine(img, mat, dsize)``; ``mat`` maps source to destination pixel indices and
    ``dsize`` is ``(w, h)``. Coordinates are mapped in the continuous frame."""

    def __init__(
        self,
        mat: np.ndarray,
        dsize: tuple[int, int],
        interp: int = cv2.INTER_LINEAR,
        borderMode: int = cv2.BORDER_CONSTANT,  # noqa: N803 (tensorpack's name)
        borderValue: Any = 0,  # noqa: N803
    ) -> None:
        self.mat = np.asarray(mat, dtype=np.float64).reshape(2, 3)
        self.dsize = (int(dsize[0]), int(dsize[1]))
        self.interp, self.borderMode, self.borderValue = interp, borderMode, borderValue

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        return fn.warp_affine(
            img, self.mat, self.dsize, self.interp, self.borderMode, self.borderValue
        )

    def apply_mask(self, mask: np.ndarray) -> np.ndarray:
        if mask.dtype == np.bool_:
            return self.apply_mask(mask.view(np.uint8)).astype(np.bool_)
        return fn.warp_affine(mask, self.mat, self.dsize, cv2.INTER_NEAREST, cv2.BORDER_CONSTANT, 0)

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        coords = fn.check_coords(coords)
        return fn.affine_coords(coords, self.mat)


class PasteTransform(Transform):
    """Paste the image at ``(y0, x0)`` on a ``background_shape = (h, w)`` background made by
    ``background_filler.fill(background_shape, img)``; coordinates shift by ``(x0, y0)``."""

    def __init__(
        self, background_shape: tuple[int, int], y0: int, x0: int, background_filler: Any
    ) -> None:
        self.background_shape = tuple(int(s) for s in background_shape)
        self.y0, self.x0, self.background_filler = int(y0), int(x0), background_filler

    def _fits(self, img: np.ndarray) -> None:
        bh, bw = self.background_shape
        if self.y0 + img.shape[0] > bh or self.x0 + img.shape[1] > bw:
            raise ValueError(
                f"cannot paste an image of shape {img.shape} at (y0, x0)=({self.y0}, {self.x0}) "
                f"on a background of (h, w)={self.background_shape}."
            )

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        self._fits(img)
        bg = self.background_filler.fill(self.background_shape, img)
        return fn.paste(img, bg, self.y0, self.x0)

    def apply_mask(self, mask: np.ndarray) -> np.ndarray:
        self._fits(mask)
        bg = np.zeros(self.background_shape + mask.shape[2:], dtype=mask.dtype)
        return fn.paste(mask, bg, self.y0, self.x0)

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        coords = fn.check_coords(coords)
        return fn.shift_coords(coords, self.x0, self.y0)


class PhotometricTransform(Transform):
    """Applies ``func`` to images; coordinates, boxes and masks are returned unchanged."""

    def __init__(self, func: Callable[[np.ndarray], np.ndarray], name: str | None = None) -> None:
        self.func, self.name = func, name

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        return self.func(img)

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        return fn.check_coords(coords)  # (integer coordinates come back as float32)

    def apply_boxes(self, boxes: np.ndarray) -> np.ndarray:
        return boxes

    def apply_mask(self, mask: np.ndarray) -> np.ndarray:
        return mask

    def __repr__(self) -> str:
        return f"imgaug.PhotometricTransform({self.name or getattr(self.func, '__name__', '')})"

    __str__ = __repr__


class CutoutTransform(PhotometricTransform):
    """Fill the ``h x w`` rectangle at ``(y0, x0)`` with ``fill`` (on a copy)."""

    def __init__(self, y0: int, x0: int, h: int, w: int, fill: float = 0.0) -> None:
        self.y0, self.x0, self.h, self.w, self.fill = int(y0), int(x0), int(h), int(w), fill
        self.name = "Cutout"

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        return fn.cutout(img, self.y0, self.x0, self.h, self.w, self.fill)

    def __repr__(self) -> str:
        return _default_repr(self)

    __str__ = __repr__


class TransformList(BaseTransform):
    """Applies ``tfms`` in order for every ``apply_<x>``. Supports ``+``, ``+=`` and reversed ``+``
    with a transform or another list."""

    def __init__(self, tfms: Iterable[BaseTransform]) -> None:
        tfms = list(tfms)
        for t in tfms:
            if not isinstance(t, BaseTransform):
                raise TypeError(
                    f"`tfms` must hold Transform objects, got {type(t).__name__}: {t!r}."
                )
        self.tfms = tfms

    def _chain(self, name: str, x: Any) -> Any:
        for t in self.tfms:
            x = getattr(t, name)(x)
        return x

    def __getattr__(self, name: str) -> Any:
        if name.startswith("apply_"):
            return lambda x: self._chain(name, x)
        raise AttributeError(f"'TransformList' object has no attribute {name!r}")

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        for t in self.tfms:
            img = t.apply_image(img)
        return img

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        return self._chain("apply_coords", coords)

    def apply_boxes(self, boxes: np.ndarray) -> np.ndarray:
        return self._chain("apply_boxes", boxes)

    def apply_mask(self, mask: np.ndarray) -> np.ndarray:
        return self._chain("apply_mask", mask)

    def _others(self, other: Any) -> list[BaseTransform]:
        if isinstance(other, TransformList):
            return list(other.tfms)
        if isinstance(other, BaseTransform):
            return [other]
        return NotImplemented

    def __add__(self, other: Any) -> TransformList:
        others = self._others(other)
        if others is NotImplemented:
            return NotImplemented
        return TransformList(self.tfms + others)

    def __iadd__(self, other: Any) -> TransformList:
        others = self._others(other)
        if others is NotImplemented:
            return NotImplemented
        self.tfms.extend(others)
        return self

    def __radd__(self, other: Any) -> TransformList:
        others = self._others(other)
        if others is NotImplemented:
            return NotImplemented
        return TransformList(others + self.tfms)

    def __len__(self) -> int:
        return len(self.tfms)

    def __repr__(self) -> str:
        inner = ", ".join(repr(t) for t in self.tfms)
        return f"imgaug.TransformList([{inner}])"

    __str__ = __repr__


class TransformFactory(Transform):
    """A transform from callables: ``TransformFactory(name="x", apply_image=f, apply_coords=g)``.

    Every keyword must be named ``apply_<x>`` and be callable (a ``KeyError`` otherwise).
    """

    def __init__(self, name: str | None = None, **kwargs: Callable[[Any], Any]) -> None:
        for k, v in kwargs.items():
            if not k.startswith("apply_"):
                raise KeyError(
                    f"TransformFactory keyword {k!r} is not an `apply_<x>` name; use e.g. "
                    "apply_image=..., apply_coords=..."
                )
            if not callable(v):
                raise KeyError(f"TransformFactory keyword {k!r} must be callable, got {v!r}.")
        self.name = name
        self.__dict__.update(kwargs)

    def __repr__(self) -> str:
        return f"imgaug.TransformFactory(name={self.name!r})"

    __str__ = __repr__


class LazyTransform(BaseTransform):
    """Creates its transform from the first image given to ``apply_image`` (used by
    :class:`~dataflow.imgaug.AugmentorList` so that each augmentor sees the image produced by
    the previous ones). Other ``apply_<x>`` calls before that raise ``RuntimeError``."""

    def __init__(self, get_transform: Callable[[np.ndarray], BaseTransform]) -> None:
        self.get_transform = get_transform
        self._tfm: BaseTransform | None = None

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        if self._tfm is None:
            self._tfm = self.get_transform(img)
        return self._tfm.apply_image(img)

    def _created(self, name: str) -> BaseTransform:
        if self._tfm is None:
            raise RuntimeError(
                f"`{name}` was called before `apply_image`: the transforms after the first "
                "augmentor of an AugmentorList depend on the intermediate image. Call "
                "`tfm.apply_image(img)` first, then apply the same `tfm` to coordinates or masks."
            )
        return self._tfm

    def __getattr__(self, name: str) -> Any:
        if name.startswith("apply_"):
            return getattr(self._created(name), name)
        return super().__getattr__(name)

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        return self._created("apply_coords").apply_coords(coords)

    def apply_boxes(self, boxes: np.ndarray) -> np.ndarray:
        return self._created("apply_boxes").apply_boxes(boxes)

    def __repr__(self) -> str:
        if self._tfm is None:
            return "imgaug.LazyTransform(not created yet)"
        return repr(self._tfm)

    __str__ = __repr__
