"""Argument checks shared by the augmentors (errors name the parameter, show it, suggest a fix)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["check_fits", "pair", "shape2d"]


def shape2d(value: Any, name: str) -> tuple[int, int]:
    """``int -> (v, v)``; a 2-sequence of positive ints -> ``(h, w)``."""
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        out = (int(value), int(value))
    elif isinstance(value, list | tuple) and len(value) == 2:
        out = (int(value[0]), int(value[1]))
    else:
        raise ValueError(
            f"`{name}` must be an int or a (h, w) pair, got {value!r}; e.g. {name}=224 or "
            f"{name}=(224, 256)."
        )
    if out[0] <= 0 or out[1] <= 0:
        raise ValueError(f"`{name}` must be positive, got {value!r}.")
    return out


def pair(value: Any, name: str) -> tuple[float, float]:
    """A ``(low, high)`` pair with ``low <= high``."""
    if not isinstance(value, list | tuple | np.ndarray) or len(value) != 2:
        raise ValueError(f"`{name}` must be a (low, high) pair, got {value!r}.")
    lo, hi = value
    if lo > hi:
        raise ValueError(f"`{name}` must have low <= high, got {value!r}; swap the two values.")
    return lo, hi


def check_fits(crop_hw: tuple[int, int], img: np.ndarray, what: str) -> None:
    """Raise if a ``crop_hw = (h, w)`` window does not fit in ``img``."""
    h, w = img.shape[:2]
    if crop_hw[0] > h or crop_hw[1] > w:
        raise ValueError(
            f"{what} (h, w)={tuple(crop_hw)} is larger than the image (h, w)=({h}, {w}); "
            "resize the image first (e.g. ResizeShortestEdge) or use a smaller size."
        )
