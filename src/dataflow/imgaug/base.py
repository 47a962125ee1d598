"""Augmentor base classes: ``ImageAugmentor`` (alias ``Augmentor``), ``AugmentorList``,
``PhotometricAugmentor``.

Augmentors sample, transforms apply: ``get_transform(img)`` does all the random sampling and
returns a deterministic :class:`~dataflow.imgaug.transform.Transform`.

Random streams (see :mod:`dataflow.rng`). Every augmentor owns ``self.rng`` (a
``numpy.random.RandomState``), derived from a base seed (its own ``seed=``, which every augmentor
accepts as a keyword, else the global :func:`dataflow.set_seed`, else OS entropy) and its *path*:
the stage that owns it (``AugmentImageComponent`` and friends) gives every augmentor inside it a
path below the stage's own, in a fixed order (depth first, attributes by name). So

* the same seed gives the same transforms in every run, whatever else the program built;
* ``reset_state()`` re-derives the streams of the augmentor and of every augmentor inside it;
* inside a parallel mapper, an augmentor draws from a stream keyed by the input being mapped
  (its epoch and position), so the result does not depend on which worker maps it;
* an augmentor used on its own, never reset, derives its stream on first use from the global
  seed and its class name;
* every stream is keyed by the runner worker that uses it (:func:`dataflow.rng.get_worker_info`):
  the copies of a flow in ``MultiProcessRunnerZMQ``'s workers augment differently, and each
  reproduces.

As in tensorpack, ``aug.rng = np.random.RandomState(n)`` pins an augmentor to that generator
(until its next ``reset_state()``).
"""

from __future__ import annotations

import functools
import inspect
import logging
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

_deprecation_logged: set[str] = set()


def _log_deprecated(what: str, instead: str) -> None:
    if what not in _deprecation_logged:
        _deprecation_logged.add(what)
        logger.warning("%s is deprecated; use %s instead.", what, instead)


def _with_seed(init: Any) -> Any:
    """``init`` that also takes the keyword ``seed=`` (the augmentor's own base seed), and then
    places the augmentors inside the new one (see :meth:`ImageAugmentor._place`)."""

    @functools.wraps(init)
    def __init__(  # noqa: N807 (it becomes the class's __init__)
        self: ImageAugmentor, *args: Any, seed: int | None = None, **kwargs: Any
    ) -> None:
        init(self, *args, **kwargs)
        if seed is not None:
            self.seed = _rng.check_seed(seed)
        self._place()  # the augmentors inside (a list's) get their positions now

    __init__._takes_seed = True  # type: ignore[attr-defined]
    return __init__


def builtin(seed_name: str, *, keeps_input: bool = True) -> Any:
    """Marks an augmentor class of this package with two class attributes, its own (a subclass
    inherits neither: its draws and its writes are its own):

    * ``seed_name``: the name its random stream is keyed by when it is used alone, outside a
      pipeline (see :func:`dataflow.rng.name_key`). It is pinned here, not taken from the file
      the class lives in, so that moving a file changes no seeded output.
    * ``keeps_input``: its transforms never write into the image they are given, so the image
      flows may hand it a datapoint's array without a copy (``MapImage``, ``Albumentations`` and
      ``IAAugmentor`` run the user's code: ``False``).
    """

    def mark(cls: type) -> type:
        cls.seed_name = seed_name  # type: ignore[attr-defined]
        cls.keeps_input = keeps_input  # type: ignore[attr-defined]
        return cls

    return mark


@builtin("dataflow.imgaug.base.ImageAugmentor")
class ImageAugmentor:
    """Base class of augmentors. Subclasses implement ``get_transform(img)``.

    Old-style subclasses that implement ``_get_augment_params(img)`` and ``_augment(img, p)``
    (optionally ``_augment_coords(coords, p)``) keep working through the base ``get_transform``.
    """

    seed: int | None = None  # the augmentor's own base seed (the `seed=` keyword)
    _rng: np.random.RandomState | None = None
    _pinned = False  # `rng` was assigned by the user

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

    def __init__(self) -> None:
        """Nothing to do: the random stream is derived on reset or first use (see the module
        docstring)."""

    # ------------------------------------------------------------ randomness
    @property
    def rng(self) -> np.random.RandomState:
        """This augmentor's random stream (per input inside a parallel mapper)."""
        d = self.__dict__
        if d.get("_pinned"):
            return d["_rng"]
        t = _rng.thread_state()  # (one call for the scope and the worker: a hot path)
        scope = t.get("input")
        if scope is not None:
            return scope.rng(self._owner_key())
        r = d.get("_rng")
        worker = t.get("worker")
        if worker is None:
            worker = _rng.process_worker()
        if r is None or d.get("_rng_worker") != worker:  # e.g. first use in a runner worker
            r = d["_rng"] = self._derive()
            d["_rng_worker"] = worker
        return r

    @rng.setter
    def rng(self, value: np.random.RandomState) -> None:
        self.__dict__["_rng"] = value
        self.__dict__["_pinned"] = value is not None

    def _path(self) -> tuple[int, ...]:
        path = self.__dict__.get("_rng_path")
        return _rng.name_key(self) if path is None else path

    def _base_seed(self) -> int | None:
        """Its own ``seed=``, else the seed of the container or stage that owns it."""
        return self.seed if self.seed is not None else self.__dict__.get("_inherited_seed")

    def _owner_key(self) -> tuple[int, ...]:
        seed = self._base_seed()
        return (_rng.AUGMENTOR, 0 if seed is None else seed + 1, *self._path())

    def _derive(self) -> np.random.RandomState:
        # an augmentor's own seed fixes its stream wherever it sits; an inherited one (or the
        # global seed) is mixed with its path, so that the augmentors of a list differ
        seq = _rng.stage_sequence(self._base_seed(), self._path(), _rng.AUGMENTOR,
                                  use_path=self.seed is None)
        return _rng.derive_rng(seq)

    def _set_stream(self, value: np.random.RandomState) -> None:
        """Continue from ``value`` (a restored stream), without pinning."""
        self.__dict__["_rng"] = value
        self.__dict__["_rng_worker"] = _rng.get_worker_info()

    def _place(self) -> list[ImageAugmentor]:
        """Give the augmentors inside this one paths below this one's (and its base seed);
        returns them, this one first."""
        base, seed = self._path(), self._base_seed()
        tree = augmentor_tree(self)
        for k, aug in enumerate(tree[1:], 1):
            aug.__dict__["_rng_path"] = (*base, k)
            aug.__dict__["_inherited_seed"] = seed
        return tree

    def reset_state(self) -> None:
        """Re-derive the random streams of this augmentor and of the augmentors inside it,
        which get paths below this one's."""
        worker = _rng.get_worker_info()
        for aug in self._place():
            d = aug.__dict__
            d["_pinned"] = False
            d["_rng"] = aug._derive()
            d["_rng_worker"] = worker

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if not state.get("_pinned"):
            state["_rng"] = None  # a copy re-derives its stream where it is used
        return state

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "get_transform" in cls.__dict__ and "_augment_image" not in cls.__dict__:
            cls._augment_image = ImageAugmentor._augment_image  # type: ignore[method-assign]
        if "get_transform" in cls.__dict__:
            for flag in ("samples_from_shape", "pointwise"):
                if flag not in cls.__dict__:
                    setattr(cls, flag, False)
        init = cls.__dict__.get("__init__")
        if init is not None and not hasattr(init, "_takes_seed") and (
            "seed" not in inspect.signature(init).parameters
        ):
            cls.__init__ = _with_seed(init)  # type: ignore[method-assign]

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
        return low + (high - low) * self.rng.random_sample()

    # ------------------------------------------------------------ main API
    def get_transform(self, img: np.ndarray) -> BaseTransform:
        """Sample parameters for ``img`` and return a deterministic transform.

        The base implementation is the shim for old-style augmentors (see the class docstring).
        """
        hook = getattr(self, "_get_augment_params", None) or getattr(
            self, "get_augment_params", None
        )
        if not hasattr(self, "_augment"):
            raise NotImplementedError(
                f"{type(self).__name__} must implement `get_transform(img)` (or the legacy "
                "`_get_augment_params(img)` and `_augment(img, params)`)."
            )
        _log_deprecated(f"{type(self).__name__}._get_augment_params/_augment", "get_transform")
        # an old-style augmentor with no parameters implements only `_augment(img, _)`: its
        # parameters are None, as tensorpack's default `_get_augment_params` returned
        params = None if hook is None else hook(img)
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


@builtin("dataflow.imgaug.base.AugmentorList")
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
            backend: the decoder, ``"auto"``, ``"turbo"``, or a whole decode by
                ``"simplejpeg"`` or ``"cv2"`` (see :func:`dataflow.jpeg.decode_jpeg`).
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


@builtin("dataflow.imgaug.base.PhotometricAugmentor")
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


def augmentor_tree(root: Any) -> list[ImageAugmentor]:
    """``root`` and every augmentor inside it, each once, in a fixed order (depth first,
    attributes by name): the order that gives the augmentors their paths."""
    out: list[ImageAugmentor] = []
    seen: set[int] = set()

    def visit(obj: Any) -> None:
        if isinstance(obj, ImageAugmentor):
            if id(obj) in seen:
                return
            seen.add(id(obj))
            out.append(obj)
            attrs = getattr(obj, "__dict__", {})
            for key in sorted(attrs):
                if not key.startswith("_rng"):
                    visit(attrs[key])
        elif isinstance(obj, list | tuple):
            for x in obj:
                if isinstance(x, ImageAugmentor | list | tuple):
                    visit(x)

    visit(root)
    return out


def _as_augmentor_list(augmentors: Iterable[ImageAugmentor] | AugmentorList) -> AugmentorList:
    if isinstance(augmentors, AugmentorList):
        return augmentors
    if isinstance(augmentors, ImageAugmentor):
        return AugmentorList([augmentors])
    return AugmentorList(list(augmentors))
