"""The worker side of the engine, shared by every back end: the bodies that run in a worker
thread, process or actor (:func:`map_loop`, :func:`runner_loop`) and how a worker seeds itself.

A worker talks to the consumer through two callables its back end gives it: ``receive()``
(the next chunk, or ``None`` to stop) and ``emit(msg)`` (send a message of
:mod:`dataflow.parallel._protocol`). Either may raise :class:`WorkerStopped` to end the loop
quietly.
"""

from __future__ import annotations

import itertools
import queue
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from dataflow import rng as _rng
from dataflow.parallel._protocol import (
    DATA,
    END,
    ERROR,
    RETURNED,
    STATE,
    STATS,
    ErrorInfo,
    WorkerStopped,
)
from dataflow.state import Pacer

__all__ = ["map_loop", "queue_emitter", "runner_loop", "seed_globals"]


def map_loop(
    receive: Callable[[], list | None],
    emit: Callable[[tuple], None],
    map_func: Callable[[Any], Any],
    worker_id: int,
    stage: str,
    inputs: tuple[int, tuple[int, ...]],
    finish_chunk: Callable[[list], list] | None = None,
    progress: Any = None,
    hand_back: Callable[[], bool] | None = None,
) -> None:
    """Body of a map worker: map each received chunk, send results (or errors) back.

    ``receive()`` returns the next chunk of ``(index, key, datapoint)`` or ``None`` to stop.
    ``inputs`` is the mapper's seed sequence ``(entropy, spawn_key)``: while an input is
    mapped, :func:`dataflow.rng.input_rng` (and so the augmentors and the global generators)
    draw from streams keyed by it and the input's ``key``. ``finish_chunk`` may transform a
    chunk's ``(index, result)`` list before it is sent (the batching mapper uses it); it must
    keep one pair per index so that the consumer can account for every input. ``progress``
    (a shared ``ctypes`` integer) holds the index being mapped, -1 between chunks: if the
    worker dies, the consumer knows which input was being mapped. ``hand_back()``, asked
    before each input but a chunk's first, says that the inputs not started yet go back to the
    consumer (a ``RETURNED`` message, after the results of those mapped).
    """
    scope = _rng.InputScope(*inputs)
    try:
        while True:
            chunk = receive()
            if chunk is None:
                return
            results = []
            returned: list = []
            start, cpu = time.perf_counter(), time.thread_time()
            _rng.set_input_scope(scope)
            try:
                for j, (index, key, dp) in enumerate(chunk):
                    if j and hand_back is not None and hand_back():
                        returned = chunk[j:]
                        break
                    scope.begin(*key)
                    if progress is not None:
                        progress.value = index
                    try:
                        results.append((index, map_func(dp)))
                    except WorkerStopped:
                        raise
                    except BaseException as e:
                        emit((ERROR, worker_id, ErrorInfo.capture(e, worker_id, index, stage)))
                        results.append((index, None))
            finally:
                _rng.set_input_scope(None)
                if progress is not None:
                    progress.value = -1
            if finish_chunk is not None:
                results = finish_chunk(results)
            try:
                emit((DATA, worker_id, results,
                      (start, time.perf_counter(), time.thread_time() - cpu)))
            except WorkerStopped:
                raise
            except Exception as e:  # e.g. a result that cannot be pickled: every input of the
                for idx, _ in results:  # chunk failed (a skipping policy counts each)
                    emit((ERROR, worker_id, ErrorInfo.capture(e, worker_id, idx, stage)))
                emit((DATA, worker_id, [(idx, None) for idx, _ in results]))
            if returned:
                emit((RETURNED, worker_id, returned))
    except WorkerStopped:
        return


def runner_loop(
    ds: Any,
    emit: Callable[[tuple], None],
    worker_id: int,
    stage: str,
    *,
    reset: bool = True,
    start: tuple[Any, int] | None = None,
    checkpoints: bool = False,
) -> None:
    """Body of a runner worker: ``reset_state()`` its copy of ``ds`` as worker ``worker_id``
    (unless ``reset`` is false: the thread runner resets its flows beforehand), then send epochs
    forever.

    An epoch that yields nothing ends the worker with ``END`` (so an empty or exhausted flow
    ends the consumer's iteration instead of spinning or hanging).

    With ``checkpoints``, it also sends ``STATE`` messages ``(count, ds.state_dict())``: the
    state of its copy after its first ``count`` datapoints sent (at the start, then at most
    every 16 datapoints, paced to cost under 0.5 % of the time). ``start = (state, skip)``
    restores the copy to ``state`` (unless ``None``) and skips ``skip`` datapoints first.
    """
    try:
        if reset:
            with _rng.worker_scope(worker_id):
                ds.reset_state()
        skip, first_may_be_empty = 0, False
        if start is not None:
            state, skip = start
            first_may_be_empty = True  # the rest of a restored epoch may be empty
            if state is not None:
                ds.load_state_dict(state)
        saver = _StateSaver(ds, emit, worker_id) if checkpoints else None
        if saver is not None and start is None:
            saver.send(0)
        step = _StateSaver.EVERY if saver is not None else 1 << 62
        count = 0  # datapoints sent
        timed = _TimedEmit(emit, worker_id)
        emit = timed
        while True:
            itr = iter(ds)
            n = 0
            if skip:  # already delivered before the restore
                n = sum(1 for _ in itertools.islice(itr, skip))
                skip -= n
            k = step
            while k == step:  # chunks of `step` datapoints; the state is saved between them
                k = 0
                for k, dp in enumerate(itertools.islice(itr, step), 1):  # noqa: B007
                    emit((DATA, worker_id, dp))
                n += k
                count += k
                timed.report()
                if saver is not None and count >= saver.next_at:
                    saver.maybe_send(count)
            if n == 0 and not first_may_be_empty:
                emit((END, worker_id, None))
                return
            first_may_be_empty = False
    except WorkerStopped:
        return
    except BaseException as e:
        try:
            emit((ERROR, worker_id, ErrorInfo.capture(e, worker_id, stage=stage)))
        except WorkerStopped:
            return


class _TimedEmit:
    """``emit`` that counts the time spent waiting in it, and sends ``STATS`` messages (busy
    and waiting time, at most every 0.1 s) for the profiler."""

    INTERVAL = 0.1

    def __init__(self, emit: Callable[[tuple], None], worker_id: int) -> None:
        self.emit, self.worker_id = emit, worker_id
        self.waited = 0.0
        self.since = time.perf_counter()

    def __call__(self, msg: tuple) -> None:
        start = time.perf_counter()
        self.emit(msg)
        self.waited += time.perf_counter() - start

    def report(self) -> None:
        now = time.perf_counter()
        if now - self.since >= self.INTERVAL:
            self.emit((STATS, self.worker_id, (self.since, now, self.waited)))
            self.since, self.waited = now, 0.0


class _StateSaver:
    """Sends a runner worker's ``STATE`` messages, paced by their cost."""

    EVERY = 16

    def __init__(self, ds: Any, emit: Callable[[tuple], None], worker_id: int) -> None:
        self.ds, self.emit, self.worker_id = ds, emit, worker_id
        self.next_at = self.EVERY
        self.pacer = Pacer()

    def maybe_send(self, count: int) -> None:
        self.next_at = count + self.EVERY
        if self.pacer.due():
            self.send(count)

    def send(self, count: int) -> None:
        start = time.perf_counter()
        try:
            state = self.ds.state_dict()
        except NotImplementedError:
            self.next_at = 1 << 62  # the copy cannot save a state: never try again
            return
        self.emit((STATE, self.worker_id, (count, state)))
        self.pacer.saved(start)


def queue_emitter(q: queue.Queue, stop: threading.Event) -> Callable[[tuple], None]:
    """``emit(msg)`` for a worker thread: put ``msg`` into the bounded ``q``, waiting while it is
    full, and raise :class:`WorkerStopped` once ``stop`` is set (checked every 0.1 s)."""

    def emit(msg: tuple) -> None:
        while True:
            if stop.is_set():
                raise WorkerStopped
            try:
                q.put(msg, timeout=0.1)
                return
            except queue.Full:
                pass

    return emit


def seed_globals(seq: np.random.SeedSequence) -> None:
    """Seed this process's global ``np.random`` and ``random`` from ``seq`` (a runner worker's
    copy of the flow: distinct per worker, reproducible under a seed)."""
    state = seq.generate_state(4)
    np.random.seed(state)
    random.seed(int.from_bytes(state.tobytes(), "little"))
