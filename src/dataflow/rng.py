"""Reproducible random streams, derived with :class:`numpy.random.SeedSequence`.

Every random stage owns a ``numpy.random.RandomState`` (tensorpack's ``self.rng`` API:
``rand``, ``randint``, ``uniform``, ``shuffle``, ...) whose bits come from an MT19937 seeded by a
``SeedSequence`` built from:

* the base seed: the stage's own ``seed=`` argument, else the global :func:`set_seed` value,
  else fresh OS entropy (never time or pid);
* the stage's ordinal: the order in which stages first derive their stream in this process,
  which is the same in every run of the same program;
* the worker id (set in a parallel worker by :func:`set_worker_info`) and the epoch.

The same seed therefore gives the same stream in every run, and two workers never share one.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import numpy as np

__all__ = [
    "derive_rng",
    "derive_seed_sequence",
    "get_rng",
    "get_seed",
    "get_worker_info",
    "set_seed",
    "set_worker_info",
]

_lock = threading.Lock()
_global_seed: int | None = None
_stage_counter = itertools.count()
_worker_id: int | None = None


def _check_seed(seed: Any, name: str = "seed") -> int | None:
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(
            f"`{name}` must be a non-negative int or None, got {seed!r} "
            f"(type {type(seed).__name__}); pass e.g. {name}=0, or None for fresh OS entropy."
        )
    return int(seed)


def set_seed(seed: int | None) -> None:
    """Set the global base seed used by every random stage created without ``seed=``.

    ``None`` returns to fresh OS entropy. Call it before ``reset_state()``; stages derive their
    streams when they are reset.
    """
    global _global_seed, _stage_counter
    seed = _check_seed(seed)
    with _lock:
        _global_seed = seed
        _stage_counter = itertools.count()


def get_seed() -> int | None:
    """The global base seed set by :func:`set_seed`, or ``None``."""
    return _global_seed


def set_worker_info(worker_id: int | None) -> None:
    """Declare that this process (or thread pool) is worker ``worker_id``; used by runners."""
    global _worker_id
    _worker_id = None if worker_id is None else int(worker_id)


def get_worker_info() -> int | None:
    """The worker id of this process, or ``None`` in the main process."""
    return _worker_id


def next_stage_ordinal() -> int:
    with _lock:
        return next(_stage_counter)


def derive_seed_sequence(seed: int | None, *keys: int) -> np.random.SeedSequence:
    """A ``SeedSequence`` for base ``seed`` (or the global seed, or OS entropy) and ``keys``."""
    seed = _check_seed(seed)
    if seed is None:
        seed = _global_seed
    worker = -1 if _worker_id is None else _worker_id
    spawn_key = (*tuple(int(k) for k in keys), worker + 1)
    if seed is None:
        return np.random.SeedSequence(None, spawn_key=spawn_key)
    return np.random.SeedSequence(seed, spawn_key=spawn_key)


def derive_rng(seed: int | None, *keys: int) -> np.random.RandomState:
    """A ``RandomState`` (tensorpack's rng API) drawn from :func:`derive_seed_sequence`."""
    return np.random.RandomState(np.random.MT19937(derive_seed_sequence(seed, *keys)))


def rng_from_sequence(seq: np.random.SeedSequence, *keys: int) -> np.random.RandomState:
    """A ``RandomState`` for a child of ``seq`` identified by ``keys`` (e.g. the epoch)."""
    child = np.random.SeedSequence(seq.entropy, spawn_key=tuple(seq.spawn_key) + tuple(keys))
    return np.random.RandomState(np.random.MT19937(child))


def get_rng(obj: Any = None, seed: int | None = None) -> np.random.RandomState:
    """tensorpack-compatible helper: a new ``RandomState`` for ``obj``.

    Unlike tensorpack, it never uses time, pid or ``id(obj)``: it is seeded from ``seed``, else
    the global seed (with a per-call ordinal, so two calls differ but reproduce), else OS entropy.
    """
    del obj
    return derive_rng(seed, next_stage_ordinal())
