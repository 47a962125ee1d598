"""Argument checks shared by the package: each error names the parameter, shows the value and
says how to fix it; and the renamed keywords of tensorpack's older releases."""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any, Literal, TypeVar, overload

from dataflow.rng import check_seed

__all__ = [
    "check_callable",
    "check_choice",
    "check_int",
    "check_positive_int",
    "check_seconds",
    "check_seed",
    "known_length",
    "renamed_kwargs",
]

F = TypeVar("F", bound=Callable[..., Any])


def check_int(value: Any, name: str, minimum: int | None = None, example: int = 4,
              hint: str = "") -> int:
    """``value`` as an int (``bool`` refused), at least ``minimum`` if given; ``hint`` is
    added to the error for a too small value."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(
            f"`{name}` must be an int, got {value!r} (type {type(value).__name__}); pass e.g. "
            f"{name}={example}."
        )
    value = int(value.__index__())
    if minimum is not None and value < minimum:
        raise ValueError(f"`{name}` must be >= {minimum}, got {value}.{hint or ''}"
                         f"{'' if hint else f' Pass e.g. {name}={example}.'}")
    return value


def check_positive_int(value: Any, name: str, example: int = 4) -> int:
    """``value`` if it is an int > 0 (``bool`` refused), else a ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"`{name}` must be a positive int, got {value!r} (type {type(value).__name__}); "
            f"pass e.g. {name}={example}."
        )
    return value


@overload
def check_seconds(value: Any, name: str, allow_none: Literal[False] = False) -> float: ...
@overload
def check_seconds(value: Any, name: str, allow_none: bool) -> float | None: ...
def check_seconds(value: Any, name: str, allow_none: bool = False) -> float | None:
    """``value`` as a float if it is a number of seconds > 0 (``bool`` refused; ``None`` too
    where ``allow_none``: "never"), else a ``ValueError``."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"`{name}` must be a positive number of seconds"
                         f"{' or None (never)' if allow_none else ''}, got {value!r}.")
    return float(value)


def check_callable(func: Any, name: str, example: str = "lambda dp: dp") -> Callable[..., Any]:
    """``func`` if it is callable, else a ``TypeError``."""
    if not callable(func):
        raise TypeError(
            f"`{name}` must be callable, got {func!r} (type {type(func).__name__}); pass "
            f"e.g. {name}={example}."
        )
    return func


def check_choice(param: str, value: Any, choices: tuple[Any, ...]) -> Any:
    """``value`` if it is one of ``choices``, else a ``ValueError`` listing them."""
    if not isinstance(value, type(choices[0])) or value not in choices:
        names = ", ".join(map(repr, choices))
        raise ValueError(f"`{param}` must be one of {names}; got {value!r}.")
    return value


def known_length(ds: Any) -> int | None:
    """``len(ds)`` if the flow knows it, else ``None``."""
    try:
        return len(ds)
    except (NotImplementedError, TypeError):
        return None


def renamed_kwargs(**renames: str) -> Callable[[F], F]:
    """Accept tensorpack's old keyword names (``nr_proc=4`` for ``num_proc=4``) with a
    ``DeprecationWarning`` that names the new one. ``renames`` maps old name -> new name."""

    def decorate(fn: F) -> F:
        params = inspect.signature(fn).parameters
        for old, new in renames.items():
            if new not in params:  # pragma: no cover - a mistake in this package
                raise TypeError(f"{fn.__qualname__} has no parameter {new!r} for {old!r}")

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(
                            f"{fn.__qualname__}() got both `{old}` and `{new}`; pass only "
                            f"`{new}` (`{old}` is its old tensorpack name)."
                        )
                    warnings.warn(
                        f"{fn.__qualname__.split('.')[0]}: `{old}` is deprecated, use `{new}`.",
                        DeprecationWarning, stacklevel=2,
                    )
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
