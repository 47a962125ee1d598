"""``MapperBase``: the base of every parallel mapper -- iteration, counters, seeds and
resumable state. A back end gives it a transport (``_start`` / ``_stop``); the scheduling is
:class:`~dataflow.parallel._scheduler.MapScheduler`'s, and the states of the child it resumes
from are kept by :class:`~dataflow.parallel._checkpoints.Checkpoints`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from dataflow import rng as _rng
from dataflow.base import DataFlow, ProxyDataFlow
from dataflow.errors import WorkerError
from dataflow.parallel._checkpoints import Checkpoints
from dataflow.parallel._lifecycle import Lifecycle
from dataflow.parallel._scheduler import (
    MapScheduler,
    check_progress,
    repeat_enumerate,
    repeat_passes,
    skip_delivered,
)
from dataflow.parallel.autotuning.controller import Controller
from dataflow.parallel.autotuning.stage import (
    THREADS_START_PER_CORE,
    CpuShare,
    StageTuner,
    check_count,
    default_share,
    is_auto,
    resolve_buffer,
)
from dataflow.policy import make_policy
from dataflow.state import (
    SEED,
    EpochCounter,
    StateMismatchError,
    check_state,
    child_state,
    finished,
)
from dataflow.validation import check_callable, check_positive_int, known_length

__all__ = [
    "Checkpoints",
    "MapperBase",
    "WorkerCount",
]


class WorkerCount:
    """A back end's public spelling of the worker count (tensorpack's ``num_proc``,
    ``num_thread``): it reads and sets :attr:`MapperBase.num_workers`, the one name of the count
    inside the engine."""

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        return self if obj is None else obj.num_workers

    def __set__(self, obj: Any, value: int) -> None:
        obj.num_workers = value


class MapperBase(EpochCounter, Lifecycle, ProxyDataFlow):
    """Shared part of the parallel mappers; ``_start`` / ``_make_scheduler`` pick the back end.

    ``ds`` is iterated in the consumer; ``map_func`` runs in the workers. ``len()`` is
    ``len(ds)``; it is exact per ``__iter__`` only with ``strict=True`` and no ``None`` results.
    The random draws made while mapping an input are keyed by the input's (epoch, position)
    and the mapper's seed (``seed=``, else the global seed) and path (see :mod:`dataflow.rng`).
    """

    profile_hint = "process-map"

    _worker_arg = "num_workers"
    #: a worker's share of a core, for the CPU budget (a thread that waits costs little)
    _core_per_worker = 1.0
    _counts_results = True  # each result of the scheduler is one datapoint of this flow
    _live: int | None = None  # _pos - scheduler.yielded() during an epoch
    seed: int | None = None  # base seed of the inputs' random streams

    def __init__(
        self,
        ds: DataFlow,
        num_workers: Any,
        map_func: Callable[[Any], Any] | None,
        buffer_size: Any,
        strict: bool,
        ordered: bool,
        on_error: str = "raise",
        max_errors: int | float | None = None,
    ) -> None:
        ProxyDataFlow.__init__(self, ds)
        _check_order(type(self).__name__, self._worker_arg, num_workers, map_func)
        #: the CPU budget this stage shares with the other autotuned stages (see ``autotune``)
        self.cpu_share: CpuShare | None = None
        check_count(num_workers, self._worker_arg)
        self.autotuned = is_auto(num_workers)
        if self.autotuned:
            num_workers = self._auto_start(self._auto_maximum())
        self.num_workers = check_positive_int(num_workers, self._worker_arg)
        self.map_func = check_callable(map_func, "map_func", "lambda dp: [dp[0] * 2]")
        self._buffer_auto = is_auto(buffer_size)  # (sized again if the work moves)
        buffer_size = resolve_buffer(buffer_size, self._planned_workers())
        self.buffer_size = check_positive_int(buffer_size, "buffer_size", 200)
        self.strict = bool(strict)
        self.ordered = bool(ordered)
        self.on_error, self.max_errors = on_error, max_errors
        self.error_policy = make_policy(type(self).__name__, on_error, max_errors)
        self._errors_restored = False  # a restored epoch goes on counting its errors
        self._sched: MapScheduler | None = None
        self._checkpoints = Checkpoints(self.ds, self.buffer_size, self.strict)
        self._inputs: tuple[int, tuple[int, ...]] = (0, ())  # the inputs' seed, set on reset
        # the inputs' seed of a restored state: kept over resets (else drawn anew without a seed)
        self._restored_inputs: tuple[int, tuple[int, ...]] | None = None
        # after load_state_dict: (child_pos, read, pending) and the child's state to resume from
        self._resume_progress: tuple[int, int, list[int]] | None = None
        self._resume_child: dict[str, Any] | None = None
        self._tuner: StageTuner | None = None
        self._tuned: dict[str, Any] | None = None  # the controller's last state (a restore's)
        self._init_lifecycle()

    def _replace_child(self, old: DataFlow, new: DataFlow) -> None:
        super()._replace_child(old, new)
        self._checkpoints.ds = new  # (the checkpoints save the state of the child it reads)

    # ---- autotuning ---------------------------------------------------------------------------

    def _shutdown(self) -> None:
        tuner, self._tuner = self._tuner, None
        if tuner is not None:
            tuner.close()
            self._tuned = tuner.state()
        super()._shutdown()

    def _share(self) -> CpuShare:
        if self.cpu_share is None:
            self.cpu_share = default_share()
        return self.cpu_share

    def _auto_maximum(self) -> int:
        """The most workers an autotuned stage may try, from the CPU budget."""
        return self._share().maximum(self, self._core_per_worker)

    def _auto_start(self, maximum: int) -> int:
        """The first worker count of an autotuned stage (the controller climbs from there)."""
        if self._core_per_worker >= 1:
            return max(1, maximum // 2)
        cores = maximum * self._core_per_worker  # the budget's cores, in threads' terms
        return max(1, min(maximum, round(cores * THREADS_START_PER_CORE)))

    def _planned_workers(self) -> int:
        """Workers the buffer is sized for: the most an autotuned stage may run."""
        return self._auto_maximum() if self.autotuned else self.num_workers

    def resize(self, num_workers: int) -> None:
        """Run ``num_workers`` workers from now on, while iterating or not (call it from the
        consumer's thread). Nothing in flight is lost or mapped twice, results keep their
        order, and random draws stay keyed by each input's (epoch, position): the output of a
        seeded strict ordered mapper is the same whatever the resizes."""
        n = check_positive_int(num_workers, "num_workers")
        if self._started and self._transport is not None:
            if not self._can_resize():
                raise NotImplementedError(
                    f"{type(self).__name__} cannot change its worker count while it runs; "
                    "close() it and call resize() before it starts again.")
            self._transport.resize(n)
        self.num_workers = n
        if self._sched is not None:
            # chunks sized for the workers running now: 16 inputs for two threads (few queue
            # operations), one for a hundred (each has work); sizing them for the most the
            # stage may run cost two threads of OpenCV work 9 % of their throughput
            self._sched.chunk_size = self._chunk_size()

    def _can_resize(self) -> bool:
        """Whether the back end's transport resizes live (it has ``resize(n)``)."""
        return callable(getattr(self._transport, "resize", None))

    def _start_tuner(self) -> None:
        sched = self._sched
        if not self.autotuned or sched is None or not self._can_resize():
            return  # (a back end that cannot resize keeps the count it started with)
        share = self._share()
        maximum = share.maximum(self, self._core_per_worker)
        ctl = Controller(1, maximum, self.num_workers, move_after=self._move_after(),
                         backend=self.backend)
        if self._tuned is not None:  # restored: go on from the tuned count
            ctl.window = int(self._tuned.get("window", 0))
        if ctl.workers != self.num_workers:
            self.resize(ctl.workers)
        self._tuner = StageTuner(type(self).__name__, ctl, self.resize, lambda: sched.answered,
                                 share, self._core_per_worker, self._request_move,
                                 self._probing)
        self._tuner.suspend()  # (its clock starts with the first __iter__)
        sched.tuner = self._tuner
        sched.chunk_size = self._chunk_size()  # (sized for its start: see _chunk_size)

    #: the kind of worker that maps now: ``"thread"`` or ``"process"``
    backend = "process"

    def _move_after(self) -> int:
        """Consumer-bound windows at one worker after which the autotuner moves this stage's
        work to processes; 0: it never does (only a thread stage built by
        ``ParallelMapData(backend="auto")`` may)."""
        return 0

    def _request_move(self) -> None:
        """Move the work to processes once what is in flight is answered (see
        ``_move_after``)."""
        raise NotImplementedError(f"{type(self).__name__} cannot move its work to processes")

    def _restore_backend(self, backend: Any) -> None:
        """A restored autotuned stage starts on the back end it had moved to."""

    def autotune_state(self) -> dict[str, Any] | None:
        """What the autotuner chose and why (``workers``, ``decisions``...), ``None`` when
        the worker count is not ``"auto"``; also in ``state_dict()["autotune"]`` and the
        profiler's report."""
        if not self.autotuned:
            return None
        if self._tuner is not None:
            return self._tuner.state()
        return self._tuned or {"workers": self.num_workers, "decisions": []}

    _transport: Any = None  # the back end's MapTransport, set by _start()

    def _make_scheduler(self) -> MapScheduler:
        assert self._transport is not None
        return MapScheduler(self._transport, self.buffer_size, self.ordered, self._chunk_size(),
                            self.strict, type(self).__name__)

    #: a chunk is at most ``1 / _CHUNK_SHARE`` of a worker's share of the buffer, and at most
    #: ``_CHUNK_MAX`` inputs
    _CHUNK_SHARE, _CHUNK_MAX = 4, 16

    def _chunk_size(self) -> int:
        """Inputs per request: up to 16 (fewer queue operations and messages), but small enough
        to keep every worker busy: at most a quarter of a worker's share of the buffer and,
        in strict mode, of one epoch (tiny epochs of heavy maps stay parallel). Sized for the
        workers running now (an autotuned stage's change with its count)."""
        workers = self.num_workers
        if self._tuner is not None and self._tuner.starting and not self._probing():
            # (a tuner climbing from its start: sized for the most workers it may run, so
            # that added workers find work queued and its short windows see results as they
            # come, not in bursts of large chunks)
            workers = max(workers, self._tuner.controller.maximum)
        share = self.buffer_size // (self._CHUNK_SHARE * workers)
        n = known_length(self.ds) if self.strict else None
        if n:
            share = min(share, n // (4 * workers))
        return max(1, min(self._CHUNK_MAX, share))

    def reset_state(self) -> None:
        """Reset ``ds`` (in this process) and start the workers. Idempotent."""
        if self._started:
            return
        self._closed = False
        self.ds.reset_state()
        # the inputs' streams: a function of the mapper's seed and path (see dataflow.rng), or
        # the seed of the state it was restored from (which holds the entropy drawn without one)
        if self._restored_inputs is not None:
            self._inputs = self._restored_inputs
        else:
            seq = _rng.stage_sequence(self.seed, _rng.path_of(self), _rng.INPUTS)
            self._inputs = _rng.seed_words(seq)
        self._start_or_clean()
        self._sched = self._make_scheduler()
        self._sched.policy = self.error_policy
        self._checkpoints.first_undelivered = self._sched.first_undelivered
        self.trace_workers(self._recorder)
        self._start_tuner()
        if not self.strict:
            self._start_stream()
        self._started = True

    def _start_stream(self) -> None:
        """Non-strict: start the endless stream, or continue the restored one."""
        sched = self._sched
        assert sched is not None
        ckpt = self._checkpoints
        self._policy_epoch()  # a stream counts its errors over all of it
        if self._resume_progress is None:
            ckpt.start(0)
            sched.set_source(ckpt.read(repeat_enumerate(self.ds), 0))
        else:
            cpos, read, pending = self._resume_progress
            source = skip_delivered(ckpt.read(repeat_passes(self.ds, True), cpos), cpos, read,
                                    pending, type(self).__name__)
            sched.start_epoch(source, read, pending, origin=cpos)
            ckpt.reset(cpos, self._resume_child)
            self._resume_progress = None

    def _policy_epoch(self) -> None:
        """The bad-sample counts of a new pass (or stream), or of the restored one."""
        policy = self.error_policy
        if policy is not None:
            size = known_length(self.ds) if self.strict else None
            if self._errors_restored:
                policy.continue_epoch(size)
            else:
                policy.begin_epoch(size)
        self._errors_restored = False

    def __len__(self) -> int:
        return len(self.ds)

    def trace_workers(self, recorder: Callable[..., None] | None) -> None:
        """Call ``recorder(worker, start, end, 0.0, cpu)`` for every chunk a worker mapped
        (``cpu``: the worker thread's CPU seconds in it), while iterating; used by
        :func:`dataflow.profile`. (A worker waits between its chunks.)"""
        self._recorder = recorder
        self._route_spans()

    def _route_spans(self) -> None:
        """Send the workers' chunk spans to the profiler's recorder and the back-end probe."""
        sched = self._sched
        if sched is None:
            return
        recorder, probe = self._recorder, self._span_probe()
        if recorder is None and probe is None:
            sched.on_span = None
            return

        def on_span(w: int, start: float, end: float, cpu: float = 0.0) -> None:
            if recorder is not None:
                recorder(w, start, end, 0.0, cpu)
            if probe is not None:
                probe(start, end, cpu)

        sched.on_span = on_span

    def _span_probe(self) -> Callable[[float, float, float], None] | None:
        """What measures the chunks' spans for this stage's own decisions (the thread
        mapper's back-end probe), if anything."""
        return None

    def _probing(self) -> bool:
        """The stage measures its chunks' spans to choose its back end (its chunks stay
        sized for the workers running: chunks too short to share the GIL would hide that the
        work holds it)."""
        return False

    _recorder: Callable[..., None] | None = None

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
            self._policy_epoch()
            ckpt = self._checkpoints
            epoch = self._epoch - 1
            if restored and self._resume_progress is not None:
                cpos, read, pending = self._resume_progress
                source = skip_delivered(ckpt.read(enumerate(self.ds, cpos), cpos), cpos, read,
                                        pending, type(self).__name__)
                sched.start_epoch(source, read, pending, origin=cpos, key_epoch=epoch)
                ckpt.reset(cpos, self._resume_child)
            else:
                items = enumerate(self.ds)  # (the child's epoch begins here)
                ckpt.start(0)
                sched.start_epoch(ckpt.read(items, 0), key_epoch=epoch)
            self._resume_progress = None
        # _pos counts what the scheduler yields from now on (a subclass may count itself)
        self._live = self._pos - sched.yielded() if self._counts_results else None
        if self._tuner is not None:  # (the window suspended at the end of the last one)
            self._tuner.resume()
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
                if token is not None and self._token is token:
                    self._sync_pos()
                    self._end(token)  # (a closed iterator leaves the epoch unfinished)
            except WorkerError:
                self._shutdown()
                raise
            except Exception:
                if not self.strict:  # the failed pass of ds is over: the next __iter__
                    ckpt = self._checkpoints  # starts a new one
                    pos = ckpt.position
                    sched.set_source(ckpt.read(repeat_enumerate(self.ds), pos))
                    state = child_state(self.ds)
                    ckpt.reset(pos, None if state is None else finished(state))
                raise
            finally:
                if self._tuner is not None:  # (the time until the next __iter__ is not
                    self._tuner.suspend()    # the stage's: its windows go on from here)
                if token is not None and self._token is token:
                    self._sync_pos()
                    self._live = None

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
        ``child_pos`` and ``child`` (see :class:`Checkpoints`).

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
        if self._started or self._restored_inputs is not None:
            # the inputs' seed: with no seed anywhere it is fresh entropy, drawn on reset, that
            # a restore needs to map the rest of the epoch with the same random draws
            entropy, spawn_key = self._inputs
            state[SEED] = {"entropy": entropy, "spawn_key": list(spawn_key)}
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
        tuned = self.autotune_state()
        if tuned is not None:  # informative; a restore starts from the tuned count
            state["autotune"] = tuned
        if self.error_policy is not None:
            errors = self.error_policy.state()
            if sched is not None and self._resume_progress is None:
                seen, failed = sched.pending_counts()  # mapped again after a restore
                errors = {"seen": errors["seen"] - seen, "skipped": errors["skipped"] - failed,
                          "total": errors["total"] - failed}
            state["errors"] = errors
        return state

    def _restore_inputs(self, seed: Any) -> None:
        """Map from now on with the inputs' seed saved in a state; workers started with
        another seed (fresh entropy drawn by this process's reset) are started again."""
        try:
            inputs = (int(seed["entropy"]), tuple(int(k) for k in seed["spawn_key"]))
        except (KeyError, TypeError, ValueError) as e:
            raise StateMismatchError(
                f"state for stage {type(self).__name__}: expected a seed "
                f"{{'entropy': int, 'spawn_key': [int, ...]}}, found {seed!r}; the state is "
                "damaged."
            ) from e
        self._restored_inputs = inputs
        if inputs != self._inputs and self._started:
            self._shutdown()
            self._ensure_started()

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
        if SEED in state:
            self._restore_inputs(state[SEED])
        tuned = state.get("autotune")
        if self.autotuned and isinstance(tuned, dict) and isinstance(tuned.get("workers"), int):
            self._tuned = tuned
            self._restore_backend(tuned.get("backend"))
            self.resize(max(1, min(tuned["workers"], self._auto_maximum())))
        self.restore_epoch(state)
        self.ds.load_state_dict(state["child"])
        self._resume_child = state["child"]
        if self.error_policy is not None:
            self.error_policy.load(state.get("errors"))
            self._errors_restored = not state["done"] or not self.strict
        if self.strict:
            self._resume_progress = None if state["done"] else progress
        else:
            self._resume_progress = progress
            if self._started:  # drop what is in flight; continue from the state (else
                self._start_stream()  # reset_state() will)


def _check_order(stage: str, worker_arg: str, num_workers: Any, map_func: Any) -> None:
    """A clear error for swapped positional arguments: ``(ds, map_func, num_workers)``."""
    if callable(num_workers) and not callable(map_func):
        raise TypeError(
            f"{stage} takes (ds, {worker_arg}, map_func), but got a callable for `{worker_arg}` "
            f"({num_workers!r}) and {map_func!r} for `map_func`: the arguments look swapped; "
            f"write {stage}(ds, {map_func!r}, {getattr(num_workers, '__name__', 'func')})."
        )
