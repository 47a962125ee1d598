"""``imgaug.Name(arg=value, ...)`` reprs built from ``__init__``'s parameters."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

__all__ = ["_default_repr"]

_SIMPLE = (int, float, bool, str, tuple, type(None))


def _short(value: Any) -> str:
    if isinstance(value, np.ndarray) and value.size > 9:
        return f"array(shape={value.shape}, dtype={value.dtype})"
    if isinstance(value, np.ndarray):
        return np.array2string(value, separator=", ").replace("\n", "")
    return repr(value)


def _default_repr(obj: Any) -> str:
    """``imgaug.Name(arg=value, ...)`` from ``__init__``'s parameters; defaults are omitted."""
    cls = type(obj)
    try:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):  # pragma: no cover - builtin __init__
        return object.__repr__(obj)
    parts = []
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name not in vars(obj):
            return object.__repr__(obj)
        value = vars(obj)[p.name]
        default = p.default
        if default is not p.empty and (
            value is default
            or (isinstance(value, _SIMPLE) and type(value) is type(default) and value == default)
        ):
            continue
        parts.append(f"{p.name}={_short(value)}")
    return f"imgaug.{cls.__name__}({', '.join(parts)})"
