"""Base classes of the runners and mappers: validation, lifecycle and the iteration contract.

Lifecycle (template methods, STYLE 4 and 12): ``reset_state()`` starts the workers through
``_start()``; it is idempotent (a second call while the workers run does nothing). Iterating
before ``reset_state()`` starts them lazily. ``close()`` stops them through ``_stop()``, is
idempotent, cascades to the wrapped flow, and runs at garbage collection and interpreter exit;
after ``close()``, ``reset_state()`` starts fresh workers. A worker error stops the workers
(the next ``__iter__`` starts fresh ones).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

from dataflow.base import DataFlow, DataFlowReentrantGuard, ProxyDataFlow
from dataflow.errors import WorkerError
from dataflow.parallel import _lifecycle
from dataflow.parallel._worker import MapScheduler, repeat_enumerate, runner_stream

__all__ = ["MapperBase", "RunnerBase", "check_positive_int", "known_length"]


def check_positive_int(value: Any, name: str, example: int = 4) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"`{name}` must be a positive int, got {value!r} (type {type(value).__name__}); "
            f"pass e.g. {name}={example}."
        )
    return value


def known_length(ds: DataFlow) -> int | None:
    """``len(ds)`` if the flow knows it, else ``None``."""
    try:
        return len(ds)
    except (NotImplementedError, TypeError):
        return None


class _Lifecycle:
    """Idempotent start/stop bookkeeping shared by runners and mappers."""

    _started = False
    _closed = False
    _iter_thread: int | None = None  # the thread inside __iter__, if any
    _resources: _lifecycle.Resources | None = None

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
        _lifecycle.register(self)

    def _start(self) -> None:
        raise NotImplementedError

    def _stop(self) -> None:
        raise NotImplementedError

    def _ensure_started(self) -> None:
        if not self._started:
            self.reset_state()

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


class RunnerBase(_Lifecycle, ProxyDataFlow):
    """``N`` independent copies of ``ds`` running in workers; see SPEC 2.6.

    Each ``__iter__`` yields ``len(ds)`` datapoints when that length is known and positive,
    else runs until every worker's copy yields an empty epoch (for an endless flow: forever).
    """

    _num_workers: int

    def __init__(self, ds: DataFlow) -> None:
        ProxyDataFlow.__init__(self, ds)
        self._init_lifecycle()
        self._finished: set[int] = set()

    def reset_state(self) -> None:
        """Start the workers (each resets its own copy of ``ds``). Idempotent."""
        if self._started:
            return
        self._finished = set()
        self._closed = False
        self._start_or_clean()
        self._started = True

    def _receive(self, timeout: float) -> tuple | None:
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self.ds)

    def __iter__(self) -> Iterator[Any]:
        self._ensure_started()
        with self._iterating():
            n = known_length(self.ds)
            try:
                yield from runner_stream(
                    self._receive, self._num_workers, n if n else None, self._finished
                )
            except WorkerError:
                self._shutdown()
                raise


class MapperBase(_Lifecycle, ProxyDataFlow):
    """Shared part of the parallel mappers (SPEC 2.7); ``_make_transport`` picks the back end.

    ``ds`` is iterated in the consumer; ``map_func`` runs in the workers. ``len()`` is
    ``len(ds)``; it is exact per ``__iter__`` only with ``strict=True`` and no ``None`` results.
    """

    _worker_arg = "num_workers"

    def __init__(
        self,
        ds: DataFlow,
        num_workers: Any,
        map_func: Callable[[Any], Any] | None,
        buffer_size: int,
        strict: bool,
        ordered: bool,
    ) -> None:
        ProxyDataFlow.__init__(self, ds)
        self.num_workers = check_positive_int(num_workers, self._worker_arg)
        if not callable(map_func):
            raise TypeError(
                f"`map_func` must be a callable taking a datapoint, got {map_func!r}; pass e.g. "
                "map_func=lambda dp: [dp[0] * 2]."
            )
        self.map_func = map_func
        self.buffer_size = check_positive_int(buffer_size, "buffer_size", 200)
        self.strict = bool(strict)
        self.ordered = bool(ordered)
        self._sched: MapScheduler | None = None
        self._init_lifecycle()

    def _make_scheduler(self) -> MapScheduler:
        raise NotImplementedError

    def _chunk_size(self) -> int:
        """Inputs per request: up to 16 (fewer queue operations and messages), but small enough
        to keep every worker busy: at most a quarter of a worker's share of the buffer and,
        in strict mode, of one epoch (tiny epochs of heavy maps stay parallel)."""
        share = self.buffer_size // (4 * self.num_workers)
        n = known_length(self.ds) if self.strict else None
        if n:
            share = min(share, n // (4 * self.num_workers))
        return max(1, min(16, share))

    def reset_state(self) -> None:
        """Reset ``ds`` (in this process) and start the workers. Idempotent."""
        if self._started:
            return
        self._closed = False
        self.ds.reset_state()
        self._start_or_clean()
        self._sched = self._make_scheduler()
        if not self.strict:
            self._sched.set_source(repeat_enumerate(self.ds))
        self._started = True

    def __len__(self) -> int:
        return len(self.ds)

    def queue_stats(self) -> dict[str, int] | None:
        """Results finished but not yet yielded (``size``) out of ``buffer_size``
        (``capacity``), for :func:`dataflow.profile`; ``None`` before the workers start.
        Mostly empty: the workers are the bottleneck; mostly full: the consumer is."""
        return self._sched.queue_stats() if self._sched is not None else None

    def __iter__(self) -> Iterator[Any]:
        self._ensure_started()
        with self._iterating():
            sched = self._sched
            assert sched is not None
            if self.strict:
                sched.start_epoch(enumerate(self.ds))
            try:
                yield from sched.run()
            except WorkerError:
                self._shutdown()
                raise
            except Exception:
                if not self.strict:  # the failed pass of ds is over: the next __iter__
                    sched.set_source(repeat_enumerate(self.ds))  # starts a new one
                raise
