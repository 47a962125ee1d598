"""The lifecycle of every runner and mapper: start on ``reset_state()``, stop on ``close()``,
garbage collection or interpreter exit, whichever comes first, and never twice.

Template methods: ``reset_state()`` starts the workers through ``_start()``; it is idempotent (a
second call while the workers run does nothing). Iterating before ``reset_state()`` starts them
lazily. ``close()`` stops them through ``_stop()``, is idempotent, cascades to the wrapped flow,
and runs at garbage collection and interpreter exit; after ``close()``, ``reset_state()`` starts
fresh workers. A worker error stops the workers (the next ``__iter__`` starts fresh ones).

No exit hang: one ``atexit`` hook closes every live runner. The hook is registered *after*
importing ``multiprocessing.util``, and ``atexit`` runs hooks last-in first-out, so ours runs
before multiprocessing's own hook that joins non-daemonic children.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing.util  # noqa: F401 (imported before our atexit hook is registered)
import os
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from dataflow import rng as _rng
from dataflow.base import DataFlowReentrantGuard
from dataflow.errors import DataFlowTerminated

__all__ = ["Lifecycle", "Resources", "register"]

logger = logging.getLogger("dataflow.parallel")


class Lifecycle:
    """Idempotent start/stop bookkeeping shared by runners and mappers."""

    _started = False
    _closed = False
    _iter_thread: int | None = None  # the thread inside __iter__, if any
    _resources: Resources | None = None

    def _release_resources(self) -> None:
        """Run (or, if another thread is iterating, hand over) the transport's clean-up."""
        res, self._resources = self._resources, None
        if res is None:
            return
        if self._iter_thread not in (None, threading.get_ident()):
            res.request_close()
        else:
            res.close()

    @contextlib.contextmanager
    def _iterating(self) -> Iterator[None]:
        with self._guard:
            self._iter_thread = threading.get_ident()
            res = self._resources
            try:
                yield
            finally:
                self._iter_thread = None
                if res is not None and res.requested:
                    res.close()

    def _init_lifecycle(self) -> None:
        self._owner_pid = os.getpid()
        self._guard = DataFlowReentrantGuard(type(self).__name__)
        register(self)

    def _replace_child(self, old: Any, new: Any) -> None:
        """Refused while the workers run (they read, or were given, ``old``); else the base's."""
        if self._started:
            raise RuntimeError(
                f"{type(self).__name__}.replace_child: its workers are running with the child "
                f"it has; replace it before reset_state(), or close() the stage first.")
        super()._replace_child(old, new)  # type: ignore[misc]

    def _start(self) -> None:
        raise NotImplementedError

    def _stop(self) -> None:
        raise NotImplementedError

    def _ensure_started(self) -> None:
        """Start the workers if they are not running (an iteration before ``reset_state()``,
        or after a worker error stopped them); the stage paths stay as they are."""
        if not self._started:
            with _rng.keep_paths():
                self._restart()

    def _restart(self) -> None:
        self.reset_state()  # type: ignore[attr-defined]

    def _start_or_clean(self) -> None:
        try:
            self._start()
        except BaseException:
            self._stop()
            raise

    def _shutdown(self) -> None:
        self._started = False
        if os.getpid() == self._owner_pid:
            self._stop()  # every _stop() is idempotent and copes with a partial _start()

    def close(self) -> None:
        """Stop the workers and close the wrapped flow. Idempotent."""
        if os.getpid() != getattr(self, "_owner_pid", None):
            return  # a copy inherited by a forked process: the workers are not ours
        self._shutdown()
        if not self._closed:
            self._closed = True
            self.ds.close()  # type: ignore[attr-defined]

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


# ---- registry of live runners, closed at interpreter exit -------------------------------------

_live: weakref.WeakSet[Any] = weakref.WeakSet()
_live_lock = threading.Lock()


def register(runner: Any) -> None:
    """Remember ``runner`` so that it is closed at interpreter exit (if still alive then)."""
    with _live_lock:
        _live.add(runner)


def _close_all() -> None:
    with _live_lock:
        runners = list(_live)
    for r in runners:
        try:
            r.close()
        except Exception:  # pragma: no cover - best effort at exit
            logger.debug("closing %r at exit failed", r, exc_info=True)


atexit.register(_close_all)


class Resources:
    """Clean-up callables run once, in reverse order, by the thread that may run them.

    ZeroMQ sockets and shared mappings must not be closed under a thread that is using them.
    When ``close()`` of a runner comes from another thread than the one iterating it (an
    ``atexit`` hook, a watchdog), it calls :meth:`request_close`: the iterating thread runs
    the clean-up at its next :meth:`check` (within one poll interval) and raises
    ``DataFlowTerminated``, or when its iteration ends.
    """

    def __init__(self) -> None:
        self._fns: list[Any] = []
        self._lock = threading.Lock()
        self._done = False
        self.requested = False

    def add(self, fn: Any) -> None:
        self._fns.append(fn)

    def close(self) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
            fns, self._fns = self._fns[::-1], []
        for fn in fns:
            try:
                fn()
            except Exception:  # pragma: no cover - best effort
                logger.debug("clean-up %r failed", fn, exc_info=True)

    def request_close(self) -> None:
        self.requested = True

    def check(self, name: str) -> None:
        """In the iterating thread: honour a pending close request (or a completed close)."""
        if self.requested or self._done:
            self.close()
            raise DataFlowTerminated(f"{name} was closed while being iterated")
