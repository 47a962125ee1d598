"""The parallel engine shared by every back end (threads, ``multiprocessing``, ZeroMQ).

Messages are tuples ``(kind, worker_id, payload)``:

* ``DATA``: a runner's datapoint, or a mapper's list of ``(index, result)`` pairs;
* ``ERROR``: an :class:`ErrorInfo` -- worker errors travel as values and are re-raised in the
  consumer as :class:`~dataflow.errors.WorkerError` chained from the original exception;
* ``READY``: a map worker announces it can take work (nothing is sent to it before that);
* ``END``: a runner's copy of the flow yielded an empty epoch: that worker has nothing more;
* ``STATE``: a runner worker's ``(count, state of its copy after count datapoints)``.

Map requests are chunks, lists of ``(index, datapoint)``; ``index`` is a global, increasing
counter so that results can be matched, ordered and told apart from stale ones.

:class:`MapScheduler` is the consumer side of every mapper: it keeps at most ``buffer_size``
inputs in flight (submitted and not yet yielded), and

* ``ordered=False``: yields results as they arrive;
* ``ordered=True``: yields them in input order; results that arrive early wait in a reorder
  buffer, which the in-flight bound keeps at most ``buffer_size`` long;
* ``strict=True``: each ``__iter__`` is exactly one pass over the input: every input is mapped
  once, nothing of another pass is mixed in;
* ``strict=False``: one endless stream over repeated passes, continued by the next ``__iter__``
  (results in flight when the consumer stopped are yielded by the next ``__iter__``).

In both modes results that are ``None`` are dropped, as ``MapData`` does. The runners' loops
are in :mod:`dataflow.parallel._runner`; what the mappers' states hold, in
:mod:`dataflow.parallel._resume`.
"""

from __future__ import annotations

import itertools
import pickle
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from dataflow.errors import WorkerError

__all__ = [
    "DATA",
    "END",
    "ERROR",
    "READY",
    "STATE",
    "ErrorInfo",
    "MapScheduler",
    "WorkerStopped",
    "map_loop",
    "raise_worker_error",
    "repeat_enumerate",
]

DATA, ERROR, READY, END, STATE = 0, 1, 2, 3, 4
#: seconds between liveness checks while the consumer waits
POLL_INTERVAL = 0.2


class WorkerStopped(BaseException):
    """Raised by an ``emit``/``receive`` callable to make a worker loop return quietly."""


class _ReconstructedError(Exception):
    """Stands in for a worker exception whose type could not be unpickled in the consumer."""


@dataclass(frozen=True)
class ErrorInfo:
    """An exception raised in a worker, as a picklable value."""

    exc_type: str
    message: str
    traceback: str
    exc_pickle: bytes | None
    worker_id: int | None
    index: int | None = None
    stage: str | None = None

    @classmethod
    def capture(
        cls,
        exc: BaseException,
        worker_id: int | None,
        index: int | None = None,
        stage: str | None = None,
    ) -> ErrorInfo:
        try:
            exc_pickle = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
            pickle.loads(exc_pickle)
        except Exception:
            exc_pickle = None
        typ = type(exc)
        name = typ.__qualname__ if typ.__module__ == "builtins" else (
            f"{typ.__module__}.{typ.__qualname__}"
        )
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(name, str(exc), tb, exc_pickle, worker_id, index, stage)

    def original(self) -> BaseException:
        """The original exception if it can be unpickled here, else a reconstruction."""
        if self.exc_pickle is not None:
            try:
                exc = pickle.loads(self.exc_pickle)
                if isinstance(exc, BaseException):
                    return exc
            except Exception:
                pass
        return _ReconstructedError(f"{self.exc_type}: {self.message}")

    def to_error(self, index: int | None = None) -> WorkerError:
        return WorkerError(
            self.exc_type,
            self.message,
            self.traceback,
            worker_id=self.worker_id,
            index=self.index if index is None else index,
            stage=self.stage,
        )


def raise_worker_error(info: ErrorInfo, index: int | None = None) -> None:
    """Raise ``info`` as a ``WorkerError`` chained from the original exception."""
    raise info.to_error(index) from info.original()


# ---- worker side ------------------------------------------------------------------------------


def map_loop(
    receive: Callable[[], list | None],
    emit: Callable[[tuple], None],
    map_func: Callable[[Any], Any],
    worker_id: int,
    stage: str,
    finish_chunk: Callable[[list], list] | None = None,
) -> None:
    """Body of a map worker: map each received chunk, send results (or errors) back.

    ``receive()`` returns the next chunk or ``None`` to stop. ``finish_chunk`` may transform
    a chunk's ``(index, result)`` list before it is sent (the batching mapper uses it); it
    must keep one pair per index so that the consumer can account for every input.
    """
    try:
        while True:
            chunk = receive()
            if chunk is None:
                return
            results = []
            for index, dp in chunk:
                try:
                    results.append((index, map_func(dp)))
                except WorkerStopped:
                    raise
                except BaseException as e:
                    emit((ERROR, worker_id, ErrorInfo.capture(e, worker_id, index, stage)))
                    results.append((index, None))
            if finish_chunk is not None:
                results = finish_chunk(results)
            try:
                emit((DATA, worker_id, results))
            except WorkerStopped:
                raise
            except Exception as e:  # e.g. a result that cannot be pickled
                index = results[0][0] if results else None
                emit((ERROR, worker_id, ErrorInfo.capture(e, worker_id, index, stage)))
                emit((DATA, worker_id, [(idx, None) for idx, _ in results]))
    except WorkerStopped:
        return


# ---- consumer side ----------------------------------------------------------------------------


def repeat_enumerate(ds: Iterable[Any]) -> Iterator[tuple[int, Any]]:
    """``(position in epoch, datapoint)`` over endless passes of ``ds``; stops on an empty pass."""
    while True:
        n = 0
        for n, dp in enumerate(ds, 1):
            yield n - 1, dp
        if n == 0:
            return


class MapTransport(Protocol):
    def submit(self, chunk: list[tuple[int, Any]]) -> None: ...

    def receive(self, timeout: float) -> tuple | None: ...


_SKIP = object()


class MapScheduler:
    """Consumer side of a parallel map; see the module docstring for the semantics."""

    def __init__(
        self, transport: MapTransport, buffer_size: int, ordered: bool, chunk_size: int = 1
    ) -> None:
        self.transport = transport
        self.buffer_size = buffer_size
        self.ordered = ordered
        self.chunk_size = max(1, chunk_size)
        self._next_index = 0
        self._epoch_start = 0
        self._outstanding: dict[int, int] = {}  # index -> position in its epoch
        self._n_stale = 0  # outstanding inputs of an abandoned strict epoch
        self._done: dict[int, Any] = {}  # ordered: finished results waiting for their turn
        self._ready: deque[tuple[int, Any]] = deque()  # unordered: (index, result) to yield
        self._next_yield = 0
        self._source: Iterator[tuple[int, Any]] | None = None
        self._source_done = False
        # a resumed strict epoch dispatches the positions `_base_pending`, then `_base_read`, ...
        self._base_pending: list[int] = []
        self._base_read = 0
        self._origin = 0  # stream position of the first input the source yields
        #: called with this scheduler between two reads when due; returns the number of inputs
        #: until the next call (the mappers save their child's state there)
        self.checkpoint: Callable[[MapScheduler], int] | None = None
        self._checkpoint_at = 0
        self._nones = 0  # None results dropped since the pass (or stream) started

    def queue_stats(self) -> dict[str, int]:
        """``size``: finished results waiting to be yielded; ``capacity``: ``buffer_size``."""
        return {"size": len(self._done) + len(self._ready), "capacity": self.buffer_size}

    def _in_flight(self) -> int:
        return len(self._outstanding) + len(self._done) + len(self._ready)

    def start_epoch(
        self,
        source: Iterator[tuple[int, Any]],
        read: int = 0,
        pending: list[int] | None = None,
        origin: int = 0,
    ) -> None:
        """Begin a new pass (strict), or restart the stream (a restored non-strict one): what is
        still in flight from before is dropped.

        A resumed stream (see :meth:`progress`) gives the ``(read, pending)`` it was saved with;
        ``source`` must then yield exactly the stream positions ``pending``, then ``read,
        read + 1...``; ``origin`` is the position the underlying stream restarts from.
        """
        self._base_pending = list(pending or ())
        self._base_read = max(read, origin)
        self._nones = 0
        self._origin = origin
        self._epoch_start = self._next_index
        self._n_stale = len(self._outstanding)
        self._done.clear()
        self._ready.clear()
        self._next_yield = self._next_index
        self._source, self._source_done = source, False

    def set_source(self, source: Iterator[tuple[int, Any]]) -> None:
        """Use ``source`` for a continued, non-strict stream (called once)."""
        self._source, self._source_done = source, False

    def _fill(self) -> None:
        source = self._source
        chunk_size = self.chunk_size
        while not self._source_done:
            room = self.buffer_size - self._in_flight()
            # wait for room for a whole chunk, unless the workers are about to run dry
            if room <= 0 or (room < chunk_size and len(self._outstanding) >= chunk_size):
                return
            room = min(chunk_size, room)
            if self._next_index >= self._checkpoint_at and self.checkpoint is not None:
                self._checkpoint_at = self._next_index + self.checkpoint(self)
            # take the inputs first: if the source raises, nothing is half-registered
            items = list(itertools.islice(source, room))  # type: ignore[arg-type]
            if len(items) < room:
                self._source_done = True
            if not items:
                return
            first = self._next_index
            self._next_index += len(items)
            chunk = []
            for idx, (pos, dp) in enumerate(items, first):
                self._outstanding[idx] = pos
                chunk.append((idx, dp))
            self.transport.submit(chunk)

    def _handle(self, msg: tuple) -> None:
        kind, _wid, payload = msg
        if kind == DATA:
            for item in payload:
                idx, out = item
                if self._outstanding.pop(idx, None) is None:
                    continue
                if idx < self._epoch_start:
                    self._n_stale -= 1
                elif self.ordered:
                    self._done[idx] = _SKIP if out is None else out
                elif out is not None:
                    self._ready.append(item)  # the (index, result) pair
                else:
                    self._nones += 1
        elif kind == ERROR:
            pos = self._outstanding.get(payload.index) if payload.index is not None else None
            raise_worker_error(payload, pos)

    def _pop_ready(self) -> tuple[bool, Any]:
        if self.ordered:
            while self._next_yield in self._done:
                out = self._done.pop(self._next_yield)
                self._next_yield += 1
                if out is not _SKIP:
                    return True, out
                self._nones += 1
            return False, None
        if self._ready:
            return True, self._ready.popleft()[1]
        return False, None

    def yielded(self) -> int:
        """Results yielded since the pass (or stream) started, computed from the counters (the
        hot path does not count them)."""
        n = self._next_index - self._epoch_start
        if self.ordered:
            return self._next_yield - self._epoch_start - self._nones
        undelivered = len(self._outstanding) - self._n_stale + len(self._ready)
        return n - undelivered - self._nones

    def dispatched(self) -> int:
        """Inputs submitted so far (all passes)."""
        return self._next_index

    def checkpoint_after(self, n: int) -> None:
        """Call :attr:`checkpoint` again once ``n`` more inputs were read."""
        self._checkpoint_at = self._next_index + n

    def read_position(self) -> int:
        """The stream position the source reads next (its generator is suspended between
        reads whenever the consumer's code runs)."""
        n = self._next_index - self._epoch_start
        if n == 0:
            return self._origin
        nb = len(self._base_pending)
        return (self._base_pending[n - 1] if n <= nb else self._base_read + n - 1 - nb) + 1

    def progress(self) -> tuple[int, list[int]]:
        """``(read, pending)`` of the pass (strict) or stream in progress, in its positions: each
        position below ``read`` was delivered (yielded, or dropped as ``None``) unless it is in
        ``pending`` (sorted); none from ``read`` on was. ``pending`` holds at most
        ``buffer_size`` positions (the inputs in flight)."""
        start = self._epoch_start
        n = self._next_index - start  # inputs dispatched in this pass
        base, nb, read0 = self._base_pending, len(self._base_pending), self._base_read
        if self.ordered:
            undelivered: Iterable[int] = range(self._next_yield - start, n)
        else:
            undelivered = [i - start for i in self._outstanding if i >= start]
            undelivered += [i - start for i, _ in self._ready]
        pending = {base[k] if k < nb else read0 + k - nb for k in undelivered}
        pending.update(base[n:])  # saved as pending, not dispatched again yet
        read = read0 + max(0, n - nb)
        out = sorted(pending)
        while out and out[-1] == read - 1:  # a pending tail is the same as not read
            out.pop()
            read -= 1
        return read, out

    def run(self) -> Iterator[Any]:
        """Yield results until the current source is exhausted and everything is drained."""
        while True:
            self._fill()
            ok, out = self._pop_ready()
            if ok:
                yield out
                continue
            self._fill()  # skipping dropped (None) results may have made room
            if self._source_done and len(self._outstanding) == self._n_stale:
                return
            if not self._outstanding:  # nothing to wait for: _fill can submit now
                continue
            try:
                msg = self.transport.receive(POLL_INTERVAL)
            except WorkerError as e:
                if e.index is not None and e.index in self._outstanding:
                    raise WorkerError(
                        e.exc_type, e.exc_message, e.remote_traceback, e.worker_id,
                        self._outstanding[e.index], e.stage,
                    ) from e.__cause__
                raise
            if msg is not None:
                self._handle(msg)
