"""Pure image and coordinate kernels used by the transforms.

Every function here is pure: it never writes into its inputs, and it keeps the dtype and the
channel layout of the image (``(h, w)``, ``(h, w, 1)`` and ``(h, w, c)`` stay as they are) unless
its docstring says otherwise. ``uint8`` results are rounded and saturated to ``[0, 255]``.
Coordinates are float ``Nx2`` arrays of ``(x, y)`` in the continuous frame: the centre of pixel
``(row i, column j)`` is at ``(j + 0.5, i + 0.5)`` and the image spans ``[0, w] x [0, h]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dataflow.imgaug._cv2 import cv2

#: OpenCV untyped, for the calls whose stubs differ between its releases (scalars as the second
#: argument of add/subtract are known to some and not to others)
_cv2_any: Any = cv2

# Kernel choices, by measurement (benchmarks/bench_kernels.py, results in
# benchmarks/RESULTS.md, on the oldest and the newest OpenCV that pyproject.toml allows):
# * ``cv2.add(img, scalar)`` with a negative (or fractional) scalar leaves OpenCV's saturating
#   uint8 loop (7x slower on 4.8, 40x on 5.1): a negative offset is a ``cv2.subtract`` of its
#   absolute value instead, which gives the same saturated result.
# * From OpenCV 5, ``cv2.add`` / ``cv2.subtract`` with a scalar on a non-contiguous view (what a
#   crop hands the next augmentor) is ~5x slower than on a contiguous array, more than the copy
#   costs; on 4.x the view is faster than copying. So from 5 on, views are copied first.
_CV2_MAJOR = int(str(cv2.__version__).split(".")[0])
_COPY_VIEWS_FOR_ARITHMETIC = _CV2_MAJOR >= 5

__all__ = [
    "IMAGE_DTYPES",
    "add_scalar",
    "affine_coords",
    "blend_gray",
    "check_coords",
    "check_image",
    "clip",
    "color_convert",
    "contrast",
    "crop",
    "cutout",
    "finish",
    "flip",
    "flip_coords",
    "gamma",
    "gaussian_blur",
    "gaussian_noise",
    "hue_shift",
    "jpeg",
    "lighting",
    "lighting_uint8",
    "mean_variance_normalize",
    "min_max_normalize",
    "multiply",
    "paste",
    "resize",
    "resize_coords",
    "salt_pepper",
    "shift_coords",
    "to_gray",
    "transpose",
    "transpose_coords",
    "warp_affine",
]

#: dtypes accepted for images: uint8 in [0, 255], float in [0, 1] or [0, 255].
IMAGE_DTYPES = frozenset(np.dtype(t) for t in (np.uint8, np.float32, np.float64))
_UINT8 = np.dtype(np.uint8)
_ARANGE256 = np.arange(256, dtype=np.float32)


# ---------------------------------------------------------------- validation
def check_image(img: Any, name: str = "img") -> np.ndarray:
    """Raise a clear error unless ``img`` is a non-empty uint8/float (h, w[, c]) ndarray."""
    if not isinstance(img, np.ndarray):
        raise TypeError(
            f"`{name}` must be a numpy.ndarray of shape (h, w) or (h, w, c), got "
            f"{type(img).__name__}; convert it with np.asarray({name})."
        )
    if img.ndim not in (2, 3) or img.shape[0] == 0 or img.shape[1] == 0:
        raise ValueError(
            f"`{name}` must have shape (h, w) or (h, w, c) with h, w > 0, got shape {img.shape}; "
            "a batch must be augmented one image at a time."
        )
    if img.dtype not in IMAGE_DTYPES:
        raise TypeError(
            f"`{name}` must be uint8 (0..255) or float32/float64, got dtype {img.dtype}; "
            f"convert it with {name}.astype(np.float32) (or np.uint8 for 8-bit data)."
        )
    return img


def check_coords(coords: Any, name: str = "coords") -> np.ndarray:
    """``coords`` as a float ``Nx2`` ndarray of (x, y), else a clear error. Integer
    coordinates (tensorpack's own examples pass them) come back as a float32 copy; float ones
    are returned as they are."""
    if not isinstance(coords, np.ndarray):
        raise TypeError(
            f"`{name}` must be a float numpy.ndarray of shape (N, 2) holding (x, y), got "
            f"{type(coords).__name__}; use np.asarray({name}, dtype=np.float32)."
        )
    if coords.ndim != 2 or coords.shape[1] != 2:
        raise ValueError(
            f"`{name}` must have shape (N, 2) holding (x, y), got shape {coords.shape}; "
            f"reshape it with {name}.reshape(-1, 2)."
        )
    if np.issubdtype(coords.dtype, np.integer):
        return coords.astype(np.float32)
    if not np.issubdtype(coords.dtype, np.floating):
        raise TypeError(
            f"`{name}` must have a float or integer dtype, got {coords.dtype}; convert it with "
            f"{name}.astype(np.float32)."
        )
    return coords


# ---------------------------------------------------------------- helpers
def _like(out: np.ndarray, img: np.ndarray) -> np.ndarray:
    """Restore a trailing channel axis that OpenCV dropped."""
    if out.ndim == 2 and img.ndim == 3:
        return out[:, :, np.newaxis]
    return out


def finish(out: np.ndarray, dtype: np.dtype, clip: bool) -> np.ndarray:
    """Cast a float result back to ``dtype``: uint8 is rounded and saturated, float clipped
    to [0, 255] only when ``clip``."""
    if dtype == _UINT8:
        out = np.rint(out)
        np.clip(out, 0, 255, out=out)
        return out.astype(np.uint8)
    if clip:
        out = np.clip(out, 0, 255)
    return out.astype(dtype, copy=False)


def _work(img: np.ndarray) -> np.ndarray:
    """A float working copy (float32 for uint8 and float32, float64 stays float64)."""
    return img.astype(np.float64 if img.dtype == np.float64 else np.float32)


def _lut(img: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Apply a float table of 256 entries to a uint8 image (rounded and saturated)."""
    table = np.rint(table)
    # (minimum/maximum, not np.clip: on NumPy 1.x np.clip's own overhead is ~10 us, a third of
    # the lookup of a 224x224x3 image)
    np.minimum(table, 255, out=table)
    np.maximum(table, 0, out=table)
    out = cv2.LUT(img, table.astype(np.uint8))
    return out if out.shape == img.shape else out.reshape(img.shape)


def _cv_float(img: np.ndarray) -> np.ndarray:
    """OpenCV colour conversions take uint8 or float32 only."""
    return img.astype(np.float32) if img.dtype == np.float64 else img


# ---------------------------------------------------------------- geometry: images
def resize(img: np.ndarray, new_h: int, new_w: int, interp: int = cv2.INTER_LINEAR) -> np.ndarray:
    """Resize to ``(new_h, new_w)``."""
    out = cv2.resize(img, (new_w, new_h), interpolation=interp)
    return out if out.ndim == img.ndim else out[:, :, np.newaxis]


def crop(img: np.ndarray, y0: int, x0: int, h: int, w: int) -> np.ndarray:
    """``img[y0:y0+h, x0:x0+w]`` (a view, as in tensorpack: OpenCV reads such views without
    copying; nothing in dataflow writes into it)."""
    return img[y0 : y0 + h, x0 : x0 + w]


def flip(img: np.ndarray, horiz: bool = True) -> np.ndarray:
    """Mirror the columns (``horiz``) or the rows, into a new contiguous array (``cv2.flip``
    is many times faster than copying a negative-stride view)."""
    return _like(cv2.flip(img, 1 if horiz else 0), img)


def transpose(img: np.ndarray) -> np.ndarray:
    """Swap the first two axes, into a new contiguous array."""
    if img.ndim == 2 or img.shape[2] <= 4:
        return _like(cv2.transpose(img), img)
    return np.ascontiguousarray(img.swapaxes(0, 1))


def warp_affine(
    img: np.ndarray,
    mat: np.ndarray,
    dsize: tuple[int, int],
    interp: int = cv2.INTER_LINEAR,
    border_mode: int = cv2.BORDER_CONSTANT,
    border_value: Any = 0,
) -> np.ndarray:
    """``cv2.warpAffine`` with ``mat`` mapping source to destination *pixel indices*;
    ``dsize`` is ``(w, h)``."""
    if isinstance(border_value, int | float | np.number):
        border_value = (float(border_value),) * 4
    out = cv2.warpAffine(
        img, np.asarray(mat, dtype=np.float64), (int(dsize[0]), int(dsize[1])),
        flags=interp, borderMode=border_mode, borderValue=border_value,
    )
    return _like(out, img)


def paste(img: np.ndarray, background: np.ndarray, y0: int, x0: int) -> np.ndarray:
    """A copy of ``background`` with ``img`` written at ``(y0, x0)``."""
    out = np.array(background, dtype=img.dtype, copy=True)
    if out.ndim == 2 and img.ndim == 3:
        out = out[:, :, np.newaxis]
    out[y0 : y0 + img.shape[0], x0 : x0 + img.shape[1]] = img
    return out


def cutout(img: np.ndarray, y0: int, x0: int, h: int, w: int, fill: float) -> np.ndarray:
    """A copy of ``img`` with the rectangle filled with ``fill``."""
    out = img.copy()
    if out.dtype == _UINT8:
        fill = min(max(round(fill), 0), 255)
    out[y0 : y0 + h, x0 : x0 + w] = fill
    return out


# ---------------------------------------------------------------- geometry: coordinates
def resize_coords(coords: np.ndarray, sx: float, sy: float) -> np.ndarray:
    out = coords.copy()
    out[:, 0] *= sx
    out[:, 1] *= sy
    return out


def shift_coords(coords: np.ndarray, dx: float, dy: float) -> np.ndarray:
    out = coords.copy()
    out[:, 0] += dx
    out[:, 1] += dy
    return out


def flip_coords(coords: np.ndarray, h: int, w: int, horiz: bool = True) -> np.ndarray:
    out = coords.copy()
    if horiz:
        out[:, 0] = w - out[:, 0]
    else:
        out[:, 1] = h - out[:, 1]
    return out


def transpose_coords(coords: np.ndarray) -> np.ndarray:
    return coords[:, ::-1].copy()


def affine_coords(coords: np.ndarray, mat: np.ndarray) -> np.ndarray:
    """Map continuous coordinates through ``mat``, an affine matrix on pixel indices."""
    mat = np.asarray(mat, dtype=np.float64)
    pts = coords.astype(np.float64) - 0.5
    out = pts @ mat[:, :2].T + mat[:, 2] + 0.5
    return out.astype(coords.dtype)


# ---------------------------------------------------------------- photometric
def _add_offsets(img: np.ndarray, offsets: Sequence[int]) -> np.ndarray:
    """``img + offsets`` (integers, one per channel, at most 4), saturated to uint8, by the
    fastest OpenCV calls (see the kernel choices above): the positive offsets with
    ``cv2.add``, the negative ones with ``cv2.subtract`` of their absolute values."""
    src = img
    if _COPY_VIEWS_FOR_ARITHMETIC and not img.flags.c_contiguous:
        src = np.ascontiguousarray(img)
    up = [max(k, 0) for k in offsets]
    down = [max(-k, 0) for k in offsets]
    pad = [0] * (4 - len(offsets))
    out: Any = src
    if any(up) or not any(down):
        out = _cv2_any.add(src, (*up, *pad))
    if any(down):
        out = _cv2_any.subtract(out, (*down, *pad))
    return out if out.ndim == img.ndim else out.reshape(img.shape)


def add_scalar(img: np.ndarray, delta: float, clip: bool = True) -> np.ndarray:
    """``img + delta``. uint8 adds ``rint(delta)`` with saturation (``cv2.add`` or
    ``cv2.subtract``, or a lookup table beyond 4 channels), so no float temporaries are made."""
    if img.dtype == _UINT8:
        d = round(float(delta))  # round half to even (as np.rint, at a seventh of its cost)
        if img.ndim == 2 or img.shape[2] <= 4:  # (_add_offsets, inlined: this is a hot path)
            src = img
            if _COPY_VIEWS_FOR_ARITHMETIC and not img.flags.c_contiguous:
                src = np.ascontiguousarray(img)
            if d >= 0:
                out = _cv2_any.add(src, (d, d, d, d))
            else:
                out = _cv2_any.subtract(src, (-d, -d, -d, -d))
            return out if out.ndim == img.ndim else out.reshape(img.shape)
        return _lut(img, _ARANGE256 + np.float32(d))
    return finish(img + img.dtype.type(delta), img.dtype, clip)


def multiply(img: np.ndarray, factor: float, clip: bool = True) -> np.ndarray:
    """``img * factor``."""
    if img.dtype == _UINT8:
        return _lut(img, _ARANGE256 * np.float32(factor))
    return finish(img * img.dtype.type(factor), img.dtype, clip)


def clip(img: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Clip to ``[lo, hi]`` keeping the dtype."""
    if img.dtype == _UINT8:
        lo_i = min(max(int(np.ceil(lo)), 0), 255)
        hi_i = min(max(int(np.floor(hi)), 0), 255)
        return np.clip(img, lo_i, hi_i)
    return np.clip(img, lo, hi).astype(img.dtype, copy=False)


def to_gray(img: np.ndarray, rgb: bool) -> np.ndarray:
    """A 2-D gray image of a 3-channel image, in the image's dtype."""
    code = cv2.COLOR_RGB2GRAY if rgb else cv2.COLOR_BGR2GRAY
    return cv2.cvtColor(_cv_float(img), code).astype(img.dtype, copy=False)


def color_convert(img: np.ndarray, mode: int, keepdims: bool = True) -> np.ndarray:
    """``cv2.cvtColor(img, mode)``; a dropped channel axis is re-added when ``keepdims``."""
    src = img[:, :, 0] if img.ndim == 3 and img.shape[2] == 1 else img
    try:
        out = cv2.cvtColor(_cv_float(src), mode)
    except cv2.error as e:
        raise ValueError(
            f"cv2.cvtColor cannot apply conversion code {mode} to an image of shape {img.shape} "
            f"and dtype {img.dtype}; check the number of channels the code expects."
        ) from e
    if img.dtype == np.float64:
        out = out.astype(np.float64)
    if keepdims and out.ndim == 2:
        out = out[:, :, np.newaxis]
    return out


def contrast(img: np.ndarray, factor: float, rgb: bool | None, clip: bool = True) -> np.ndarray:
    """``img * factor + mean * (1 - factor)``; the mean is per channel (``rgb=None``), of the
    gray image (``rgb`` True/False) or global (2-D or 1-channel images)."""
    x = _work(img)
    if img.ndim == 3 and img.shape[2] == 3 and rgb is not None:
        mean = float(to_gray(img, rgb).astype(np.float64).mean())
    elif img.ndim == 3 and rgb is None:
        mean = x.mean(axis=(0, 1), dtype=np.float64).astype(x.dtype)
    else:
        mean = float(x.mean(dtype=np.float64))
    out = x * x.dtype.type(factor) + mean * (1.0 - factor)
    return finish(out.astype(x.dtype, copy=False), img.dtype, clip)


def blend_gray(img: np.ndarray, factor: float, rgb: bool, clip: bool = True) -> np.ndarray:
    """Saturation: ``img * factor + gray * (1 - factor)`` for a 3-channel image."""
    x = _work(img)
    gray = cv2.cvtColor(x.astype(np.float32), cv2.COLOR_RGB2GRAY if rgb else cv2.COLOR_BGR2GRAY)
    out = x * x.dtype.type(factor) + (gray[:, :, np.newaxis] * (1.0 - factor)).astype(x.dtype)
    return finish(out, img.dtype, clip)


def hue_shift(img: np.ndarray, offset: float, rgb: bool = True) -> np.ndarray:
    """Rotate the hue by ``offset`` in OpenCV's uint8 hue units (180 per turn)."""
    to_hsv = cv2.COLOR_RGB2HSV if rgb else cv2.COLOR_BGR2HSV
    to_img = cv2.COLOR_HSV2RGB if rgb else cv2.COLOR_HSV2BGR
    hsv = cv2.cvtColor(_cv_float(img), to_hsv)
    if img.dtype == _UINT8:
        hsv[..., 0] = np.mod(np.rint(hsv[..., 0].astype(np.float32) + offset), 180).astype(np.uint8)
    else:
        hsv[..., 0] = np.mod(hsv[..., 0] + np.float32(2.0 * offset), 360.0)
    return cv2.cvtColor(hsv, to_img).astype(img.dtype, copy=False)


def gamma(img: np.ndarray, g: float) -> np.ndarray:
    """``255 * (x / 255) ** (1 / (1 + g))`` on values clipped to [0, 255].

    Unlike tensorpack, a float image keeps its precision (it is not cast through uint8).
    """
    if img.dtype == _UINT8:
        return _lut(img, 255.0 * (_ARANGE256 / 255.0) ** (1.0 / (1.0 + g)))
    x = np.clip(img, 0, 255)
    return (255.0 * (x / 255.0) ** (1.0 / (1.0 + g))).astype(img.dtype, copy=False)


def gaussian_blur(
    img: np.ndarray, ksize: tuple[int, int], sigma: tuple[float, float]
) -> np.ndarray:
    """``cv2.GaussianBlur`` with kernel ``ksize = (kx, ky)`` and border replicate."""
    out = cv2.GaussianBlur(
        img, (int(ksize[0]), int(ksize[1])), sigmaX=float(sigma[0]), sigmaY=float(sigma[1]),
        borderType=cv2.BORDER_REPLICATE,
    )
    return _like(out, img)


def mean_variance_normalize(img: np.ndarray, all_channel: bool = True) -> np.ndarray:
    """float32 ``(x - mean) / max(std, 1 / sqrt(numel))`` globally or per channel."""
    x = img.astype(np.float32)
    if all_channel or x.ndim == 2:
        mean, std = x.mean(), x.std()
        return (x - mean) / max(float(std), 1.0 / np.sqrt(x.size))
    mean = x.mean(axis=(0, 1))
    std = np.maximum(x.std(axis=(0, 1)), 1.0 / np.sqrt(x.shape[0] * x.shape[1]))
    return ((x - mean) / std).astype(np.float32)


def min_max_normalize(
    img: np.ndarray, lo: float, hi: float, all_channel: bool = True
) -> np.ndarray:
    """float32 linear rescale of ``[min(x), max(x)]`` to ``[lo, hi]``.

    A flat image (or channel) maps to ``lo`` instead of dividing by zero as tensorpack does.
    """
    x = img.astype(np.float32)
    axis = None if (all_channel or x.ndim == 2) else (0, 1)
    xmin, xmax = x.min(axis=axis), x.max(axis=axis)
    span = np.asarray(xmax - xmin, dtype=np.float32)
    scale = np.divide(hi - lo, span, out=np.zeros_like(span), where=span > 0)
    return ((x - xmin) * scale + np.float32(lo)).astype(np.float32)


def jpeg(img: np.ndarray, quality: int) -> np.ndarray:
    """JPEG encode/decode round trip at ``quality``; shape and dtype are kept (tensorpack
    turned gray images into 3-channel ones)."""
    src = img if img.dtype == _UINT8 else np.clip(np.rint(img), 0, 255).astype(np.uint8)
    if src.ndim == 3 and src.shape[2] not in (1, 3):
        raise ValueError(
            f"JPEG noise needs a 1- or 3-channel image, got shape {img.shape}; apply it to "
            "the colour channels only."
        )
    ok, buf = cv2.imencode(".jpg", src, [int(cv2.IMWRITE_JPEG_QUALITY), int(quality)])
    if not ok:  # pragma: no cover - OpenCV failure
        raise RuntimeError(f"cv2.imencode failed for an image of shape {img.shape}")
    flag = cv2.IMREAD_GRAYSCALE if src.ndim == 2 or src.shape[2] == 1 else cv2.IMREAD_COLOR
    out = np.asarray(cv2.imdecode(buf, flag)).reshape(img.shape)
    return out.astype(img.dtype, copy=False)


def gaussian_noise(img: np.ndarray, seed: int, sigma: float, clip: bool = True) -> np.ndarray:
    """Add ``sigma * N(0, 1)`` noise drawn from ``seed`` (element-wise, image shape)."""
    x = _work(img)
    noise = np.random.default_rng(seed).standard_normal(img.shape, dtype=np.float32)
    out = x + (noise * np.float32(sigma)).astype(x.dtype, copy=False)
    return finish(out, img.dtype, clip)


def salt_pepper(img: np.ndarray, seed: int, white_prob: float, black_prob: float) -> np.ndarray:
    """A copy with each element set to 255 with ``white_prob`` and to 0 with ``black_prob``."""
    r = np.random.default_rng(seed).random(img.shape, dtype=np.float32)
    out = img.copy()
    out[r > 1 - white_prob] = 255
    out[r < black_prob] = 0
    return out


def lighting_uint8(inc: Sequence[float] | np.ndarray) -> tuple[int, ...] | np.ndarray:
    """What adding ``inc`` does to a uint8 image, to the bit as the float32 path computes it
    (sum, round, saturate): away from a tie, ``rint(v + inc) == v + rint(inc)`` for every
    integer v, so per-channel integer offsets (a tuple); near one, a (256, channels) table
    computed in float32."""
    inc32 = np.asarray(inc, np.float32)
    vals = inc32.tolist()  # (plain floats: three numpy calls cost more than the kernel)
    if all(abs(v - math.floor(v) - 0.5) > 1e-3 for v in vals):
        return tuple(round(v) for v in vals)
    table = np.arange(256, dtype=np.float32)[:, None] + inc32[None]
    return np.clip(np.rint(table), 0, 255).astype(np.uint8)


def lighting(img: np.ndarray, inc: Sequence[float] | np.ndarray, clip: bool = True
             ) -> np.ndarray:
    """Add the per-channel vector ``inc`` to every pixel of a 3-channel image."""
    if img.dtype == _UINT8 and img.ndim == 3 and img.shape[2] == 3:
        # uint8 without float temporaries, the same to the bit as the float path below
        how = lighting_uint8(inc)
        if isinstance(how, tuple):
            # two saturating integer passes (OpenCV scalars saturate to uint8, hence add and
            # subtract)
            return _add_offsets(img, how)
        return cv2.LUT(np.ascontiguousarray(img), how.reshape(1, 256, 3))
    x = _work(img)
    out = x + np.asarray(inc, dtype=x.dtype)
    return finish(out, img.dtype, clip)
