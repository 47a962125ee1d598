"""Augmentation fused with the JPEG decode: geometry pushed into the decoder.

:meth:`AugmentorList.augment_jpeg <dataflow.imgaug.AugmentorList.augment_jpeg>` takes encoded
bytes. The leading augmentors that declare ``samples_from_shape`` (their ``get_transform`` reads
only the image's shape: the crops, resizes and flips, and the pointwise colour augmentors) sample
their transforms, through their usual ``rng`` and ``get_transform``, from a zero-strided dummy
image of the shape in the JPEG header, so a seed draws the same parameters as decoding first and
augmenting after. Their crops, first resize, flips and pointwise transforms are then composed
into one plan:

* a window of the source image (the crops before the resize): only this window is decoded;
* the resize, and the crops after it: the resized window is computed straight from the decoded
  pixels (a crop after the resize, as in ``ResizeShortestEdge`` then ``CenterCrop``, decodes and
  resamples only the pixels the crop keeps); where the window is at least twice the output size
  (``scale=True``), libjpeg-turbo decodes it at 1/2, 1/4 or 1/8 scale inside the inverse DCT and
  the resize starts from there;
* the flips, and the transforms of the ``pointwise`` augmentors after the resize (brightness,
  gamma, PCA lighting: per-channel offsets or one lookup table per channel), applied by the
  resize kernel as it stores each output row.

For a bilinear resize, decoding and resizing are one call to the C extension, without the GIL;
the decoded rows are read in place. The rest of the chain (the transforms the plan does not
cover, then the remaining augmentors) runs on the result as usual.

Tolerance against ``cv2.imdecode`` followed by the same augmentors (docs/jpeg.md):

* at scale 1 (``scale=False``, or a window less than twice the output): the same pixels (max
  difference 0). The window is decoded exactly as in a full decode (libjpeg-turbo, default
  settings, as OpenCV's), and resized by a C kernel that computes cv2.resize's bilinear weights,
  clamping and rounding to the bit (other interpolations: the same ``cv2.resize`` call);
* DCT-scaled (``scale=True``, a window at least twice the output): the resize filters the image
  (the scaled inverse DCT averages each 2x2, 4x4 or 8x8 block) where
  ``cv2.resize(INTER_LINEAR)`` samples 2x2 pixels of the full image, so detail finer than the
  output's pixels (noise, fine texture) differs, by its own amplitude (on the noisy benchmark
  images: mean 4 levels); on images without such detail the tested bound holds: mean difference
  < 1.0 and 99.9% of pixels within 4 levels.

Without the C extension the same plan runs on OpenCV: the header is parsed in Python, the
whole image is decoded at the plan's DCT scale (by simplejpeg where installed, else by
``cv2.imdecode`` with ``IMREAD_REDUCED_*``: both the same scaled pixels as the fast path's),
then cropped, resized and flipped, and the pointwise transforms after the resize run on the
output with their own kernels (:meth:`_Plan.run_whole`): at scale 1 the same pixels as the
fast path, at 1/d within a level.

Images this path does not handle are decoded whole with OpenCV's semantics and augmented as
usual: data that is not JPEG, CMYK JPEGs and JPEGs with an EXIF orientation other than 1
(``cv2.imdecode`` rotates them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dataflow import jpeg as _jpeg
from dataflow.errors import ImageDecodeError
from dataflow.imgaug import functional as fn
from dataflow.imgaug._cv2 import cv2
from dataflow.imgaug.transform import (
    BaseTransform,
    CropTransform,
    FlipTransform,
    NoOpTransform,
    ResizeTransform,
    TransformList,
)

__all__ = ["augment_jpeg", "decode_image"]

# zero-strided dummies to sample from, sliced to each header's shape (no memory behind them)
_DUMMY3 = np.broadcast_to(np.zeros((), np.uint8), (1 << 16, 1 << 16, 3))
_DUMMY1 = _DUMMY3[:, :, 0]


def decode_image(
    data: Any, color: str = "bgr", strict: bool = True, backend: str = "auto"
) -> np.ndarray:
    """Decode a whole image as ``cv2.imdecode`` does (EXIF orientation applied, any format
    OpenCV reads), through the fast path where it gives the same pixels, with the strict
    checks of :func:`dataflow.jpeg.decode_jpeg` for JPEG data. RGB/BGR ``(h, w, 3)`` or gray
    ``(h, w)``; raises ImageDecodeError on data that does not decode."""
    if _is_jpeg(data):
        turbo = _jpeg._turbo(backend)
        _, _, _, space, orientation = _jpeg._header(data, turbo)
        if orientation == 1 and space not in _jpeg._CMYK:
            # the stored grid is what cv2.imdecode gives: the fast path, else the fallback's
            # decoder (the same pixels)
            return _jpeg.decode_jpeg(data, color=color, strict=strict, backend=backend)
        if strict:
            _jpeg.check_complete(data)
    flag = cv2.IMREAD_GRAYSCALE if color == "gray" else cv2.IMREAD_COLOR
    img = cv2.imdecode(np.frombuffer(data, np.uint8), flag)
    if img is None:
        raise ImageDecodeError(
            f"cannot decode the image data ({_jpeg._bytes_len(data)} bytes, starting "
            f"{bytes(memoryview(data).cast('B')[:4]).hex(' ')}): cv2.imdecode does not read it "
            "(not an image, or a corrupt one)."
        )
    if color == "rgb":
        img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    return img


def _is_jpeg(data: Any) -> bool:
    b = memoryview(data).cast("B")
    return len(b) >= 2 and b[0] == 0xFF and b[1] == 0xD8


def _flat(tfm: BaseTransform) -> list[BaseTransform]:
    if isinstance(tfm, TransformList):
        return [t for sub in tfm.tfms for t in _flat(sub)]
    return [tfm]


def _sample_prefix(
    augmentors: Sequence[Any], shape: tuple[int, ...]
) -> tuple[list[BaseTransform], dict[int, Any], int]:
    """Sample the transforms of the leading shape-only augmentors from a dummy of ``shape``.

    Returns the transforms, the pointwise augmentor that made each pointwise one (by position),
    and how many augmentors sampled. Stops after the first augmentor whose transform the plan
    cannot follow the shape of, so that no augmentor samples from a shape that is not the real
    one."""
    tfms: list[BaseTransform] = []
    pointwise: dict[int, Any] = {}
    n = 0
    for aug in augmentors:
        if not getattr(aug, "samples_from_shape", False):
            break
        dummy = _DUMMY1 if len(shape) == 2 else _DUMMY3
        new = _flat(aug.get_transform(dummy[: shape[0], : shape[1]]))
        if getattr(aug, "pointwise", False):
            pointwise.update(dict.fromkeys(range(len(tfms), len(tfms) + len(new)), aug))
        tfms.extend(new)
        n += 1
        for t in new:
            if isinstance(t, CropTransform):
                shape = (t.h, t.w, *shape[2:])
            elif isinstance(t, ResizeTransform):
                shape = (t.new_h, t.new_w, *shape[2:])
            elif not isinstance(t, FlipTransform | NoOpTransform) and not getattr(
                aug, "pointwise", False
            ):
                return tfms, pointwise, n
    return tfms, pointwise, n


_RAMP = {c: np.ascontiguousarray(np.broadcast_to(np.arange(256, dtype=np.uint8)[:, None, None],
                                                 (256, 1, c))) for c in (1, 3)}


def _lookup_table(t: BaseTransform, aug: Any, channels: int) -> Any:
    """What a pointwise transform does to uint8 values: per-channel offsets (a tuple, added with
    saturation) or a (256, channels) uint8 table; from the augmentor's
    ``_table(params, channels)`` where it has one, else the transform's output on a ramp."""
    params = getattr(getattr(t, "func", None), "params", None)
    if params is not None and hasattr(aug, "_table"):
        return aug._table(params, channels)
    ramp = _RAMP.get(channels)
    if ramp is None:
        return None
    try:
        out = t.apply_image(ramp if channels == 3 else ramp[:, :, 0])
    except Exception:  # e.g. a 3-channel op on a gray image: applied as usual, raising there
        return None
    if not isinstance(out, np.ndarray) or out.dtype != np.uint8 or out.size != 256 * channels:
        return None
    return np.ascontiguousarray(out.reshape(256, channels))


class _Plan:
    """Window, resize, crops after it, flips and lookup tables, composed from the sampled
    transforms."""

    __slots__ = ("channels", "deferred", "fh", "fv", "lut", "post", "resize", "tables", "window")

    def __init__(self, h: int, w: int, channels: int, tables: bool = True) -> None:
        self.window = [0, 0, w, h]  # x, y, w, h of the source, before any resize
        self.resize: tuple[int, int, int] | None = None  # new_h, new_w, interp
        self.post: list[int] | None = None  # x, y, w, h in the resized frame
        self.fh = self.fv = False
        self.lut: Any = None  # offsets (a tuple) or a (256, channels) table, for the output
        self.channels = channels
        # without tables (the OpenCV path: no kernel to store through them), the pointwise
        # transforms are applied to the output as they are, by their own kernels
        self.tables = tables
        self.deferred: list[BaseTransform] = []

    def push(self, tfms: list[BaseTransform], pointwise: dict[int, Any]) -> int:
        """Compose the transforms it can; returns how many were composed."""
        cur_h, cur_w = self.window[3], self.window[2]
        for i, t in enumerate(tfms):
            if isinstance(t, NoOpTransform):
                continue
            if i in pointwise:
                # a table commutes with crops and flips, not with a resize: only after the
                # bilinear resize that the kernel computes (which stores through the table)
                if self.resize is None or self.resize[2] != cv2.INTER_LINEAR:
                    return i
                if not self.tables:
                    self.deferred.append(t)
                    continue
                table = _lookup_table(t, pointwise[i], self.channels)
                if table is None:
                    return i
                if self.lut is None:
                    self.lut = table
                else:  # two in a row: one table (saturation does not let offsets add up)
                    k = np.arange(self.channels)
                    self.lut = _as_table(table)[_as_table(self.lut), k]
            elif isinstance(t, CropTransform):
                if t.y0 + t.h > cur_h or t.x0 + t.w > cur_w:
                    return i  # raises its usual error when applied
                # cropping a flipped image = flipping the crop of the mirrored window
                x = cur_w - t.x0 - t.w if self.fh else t.x0
                y = cur_h - t.y0 - t.h if self.fv else t.y0
                win = self.window if self.post is None else self.post
                win[0] += x
                win[1] += y
                win[2], win[3] = t.w, t.h
                cur_h, cur_w = t.h, t.w
            elif isinstance(t, FlipTransform):
                if t.horiz:
                    self.fh = not self.fh
                else:
                    self.fv = not self.fv
            elif isinstance(t, ResizeTransform):
                if self.resize is not None or self.fh or self.fv or (t.h, t.w) != (cur_h, cur_w):
                    return i
                self.resize = (t.new_h, t.new_w, t.interp)
                self.post = [0, 0, t.new_w, t.new_h]
                cur_h, cur_w = t.new_h, t.new_w
            else:
                return i
        return len(tfms)

    def run_whole(self, data: Any, color: str, scale: bool, strict: bool, h: int, w: int,
                  backend: str) -> np.ndarray:
        """The plan without the C extension: the whole image is decoded at the DCT scale 1/d
        the fast path would use (:func:`dataflow.jpeg.decode_whole`: the same pixels as the
        fast path's scaled decode), then cropped, resized and flipped by OpenCV, and the
        pointwise transforms after the resize are applied to the output with their own
        kernels.

        At scale 1 this is the decode-then-augment path's own calls (``cv2.resize`` on the
        window: the same pixels as the fast path and as augmenting after a full decode); at 1/d
        the resize from the scaled window is ``cv2.warpAffine`` with the fast path's geometry
        (OpenCV's bilinear warp has 5-bit sub-pixel weights where the kernel's have 11: within
        a level of the fast path's pixels, inside the DCT-scaled tolerance of docs/jpeg.md)."""
        if strict:
            _jpeg.check_complete(data)
        win = tuple(self.window)
        d = 1
        if self.resize is not None and self.resize[2] == cv2.INTER_LINEAR and scale:
            d = _jpeg.dct_scale((win[3], win[2]), self.resize[:2])
        img = _jpeg.decode_whole(data, d, color == "gray", h, w, backend=backend, strict=strict)
        x, y, ww, hh = win
        if self.resize is None:
            img = img[y : y + hh, x : x + ww]
        elif d == 1:  # the same cv2.resize call as the decode-then-augment path, on the window
            nh, nw, interp = self.resize
            img = fn.resize(img[y : y + hh, x : x + ww], nh, nw, interp)
            post = tuple(self.post)  # type: ignore[arg-type]
            if post != (0, 0, nw, nh):
                img = img[post[1] : post[1] + post[3], post[0] : post[0] + post[2]]
        else:
            nh, nw, _ = self.resize
            post = tuple(self.post)  # type: ignore[arg-type]
            (px, py, pw, ph), ax, ay, _ = _kernel_plan(win, (nh, nw), post, d)
            # output pixel u reads (u + plo + 0.5) * scale - 0.5 + shift of the frame, whose
            # pixels the part holds from `start` on; the part touches the frame's edges where
            # the resize clamps, so BORDER_REPLICATE clamps where the kernel does
            mat = np.array([[ax[0], 0.0, (ax[2] + 0.5) * ax[0] - 0.5 + ax[1] - ax[4]],
                            [0.0, ay[0], (ay[2] + 0.5) * ay[0] - 0.5 + ay[1] - ay[4]]])
            img = cv2.warpAffine(img[py : py + ph, px : px + pw], mat, (post[2], post[3]),
                                 flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                                 borderMode=cv2.BORDER_REPLICATE)
        if self.fh or self.fv:
            img = cv2.flip(img, -1 if self.fh and self.fv else 1 if self.fh else 0)
        if color == "rgb":
            img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
        for t in self.deferred:  # pointwise: they commute with the crops and flips
            img = t.apply_image(img)
        return img if img.flags.c_contiguous else np.ascontiguousarray(img)

    def run(self, data: Any, color: str, scale: bool, strict: bool) -> np.ndarray:
        win = tuple(self.window)
        if self.resize is None:
            img = _decode(data, win, 1, color, strict)
        elif self.resize[2] == cv2.INTER_LINEAR:
            nh, nw, _ = self.resize
            d = _jpeg.dct_scale((win[3], win[2]), (nh, nw)) if scale else 1
            post = tuple(self.post)  # type: ignore[arg-type]
            part, ax, ay, half = _kernel_plan(win, (nh, nw), post, d)
            return _decode_resize(data, part, d, color, strict, post, (ax, ay, half),
                                  self.fh, self.fv, self.lut)
        else:  # the same cv2.resize call as the decode-then-augment path, on the window
            nh, nw, interp = self.resize
            img = fn.resize(_decode(data, win, 1, color, strict), nh, nw, interp)
            post = tuple(self.post)  # type: ignore[arg-type]
            if post != (0, 0, nw, nh):
                img = fn.crop(img, post[1], post[0], post[3], post[2])
        if self.fh:
            img = fn.flip(img, True)
        if self.fv:
            img = fn.flip(img, False)
        return img


def _decode(data: Any, win: tuple[int, ...], d: int, color: str, strict: bool) -> np.ndarray:
    """Decode the window ``(x, y, w, h)`` of the 1/d scaled image (header already checked)."""
    x, y, w, h = win
    out = np.empty((h, w) if color == "gray" else (h, w, 3), np.uint8)
    try:
        _jpeg._jpeg.decode(data, out, x, y, w, h, d, _jpeg._COLORS[color], strict)
    except _jpeg._jpeg.DecodeError as e:
        raise _jpeg._error(data, e) from None
    return out


def _decode_resize(
    data: Any,
    part: tuple[int, ...],
    d: int,
    color: str,
    strict: bool,
    post: tuple[int, ...],
    axes: tuple[Any, Any, bool],
    flip_h: bool,
    flip_v: bool,
    lut: Any,
) -> np.ndarray:
    """Decode ``part`` of the 1/d scaled image and resize it into a new ``post``-sized array,
    in one call without the GIL (the decoded rows are never copied)."""
    out = np.empty((post[3], post[2]) if color == "gray" else (post[3], post[2], 3), np.uint8)
    add = lut if isinstance(lut, tuple) else (None if lut is None else _offsets(lut))
    ax, ay, half = axes
    try:
        _jpeg._jpeg.decode_resize(data, out, *part, d, _jpeg._COLORS[color], strict, ax, ay,
                                  flip_h, flip_v, None if add else lut, add, half)
    except _jpeg._jpeg.DecodeError as e:
        raise _jpeg._error(data, e) from None
    return out


def _axis(lo: int, size: int, new: int, plo: int, psize: int, d: int) -> tuple[Any, ...]:
    """One axis of the bilinear resize of source pixels ``[lo, lo + size)`` to ``new`` pixels,
    of which the output keeps ``[plo, plo + psize)``, read from the 1/d scaled image.

    Returns the part of the scaled image to decode (start, length) and the kernel's axis
    ``(scale, shift, start, length, origin)``: output pixel u reads the source coordinate
    ``(u + plo + 0.5) * scale - 0.5 + shift`` of the frame the resize clamps to (the source
    window; at 1/d, the scaled pixels covering it), whose pixels the decoded part holds from
    ``origin`` on. At scale 1 this is cv2.resize's own geometry, to the bit; scaled pixel i
    covers source pixels ``[d * i, d * (i + 1))``."""
    s = 1.0 / (new / size)  # as cv2.resize computes its scale
    c0, c1 = lo // d, -(-(lo + size) // d)  # the frame: the scaled cover of the source window
    scale, shift = (s, 0.0) if d == 1 else (s / d, lo / d - c0)
    first = math.floor((plo + 0.5) * scale - 0.5 + shift) - 1
    last = math.floor((plo + psize - 0.5) * scale - 0.5 + shift) + 2
    start, stop = max(first, 0), min(last, c1 - c0 - 1) + 1
    return c0 + start, stop - start, (scale, shift, plo, c1 - c0, start)


def _kernel_plan(
    win: tuple[int, ...], new: tuple[int, int], post: tuple[int, ...], d: int
) -> tuple[tuple[int, int, int, int], tuple[Any, ...], tuple[Any, ...], bool]:
    """What to decode (a window of the 1/d scaled image) and the kernel's two axes, to resize
    the source window ``win`` to ``new`` and keep ``post`` of it."""
    x0, width, ax = _axis(win[0], win[2], new[1], post[0], post[2], d)
    y0, height, ay = _axis(win[1], win[3], new[0], post[1], post[3], d)
    # cv2.resize averages 2x2 pixels where the resize is exactly 1/2 on both axes
    half = d == 1 and abs(ax[0] - 2.0) < 1e-15 and abs(ay[0] - 2.0) < 1e-15
    if half:
        x0, width, ax = win[0] + 2 * post[0], 2 * post[2], (*ax[:4], 2 * post[0])
        y0, height, ay = win[1] + 2 * post[1], 2 * post[3], (*ay[:4], 2 * post[1])
    return (x0, y0, width, height), ax, ay, half


_ARANGE = np.arange(256)


def _offsets(lut: np.ndarray) -> tuple[int, ...] | None:
    """The per-channel offsets k such that ``lut[:, c] == clip(v + k[c], 0, 255)``, if the table
    is that (brightness, PCA lighting): the kernel then adds them with SIMD instead of looking
    up every byte."""
    ks = tuple(int(lut[128, c]) - 128 for c in range(lut.shape[1]))
    for c, k in enumerate(ks):
        if not np.array_equal(lut[:, c], np.clip(_ARANGE + k, 0, 255)):
            return None
    return ks


def _as_table(lut: Any) -> np.ndarray:
    if isinstance(lut, tuple):
        return np.clip(_ARANGE[:, None] + np.array(lut), 0, 255).astype(np.uint8)
    return lut


def _kernel(src: np.ndarray, post: tuple[int, ...], ax: Any, ay: Any, half: bool,
            flip_h: bool = False, flip_v: bool = False, lut: Any = None) -> np.ndarray:
    out = np.empty((post[3], post[2], *src.shape[2:]), np.uint8)
    add = lut if isinstance(lut, tuple) else (None if lut is None else _offsets(lut))
    _jpeg._jpeg.resize(src, out, ax, ay, flip_h, flip_v, None if add else lut, add, half)
    return out


def _resize_window_from(img: np.ndarray, new: tuple[int, int], post: tuple[int, ...]) -> Any:
    """``cv2.resize(img, new[::-1])[post window]`` by the kernel, from the part of ``img`` it
    reads (for tests)."""
    (x0, y0, w, h), ax, ay, half = _kernel_plan((0, 0, img.shape[1], img.shape[0]), new, post, 1)
    return _kernel(img[y0 : y0 + h, x0 : x0 + w], post, ax, ay, half)


def augment_jpeg(
    augs: Any,
    data: Any,
    *,
    color: str = "bgr",
    scale: bool = True,
    strict: bool = True,
    backend: str = "auto",
    return_transform: bool = False,
) -> Any:
    """See :meth:`dataflow.imgaug.AugmentorList.augment_jpeg`."""
    if color not in _jpeg._COLORS:
        raise ValueError(f"`color` must be one of {sorted(_jpeg._COLORS)}, got {color!r}.")
    augmentors = augs.augmentors
    is_jpeg = _is_jpeg(data)
    turbo = is_jpeg and _jpeg._turbo(backend)
    tfms: list[BaseTransform] = []
    n = 0
    if is_jpeg:  # (without the extension: the header parsed in Python, the plan run by cv2)
        h, w, _, space, orientation = _jpeg._header(data, turbo)
        if orientation == 1 and space not in _jpeg._CMYK:
            shape = (h, w) if color == "gray" else (h, w, 3)
            tfms, pointwise, n = _sample_prefix(augmentors, shape)
    if n:
        plan = _Plan(h, w, 1 if color == "gray" else 3, tables=turbo)
        k = plan.push(tfms, pointwise)
        if turbo:
            img = plan.run(data, color, scale, strict)
        else:
            img = plan.run_whole(data, color, scale, strict, h, w, backend)
        for t in tfms[k:]:
            img = t.apply_image(img)
    else:
        img = decode_image(data, color, strict, backend)
    rest = augmentors[n:]
    if not return_transform:
        for a in rest:
            img = a._augment_image(img)
        return img
    for a in rest:
        t = a.get_transform(img)
        img = t.apply_image(img)
        tfms.append(t)
    return img, TransformList(tfms)
