"""JPEG decoding that decodes only what is needed: a region, at a reduced scale.

``decode_jpeg(data, crop=(x, y, w, h), min_size=(h, w))`` decodes only the ``crop`` window
(rows above it are only entropy-decoded, rows below are never read, columns outside skip the
inverse DCT and the colour conversion) and, with ``min_size``, lets libjpeg-turbo scale the image
by 1/2, 1/4 or 1/8 inside the inverse DCT, picking the coarsest scale at which the window still
has at least ``min_size`` pixels. ``jpeg_shape(data)`` reads the header only.

Back ends. ``"turbo"`` is the C extension ``dataflow.jpeg._jpeg``, built by ``pip install``
where a C compiler and libjpeg-turbo's headers exist. Without it (``"auto"`` then logs once why)
the whole image is decoded at the DCT scale and then cropped, to the same shapes and the same
pixels (all three are libjpeg-turbo with its default settings): by ``"simplejpeg"`` where that
package is installed (the ``imgaug`` extra installs it; a binary wheel with libjpeg-turbo
inside, whose decode runs 5-8% faster than ``cv2.imdecode`` in a threads pipeline), else by
``"cv2"`` (``cv2.imdecode`` with ``IMREAD_REDUCED_*``).

Strict by default: corrupt data that libjpeg would decode anyway, with a warning, raises
:class:`~dataflow.errors.ImageDecodeError`, and so does data with no end-of-image marker after the
start of its first scan (a truncated file, even when the window lies above the missing part);
``cv2.imdecode`` (OpenCV 4) returns such images half grey. ``strict=False`` accepts them: the fast
path and simplejpeg decode what is there (missing rows grey); the cv2 fallback then depends on
OpenCV, which since version 5 refuses truncated data (ImageDecodeError).

The stored pixel grid is decoded: unlike ``cv2.imdecode``, the EXIF orientation is not applied
(``jpeg_orientation(data)`` reads it). See docs/jpeg.md.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from dataflow._optional import NO_C_EXT_ENV, c_extensions_off, install_hint
from dataflow.errors import ImageDecodeError

__all__ = [
    "check_complete",
    "cv2_decode_scaled",
    "dct_scale",
    "decode_jpeg",
    "decode_whole",
    "fast_path_note",
    "fast_path_status",
    "jpeg_orientation",
    "jpeg_shape",
    "scaled_window",
]

logger = logging.getLogger(__name__)

#: set to 1 to run without the C extension even where it is built (benchmarks and tests of the
#: fallback, or to rule the extension out when looking for a bug); DATAFLOW_NO_C_EXT=1 turns
#: off all of dataflow's C extensions
DISABLE_ENV = "DATAFLOW_NO_JPEG_EXT"

_jpeg: Any  # the C extension's module, or None
_OFF_REASON: str | None
if os.environ.get(DISABLE_ENV) == "1" or c_extensions_off():
    _jpeg = None
    _OFF_REASON = ("the C extension dataflow.jpeg._jpeg is disabled by "
                   f"{DISABLE_ENV if os.environ.get(DISABLE_ENV) == '1' else NO_C_EXT_ENV}=1")
else:
    try:
        from dataflow.jpeg import _jpeg  # (the C extension)
    except ImportError as e:  # not built (no compiler or headers at install time) or not loadable
        _jpeg = None
        _OFF_REASON = f"the C extension dataflow.jpeg._jpeg is not available ({e})"
    else:
        _OFF_REASON = None

#: ``cv2`` or ``simplejpeg``: the whole-image decoder of the fallback for a whole process (read
#: at import; default: simplejpeg where installed, else cv2), to measure or test one of them
FALLBACK_ENV = "DATAFLOW_JPEG_FALLBACK"
_FORCED = os.environ.get(FALLBACK_ENV)  # (read once, as DISABLE_ENV: not per image)

#: how to get the fast path, for the log line and the profiler's note
HOW_TO_GET = (
    "install a binary wheel of dataflow-reloaded, which bundles libjpeg-turbo (in a clone, "
    "`make wheel` builds it into dist/: pip install dist/dataflow_reloaded-*.whl), or install a "
    "C compiler and libjpeg-turbo's headers (e.g. apt-get install gcc libjpeg62-turbo-dev) and "
    "reinstall from source (pip install -e . in a clone)"
)

_COLORS = {"bgr": 0, "rgb": 1, "gray": 2}
_BACKENDS = ("auto", "turbo", "simplejpeg", "cv2")
_SCALES = (8, 4, 2, 1)
_CMYK = (4, 5)  # libjpeg's JCS_CMYK, JCS_YCCK
_logged_off = False


def fast_path_status() -> str | None:
    """``None`` when the libjpeg-turbo region decoder is available, else why it is not."""
    return _OFF_REASON


def fast_path_note(only_if_used: bool = True) -> str | None:
    """One line for a report (the profiler's): that the fast path is off, why, and how to get
    it; ``None`` while the fast path is on, or (``only_if_used``) while no decode in this
    process has needed it. A report on a pipeline that decodes in worker processes passes
    ``only_if_used=False`` when a stage decodes JPEG (an image flow with ``decode="jpeg"``)."""
    if _OFF_REASON is None or (only_if_used and not _logged_off):
        return None
    return (f"JPEG fast path off ({_OFF_REASON}): decoding whole images with "
            f"{_DECODER_NAMES[_fallback('auto')]} instead; to get it, {HOW_TO_GET}.")


_DECODER_NAMES = {"simplejpeg": "simplejpeg (DCT-scaled)",
                  "cv2": "OpenCV's DCT-scaled cv2.imdecode"}
_simplejpeg_module: Any = False  # not looked for yet; then the module or None


def _load_simplejpeg() -> Any:
    """The simplejpeg module, or None where it is not installed (looked for once)."""
    global _simplejpeg_module
    if _simplejpeg_module is False:
        try:
            import simplejpeg
        except ImportError:
            simplejpeg = None
        _simplejpeg_module = simplejpeg
    return _simplejpeg_module


def _fallback(backend: str) -> str:
    """The whole-image decoder for ``backend`` when it is not the fast path: "simplejpeg" or
    "cv2" ("turbo": for what the fast path does not take, as "auto")."""
    if backend in ("auto", "turbo"):
        if _FORCED in ("cv2", "simplejpeg"):
            backend = _FORCED
        else:
            return "simplejpeg" if _load_simplejpeg() is not None else "cv2"
    if backend == "simplejpeg" and _load_simplejpeg() is None:
        raise ImportError(
            "`backend='simplejpeg'` needs the simplejpeg package, which is not installed: "
            f"{install_hint('simplejpeg')} (or pip install simplejpeg)."
        )
    return backend


def _turbo(backend: str) -> bool:
    """Whether to use the C extension for ``backend`` (logs once when "auto" falls back)."""
    global _logged_off
    if backend == "auto":
        if _jpeg is not None:
            return True
        if not _logged_off:
            _logged_off = True
            logger.warning(
                "dataflow.jpeg: the region-decoding fast path is off (%s); decoding whole images "
                "with %s (at 1/2, 1/4 or 1/8 scale where a window allows). To get it, %s.",
                _OFF_REASON, _DECODER_NAMES[_fallback("auto")], HOW_TO_GET,
            )
        return False
    if backend in ("cv2", "simplejpeg"):
        return False
    if backend == "turbo":
        if _jpeg is None:
            raise ImportError(f"`backend='turbo'` needs the fast path, but {_OFF_REASON}.")
        return True
    raise ValueError(f"`backend` must be one of {_BACKENDS}, got {backend!r}.")


def _bytes_len(data: Any) -> int:
    try:
        return memoryview(data).nbytes
    except TypeError:
        raise TypeError(
            f"`data` must be the encoded JPEG as bytes, bytearray, memoryview or a uint8 array, "
            f"got {type(data).__name__}."
        ) from None


def _error(data: Any, e: Exception) -> ImageDecodeError:
    return ImageDecodeError(f"cannot decode the JPEG data ({_bytes_len(data)} bytes): {e}")


# ---------------------------------------------------------------- header
def _header(data: Any, turbo: bool) -> tuple[int, int, int, int, int]:
    """``(height, width, components, jpeg_color_space, orientation)``."""
    if turbo:
        try:
            h, w, c, space, orientation, _ = _jpeg.header(data)
        except _jpeg.DecodeError as e:
            raise _error(data, e) from None
        return h, w, c, space, orientation
    h, w, c, orientation = _parse_sof(data)
    return h, w, c, _CMYK[0] if c == 4 else 0, orientation


_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # start-of-frame markers


def _parse_sof(data: Any) -> tuple[int, int, int, int]:
    """Height, width and components from the start-of-frame segment, and the EXIF orientation
    of an APP1 segment before it (1 when absent), in pure Python."""
    b = memoryview(data).cast("B")
    n = len(b)
    if n < 4 or b[0] != 0xFF or b[1] != 0xD8:
        raise ImageDecodeError(
            f"cannot decode the JPEG data ({n} bytes): it does not start with the JPEG "
            f"start-of-image marker FF D8 (starts with {bytes(b[:4]).hex(' ')})."
        )
    i = 2
    orientation = 1
    while i + 4 <= n:
        if b[i] != 0xFF:
            break
        marker = b[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        length = b[i + 2] << 8 | b[i + 3]
        if marker == 0xE1 and orientation == 1:
            orientation = _exif_orientation(bytes(b[i + 4 : i + 2 + length]))
        if marker in _SOF and i + 10 <= n:
            return (b[i + 5] << 8 | b[i + 6], b[i + 7] << 8 | b[i + 8], b[i + 9], orientation)
        i += 2 + length
    raise ImageDecodeError(
        f"cannot decode the JPEG data ({n} bytes): no start-of-frame segment before byte {i}; "
        "the header is corrupt or truncated."
    )


def _exif_orientation(app1: bytes) -> int:
    """The orientation tag (0x0112) of IFD0 in an APP1 segment's payload; 1 when it is not an
    EXIF segment, has no such tag or is malformed (libjpeg-turbo's reading, where the fast path
    reads it, does the same)."""
    if len(app1) < 14 or app1[:6] != b"Exif\0\0":
        return 1
    tiff = app1[6:]
    order = {b"II": "little", b"MM": "big"}.get(tiff[:2])
    if order is None:
        return 1

    def u(at: int, size: int) -> int:
        return int.from_bytes(tiff[at : at + size], order)  # type: ignore[arg-type]

    ifd = u(4, 4)
    if ifd + 2 > len(tiff):
        return 1
    for k in range(u(ifd, 2)):
        e = ifd + 2 + 12 * k
        if e + 12 > len(tiff):
            break
        if u(e, 2) == 0x0112 and u(e + 2, 2) == 3:  # SHORT
            v = u(e + 8, 2)
            return v if 1 <= v <= 8 else 1
    return 1


def jpeg_shape(data: Any, *, backend: str = "auto") -> tuple[int, int, int]:
    """``(height, width, components)`` of a JPEG from its header, without decoding pixels
    (components: 1 gray, 3 colour, 4 CMYK). Raises ImageDecodeError on data that is not JPEG."""
    _bytes_len(data)
    h, w, c, _, _ = _header(data, _turbo(backend))
    return h, w, c


def jpeg_orientation(data: Any) -> int:
    """The EXIF orientation tag (1 to 8; 1 when absent)."""
    return _header(data, _turbo("auto"))[4]


# ---------------------------------------------------------------- decode
def dct_scale(size: Sequence[int], min_size: Any) -> int:
    """The coarsest DCT scale denominator ``d`` in (8, 4, 2, 1) at which an ``(h, w)`` window
    still has at least ``min_size`` pixels (an int or ``(min_h, min_w)``): the scaled window is
    ``ceil(h / d) x ceil(w / d)``."""
    mh, mw = (min_size, min_size) if isinstance(min_size, int | np.integer) else min_size
    h, w = size
    for d in _SCALES:
        if -(-h // d) >= mh and -(-w // d) >= mw:
            return d
    return 1


def _check_crop(crop: Any, h: int, w: int) -> tuple[int, int, int, int]:
    if crop is None:
        return 0, 0, w, h
    try:
        x, y, cw, ch = (int(v) for v in crop)
    except (TypeError, ValueError):
        raise ValueError(f"`crop` must be (x, y, w, h) integers, got {crop!r}.") from None
    if cw <= 0 or ch <= 0 or x < 0 or y < 0 or x + cw > w or y + ch > h:
        raise ValueError(
            f"`crop` (x, y, w, h)={crop!r} must be a non-empty window inside the {w}x{h} image "
            "(0 <= x, x + w <= width, 0 <= y, y + h <= height)."
        )
    return x, y, cw, ch


def scaled_window(crop: tuple[int, int, int, int], d: int) -> tuple[int, int, int, int]:
    """The window ``(x, y, w, h)`` of the 1/``d`` scaled image that covers ``crop``: columns
    ``x // d`` to ``ceil((x + w) / d)``, and the same for rows."""
    x, y, w, h = crop
    x0, y0 = x // d, y // d
    return x0, y0, -(-(x + w) // d) - x0, -(-(y + h) // d) - y0


def decode_jpeg(
    data: Any,
    crop: Sequence[int] | None = None,
    min_size: Any = None,
    out: np.ndarray | None = None,
    *,
    color: str = "bgr",
    strict: bool = True,
    backend: str = "auto",
    scale: int | None = None,
) -> np.ndarray:
    """Decode a JPEG, or only a window of it, into a uint8 array.

    Args:
        data: the encoded JPEG (bytes, bytearray, memoryview or a 1-D uint8 array).
        crop: ``(x, y, w, h)``, the window to decode, in pixels of the full image; None decodes
            the whole image.
        min_size: an int or ``(min_h, min_w)``: decode at the coarsest DCT scale 1/d (d in 1, 2,
            4, 8, see :func:`dct_scale`) that still gives the window at least this size. The
            result is then the window :func:`scaled_window` ``(crop, d)`` of the image scaled by
            1/d. None: scale 1.
        out: a uint8 array of the result's shape to decode into (its pixels must be contiguous;
            its rows may be strided, e.g. ``batch[i]``); returned.
        color: ``"bgr"`` (``(h, w, 3)``, like ``cv2.imdecode``), ``"rgb"`` or ``"gray"``
            (``(h, w)``).
        strict: raise :class:`~dataflow.errors.ImageDecodeError` on corrupt or truncated data
            (see the module docstring); False decodes what libjpeg can.
        backend: ``"auto"`` (the fast path where built, else simplejpeg where installed, else
            cv2), ``"turbo"``, ``"simplejpeg"`` or ``"cv2"``.
        scale: the scale denominator d (1, 2, 4 or 8) to use instead of choosing it from
            ``min_size``.
    """
    if color not in _COLORS:
        raise ValueError(f"`color` must be one of {sorted(_COLORS)}, got {color!r}.")
    if scale is not None and scale not in _SCALES:
        raise ValueError(f"`scale` must be 1, 2, 4 or 8 (the denominator), got {scale!r}.")
    _bytes_len(data)
    turbo = _turbo(backend)
    h, w, _, space, _ = _header(data, turbo)
    win = _check_crop(crop, h, w)
    if scale is not None:
        d = scale
    else:
        d = 1 if min_size is None else dct_scale(win[2:][::-1], min_size)
    x0, y0, ww, hh = scaled_window(win, d)
    shape = (hh, ww) if color == "gray" else (hh, ww, 3)
    if out is not None and (
        not isinstance(out, np.ndarray) or out.dtype != np.uint8 or out.shape != shape
    ):
        got = (out.dtype, out.shape) if isinstance(out, np.ndarray) else type(out).__name__
        raise ValueError(f"`out` must be a uint8 array of shape {shape}, got {got}.")
    if turbo and space not in _CMYK:
        res = np.empty(shape, np.uint8) if out is None else out
        try:
            _jpeg.decode(data, res, x0, y0, ww, hh, d, _COLORS[color], strict)
        except _jpeg.DecodeError as e:
            raise _error(data, e) from None
        return res
    res = _whole_window(data, (x0, y0, ww, hh), d, color, strict, h, w, space, backend)
    if out is None:
        return res
    out[...] = res
    return out


def cv2_decode_scaled(data: Any, d: int, gray: bool, h: int, w: int) -> np.ndarray:
    """The whole image at scale 1/``d``, BGR (or gray), by ``cv2.imdecode``: its
    ``IMREAD_REDUCED_*`` modes are libjpeg-turbo's DCT scaling, the same pixels as the fast
    path's at every scale (checked by the tests); the EXIF orientation is not applied. Where
    the installed OpenCV returns another shape than ``ceil(h / d) x ceil(w / d)``, the full
    decode is scaled with ``cv2.INTER_AREA`` instead."""
    from dataflow._optional import import_cv2

    cv2 = import_cv2("the JPEG decoder's OpenCV fallback")
    mode = _CV2_MODES[gray, d]
    img = cv2.imdecode(np.frombuffer(data, np.uint8),
                       getattr(cv2, mode) | cv2.IMREAD_IGNORE_ORIENTATION)
    if img is None:
        raise ImageDecodeError(
            f"cannot decode the JPEG data ({_bytes_len(data)} bytes): cv2.imdecode failed."
        )
    size = (-(-h // d), -(-w // d))
    if img.shape[:2] != size:  # (an OpenCV that scales otherwise)
        if d > 1:
            img = cv2_decode_scaled(data, 1, gray, h, w)
            img = cv2.resize(img, size[::-1], interpolation=cv2.INTER_AREA)
        if img.shape[:2] != size:
            raise ImageDecodeError(
                f"cannot decode the JPEG data ({_bytes_len(data)} bytes): cv2.imdecode gave "
                f"{img.shape[1]}x{img.shape[0]} pixels where the header says {w}x{h}."
            )
    return img


_CV2_MODES = {
    (False, 1): "IMREAD_COLOR", (True, 1): "IMREAD_GRAYSCALE",
    **{(False, d): f"IMREAD_REDUCED_COLOR_{d}" for d in (2, 4, 8)},
    **{(True, d): f"IMREAD_REDUCED_GRAYSCALE_{d}" for d in (2, 4, 8)},
}


def decode_whole(
    data: Any, d: int, gray: bool, h: int, w: int, *, backend: str = "auto",
    strict: bool = True, cmyk: bool = False,
) -> np.ndarray:
    """The whole ``h x w`` image at scale 1/``d`` (BGR or gray, EXIF orientation not applied),
    by the fallback's decoder for ``backend`` (simplejpeg where installed, else cv2; a CMYK
    JPEG always by cv2, which converts it as ``cv2.imdecode`` does). The three give the same
    pixels (libjpeg-turbo's default settings and DCT scaling; checked by the tests). ``strict``:
    simplejpeg raises on what libjpeg warns about (as the fast path does); OpenCV decodes such
    data anyway. Callers check completeness (:func:`check_complete`) themselves."""
    decoder = "cv2" if cmyk else _fallback(backend)
    if decoder == "cv2":
        return cv2_decode_scaled(data, d, gray, h, w)
    size = (-(-h // d), -(-w // d))
    try:
        img = _load_simplejpeg().decode_jpeg(
            data, "GRAY" if gray else "BGR", min_height=size[0], min_width=size[1],
            min_factor=d, strict=strict,
        )
    except ValueError as e:
        if strict:
            raise ImageDecodeError(
                f"cannot decode the JPEG data ({_bytes_len(data)} bytes): {e} (simplejpeg; "
                "pass strict=False to decode what libjpeg can)."
            ) from None
        return cv2_decode_scaled(data, d, gray, h, w)  # (e.g. a JPEG libjpeg-turbo refuses)
    if img.shape[:2] != size:  # (a scale that simplejpeg picks otherwise)
        return cv2_decode_scaled(data, d, gray, h, w)
    return img[:, :, 0] if gray else img


def _whole_window(
    data: Any, win: tuple[int, int, int, int], d: int, color: str, strict: bool, h: int, w: int,
    space: int, backend: str,
) -> np.ndarray:
    """The fallback: decode the whole image at 1/d (DCT scaling), then crop."""
    if strict:
        check_complete(data)
    img = decode_whole(data, d, color == "gray", h, w, backend=backend, strict=strict,
                       cmyk=space in _CMYK)
    x0, y0, ww, hh = win
    img = img[y0 : y0 + hh, x0 : x0 + ww]
    if color == "rgb":
        from dataflow._optional import import_cv2

        cv2 = import_cv2("the JPEG decoder's OpenCV fallback")
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    return np.ascontiguousarray(img)


def check_complete(data: Any) -> None:
    """Raise ImageDecodeError unless an end-of-image marker follows the last start-of-scan
    marker (entropy-coded data cannot contain FF D9, so a truncated file has none)."""
    b = data if isinstance(data, bytes) else bytes(memoryview(data).cast("B"))
    # Searched from the ends, not across the entropy-coded data (whose many FF bytes make a
    # scan of it cost as much as a tenth of the decode): the last end-of-image marker, usually
    # the last two bytes, must have no start-of-scan after it and one before it (the first scan
    # follows the headers).
    eoi = b.rfind(b"\xff\xd9")
    if eoi >= 0 and b.find(b"\xff\xda", eoi) < 0 and b.find(b"\xff\xda", 0, eoi) >= 0:
        return
    sos = b.rfind(b"\xff\xda")
    if sos < 0 or eoi < sos:
        raise ImageDecodeError(
            f"cannot decode the JPEG data ({len(b)} bytes): "
            + ("it has no start-of-scan marker" if sos < 0 else
               "it has no end-of-image marker after its last scan: the file is truncated")
            + " (pass strict=False to decode what is there)."
        )
