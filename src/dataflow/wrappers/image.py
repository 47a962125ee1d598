"""Image flows: ``ImageFromFile``, ``AugmentImageComponent``, ``AugmentImageComponents``,
``AugmentImageCoordinates``.

OpenCV is imported when one of these flows is built, never by ``import dataflow``; without it
the constructors raise an ImportError that names the command that installs it.

Differences from tensorpack, on purpose:

* coordinates are validated on NumPy 2 (tensorpack's check used the removed ``np.float``);
  integer images other than uint8 are rejected with a clear error (tensorpack's check was a
  no-op);
* ``ImageFromFile(shuffle=True)`` shuffles its own copy of ``files`` with a per-epoch derived
  stream instead of the caller's list;
* ``copy=True`` skips the up-front copy when every augmentor is a built-in one (they never
  write into their input) and copies only a result that would share memory with the input
  (a crop view, an unflipped image); user-defined augmentors still get a private copy first.

Fused decode (``decode="jpeg"``): the augmentation flows also take encoded images (JPEG bytes
from an LMDB, say) and decode only what the leading crops and resizes keep, with the same
random parameters as decoding first (see :meth:`dataflow.imgaug.AugmentorList.augment_jpeg`).

Resumable: ``ImageFromFile`` saves epoch, position and seed (a restored flow reads
no file before the position); the augmentation flows save their input's state and the stream of
every augmentor in the tree, so a restored pipeline draws the same transforms. Not covered:
randomness outside the augmentors' ``rng`` (albumentations / imgaug draw from their own
generators). Saving a state derives the streams of augmentors that have not drawn yet.
"""

from __future__ import annotations

import copy as copy_mod
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from dataflow import rng as _rng
from dataflow.base import DataFlow, RNGDataFlow
from dataflow.errors import ImageDecodeError
from dataflow.jpeg import decode_jpeg, fast_path_note, jpeg_shape
from dataflow.state import ReaderState, StateMismatchError, check_state, rng_from_state, rng_state
from dataflow.wrappers.map import MapData, MapDataComponent

__all__ = [
    "AugmentImageComponent",
    "AugmentImageComponents",
    "AugmentImageCoordinates",
    "ImageFromFile",
    "decode_jpeg",
    "jpeg_shape",
]

logger = logging.getLogger(__name__)


def _imgaug() -> Any:
    from dataflow import imgaug  # raises the ImportError naming the extra if cv2 is missing

    return imgaug


def _cv2() -> Any:
    from dataflow._optional import import_cv2

    return import_cv2()


class ImageFromFile(ReaderState, RNGDataFlow):
    """Yields ``[image]`` read from each path of ``files`` (decoded as ``cv2.imread`` does).

    A missing file raises FileNotFoundError; a file that exists but does not decode (not an
    image, corrupt, or a truncated JPEG, which ``cv2.imread`` would return half grey) raises
    :class:`~dataflow.errors.ImageDecodeError`.

    Args:
        files: image paths.
        channel: 3 for colour (returned as **RGB**, ``(h, w, 3)``) or 1 for grayscale
            (``(h, w, 1)``).
        resize: an int or ``(h, w)`` to resize every image to, or None.
        shuffle: shuffle the order in every epoch (the caller's list is not modified).
        seed: base seed of the shuffle stream (see :mod:`dataflow.rng`).
    """

    def __init__(
        self,
        files: Sequence[str],
        channel: int = 3,
        resize: Any = None,
        shuffle: bool = False,
        *,
        seed: int | None = None,
    ) -> None:
        from dataflow.imgaug._args import shape2d

        _cv2()
        if isinstance(files, str) or not len(files):
            raise ValueError(
                f"`files` must be a non-empty list of image paths, got {files!r}; for one "
                "file use [path]."
            )
        if channel not in (1, 3):
            raise ValueError(f"`channel` must be 1 (gray) or 3 (colour), got {channel!r}.")
        self.files = list(files)
        self.channel = channel
        self.resize = None if resize is None else shape2d(resize, "resize")
        self.shuffle = self._shuffle = bool(shuffle)
        self.seed = seed

    def __len__(self) -> int:
        return len(self.files)

    def _read(self, path: str) -> np.ndarray:
        from dataflow.imgaug.fused import decode_image

        cv2 = _cv2()
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise FileNotFoundError(
                f"ImageFromFile: no file {path!r}; check the path (relative paths are from "
                f"the working directory)."
            ) from None
        try:
            # strict: a truncated JPEG is an error, not a half-grey image
            img = decode_image(data, "rgb" if self.channel == 3 else "gray")
        except ImageDecodeError as e:
            raise ImageDecodeError(f"ImageFromFile: {path!r} does not decode: {e}") from None
        if self.resize is not None:
            h, w = self.resize
            img = cv2.resize(img, (w, h))
        if self.channel == 1:
            img = img[:, :, np.newaxis]
        return img

    def __iter__(self) -> Iterator[list[np.ndarray]]:
        # the epoch begins now, not on the first next(): parents that create their children's
        # iterators up front save the children's states in the new epoch
        token, epoch, start = self._begin_epoch()
        order = list(self.files)
        if self.shuffle:
            self._epoch_rng(epoch).shuffle(order)
        return self._run(order[start:], token)

    def _run(self, paths: list[str], token: object) -> Iterator[list[np.ndarray]]:
        for path in paths:
            dp = [self._read(path)]
            self._pos += 1
            yield dp
        self._end(token)


# ---------------------------------------------------------------- augmentation flows
def _builtin(aug: Any) -> bool:
    """True if ``aug`` and every augmentor inside it are built-ins that never mutate input."""
    imgaug = _imgaug()
    if not type(aug).__dict__.get("keeps_input", False):  # (a class's own, never inherited)
        return False
    children: list[Any] = []
    if isinstance(aug, imgaug.AugmentorList):
        children = aug.augmentors
    elif isinstance(aug, imgaug.RandomApplyAug):
        children = [aug.aug]
    elif isinstance(aug, imgaug.RandomChooseAug):
        children = aug._augs
    elif isinstance(aug, imgaug.RandomOrderAug):
        children = aug.aug_lists
    return all(_builtin(c) for c in children)


class _AugmentBase:
    """Shared set-up of the augmentation flows."""

    augs: Any
    _copy: bool

    def profile_notes(self) -> list[str]:
        """For :func:`dataflow.profile`: that the JPEG fast path is off, when this stage
        decodes JPEG (in this process or in workers) without it."""
        note = fast_path_note(only_if_used=False) if self.decode == "jpeg" else None
        return [] if note is None else [note]

    def _setup(
        self, augmentors: Any, copy: bool, catch_exceptions: bool, decode: Any = None,
        color: str = "bgr",
    ) -> None:
        imgaug = _imgaug()
        if decode not in (None, "jpeg"):
            raise ValueError(
                f"`decode` must be None (the components hold decoded images) or 'jpeg' (they "
                f"hold encoded bytes), got {decode!r}."
            )
        if color not in ("bgr", "rgb", "gray"):
            raise ValueError(f"`color` must be 'bgr', 'rgb' or 'gray', got {color!r}.")
        self.decode, self.color = decode, color
        if isinstance(augmentors, imgaug.AugmentorList):
            self.augs = augmentors
        elif isinstance(augmentors, imgaug.ImageAugmentor):
            self.augs = imgaug.AugmentorList([augmentors])
        elif isinstance(augmentors, list | tuple):
            self.augs = imgaug.AugmentorList(list(augmentors))
        else:
            raise TypeError(
                f"`augmentors` must be a list of augmentors or an AugmentorList, got "
                f"{type(augmentors).__name__}."
            )
        builtin = _builtin(self.augs)
        self._copy = bool(copy) and not builtin  # copy before: the augmentors may write into it
        self._unalias = bool(copy) and builtin  # copy after, only if the result aliases it
        self.copy = copy
        self.catch_exceptions = catch_exceptions

    @staticmethod
    def _policy(catch_exceptions: bool, on_error: str | None) -> str:
        """``on_error`` of the flow: tensorpack's ``catch_exceptions=True`` is ``"warn"``."""
        if on_error is None:
            return "warn" if catch_exceptions else "raise"
        if catch_exceptions and on_error == "raise":
            raise ValueError(
                "`catch_exceptions=True` (tensorpack's name of on_error='warn') contradicts "
                "on_error='raise'; pass one of them."
            )
        return on_error

    def _image(self, img: Any, where: Any) -> np.ndarray:
        if type(img) is not np.ndarray or img.dtype.char not in "Bfd" or not 2 <= img.ndim <= 3:
            from dataflow.imgaug.functional import check_image

            check_image(img, f"dp[{where!r}]")  # raises the detailed error
        return copy_mod.deepcopy(img) if self._copy else img

    def _result(self, out: np.ndarray, src: np.ndarray) -> np.ndarray:
        """With ``copy``, never hand out (a view of) the source image."""
        if self._unalias and np.may_share_memory(out, src):
            return out.copy()
        return out

    @staticmethod
    def _encoded(data: Any, where: Any) -> Any:
        if isinstance(data, bytes | bytearray | memoryview) or (
            isinstance(data, np.ndarray) and data.ndim == 1 and data.dtype == np.uint8
        ):
            return data
        got = f"an array of shape {data.shape}" if isinstance(data, np.ndarray) else (
            type(data).__name__)
        raise TypeError(
            f"dp[{where!r}] must hold an encoded image (bytes or a 1-D uint8 array) with "
            f"decode='jpeg', got {got}; leave `decode` unset for decoded images."
        )

    def _decode_augment(self, data: Any, where: Any, transform: bool = False) -> Any:
        return self.augs.augment_jpeg(
            self._encoded(data, where), color=self.color, return_transform=transform
        )

    @staticmethod
    def _coords(coords: Any, where: Any) -> np.ndarray:
        from dataflow.imgaug.functional import check_coords

        return check_coords(coords, f"dp[{where!r}]")

    def reset_state(self) -> None:
        self.ds.reset_state()  # type: ignore[attr-defined]
        # the augmentors' paths are below this stage's own (see dataflow.rng)
        self.augs.__dict__["_rng_path"] = _rng.path_of(self)
        self.augs.reset_state()

    def state_dict(self) -> dict[str, Any]:
        """The input flow's state and every augmentor's random stream (see the module
        docstring)."""
        return {"type": type(self).__name__,
                "augmentors": [rng_state(a.rng) for a in _augmentor_tree(self.augs)],
                "child": self.ds.state_dict()}  # type: ignore[attr-defined]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state(state, self)
        augs = _augmentor_tree(self.augs)
        saved = state.get("augmentors")
        if not isinstance(saved, list) or len(saved) != len(augs):
            found = len(saved) if isinstance(saved, list) else saved
            raise StateMismatchError(
                f"state for stage {type(self).__name__}: expected {len(augs)} augmentor streams "
                f"(one per augmentor in {self.augs!r:.200}), found {found!r}; the state was "
                "saved from a pipeline with other augmentors."
            )
        try:
            rngs = [rng_from_state(s) for s in saved]
        except (KeyError, TypeError, ValueError) as e:
            raise StateMismatchError(
                f"state for stage {type(self).__name__}: expected augmentor streams saved by "
                f"dataflow.state.rng_state, found {saved!r:.120} ({type(e).__name__}: {e})."
            ) from e
        self.ds.load_state_dict(state["child"])  # type: ignore[attr-defined]
        for aug, r in zip(augs, rngs):
            aug._set_stream(r)


def _augmentor_tree(root: Any) -> list[Any]:
    from dataflow.imgaug.base import augmentor_tree

    return augmentor_tree(root)


def _mutable(dp: Any) -> Any:
    return list(dp) if isinstance(dp, tuple) else dp


class AugmentImageComponent(_AugmentBase, MapDataComponent):
    """Augment the image at ``dp[index]`` with ``augmentors`` (a list or an AugmentorList).

    ``copy``: give the augmentors a private copy of the image (skipped for built-in
    augmentors, which never modify their input). ``on_error`` / ``max_errors``: what to do with
    a datapoint whose augmentation raises (see :mod:`dataflow.policy`); tensorpack's
    ``catch_exceptions=True`` is ``on_error="warn"`` (log it, drop it). ``decode="jpeg"``:
    ``dp[index]`` holds encoded bytes, decoded (``color``: ``"bgr"`` as ``cv2.imdecode``,
    ``"rgb"`` or ``"gray"``) only where the leading crops and resizes need it (see
    :meth:`~dataflow.imgaug.AugmentorList.augment_jpeg`).
    """

    def __init__(
        self,
        ds: DataFlow,
        augmentors: Any,
        index: Any = 0,
        copy: bool = True,
        catch_exceptions: bool = False,
        *,
        decode: str | None = None, color: str = "bgr",
        on_error: str | None = None, max_errors: int | float | None = None,
    ) -> None:
        self._setup(augmentors, copy, catch_exceptions, decode, color)
        MapDataComponent.__init__(self, ds, self._augment, index,
                                  on_error=self._policy(catch_exceptions, on_error),
                                  max_errors=max_errors)

    def _augment(self, img: Any) -> np.ndarray:
        if self.decode:
            return self._decode_augment(img, self.index)
        return self._result(self.augs.augment(self._image(img, self.index)), img)



class AugmentImageCoordinates(_AugmentBase, MapData):
    """Augment the image at ``dp[img_index]`` and move the ``Nx2`` float ``(x, y)``
    coordinates at ``dp[coords_index]`` with the same transform (``decode``, ``color``: as in
    :class:`AugmentImageComponent`; the coordinates move exactly as after a full decode)."""

    def __init__(
        self,
        ds: DataFlow,
        augmentors: Any,
        img_index: Any = 0,
        coords_index: Any = 1,
        copy: bool = True,
        catch_exceptions: bool = False,
        *,
        decode: str | None = None, color: str = "bgr",
        on_error: str | None = None, max_errors: int | float | None = None,
    ) -> None:
        self._setup(augmentors, copy, catch_exceptions, decode, color)
        self.img_index, self.coords_index = img_index, coords_index
        MapData.__init__(self, ds, self._augment, on_error=self._policy(catch_exceptions, on_error),
                         max_errors=max_errors)

    def _augment(self, dp: Any) -> Any:
        dp = _mutable(dp)
        coords = self._coords(dp[self.coords_index], self.coords_index)
        if self.decode:
            dp[self.img_index], tfm = self._decode_augment(dp[self.img_index], self.img_index, True)
        else:
            img = self._image(dp[self.img_index], self.img_index)
            tfm = self.augs.get_transform(img)
            dp[self.img_index] = self._result(tfm.apply_image(img), img)
        dp[self.coords_index] = tfm.apply_coords(coords)
        return dp



class AugmentImageComponents(_AugmentBase, MapData):
    """Augment several images of a datapoint (e.g. an image and its masks) with one transform
    sampled from ``dp[index[0]]``, and move the coordinates at each of ``coords_index``.

    ``decode="jpeg"``: ``dp[index[0]]`` holds encoded bytes, decoded as in
    :class:`AugmentImageComponent`; the other components may hold encoded bytes too (decoded
    whole, then transformed: masks are better stored as arrays) or decoded arrays."""

    def __init__(
        self,
        ds: DataFlow,
        augmentors: Any,
        index: Sequence[Any] = (0, 1),
        coords_index: Sequence[Any] = (),
        copy: bool = True,
        catch_exceptions: bool = False,
        *,
        decode: str | None = None, color: str = "bgr",
        on_error: str | None = None, max_errors: int | float | None = None,
    ) -> None:
        if not isinstance(index, list | tuple) or not index:
            raise ValueError(f"`index` must be a non-empty list of components, got {index!r}.")
        self._setup(augmentors, copy, catch_exceptions, decode, color)
        self.index, self.coords_index = tuple(index), tuple(coords_index)
        MapData.__init__(self, ds, self._augment, on_error=self._policy(catch_exceptions, on_error),
                         max_errors=max_errors)

    def _augment(self, dp: Any) -> Any:
        dp = _mutable(dp)
        if self.decode:
            dp[self.index[0]], tfm = self._decode_augment(dp[self.index[0]], self.index[0], True)
        else:
            major = self._image(dp[self.index[0]], self.index[0])
            tfm = self.augs.get_transform(major)
            dp[self.index[0]] = self._result(tfm.apply_image(major), major)
        for idx in self.index[1:]:
            if self.decode and not (isinstance(dp[idx], np.ndarray) and dp[idx].ndim >= 2):
                from dataflow.imgaug.fused import decode_image

                dp[idx] = tfm.apply_image(decode_image(self._encoded(dp[idx], idx), self.color))
                continue
            src = self._image(dp[idx], idx)
            dp[idx] = self._result(tfm.apply_image(src), src)
        for idx in self.coords_index:
            dp[idx] = tfm.apply_coords(self._coords(dp[idx], idx))
        return dp

