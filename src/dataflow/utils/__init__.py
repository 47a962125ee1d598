"""Small utilities: the package's own helpers, and tensorpack's ``utils`` modules.

The submodules keep the layout of the standalone ``dataflow`` package (whose ``dataflow.utils``
is tensorpack's ``tensorpack.utils``), so code written for it imports unchanged:
:mod:`~dataflow.utils.serialize`, :mod:`~dataflow.utils.logger`, :mod:`~dataflow.utils.fs`,
:mod:`~dataflow.utils.timer`, :mod:`~dataflow.utils.utils`, :mod:`~dataflow.utils.argtools`,
:mod:`~dataflow.utils.concurrency` and :mod:`~dataflow.utils.stats`. They load on first access
(``import dataflow.utils`` stays light; importing :mod:`~dataflow.utils.logger` is what gives
the ``dataflow`` logger its console handler, as importing tensorpack's logger did).
"""

from __future__ import annotations

import importlib as _importlib
from typing import Any

import numpy as np

from dataflow.utils.argtools import shape2d
from dataflow.utils.utils import fix_rng_seed, get_rng, get_tqdm, get_tqdm_kwargs

__all__ = [
    "fix_rng_seed",
    "get_rng",
    "get_tqdm",
    "get_tqdm_kwargs",
    "map_numeric_arrays",
    "shape2d",
]

_SUBMODULES = ("argtools", "concurrency", "fs", "logger", "serialize", "stats", "timer", "utils")


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return _importlib.import_module(f"dataflow.utils.{name}")
    raise AttributeError(f"module 'dataflow.utils' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_SUBMODULES])


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
