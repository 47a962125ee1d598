"""Thread back end: ``MultiThreadRunner`` and ``MultiThreadMapData``.

Threads share the consumer's memory, so datapoints are passed as objects (no serialization).
They are daemon threads: a thread stuck inside ``map_func`` cannot block interpreter exit.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from collections.abc import Callable, Collection
from typing import Any

from dataflow import _global_rng
from dataflow import rng as _rng
from dataflow.base import DataFlow
from dataflow.errors import DataFlowTerminated, WorkerError
from dataflow.parallel._mapper import MapperBase, WorkerCount
from dataflow.parallel._runner import RunnerBase
from dataflow.parallel._worker import map_loop, queue_emitter, runner_loop
from dataflow.parallel.autotuning.backend import (
    BackendChoice,
    BackendProbe,
    may_move,
    thread_start,
)
from dataflow.parallel.autotuning.stage import (
    THREADS_PER_CORE,
    resolve_buffer,
    resolve_runner_count,
)
from dataflow.state import child_state
from dataflow.validation import check_positive_int, known_length, renamed_kwargs

__all__ = ["MultiThreadMapData", "MultiThreadPrefetchData", "MultiThreadRunner"]

#: seconds ``close()`` waits for each thread to finish
JOIN_TIMEOUT = 5.0

#: consumer-bound windows (of half a second) at one thread after which an autotuned stage
#: that may move its work to processes does
MOVE_WINDOWS = 4

logger = logging.getLogger("dataflow.parallel")


class _ThreadGroup:
    """Threads running ``loops[i]`` with a stop event; reports threads that died silently."""

    def __init__(
        self, name: str, loops: list[Callable[[], None]], stop: threading.Event | None = None
    ) -> None:
        self.stop = stop or threading.Event()
        self.threads = [
            threading.Thread(target=loop, name=f"{name}-{i}", daemon=True)
            for i, loop in enumerate(loops)
        ]
        self.name = name
        self.retired: set[int] = set()  # threads that ended on purpose (a resize)

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def add(self, loop: Callable[[], None]) -> None:
        """Start one more thread running ``loop`` (id ``len(threads)``)."""
        t = threading.Thread(target=loop, name=f"{self.name}-{len(self.threads)}", daemon=True)
        self.threads.append(t)
        t.start()

    def check(self, ignore: Collection[int] = ()) -> None:
        """Raise :class:`WorkerError` for a thread that ended neither on purpose (a resize,
        ``ignore``) nor because the group stops. Whether it ended is read first: a thread
        records why it ends before it ends, so read after, the reason is there (read before,
        a thread retiring between the two reads looked as if it had died)."""
        ended = [i for i, t in enumerate(self.threads) if not t.is_alive()]
        if not ended or self.stop.is_set():
            return
        for i in ended:
            if i not in ignore and i not in self.retired:
                raise WorkerError(
                    "WorkerDied", f"worker thread {i} ended unexpectedly", worker_id=i,
                    stage=self.name,
                )

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            if t is not threading.current_thread():
                t.join(JOIN_TIMEOUT)


class MultiThreadRunner(RunnerBase):
    """Run ``num_thread`` flows, each built by ``get_df()``, in threads of this process.

    Tensorpack's contract: ``get_df`` is called once per thread (in ``__init__``)
    to build that thread's own flow, which the thread iterates forever into a queue of
    ``num_prefetch`` datapoints (``"auto"``: 16; ``num_thread="auto"``: the CPU budget's
    cores, fixed). ``len()`` is the first flow's length; each ``__iter__``
    yields that many datapoints (or forever when unknown).

    Unlike tensorpack: each flow is reset once (by ``reset_state()``, as runner worker ``i``,
    so random flows get distinct streams: see :func:`dataflow.rng.worker_scope`), and an
    exception in a thread is raised in the consumer as :class:`~dataflow.errors.WorkerError`.

    ``state_dict()`` saves counters only: the threads' flows are independent copies, so a
    restore cannot be exact; the restored epoch yields the datapoints it had left (see
    :meth:`RunnerBase.state_dict <dataflow.parallel._runner.RunnerBase.state_dict>`).
    """

    @renamed_kwargs(nr_prefetch="num_prefetch", nr_thread="num_thread")
    def __init__(self, get_df: Callable[[], DataFlow], num_prefetch: int | str,
                 num_thread: int | str) -> None:
        if not callable(get_df):
            raise TypeError(
                f"`get_df` must be a zero-argument callable returning a DataFlow, got "
                f"{get_df!r}; pass e.g. get_df=lambda: DataFromList(lst)."
            )
        num_thread = resolve_runner_count(num_thread, name="num_thread")
        num_prefetch = resolve_runner_count(num_prefetch, 16, "num_prefetch", 16)
        self.num_thread = self._num_workers = check_positive_int(num_thread, "num_thread")
        self.num_prefetch = check_positive_int(num_prefetch, "num_prefetch", 16)
        self.dfs = [get_df() for _ in range(self.num_thread)]
        super().__init__(self.dfs[0])
        self._group: _ThreadGroup | None = None
        self._queue: queue.Queue | None = None
        self._initial_states: list[Any] = [None] * self.num_thread
        self._pristine: list[Any] | None = None  # the flows' states after their first reset

    def children(self) -> list[DataFlow]:
        return list(self.dfs)

    def _replace_child(self, old: DataFlow, new: DataFlow) -> None:
        super()._replace_child(old, new)  # (refused while the threads run)
        self.dfs = [new if df is old else df for df in self.dfs]
        self.ds = self.dfs[0]  # (the first copy stands for them all)

    def _start(self) -> None:
        # every copy sits where the first does in the pipeline, and is keyed by its worker
        path = _rng.path_of(self.dfs[0])
        for i, df in enumerate(self.dfs):
            _rng.assign_paths(df, path)
            with _rng.worker_scope(i):
                df.reset_state()
        # the flows are reused across restarts: a restore needs their states from now, and a
        # restored worker saved before it sent any state starts from the first ones
        self._initial_states = [child_state(df) for df in self.dfs]
        if self._pristine is None:
            self._pristine = self._initial_states
        if self._worker_starts is not None:
            self._worker_starts = [
                (self._pristine[i] if state is None else state, skip)
                for i, (state, skip) in enumerate(self._worker_starts)
            ]
        self._queue = q = queue.Queue[tuple](self.num_prefetch)
        stop = threading.Event()
        emit = queue_emitter(q, stop)

        name = type(self).__name__
        self._group = _ThreadGroup(
            name,
            [
                functools.partial(runner_loop, df, emit, i, name, reset=False,
                                  start=self._worker_start(i), checkpoints=True)
                for i, df in enumerate(self.dfs)
            ],
            stop,
        )
        self._transport = _QueueTransport(q, self._group, self._finished)
        self._group.start()

    def _initial_state(self, i: int) -> Any:
        return self._initial_states[i]

    def queue_stats(self) -> dict[str, int] | None:
        """Datapoints waiting in the queue (``size``) out of ``num_prefetch`` (``capacity``),
        for :func:`dataflow.profile`; ``None`` before the threads start."""
        q = self._queue
        return None if q is None else {"size": q.qsize(), "capacity": self.num_prefetch}

    def _stop(self) -> None:
        self._transport = None
        if self._group is not None:
            self._group.join()
            self._group = None
        self._queue = None

    def close(self) -> None:
        super().close()
        for df in self.dfs[1:]:
            df.close()


MultiThreadPrefetchData = MultiThreadRunner


class _QueueTransport:
    """The runner's consumer side: the threads' queue, and a check of threads that died."""

    def __init__(self, q: queue.Queue, group: _ThreadGroup, finished: set[int]) -> None:
        self.q, self.group, self.finished = q, group, finished

    def receive(self, timeout: float) -> tuple | None:
        if self.group.stop.is_set():
            raise DataFlowTerminated(f"{self.group.name} was closed while being iterated")
        try:
            return self.q.get(timeout=timeout)
        except queue.Empty:
            self.group.check(ignore=self.finished)
            return None


#: the input-queue entry that ends the thread that takes it (a resize)
_RETIRE = object()


class _ThreadMapTransport:
    """The mapper's transport: an input queue that the threads take chunks from, an output
    queue of their messages. :meth:`resize` starts threads, or queues a retire token that ends
    whichever thread takes it after the chunks queued before it: no input is lost or mapped
    twice, and each input's key travels with it, so its result does not depend on which
    thread mapped it."""

    def __init__(self, map_func: Callable[[Any], Any], num_thread: int, name: str,
                 inputs: tuple[int, tuple[int, ...]]) -> None:
        self._in: queue.SimpleQueue = queue.SimpleQueue()
        self._out: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self._handing_back = threading.Event()  # (see hand_back)
        self._loop = functools.partial(map_loop, emit=self._out.put, map_func=map_func,
                                       stage=name, inputs=inputs,
                                       hand_back=self._handing_back.is_set)
        self.group = _ThreadGroup(name, [self._worker(i) for i in range(num_thread)], self._stop)
        self.workers = num_thread  # threads running or starting, less those told to retire
        self.group.start()

    def _worker(self, i: int) -> Callable[[], None]:
        stop, inq = self._stop, self._in

        def receive() -> list | None:
            chunk = inq.get()
            if chunk is _RETIRE:
                self.group.retired.add(i)
                return None
            return None if stop.is_set() else chunk  # on close, skip the queued work

        return functools.partial(self._loop, receive, worker_id=i)

    def resize(self, n: int) -> None:
        """Run ``n`` threads from now on (each retiring thread finishes the chunk it has)."""
        self._check_open()
        while self.workers < n:
            self.group.add(self._worker(len(self.group.threads)))
            self.workers += 1
        while self.workers > n:
            self._in.put(_RETIRE)
            self.workers -= 1

    def submit(self, chunk: list) -> None:
        self._check_open()
        self._in.put(chunk)

    def take_back(self) -> list[list]:
        """The chunks no thread has taken yet, removed from the input queue (the threads then
        finish the chunks they have; a retire token taken with them is dropped: the caller
        closes this transport next)."""
        chunks: list[list] = []
        while True:
            try:
                chunk = self._in.get_nowait()
            except queue.Empty:
                return chunks
            if isinstance(chunk, list):
                chunks.append(chunk)

    def hand_back(self) -> None:
        """The threads stop mapping the chunks they hold after the input in progress: the
        rest come back to the consumer (``RETURNED``), which submits them to its transport."""
        self._handing_back.set()

    def resume(self, chunks: list[list]) -> None:
        """Undo :meth:`hand_back`: map again, starting with ``chunks`` (taken back)."""
        self._handing_back.clear()
        for chunk in chunks:
            self._in.put(chunk)

    def rechunk(self, size: int) -> int:
        """Split the chunks no thread has taken yet into chunks of at most ``size`` inputs,
        in their order (retire tokens keep their places): each input stays queued once.
        Returns how many inputs are queued."""
        queued: list[Any] = []
        inputs = 0
        while True:
            try:
                queued.append(self._in.get_nowait())
            except queue.Empty:
                break
        for chunk in queued:
            if not isinstance(chunk, list):
                self._in.put(chunk)
                continue
            inputs += len(chunk)
            for k in range(0, len(chunk), size):
                self._in.put(chunk[k:k + size])
        return inputs

    def _check_open(self) -> None:
        if self.group.stop.is_set():
            raise DataFlowTerminated(f"{self.group.name} was closed while being iterated")

    def receive(self, timeout: float) -> tuple | None:
        self._check_open()
        try:
            return self._out.get(timeout=timeout)
        except queue.Empty:
            self.group.check()
            return None

    def close(self) -> None:
        self.group.stop.set()
        for _ in self.group.threads:
            self._in.put(None)
        self.group.join()


class MultiThreadMapData(MapperBase):
    """Map ``map_func`` over ``ds`` with ``num_thread`` threads (for functions that release the
    GIL, such as OpenCV and NumPy kernels).

    ``ds`` is iterated in the consumer thread; at most ``buffer_size`` inputs are in flight.

    * ``strict=False`` (tensorpack's default): an endless stream over repeated passes of
      ``ds``; each ``__iter__`` continues it (nothing in flight is lost between them).
    * ``strict=True``: each ``__iter__`` yields exactly the results of one pass of ``ds``.
    * ``ordered=False``: results in completion order; ``ordered=True``: in input order.

    ``None`` results are dropped when ``strict=False`` (as ``MapData`` does); with
    ``strict=True`` a ``None`` result raises, as in tensorpack (an epoch must hold a result for
    every input). ``len()`` is ``len(ds)``. Random draws made while mapping an input
    (augmentors, ``np.random.*``, ``random.*``, :func:`dataflow.rng.input_rng`) are keyed by the
    input's place in the epoch: with a seed, a strict, ordered mapper's output is the same for
    any number of threads, and the same as the process mappers'. Unlike tensorpack, an
    exception in ``map_func`` is raised in the consumer as
    :class:`~dataflow.errors.WorkerError` (with the input's index) instead of killing the thread
    and hanging, and ``buffer_size`` may exceed ``len(ds)``.

    Resumable (``state_dict()`` / ``load_state_dict()``): exact with ``strict=True,
    ordered=True``; strict and unordered, the rest of the epoch holds every undelivered result
    exactly once; ``strict=False``, the stream continues without loss or repetition. Details:
    :meth:`MapperBase.state_dict <dataflow.parallel._mapper.MapperBase.state_dict>`.

    ``num_thread="auto"`` (:data:`dataflow.AUTOTUNE`): the thread count is tuned while it
    runs, up to 128 threads per core of the CPU budget; ``buffer_size="auto"``: room for the most
    threads it may run. :meth:`resize` changes the count by hand.
    """

    profile_hint = "thread-map"
    backend = "thread"

    _worker_arg = "num_thread"
    num_thread = WorkerCount()
    _core_per_worker = 1 / THREADS_PER_CORE

    @renamed_kwargs(nr_thread="num_thread")
    def __init__(
        self, ds: DataFlow, num_thread: int | str | None = None,
        map_func: Callable[[Any], Any] | None = None, *,
        buffer_size: int | str = 200, strict: bool = False, ordered: bool = False,
        seed: int | None = None, on_error: str = "raise", max_errors: int | float | None = None,
    ) -> None:
        super().__init__(ds, num_thread, map_func, buffer_size, strict, ordered, on_error,
                         max_errors)
        self.seed = seed
        self._transport: _ThreadMapTransport | None = None
        self._dispatching = False  # _global_rng installed for this mapper's threads

    #: set by ``ParallelMapData(backend="auto")`` for work that computes on a budget of two
    #: cores or more: the autotuner may move it to processes (see ``_move_after``)
    _may_move = False
    #: set by ``ParallelMapData(backend="auto")``: the stage measures its first chunks and
    #: moves its work to processes if it holds the GIL (see ``autotuning.backend``)
    _choose = False
    #: what that measurement chose, and why (``None`` until it has)
    backend_choice: BackendChoice | None = None
    _backend_probe: BackendProbe | None = None
    _pool: Any = None  # the worker processes, once the work moved to processes
    _retiring: Any = None  # the threads' transport, while they answer what they have

    def _start(self) -> None:
        _global_rng.install()
        self._dispatching = True
        self._transport = self._start_workers()

    def _start_workers(self) -> Any:
        """The transport of this stage's workers: threads, or processes once it moved."""
        name = type(self).__name__
        if self.backend == "thread":
            return _ThreadMapTransport(self.map_func, self.num_workers, name, self._inputs)
        from dataflow.parallel._map_processes import start_map_processes
        from dataflow.parallel._zmq_consumer import RESTART_WINDOW
        from dataflow.parallel.shared_memory import shm_available

        transport, self._pool, self._resources = start_map_processes(
            name, self.map_func, self.num_workers, self._inputs, None, start_method=None,
            use_shm=shm_available(), max_restarts=3,
            restart_window=known_length(self.ds) or RESTART_WINDOW)
        return transport

    def _stop(self) -> None:
        self._retire_threads()  # (a move still in progress)
        if self._pool is not None:
            self._pool.terminate()
            self._pool = None
        elif self._transport is not None:
            self._transport.close()
        self._transport = None
        self._release_resources()
        if self._dispatching:
            self._dispatching = False
            _global_rng.uninstall()

    # ---- moving the work to processes ---------------------------------------------------------
    # A thread stage whose consumer is the bottleneck runs one thread, and the parts of its
    # work that hold the GIL (the Python around each OpenCV call, an augmentor's logic) take
    # it from the consumer, whose step may hold it too (a trainer's Python): on two cores,
    # one worker process instead gave such a consumer 1-4 % more steps per second. The move
    # starts the processes, which take the new inputs, while the threads answer the inputs
    # they have; inputs carry their keys, so the results are the same as if the stage had
    # run threads throughout.

    def _move_after(self) -> int:
        # (the budget may have been given by autotune() after ParallelMapData decided)
        movable = self._may_move and self.backend == "thread" and self._share().cores >= 2
        return MOVE_WINDOWS if movable else 0

    def _request_move(self) -> None:
        """Start the processes; the inputs in flight in the threads are answered there, then
        the threads end (see ``MapScheduler.swap_transport``). If the processes cannot start,
        the stage stays on threads."""
        sched = self._sched
        if sched is None or self.backend != "thread" or self._retiring is not None:
            return
        self._set_backend("process")
        threads = self.num_workers
        if self.autotuned:  # (no more processes than the budget's cores: they cost to start)
            self.num_workers = min(threads, self._auto_maximum())
        old = self._transport
        # the threads stop first: the chunks not started are taken back, and each thread hands
        # back the rest of the chunk it holds once its input in progress is mapped. The work
        # holds the GIL: threads that went on mapping would slow the start of the processes
        # (0.65 s for two, behind 8 such threads) and take their work meanwhile; and on two
        # busy cores, one thread behind a consumer that holds the GIL maps at the consumer's
        # pace, keeping the inputs queued for it for seconds
        held: list[list] = []
        if old is not None:
            old.hand_back()
            held = old.take_back()
        try:
            new = self._start_workers()
        except Exception as e:  # (e.g. a map function that a spawned process cannot unpickle)
            logger.warning("%s: its work could not move to processes (%s: %s); it stays on "
                           "threads", type(self).__name__, type(e).__name__, e)
            self._set_backend("thread")
            self.num_workers = threads
            if old is not None:
                old.resume(held)  # (what the threads handed back comes back to them)
            if self._tuner is not None:
                self._tuner.moved(None)
            return
        self._retiring, self._transport = old, new
        sched.swap_transport(new, self._retire_threads, held)
        if self._buffer_auto:
            # (a buffer sized for the threads it may run: hundreds of inputs queued at two
            # processes, in turn, end a pass with one of them mapping alone; the buffer of a
            # process stage of this many workers bounds the inputs in flight from now on; the
            # checkpoints, taken for the larger buffer, hold for a smaller one)
            sched.buffer_size = min(sched.buffer_size,
                                    resolve_buffer("auto", self.num_workers))
        if self._tuner is not None:
            self._tuner.moved(self._core_per_worker)

    def _retire_threads(self) -> None:
        old, self._retiring = self._retiring, None
        if old is not None:
            old.close()

    def _set_backend(self, backend: str) -> None:
        self.backend = backend
        self._core_per_worker = 1.0 if backend == "process" else 1 / THREADS_PER_CORE
        self.profile_hint = "process-map" if backend == "process" else "thread-map"

    # ---- the back-end choice of ParallelMapData(backend="auto") ------------------------------

    def _span_probe(self) -> Callable[[float, float, float], None] | None:
        if not self._choose or self.backend_choice is not None or self.backend != "thread":
            return None
        if self._backend_probe is None:
            self._backend_probe = BackendProbe(self._share().cores, idle=True)
        return self._probe_span

    def _probing(self) -> bool:
        return self._choose and self.backend_choice is None and self.backend == "thread"

    def _probe_span(self, start: float, end: float, cpu: float) -> None:
        probe = self._backend_probe
        choice = probe.add(start, end, cpu) if probe is not None else None
        if choice is not None:
            self._chosen(choice)

    def _chosen(self, choice: BackendChoice) -> None:
        """Act on the probe's choice (in the consumer's thread, between two messages)."""
        self.backend_choice, self._backend_probe = choice, None
        self._route_spans()  # (the probe is done)
        logger.info("ParallelMapData(%s): %s", _func_name(self.map_func), choice.reason)
        cores = self._share().cores
        self._may_move = may_move(choice.computes, cores)
        if choice.backend == "process":
            self._request_move()
        elif self.autotuned:
            n = thread_start(choice.computes, self.num_workers, cores)
            if self._tuner is not None and choice.computes:
                # (the tuner's quick start climbs work that waits: noisy windows of threads
                # that take turns on the GIL, or share few cores, would seem to pay)
                self._tuner.controller.end_start()
            if n != self.num_workers and self._tuner is not None:
                self._tuner.set_workers(n, choice.reason)
                n = self._tuner.controller.workers
            self.resize(n)  # (the same count too: chunks sized for the tuner's start)
            transport, sched = self._transport, self._sched
            if (self._tuner is not None and self._tuner.starting and transport is not None
                    and sched is not None):
                # the chunks queued while the probe measured (sized for the threads then)
                # are split too: the threads a climb adds find work, and results come as
                # they are mapped, not in bursts that short windows would misread; the
                # tuner measures from when the chunks the threads hold are answered
                queued = transport.rechunk(sched.chunk_size)
                self._tuner.settle_until(sched.dispatched() - queued)

    def autotune_state(self) -> dict[str, Any] | None:
        state = super().autotune_state()
        if state is not None and self.backend_choice is not None:
            state = {**state, "backend_choice": self.backend_choice.to_dict()}
        return state

    def _restore_backend(self, backend: Any) -> None:
        if self._choose and backend in ("thread", "process"):
            self.backend_choice = BackendChoice(backend, "restored from a state", True, 0, 0)
            self._may_move = True
        if backend != "process" or not self._may_move or self.backend == "process":
            return
        if self._started:
            self._request_move()
        else:
            self._set_backend("process")


def _func_name(func: Any) -> str:
    return getattr(func, "__name__", type(func).__name__)
