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

from dataflow.utils.argtools import shape2d
from dataflow.utils.utils import fix_rng_seed, get_rng, get_tqdm, get_tqdm_kwargs
from dataflow.wrappers.batch import map_numeric_arrays

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
