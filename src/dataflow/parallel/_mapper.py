"""``MapperBase``: the consumer side shared by the parallel mappers (SPEC 2.7) -- iteration,
counters, and resumable state (see :mod:`dataflow.parallel._resume`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from dataflow.base import DataFlow, ProxyDataFlow
from dataflow.errors import WorkerError
from dataflow.parallel._base import _Lifecycle, check_positive_int, known_length
from dataflow.parallel._resume import (
    Checkpoints,
    check_progress,
    child_state,
    epoch_over,
    repeat_passes,
    skip_delivered,
)
from dataflow.parallel._worker import MapScheduler, repeat_enumerate
from dataflow.state import EpochCounter, check_state

__all__ = ["MapperBase"]


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
                                            None if state is None else epoch_over(state))
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
                child = epoch_over(child)  # the next __iter__ starts a new pass
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
