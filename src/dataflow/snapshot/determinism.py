"""Never cache randomness: the test that a function's outputs do not depend on any seed.

A snapshot stores ``map_func(ds[i])`` once and hands it out in every later epoch: a random draw
inside ``map_func`` would be frozen. :func:`check_deterministic` runs the function on a few
inputs twice, each time under other seeds of every generator this library seeds:

* the legacy global ``np.random`` generator and ``random``'s (seeded, and inside the run their
  module functions dispatch to a per-input stream, as in a parallel mapper's workers);
* :mod:`dataflow.rng`'s per-thread input streams (``input_rng()``, and the augmentors, which
  draw from them inside a mapper) and its global seed (``get_rng()``);

and compares the outputs byte for byte (:func:`fingerprint`). A generator the function makes
itself from fresh entropy (``np.random.default_rng()``) differs between the runs too. Outputs
that differ mean randomness: the function is refused with :class:`NondeterministicError`, which
names it and says where a snapshot can go instead. The generators' states are restored after.
"""

from __future__ import annotations

import copy
import pickle
import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import xxhash

from dataflow import _global_rng
from dataflow import rng as _rng

__all__ = ["NondeterministicError", "check_deterministic", "fingerprint", "func_name"]

#: how many inputs the test maps (twice each)
CHECK_INPUTS = 3
#: the two seeds of the two runs
_SEEDS = (1_234_577, 7_654_321)


class NondeterministicError(ValueError):
    """A function meant for a snapshot gives different outputs under different seeds: storing
    its outputs would freeze its randomness."""


def func_name(fn: Any) -> str:
    """``module.qualname`` of a function (or of a callable object's class)."""
    target = fn if hasattr(fn, "__qualname__") else type(fn)
    inner = getattr(fn, "func", None)  # functools.partial
    if inner is not None and not hasattr(fn, "__qualname__"):
        target = inner
    module = getattr(target, "__module__", None) or "?"
    return f"{module}.{getattr(target, '__qualname__', type(fn).__name__)}"


def _feed(h: Any, value: Any) -> None:
    if value is None or (isinstance(value, bool | int | float | str) and not isinstance(
            value, np.generic)):
        h.update(f"{type(value).__name__}:{value!r};".encode())
    elif isinstance(value, np.ndarray | np.generic):
        arr = np.ascontiguousarray(value)
        h.update(f"a:{arr.dtype.str}:{arr.shape};".encode())
        if arr.dtype == object:
            h.update(pickle.dumps(arr.tolist()))
        else:  # (the array's own bytes, without a copy)
            h.update(arr.reshape(-1).view(np.uint8))
    elif isinstance(value, bytes | bytearray | memoryview):
        data = memoryview(value).cast("B")
        h.update(f"b:{data.nbytes};".encode())
        h.update(data)
    elif isinstance(value, list | tuple):
        h.update(f"l:{len(value)}[".encode())
        for v in value:
            _feed(h, v)
        h.update(b"]")
    elif isinstance(value, dict):
        h.update(f"d:{len(value)}{{".encode())
        for k in sorted(value, key=repr):
            _feed(h, k)
            _feed(h, value[k])
        h.update(b"}")
    else:
        h.update(f"o:{type(value).__qualname__};".encode())
        h.update(pickle.dumps(value, protocol=4))


def fingerprint(value: Any) -> bytes:
    """The bytes that say whether two outputs are equal: dtypes, shapes and array bytes, the
    values of scalars (a list and a tuple of the same items count as equal, as a stored list
    comes back as a list)."""
    h = xxhash.xxh3_128()  # (not kept anywhere: a fast hash, ~20x sha256 here)
    _feed(h, value)
    return h.digest()


def _first_difference(a: Any, b: Any, where: str = "output") -> str:
    """Where two outputs differ first, for the error message."""
    if isinstance(a, list | tuple) and isinstance(b, list | tuple) and len(a) == len(b):
        for k, (x, y) in enumerate(zip(a, b)):
            if fingerprint(x) != fingerprint(y):
                return _first_difference(x, y, f"{where}[{k}]")
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        for k in a:
            if fingerprint(a[k]) != fingerprint(b[k]):
                return _first_difference(a[k], b[k], f"{where}[{k!r}]")
    return where


def run_seeded(func: Callable[[Any], Any], inputs: Sequence[Any], seed: int) -> list[Any]:
    """``func`` on copies of ``inputs`` with every generator the library seeds set from
    ``seed``; the generators' states are restored after."""
    np_state, py_state, global_seed = np.random.get_state(), random.getstate(), _rng.get_seed()
    prev = _rng.current_input_scope()
    _global_rng.install()
    scope = _rng.InputScope(seed, (_rng.INPUTS, 0))
    _rng.set_input_scope(scope)
    try:
        _rng.set_seed(seed)
        outs = []
        for k, dp in enumerate(inputs):
            np.random.seed((seed + k) % 2**32)
            random.seed(seed + k)
            scope.begin(0, k)
            outs.append(func(copy.deepcopy(dp)))
        return outs
    finally:
        _rng.set_input_scope(prev)
        _global_rng.uninstall()
        np.random.set_state(np_state)
        random.setstate(py_state)
        _rng.set_seed(global_seed)


def check_deterministic(func: Callable[[Any], Any], inputs: Sequence[Any], *,
                        where: str = "") -> list[Any]:
    """Raise :class:`NondeterministicError` if ``func``'s outputs on ``inputs`` differ under
    two seeds; return the outputs of the first run. ``where`` ends the message: where a
    snapshot can go instead."""
    first = run_seeded(func, inputs, _SEEDS[0])
    second = run_seeded(func, inputs, _SEEDS[1])
    for k, (a, b) in enumerate(zip(first, second)):
        if fingerprint(a) != fingerprint(b):
            raise NondeterministicError(
                f"`map_func` {func_name(func)} is random: mapping the same input (number {k} "
                f"of the test) under two seeds of the random generators gave different "
                f"{_first_difference(a, b)}, so a snapshot would freeze one draw of it. "
                + (where or "Snapshot only its deterministic part: give SnapshotData a function "
                   "without random draws (decoding, a fixed resize) and apply the random part "
                   "after it (MapData(snap, augment), the augmentors, a DataService), or let "
                   "dataflow.snapshot(ds, path) cut a chain before its first random stage."))
    return first
