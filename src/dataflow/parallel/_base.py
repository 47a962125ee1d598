"""Base class of the runners (``MapperBase`` is in :mod:`dataflow.parallel._mapper`), the shared
lifecycle, validation and the iteration contract.

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
from collections.abc import Iterator
from typing import Any

from dataflow.base import DataFlow, DataFlowReentrantGuard, ProxyDataFlow
from dataflow.errors import WorkerError
from dataflow.parallel import _lifecycle
from dataflow.parallel._runner import runner_stream
from dataflow.state import EpochCounter, StateMismatchError, check_state

__all__ = ["RunnerBase", "check_positive_int", "known_length"]


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


class RunnerBase(EpochCounter, _Lifecycle, ProxyDataFlow):
    """``N`` independent copies of ``ds`` running in workers; see SPEC 2.6.

    Each ``__iter__`` yields ``len(ds)`` datapoints when that length is known and positive,
    else runs until every worker's copy yields an empty epoch (for an endless flow: forever).
    """

    _num_workers: int
    _count: list[int] | None = None  # [_pos] while an epoch is live

    def __init__(self, ds: DataFlow) -> None:
        ProxyDataFlow.__init__(self, ds)
        self._init_lifecycle()
        self._finished: set[int] = set()
        self._starts: list[tuple[Any, int]] | None = None  # restored: for the next _start()
        self._worker_starts: list[tuple[Any, int]] | None = None  # what _start() passes
        self._delivered: list[int] = []  # datapoints yielded of each worker since it started
        # each worker's last checkpoint: (datapoints it had sent, state of its copy, to skip)
        self._ckpts: list[tuple[int, Any, int]] = []

    def reset_state(self) -> None:
        """Start the workers (each resets its own copy of ``ds``). Idempotent."""
        if self._started:
            return
        self._finished = set()
        self._closed = False
        self._worker_starts, self._starts = self._starts, None
        self._start_or_clean()
        n = self._num_workers
        self._delivered = [0] * n
        starts = self._worker_starts or [(self._initial_state(i), 0) for i in range(n)]
        self._ckpts = [(0, state, skip) for state, skip in starts]
        self._started = True

    def _worker_start(self, i: int) -> tuple[Any, int] | None:
        """``(state, skip)`` for worker ``i``'s ``runner_loop`` after a restore, else None."""
        return None if self._worker_starts is None else self._worker_starts[i]

    def _initial_state(self, i: int) -> Any:
        """The state of worker ``i``'s copy when it started, if the consumer knows it (``None``:
        a copy made from the untouched ``ds``, which a restore can make again)."""
        return None

    def _on_state(self, wid: int, payload: tuple[int, Any]) -> None:
        count, state = payload
        self._ckpts[wid] = (count, state, 0)

    def _receive(self, timeout: float) -> tuple | None:
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self.ds)

    def __iter__(self) -> Iterator[Any]:
        self._ensure_started()
        if self._iter_thread is not None:  # an iteration is alive: the guard raises
            return self._run(None, 0, [0])
        token, start = self._begin()
        n = known_length(self.ds)
        self._count = count = [start]  # _pos of this epoch, counted by runner_stream
        return self._run(token, n if n else None, count)

    def _run(self, token: object | None, size: int | None, count: list[int]) -> Iterator[Any]:
        with self._iterating():
            try:
                yield from runner_stream(
                    self._receive, self._num_workers, size, self._finished, count,
                    self._delivered, self._on_state,
                )
            except WorkerError:
                self._shutdown()
                raise
            finally:
                if token is not None and self._token is token:
                    self._pos = count[0]
                    self._count = None
                    self._end(token)

    def _counters(self) -> dict[str, Any]:
        if self._count is not None:
            self._pos = self._count[0]
        return super()._counters()

    def state_dict(self) -> dict[str, Any]:
        """Counters (``epoch``, ``pos``: datapoints yielded in it, ``done``) and, for each
        worker, where its copy of ``ds`` stands: ``{"child": state, "skip": n}``, the state of
        the copy at its last checkpoint and how many of its datapoints since were delivered.

        Each worker sends its copy's state at its start and then every 16 datapoints or so
        (paced to cost under 0.5 % of its time). On resume (same number of workers), each worker
        restores its copy to that state and skips the ``n`` datapoints already delivered: every
        worker's stream continues right after its last delivered datapoint, with no loss and no
        repetition. Not exact: the interleaving of the workers' streams differs (it is not
        deterministic anyway), and the restored epoch yields the ``len(ds) - pos`` datapoints it
        had left, from whichever workers send them first. A copy without ``state_dict()``
        restarts from scratch and skips what was delivered (exact if it is deterministic).
        """
        workers = [
            {"child": state, "skip": skip + self._delivered[w] - count}
            for w, (count, state, skip) in enumerate(self._ckpts)
        ] if self._ckpts else [{"child": None, "skip": 0}] * self._num_workers
        return {"type": type(self).__name__, "size": known_length(self.ds),
                "num_workers": self._num_workers, **self._counters(), "workers": workers}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`: running workers are stopped, and the next
        ``__iter__`` starts them from the saved positions of their copies."""
        check_state(state, self, size=known_length(self.ds), num_workers=self._num_workers)
        workers = state.get("workers")
        if not isinstance(workers, list) or len(workers) != self._num_workers or not all(
            isinstance(w, dict) and isinstance(w.get("skip"), int) and w["skip"] >= 0
            and (w.get("child") is None or isinstance(w["child"], dict))
            for w in workers
        ):
            raise StateMismatchError(
                f"state for stage {type(self).__name__}: expected workers=[{{'child': state or "
                f"None, 'skip': int >= 0}}] * {self._num_workers}, found {workers!r:.80}; the "
                "state is corrupt or from another version."
            )
        self._restore_counters(state)
        if self._started:
            self._shutdown()  # restart the workers from the saved positions
        self._starts = [(w.get("child"), w["skip"]) for w in workers]
