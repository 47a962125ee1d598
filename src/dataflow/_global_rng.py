"""Per-input streams for the global generators (``np.random.*``, ``random.*``) in map workers.

A map function that calls ``np.random.uniform()`` or ``random.random()`` draws from one
generator shared by the whole process: in a thread mapper its draws would depend on which thread
runs first, in a process mapper on which inputs a worker happened to get. While map workers run,
the module-level functions of :mod:`numpy.random` (the legacy ``RandomState`` API) and of
:mod:`random` dispatch, inside the mapping of an input, to a generator keyed by that input (see
:class:`dataflow.rng.InputScope`); everywhere else they call the usual global generator, so code
outside the map functions sees no difference. ``seed``, ``get_state`` and ``set_state`` always
act on the global generator.

Only calls through the module attributes are dispatched: a function bound earlier by
``from numpy.random import rand`` keeps drawing from the global generator. The dispatching is
installed in process workers for their lifetime, and in this process while a thread mapper runs.
"""

from __future__ import annotations

import functools
import random
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from dataflow import rng as _rng

__all__ = ["install", "uninstall"]

_KEEP = frozenset({"seed", "get_state", "set_state", "getstate", "setstate", "default_rng"})
_NP_OWNER = (_rng.GLOBALS, 0)
_PY_OWNER = (_rng.GLOBALS, 1)

_lock = threading.Lock()
_count = 0
_saved: list[tuple[Any, str, Any]] = []


def _bound_to(module: Any, instance: Any) -> list[str]:
    return [
        name for name in dir(module)
        if not name.startswith("_") and name not in _KEEP
        and getattr(getattr(module, name), "__self__", None) is instance
    ]


def _dispatch(name: str, orig: Callable[..., Any],
              generator: Callable[[_rng.InputScope], Any]) -> Callable[..., Any]:
    """``orig`` (a module-level function), or inside an input scope the method ``name`` of
    that input's ``generator(scope)``."""
    current = _rng.current_input_scope

    @functools.wraps(orig)
    def dispatch(*args: Any, **kwargs: Any) -> Any:
        scope = current()
        if scope is None:
            return orig(*args, **kwargs)
        return getattr(generator(scope), name)(*args, **kwargs)

    return dispatch


def _np_random(scope: _rng.InputScope) -> Any:
    """A ``RandomState`` for the input of ``scope``."""
    return scope.rng(_NP_OWNER)


def _py_random(scope: _rng.InputScope) -> random.Random:
    """A ``random.Random`` for the input of ``scope``, seeded from that input's stream."""
    gen = getattr(_tls, "py", None)
    if gen is None:
        gen = _tls.py = [random.Random(), None]
    if gen[1] is not scope.token:
        gen[0].seed(int(scope.rng(_PY_OWNER).randint(0, 2**62)))
        gen[1] = scope.token
    return gen[0]


_tls = threading.local()


def install() -> None:
    """Dispatch the module-level functions (counted: each call needs one :func:`uninstall`)."""
    global _count
    with _lock:
        _count += 1
        if _count > 1:
            return
        np_rand = np.random.mtrand._rand
        for name in _bound_to(np.random, np_rand):
            orig = getattr(np.random, name)
            _saved.append((np.random, name, orig))
            setattr(np.random, name, _dispatch(name, orig, _np_random))
        for name in _bound_to(random, random._inst):
            orig = getattr(random, name)
            _saved.append((random, name, orig))
            setattr(random, name, _dispatch(name, orig, _py_random))


def uninstall() -> None:
    """Undo one :func:`install`; the last one restores the original functions."""
    global _count
    with _lock:
        if _count == 0:
            return
        _count -= 1
        if _count:
            return
        while _saved:
            module, name, orig = _saved.pop()
            setattr(module, name, orig)
