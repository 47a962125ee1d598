"""Small utilities shared by the package (tensorpack's ``utils`` names where they matter)."""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from dataflow.rng import get_rng, set_seed

__all__ = [
    "fix_rng_seed",
    "get_rng",
    "get_tqdm",
    "get_tqdm_kwargs",
    "map_numeric_arrays",
    "shape2d",
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



def get_tqdm_kwargs(**kwargs: Any) -> dict[str, Any]:
    """Default tqdm arguments: a readable bar with rates, refreshed sensibly on and off a TTY.

    ``DATAFLOW_PROGRESS_REFRESH`` (or tensorpack's ``TENSORPACK_PROGRESS_REFRESH``) sets the
    minimum refresh interval in seconds.
    """
    default: dict[str, Any] = {
        "smoothing": 0.5,
        "dynamic_ncols": True,
        "ascii": True,
        "bar_format": "{l_bar}{bar}|{n_fmt}/{total_fmt}[{elapsed}<{remaining},{rate_noinv_fmt}]",
    }
    refresh = os.environ.get("DATAFLOW_PROGRESS_REFRESH") or os.environ.get(
        "TENSORPACK_PROGRESS_REFRESH"
    )
    if refresh is not None:
        default["mininterval"] = float(refresh)
    else:
        isatty = getattr(sys.stderr, "isatty", lambda: False)()
        default["mininterval"] = 0.5 if isatty else 30.0
    default.update(kwargs)
    return default


def get_tqdm(*args: Any, **kwargs: Any):
    """A ``tqdm`` progress bar with :func:`get_tqdm_kwargs` defaults."""
    from tqdm import tqdm

    return tqdm(*args, **get_tqdm_kwargs(**kwargs))


def shape2d(a: Any) -> list[int]:
    """``int`` -> ``[a, a]``; a pair -> ``list(a)``."""
    if isinstance(a, int):
        return [a, a]
    if isinstance(a, list | tuple) and len(a) == 2:
        return [int(a[0]), int(a[1])]
    raise ValueError(f"Expected an int or a pair of ints, got {a!r}.")


#: NumPy dtype kinds that frameworks take as tensors: bool, int, uint, float, complex
NUMERIC_KINDS = frozenset("biufc")


def map_numeric_arrays(obj: Any, fn: Any) -> Any:
    """``obj`` with every numeric NumPy array or scalar replaced by ``fn(x)``, through lists,
    tuples and dicts (their types kept); anything else is returned as it is."""
    if isinstance(obj, np.ndarray | np.generic):
        return fn(obj) if obj.dtype.kind in NUMERIC_KINDS else obj
    tp = type(obj)
    if tp is list:
        return [map_numeric_arrays(x, fn) for x in obj]
    if tp is tuple:
        return tuple(map_numeric_arrays(x, fn) for x in obj)
    if isinstance(obj, dict):
        return tp((k, map_numeric_arrays(v, fn)) for k, v in obj.items())
    return obj


