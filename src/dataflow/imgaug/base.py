"""Augmentor base classes: ``ImageAugmentor`` (alias ``Augmentor``), ``AugmentorList``,
``PhotometricAugmentor``.

Augmentors sample, transforms apply: ``get_transform(img)`` does all the random sampling and
returns a deterministic :class:`~dataflow.imgaug.transform.Transform`.

Random streams. Every augmentor owns ``self.rng`` (a ``numpy.random.RandomState``), derived
lazily on first use from :mod:`dataflow.rng`: the global seed (:func:`dataflow.rng.set_seed`),
a per-augmentor ordinal (the order in which augmentors first draw in this process, the same in
every run of the same program) and the worker id (:func:`dataflow.rng.get_worker_info`). So

* with a seed, an augmentor list yields the same transforms in every run;
* ``reset_state()`` re-derives the stream (it restarts it, from the same seed);
* after ``fork`` every live augmentor's stream is marked stale and re-derived on first use in
  the child, *after* the worker has declared its id, so workers get different, reproducible
  streams (tensorpack re-seeded from time and pid, and ``fix_rng_seed`` made workers identical);
* a pickled augmentor (e.g. sent to a spawned worker) re-derives its stream when unpickled,
  from the global seed of the process that pickled it if the new process has none.

Without a seed, streams come from fresh OS entropy.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from dataflow import rng as _rng
from dataflow.imgaug import functional as fn
from dataflow.imgaug._repr import _default_repr
from dataflow.imgaug.transform import (
    BaseTransform,
    LazyTransform,
    NoOpTransform,
    PhotometricTransform,
    Transform,
    TransformList,
)

__all__ = ["Augmentor", "AugmentorList", "ImageAugmentor", "PhotometricAugmentor"]

logger = logging.getLogger(__name__)

_live: weakref.WeakValueDictionary[int, ImageAugmentor] = weakref.WeakValueDictionary()
_live_lock = threading.Lock()
_deprecation_logged: set[str] = set()


def _mark_all_stale() -> None:
    """At-fork hook (child side): every live augmentor re-derives its rng on first use."""
    global _live_lock
    _live_lock = threading.Lock()  # a lock held by another parent thread stays held otherwise
    for aug in list(_live.values()):
        aug.__dict__["_rng"] = None


if hasattr(os, "register_at_fork"):  # pragma: no branch
    os.register_at_fork(after_in_child=_mark_all_stale)


def _log_deprecated(what: str, instead: str) -> None:
    if what not in _deprecation_logged:
        _deprecation_logged.add(what)
        logger.warning("%s is deprecated; use %s instead.", what, instead)


class ImageAugmentor:
    """Base class of augmentors. Subclasses implement ``get_transform(img)``.

    Old-style subclasses that implement ``_get_augment_params(img)`` and ``_augment(img, p)``
    (optionally ``_augment_coords(coords, p)``) keep working through the base ``get_transform``.
    """

    _rng: np.random.RandomState | None = None
    _rng_ordinal: int | None = None

    #: True if ``get_transform(img)`` reads nothing of ``img`` but its shape (the crops, resizes
    #: and flips), so that it can sample from a JPEG's header before any pixel is decoded (see
    #: :meth:`AugmentorList.augment_jpeg`). A subclass that overrides ``get_transform`` is
    #: False again unless it sets the attribute itself.
    samples_from_shape: bool = False
    #: True if the transform maps each value of each channel on its own, the same way at every
    #: pixel (brightness, gamma, PCA lighting), so that on uint8 images it is a lookup table per
    #: channel, which :meth:`AugmentorList.augment_jpeg` applies while the resized output is
    #: stored. Reset like ``samples_from_shape``.
    pointwise: bool = False

    def __new__(cls, *args: Any, **kwargs: Any) -> ImageAugmentor:
        obj = super().__new__(cls)
        with _live_lock:
            _live[id(obj)] = obj
        return obj

    def __init__(self) -> None:
        """Nothing to do: the random stream is derived lazily (see the module docstring)."""

    # ------------------------------------------------------------ randomness
    @property
    def rng(self) -> np.random.RandomState:
        """This augmentor's random stream, derived on first use."""
        r = self.__dict__.get("_rng")
        if r is None:
            if self._rng_ordinal is None:
                self._rng_ordinal = _rng.next_stage_ordinal()
            seed = _rng.get_seed()
            if seed is None:  # e.g. unpickled in a spawned worker: the seed it was sent with
                seed = self.__dict__.get("_rng_seed")
            r = _rng.derive_rng(seed, self._rng_ordinal)
            self.__dict__["_rng"] = r
        return r

    @rng.setter
    def rng(self, value: np.random.RandomState) -> None:
        self.__dict__["_rng"] = value

    def reset_state(self) -> None:
        """Re-derive the random stream (lazily); containers reset their children too."""
        self.__dict__["_rng"] = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_rng"] = None  # a copy re-derives its stream where it is used
        if _rng.get_seed() is not None:  # and keeps the global seed (spawned workers)
            state["_rng_seed"] = _rng.get_seed()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        with _live_lock:
            _live[id(self)] = self

    def _init(self, params: dict[str, Any] | None = None) -> None:
        """Store a ``locals()`` dict as attributes, skipping ``self`` and ``_``-prefixed names."""
        for k, v in (params or {}).items():
            if k != "self" and not k.startswith("_"):
                setattr(self, k, v)

    def _rand_range(self, low: float = 1.0, high: float | None = None, size: Any = None) -> Any:
        """Uniform float32 sample(s) in ``[low, high)``, or ``[0, low)`` with one argument."""
        if high is None:
            low, high = 0.0, low
        return np.float32(self.rng.uniform(low, high, size)) if size is None else (
            self.rng.uniform(low, high, size).astype(np.float32)
        )

    def _uniform(self, low: float = 0.0, high: float = 1.0) -> float:
        """One ``uniform(low, high)`` draw; the same value as ``self.rng.uniform(low, high)``
        (which computes ``low + (high - low) * random_sample()``), at a fifth of the cost."""
        r = self.__dict__.get("_rng") or self.rng
        return low + (high - low) * r.random_sample()

    # ------------------------------------------------------------ main API
    def get_transform(self, img: np.ndarray) -> BaseTransform:
        """Sample parameters for ``img`` and return a deterministic transform.

        The base implementation is the shim for old-style augmentors (see the class docstring).
        """
        hook = getattr(self, "_get_augment_params", None) or getattr(
            self, "get_augment_params", None
        )
        if hook is None or not hasattr(self, "_augment"):
            raise NotImplementedError(
                f"{type(self).__name__} must implement `get_transform(img)` (or the legacy "
                "`_get_augment_params(img)` and `_augment(img, params)`)."
            )
        _log_deprecated(f"{type(self).__name__}._get_augment_params/_augment", "get_transform")
        params = hook(img)
        if isinstance(params, BaseTransform):
            return params
        return _LegacyTransform(self, params)

    def augment(self, img: np.ndarray) -> np.ndarray:
        """Validate ``img`` and return ``get_transform(img).apply_image(img)``."""
        fn.check_image(img)
        return self._augment_image(img)

    def _augment_image(self, img: np.ndarray) -> np.ndarray:
        """``get_transform(img).apply_image(img)`` for a validated image.

        Hot built-in augmentors override it with the same random draws and the same kernels,
        without building a transform object. A subclass that overrides ``get_transform`` but
        not this method gets this generic version back (see ``__init_subclass__``).
        """
        return self.get_transform(img).apply_image(img)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "get_transform" in cls.__dict__ and "_augment_image" not in cls.__dict__:
            cls._augment_image = ImageAugmentor._augment_image  # type: ignore[method-assign]
        if "get_transform" in cls.__dict__:
            for flag in ("samples_from_shape", "pointwise"):
                if flag not in cls.__dict__:
                    setattr(cls, flag, False)

    # ------------------------------------------------------------ deprecated API
    def augment_return_params(self, img: np.ndarray) -> tuple[np.ndarray, BaseTransform]:
        """Deprecated: ``(augmented image, transform)``."""
        _log_deprecated("augment_return_params", "get_transform(img).apply_image(img)")
        fn.check_image(img)
        tfm = self.get_transform(img)
        return tfm.apply_image(img), tfm

    def augment_with_params(self, img: np.ndarray, tfm: BaseTransform) -> np.ndarray:
        """Deprecated: ``tfm.apply_image(img)``."""
        _log_deprecated("augment_with_params", "tfm.apply_image(img)")
        return tfm.apply_image(img)

    def augment_coords(self, coords: np.ndarray, tfm: BaseTransform) -> np.ndarray:
        """Deprecated: ``tfm.apply_coords(coords)``."""
        _log_deprecated("augment_coords", "tfm.apply_coords(coords)")
        return tfm.apply_coords(coords)

    def __repr__(self) -> str:
        return _default_repr(self)

    __str__ = __repr__


#: tensorpack's alias.
Augmentor = ImageAugmentor


class _LegacyTransform(Transform):
    """Wraps an old-style augmentor's ``_augment(img, p)`` / ``_augment_coords(coords, p)``."""

    def __init__(self, aug: ImageAugmentor, params: Any) -> None:
        self.aug, self.params = aug, params

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        return self.aug._augment(img, self.params)  # type: ignore[attr-defined]

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        for name in ("_augment_coords", "augment_coords_legacy"):
            fn = getattr(type(self.aug), name, None)
            if fn is not None:
                return fn(self.aug, coords, self.params)
        return coords

    def __repr__(self) -> str:
        return f"imgaug.LegacyTransform({self.aug!r})"

    __str__ = __repr__


class AugmentorList(ImageAugmentor):
    """Applies ``augmentors`` in order; each one sees the image produced by the previous ones.

    ``get_transform(img)`` creates the first transform at once and the others lazily, on the
    first ``apply_image``; call ``apply_image`` before ``apply_coords``. Once applied, the list
    of transforms is fixed and can be re-applied to other images and coordinates.
    """

    def __init__(self, augmentors: Sequence[ImageAugmentor]) -> None:
        if not isinstance(augmentors, list | tuple):
            raise TypeError(
                f"`augmentors` must be a list or tuple of augmentors, got "
                f"{type(augmentors).__name__}; wrap a single one as [aug]."
            )
        for a in augmentors:
            if not isinstance(a, ImageAugmentor):
                raise TypeError(
                    f"`augmentors` must hold ImageAugmentor objects, got {type(a).__name__}: "
                    f"{a!r}."
                )
        self.augmentors = list(augmentors)
        super().__init__()

    def reset_state(self) -> None:
        super().reset_state()
        for a in self.augmentors:
            a.reset_state()

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        fn.check_image(img)
        if not self.augmentors:
            return NoOpTransform()
        first = self.augmentors[0].get_transform(img)
        tfms = list(first.tfms) if isinstance(first, TransformList) else [first]
        tfms.extend(LazyTransform(a.get_transform) for a in self.augmentors[1:])
        return TransformList(tfms)

    def augment(self, img: np.ndarray) -> np.ndarray:
        """Same result and random draws as ``get_transform(img).apply_image(img)``, faster."""
        fn.check_image(img)
        for a in self.augmentors:
            img = a._augment_image(img)
        return img

    def _augment_image(self, img: np.ndarray) -> np.ndarray:
        for a in self.augmentors:
            img = a._augment_image(img)
        return img

    def augment_jpeg(
        self,
        data: Any,
        *,
        color: str = "bgr",
        scale: bool = True,
        strict: bool = True,
        backend: str = "auto",
        return_transform: bool = False,
    ) -> Any:
        """Decode the encoded image ``data`` and augment it, decoding only what the leading
        crops and resizes keep (see :mod:`dataflow.imgaug.fused` for how, and for the bound
        on the difference from ``augment(cv2.imdecode(data))``, which draws the same
        parameters).

        Args:
            data: encoded bytes (bytes, bytearray, memoryview or a 1-D uint8 array); data that
                is not JPEG is decoded whole by OpenCV, then augmented.
            color: ``"bgr"`` (as ``cv2.imdecode``), ``"rgb"`` or ``"gray"`` (``(h, w)``).
            scale: let the decoder scale by 1/2, 1/4 or 1/8 when the window is at least twice
                the size of the bilinear resize that follows; False keeps scale 1.
            strict: corrupt or truncated data raises ImageDecodeError (see
                :func:`dataflow.jpeg.decode_jpeg`).
            backend: the decoder, ``"auto"``, ``"turbo"`` or ``"cv2"`` (whole decode).
            return_transform: also return the transform that was applied, a TransformList
                (``apply_coords``, ``apply_image`` on masks, ...): ``(image, transform)``.
        """
        from dataflow.imgaug.fused import augment_jpeg

        return augment_jpeg(self, data, color=color, scale=scale, strict=strict,
                            backend=backend, return_transform=return_transform)

    def __iter__(self):
        return iter(self.augmentors)

    def __len__(self) -> int:
        return len(self.augmentors)

    def __repr__(self) -> str:
        return "imgaug.AugmentorList([" + ", ".join(repr(a) for a in self.augmentors) + "])"

    __str__ = __repr__


class _BoundAugment:
    """Picklable ``img -> aug._augment(img, params)``."""

    __slots__ = ("aug", "params")

    def __init__(self, aug: PhotometricAugmentor, params: Any) -> None:
        self.aug, self.params = aug, params

    def __call__(self, img: np.ndarray) -> np.ndarray:
        return self.aug._augment(img, self.params)

    def __getstate__(self) -> tuple[Any, Any]:
        return (self.aug, self.params)

    def __setstate__(self, state: tuple[Any, Any]) -> None:
        self.aug, self.params = state


class PhotometricAugmentor(ImageAugmentor):
    """An augmentor that changes pixel values only; coordinates are unchanged.

    Subclasses implement ``_get_augment_params(img)`` (default: ``None``) and
    ``_augment(img, params)``, which must not modify ``img``.
    """

    def _get_augment_params(self, img: np.ndarray) -> Any:
        return None

    def _augment(self, img: np.ndarray, params: Any) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} must implement `_augment(img, params)`.")

    def get_transform(self, img: np.ndarray) -> BaseTransform:
        params = self._get_augment_params(img)
        return PhotometricTransform(_BoundAugment(self, params), name=type(self).__name__)

    def _augment_image(self, img: np.ndarray) -> np.ndarray:
        return self._augment(img, self._get_augment_params(img))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # a subclass that redefines the hooks of a built-in with a fast path gets the generic
        # paths back, so that its hooks are the ones used
        own = cls.__dict__
        if ("_augment" in own or "_get_augment_params" in own) and "get_transform" not in own:
            cls.get_transform = PhotometricAugmentor.get_transform  # type: ignore[method-assign]
            cls._augment_image = PhotometricAugmentor._augment_image  # type: ignore[method-assign]
            for flag in ("samples_from_shape", "pointwise"):  # the new hooks may read pixels
                if flag not in own:
                    setattr(cls, flag, False)


def _as_augmentor_list(augmentors: Iterable[ImageAugmentor] | AugmentorList) -> AugmentorList:
    if isinstance(augmentors, AugmentorList):
        return augmentors
    if isinstance(augmentors, ImageAugmentor):
        return AugmentorList([augmentors])
    return AugmentorList(list(augmentors))
