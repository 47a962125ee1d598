"""tensorpack's ``utils.argtools``: shape arguments and memoizing decorators."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ShapeError", "call_only_once", "memoized", "memoized_ignoreargs", "shape2d"]

F = TypeVar("F", bound=Callable[..., Any])


class ShapeError(ValueError, RuntimeError):
    """A shape argument that is not an int or a pair of ints (a ``ValueError``, and a
    ``RuntimeError`` as tensorpack raised)."""


def shape2d(a: Any) -> list[int]:
    """``int`` -> ``[a, a]``; a list or tuple of two -> ``[a[0], a[1]]``."""
    if isinstance(a, int) and not isinstance(a, bool):
        return [a, a]
    if isinstance(a, list | tuple) and len(a) == 2:
        return [int(a[0]), int(a[1])]
    raise ShapeError(f"Expected an int or a pair of ints, got {a!r} (type {type(a).__name__}).")


#: ``functools.lru_cache(maxsize=None)``: the result for each distinct argument list is kept
memoized = functools.lru_cache(maxsize=None)


def memoized_ignoreargs(func: F) -> F:
    """Cache the first result of ``func`` and return it for every later call, whatever the
    arguments."""
    result: list[Any] = []

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not result:
            result.append(func(*args, **kwargs))
        return result[0]

    return wrapper  # type: ignore[return-value]


def call_only_once(func: F) -> F:
    """Decorate a method so that it runs at most once per instance; a second call raises
    ``AssertionError`` (as tensorpack's did) naming the method."""
    attr = f"_call_only_once_{func.__name__}"

    @functools.wraps(func)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, attr, False):
            raise AssertionError(
                f"{type(self).__name__}.{func.__name__}() was already called on this instance; "
                "it can only be called once (make a new instance to call it again).")
        setattr(self, attr, True)
        return func(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
