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
from dataflow.parallel._resume import (
    Checkpoints,
    check_progress,
    child_state,
    repeat_passes,
    skip_delivered,
)
from dataflow.parallel._runner import runner_stream
from dataflow.parallel._worker import MapScheduler, repeat_enumerate
from dataflow.state import EpochCounter, StateMismatchError, check_state, finished

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


class MapperBase(EpochCounter, _Lifecycle, ProxyDataFlow):
    """Shared part of the parallel mappers (SPEC 2.7); ``_make_transport`` picks the back end.

    ``ds`` is iterated in the consumer; ``map_func`` runs in the workers. ``len()`` is
    ``len(ds)``; it is exact per ``__iter__`` only with ``strict=True`` and no ``None`` results.
    """

    _worker_arg = "num_workers"
    _counts_results = True  # each result of the scheduler is one datapoint of this flow
    _live: int | None = None  # _pos - scheduler.yielded() during an epoch

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
        self._checkpoints = Checkpoints(self.ds, self.buffer_size, self.strict)
        # after load_state_dict: (child_pos, read, pending) and the child's state to resume from
        self._resume_progress: tuple[int, int, list[int]] | None = None
        self._resume_child: dict[str, Any] | None = None
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
        self._sched = sched = self._make_scheduler()
        sched.checkpoint = self._checkpoints.take
        if not self.strict:
            self._start_stream()
        self._started = True

    def _start_stream(self) -> None:
        """Non-strict: start the endless stream, or continue the restored one."""
        sched = self._sched
        assert sched is not None
        if self._resume_progress is None:
            self._checkpoints.start(0, sched)
            sched.set_source(repeat_enumerate(self.ds))
        else:
            cpos, read, pending = self._resume_progress
            source = skip_delivered(repeat_passes(self.ds, True), cpos, read, pending,
                                    type(self).__name__)
            sched.start_epoch(source, read, pending, origin=cpos)
            self._checkpoints.reset(cpos, self._resume_child)
            self._resume_progress = None
        sched.checkpoint_after(self.buffer_size)

    def __len__(self) -> int:
        return len(self.ds)

    def queue_stats(self) -> dict[str, int] | None:
        """Results finished but not yet yielded (``size``) out of ``buffer_size``
        (``capacity``), for :func:`dataflow.profile`; ``None`` before the workers start.
        Mostly empty: the workers are the bottleneck; mostly full: the consumer is."""
        return self._sched.queue_stats() if self._sched is not None else None

    def __iter__(self) -> Iterator[Any]:
        self._ensure_started()
        if self._iter_thread is not None:  # an iteration is alive: the guard raises
            return self._run(None)
        restored = self._resume is not None
        token, _ = self._begin()
        sched = self._sched
        assert sched is not None
        if self.strict:  # the pass of ds begins now, with this iterator
            if restored and self._resume_progress is not None:
                cpos, read, pending = self._resume_progress
                source = skip_delivered(enumerate(self.ds, cpos), cpos, read, pending,
                                        type(self).__name__)
                sched.start_epoch(source, read, pending, origin=cpos)
                self._checkpoints.reset(cpos, self._resume_child)
            else:
                sched.start_epoch(enumerate(self.ds))
                self._checkpoints.start(0, sched)
            sched.checkpoint_after(self.buffer_size)
            self._resume_progress = None
        # _pos counts what the scheduler yields from now on (a subclass may count itself)
        self._live = self._pos - sched.yielded() if self._counts_results else None
        return self._run(token)

    def _stream(self, sched: MapScheduler) -> Iterator[Any]:
        """The datapoints this flow yields (the batching mapper flattens batches)."""
        return sched.run()

    def _run(self, token: object | None) -> Iterator[Any]:
        with self._iterating():
            sched = self._sched
            assert sched is not None
            try:
                yield from self._stream(sched)
            except WorkerError:
                self._shutdown()
                raise
            except Exception:
                if not self.strict:  # the failed pass of ds is over: the next __iter__
                    sched.set_source(repeat_enumerate(self.ds))  # starts a new one
                    state = child_state(self.ds)
                    self._checkpoints.reset(sched.read_position(),
                                            None if state is None else finished(state))
                raise
            finally:
                if token is not None and self._token is token:
                    self._sync_pos()
                    self._live = None
                    self._end(token)

    def _sync_pos(self) -> None:
        """``_pos`` of a live epoch is read off the scheduler (no per-datapoint counting)."""
        if self._live is not None and self._sched is not None:
            self._pos = self._live + self._sched.yielded()

    def _counters(self) -> dict[str, Any]:
        self._sync_pos()
        return super()._counters()

    # ---- resumable iteration ------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The iteration state (JSON-serializable): counters (``epoch``, ``pos``: datapoints
        yielded in it, ``done``), and where the input stream stands: ``read``, ``pending``,
        ``child_pos`` and ``child`` (see :mod:`dataflow.parallel._resume`).

        Exact for ``strict=True``: on resume the consumer restores the child to a checkpoint
        taken before the oldest undelivered input (checkpoints are taken every ``buffer_size``
        inputs, paced to cost under 0.5 % of the time), reads the pass again from there
        (without mapping the delivered inputs again) and dispatches only the undelivered ones.
        Ordered: the rest of the epoch, and the epochs after it, equal an uninterrupted run's.
        Unordered: the rest of the epoch holds every result not yet delivered exactly once
        (those that had arrived but were not yet yielded are mapped again), in a new order.

        ``strict=False`` (an endless stream): the same over the stream; ordered, the stream
        continues exactly; unordered, every input not yet delivered comes exactly once (as the
        epochs of the stream mix, "the rest of the epoch" has no meaning there). Not exact: after
        a pass of ``ds`` that raised, inputs of that pass still in flight may be given up; a
        worker error (which stops the workers) loses what was in flight.
        """
        state: dict[str, Any] = {
            "type": type(self).__name__, "strict": self.strict, "ordered": self.ordered,
            **self._counters(),
        }
        if self.strict:
            state["size"] = known_length(self.ds)
        sched = self._sched
        if self._resume_progress is not None:  # restored, not iterated since
            cpos, read, pending = self._resume_progress
            child = self._resume_child
        elif sched is None or (self.strict and self._done):
            cpos, read, pending, child = 0, 0, [], child_state(self.ds)
            if self.strict and child is not None:
                child = finished(child)  # the next __iter__ starts a new pass
        else:
            cpos, child, read, pending = self._checkpoints.select(*sched.progress())
        if child is None:
            raise NotImplementedError(
                f"{type(self).__name__} cannot save its iteration state: its child "
                f"{type(self.ds).__name__} has no state_dict(); implement state_dict() and "
                "load_state_dict() for it."
            )
        state.update(child_pos=cpos, read=read, pending=pending, child=child)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`; the next ``__iter__`` continues from it.

        Raises :class:`~dataflow.state.StateMismatchError` when the state comes from another
        stage, another ``strict``/``ordered`` setting or a dataset of another size.
        """
        expected: dict[str, Any] = {"strict": self.strict, "ordered": self.ordered}
        if self.strict:
            expected["size"] = known_length(self.ds)
        check_state(state, self, **expected)
        progress = check_progress(state, type(self).__name__)
        self._restore_counters(state)
        self.ds.load_state_dict(state["child"])
        self._resume_child = state["child"]
        if self.strict:
            self._resume_progress = None if state["done"] else progress
        else:
            self._resume_progress = progress
            if self._started:  # drop what is in flight; continue from the state (else
                self._start_stream()  # reset_state() will)
