"""tensorpack's ``utils.utils``: random generators, progress bars, run-once checks, time
deltas and environment changes."""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Iterator

import numpy as np

from dataflow.rng import get_rng, set_seed
from dataflow.wrappers._progress import get_tqdm, get_tqdm_kwargs

__all__ = [
    "change_env",
    "execute_only_once",
    "fix_rng_seed",
    "get_rng",
    "get_tqdm",
    "get_tqdm_kwargs",
    "humanize_time_delta",
]


def fix_rng_seed(seed: int) -> None:
    """tensorpack's name: make the program deterministic from ``seed``.

    Sets dataflow's global seed (:func:`dataflow.set_seed`: every random stage, augmentor and
    parallel worker derives its stream from it and its place in the pipeline) and seeds this
    process's global ``np.random`` and ``random`` generators, for the code that draws from
    them outside parallel workers.
    """
    import random

    set_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


_EXECUTED: set[tuple[str, int]] = set()


def execute_only_once() -> bool:
    """True the first time it is called from a given line of code (file and line number) in
    this process, False every later time::

        if execute_only_once():
            logger.warning("this is printed once")
    """
    caller = inspect.currentframe()
    assert caller is not None and caller.f_back is not None
    key = (caller.f_back.f_code.co_filename, caller.f_back.f_lineno)
    if key in _EXECUTED:
        return False
    _EXECUTED.add(key)
    return True


_UNITS = (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))


def humanize_time_delta(sec: float) -> str:
    """A duration in words, as tensorpack writes it: ``1`` -> ``'1 second'``,
    ``61`` -> ``'1 minute 1 second'``, ``87.6`` -> ``'1 minute 27 seconds'``,
    ``3661`` -> ``'1 hour 1 minute 1 second'``, ``0.01`` -> ``'0.01 seconds'``. Units that are
    zero are left out; below one second the value is written with 3 significant digits.
    """
    if sec < 0:
        raise ValueError(f"`sec` must be >= 0 (a duration), got {sec!r}.")
    if sec < 1:
        return f"{sec:.3g} seconds"
    rest = int(sec)
    parts = []
    for name, size in _UNITS:
        n, rest = divmod(rest, size)
        if n:
            parts.append(f"{n} {name}{'s' if n > 1 else ''}")
    return " ".join(parts)


@contextlib.contextmanager
def change_env(name: str, val: str | None) -> Iterator[None]:
    """Set environment variable ``name`` to ``val`` (``None``: unset it) inside the context,
    and restore its previous value (or absence) afterwards."""
    old = os.environ.get(name)
    try:
        if val is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = val
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old
