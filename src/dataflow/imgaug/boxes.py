"""Bounding boxes: formats, conversion, clipping, and the corner trick used by transforms.

Boxes are float ``Nx4`` arrays in a named :class:`BoxFormat`: ``XYXY`` = ``(x0, y0, x1, y1)``
(the format every ``Transform.apply_boxes`` takes and returns) or ``XYWH`` = ``(x0, y0, w, h)``.
Coordinates are continuous: an image of width ``w`` spans ``x`` in ``[0, w]``.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

__all__ = [
    "BoxFormat",
    "boxes_from_corners",
    "boxes_to_corners",
    "check_boxes",
    "clip_boxes",
    "convert_boxes",
]


class BoxFormat(enum.Enum):
    """How the four numbers of a box are laid out."""

    XYXY = "xyxy"
    XYWH = "xywh"


def check_boxes(boxes: Any, name: str = "boxes") -> np.ndarray:
    """Raise a clear error unless ``boxes`` is a float ``Nx4`` ndarray."""
    if not isinstance(boxes, np.ndarray) or boxes.ndim != 2 or boxes.shape[1] != 4:
        shape = getattr(boxes, "shape", None)
        raise ValueError(
            f"`{name}` must be a numpy.ndarray of shape (N, 4), got {type(boxes).__name__} "
            f"with shape {shape}; use np.asarray({name}, dtype=np.float32).reshape(-1, 4)."
        )
    if not np.issubdtype(boxes.dtype, np.floating):
        raise TypeError(
            f"`{name}` must have a float dtype, got {boxes.dtype}; convert it with "
            f"{name}.astype(np.float32)."
        )
    return boxes


def convert_boxes(boxes: np.ndarray, src: BoxFormat, dst: BoxFormat) -> np.ndarray:
    """A copy of ``boxes`` converted from format ``src`` to ``dst``."""
    src, dst = BoxFormat(src), BoxFormat(dst)
    out = check_boxes(boxes).copy()
    if src is dst:
        return out
    if src is BoxFormat.XYWH:  # -> XYXY
        out[:, 2:] += out[:, :2]
    else:  # XYXY -> XYWH
        out[:, 2:] -= out[:, :2]
    return out


def clip_boxes(boxes: np.ndarray, image_shape: tuple[int, ...]) -> np.ndarray:
    """A copy of XYXY ``boxes`` clipped to an image of shape ``(h, w, ...)``."""
    h, w = image_shape[:2]
    out = check_boxes(boxes).copy()
    np.clip(out[:, 0::2], 0, w, out=out[:, 0::2])
    np.clip(out[:, 1::2], 0, h, out=out[:, 1::2])
    return out


def boxes_to_corners(boxes: np.ndarray) -> np.ndarray:
    """The four corners of each XYXY box, as a ``(4N, 2)`` array of (x, y)."""
    idx = np.array([[0, 1], [2, 1], [0, 3], [2, 3]])
    return boxes[:, idx].reshape(-1, 2)


def boxes_from_corners(corners: np.ndarray) -> np.ndarray:
    """The axis-aligned XYXY box enclosing each group of four corners of ``corners``."""
    pts = corners.reshape(-1, 4, 2)
    return np.concatenate([pts.min(axis=1), pts.max(axis=1)], axis=1)
