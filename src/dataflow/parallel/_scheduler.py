"""The consumer side of every parallel mapper: :class:`MapScheduler`, and the input streams it
reads (passes of the input flow, a resumed stream that skips what was delivered).

:class:`MapScheduler` keeps at most ``buffer_size`` inputs in flight (submitted and not yet
yielded), and

* ``ordered=False``: yields results as they arrive;
* ``ordered=True``: yields them in input order; results that arrive early wait in a reorder
  buffer, which the in-flight bound keeps at most ``buffer_size`` long;
* ``strict=True`` (the mapper starts a pass per ``__iter__``): each pass is exactly one pass
  over the input: every input is mapped once, nothing of another pass is mixed in;
* ``strict=False``: one endless stream over repeated passes, continued by the next ``__iter__``
  (results in flight when the consumer stopped are yielded by the next ``__iter__``).

In both modes results that are ``None`` are dropped, as ``MapData`` does. Positions: the *stream
position* of an input counts the inputs read since the stream (strict: the pass) began, across
restores; :meth:`MapScheduler.progress` says which positions were delivered.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from dataflow.errors import NoneResultError, StateMismatchError, WorkerError
from dataflow.parallel._protocol import (
    DATA,
    ERROR,
    POLL_INTERVAL,
    RETURNED,
    MapTransport,
    raise_worker_error,
)
from dataflow.policy import ErrorPolicy

__all__ = [
    "MapScheduler",
    "check_progress",
    "repeat_enumerate",
    "repeat_passes",
    "skip_delivered",
]


#: seconds the consumer waits on the new transport before it looks at the old one again,
#: while a replaced transport still has inputs to answer
OLD_POLL = 0.005


def repeat_enumerate(ds: Iterable[Any]) -> Iterator[tuple[int, Any]]:
    """``(position in epoch, datapoint)`` over endless passes of ``ds``; stops on an empty pass."""
    while True:
        n = 0
        for n, dp in enumerate(ds, 1):
            yield n - 1, dp
        if n == 0:
            return


_SKIP = object()


class MapScheduler:
    """Consumer side of a parallel map; see the module docstring for the semantics."""

    def __init__(
        self, transport: MapTransport, buffer_size: int, ordered: bool, chunk_size: int = 1,
        strict: bool = False, stage: str = "mapper",
    ) -> None:
        self.transport = transport
        self.strict, self.stage = strict, stage
        #: called with ``(worker, start, end, cpu)`` of each chunk a worker mapped (the
        #: profiler; the back-end probe): its wall-clock span and the worker thread's CPU
        #: seconds in it
        self.on_span: Callable[[int, float, float, float], None] | None = None
        #: inputs the workers answered so far (all passes; the autotuner's throughput)
        self.answered = 0
        #: told how long each wait for a result took (the autotuner; see ``_autotune``)
        self.tuner: Any = None
        #: the bad-sample policy (``None``: a worker error is raised)
        self.policy: ErrorPolicy | None = None
        # a change of transport in progress (see swap_transport): the one replaced, the inputs
        # it has not answered yet, and what closes it once it has
        self._old: MapTransport | None = None
        self._old_pending: set[int] = set()
        self._retire: Callable[[], None] | None = None
        self._failed: set[int] = set()  # indices whose ERROR was skipped; their DATA is due
        self._failed_waiting: set[int] = set()  # ordered: skipped, waiting for their turn
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
        self._key_epoch = 0  # first element of the inputs' keys in this pass
        self._nones = 0  # None results dropped since the pass (or stream) started
        # messages received ahead by queue_stats (the profiler), not yet handled
        self._early: deque[Any] = deque()
        self._early_items = 0  # results in the DATA messages of _early

    def queue_stats(self) -> dict[str, int]:
        """``size``: finished results waiting to be yielded; ``capacity``: ``buffer_size``.

        The results the workers finished are mostly still in the transport (a queue, a
        socket) until the consumer asks for the next one; they are received here, without
        waiting, and kept in arrival order for :meth:`_receive`, so that they count."""
        self._peek()
        size = len(self._done) + len(self._ready) + self._early_items
        return {"size": min(size, self.buffer_size), "capacity": self.buffer_size}

    def _peek(self) -> None:
        """Receive, without waiting, the messages the current transport holds now (at most a
        buffer's worth); an exception the transport raises is kept and raised by
        :meth:`_receive`, in its turn."""
        early = self._early
        while self._old is None and len(early) < self.buffer_size and \
                not (early and isinstance(early[-1], BaseException)):
            try:
                msg = self.transport.receive(0.0)
            except Exception as e:  # (raised by _receive, in its turn)
                early.append(e)
                return
            if msg is None:
                return
            early.append(msg)
            if msg[0] == DATA:
                self._early_items += len(msg[2])

    def _in_flight(self) -> int:
        return len(self._outstanding) + len(self._done) + len(self._ready)

    def start_epoch(
        self,
        source: Iterator[tuple[int, Any]],
        read: int = 0,
        pending: list[int] | None = None,
        origin: int = 0,
        key_epoch: int = 0,
    ) -> None:
        """Begin a new pass (strict), or restart the stream (a restored non-strict one): what is
        still in flight from before is dropped.

        A resumed stream (see :meth:`progress`) gives the ``(read, pending)`` it was saved with;
        ``source`` must then yield exactly the stream positions ``pending``, then ``read,
        read + 1...``; ``origin`` is the position the underlying stream restarts from. Each
        input is sent with the key ``(key_epoch, its stream position)``.
        """
        self._key_epoch = key_epoch
        self._base_pending = list(pending or ())
        self._base_read = max(read, origin)
        self._nones = 0
        self._origin = origin
        self._epoch_start = self._next_index
        self._n_stale = len(self._outstanding)
        self._done.clear()
        self._ready.clear()
        self._failed.clear()
        self._failed_waiting.clear()
        self._next_yield = self._next_index
        self._source, self._source_done = source, False

    def set_source(self, source: Iterator[tuple[int, Any]]) -> None:
        """Use ``source`` for a continued, non-strict stream: its inputs take the next stream
        positions."""
        self._source, self._source_done = source, False

    def swap_transport(self, new: MapTransport, retire: Callable[[], None],
                       taken_back: Sequence[list] = ()) -> None:
        """Submit the inputs to ``new`` from now on. ``taken_back``: the chunks the replaced
        transport had not started (its caller took them back from it); they go to ``new``
        too. The other inputs in flight there are answered there (received first, as they
        come); then ``retire()`` (called in the consumer's thread, which receives) closes it.
        Nothing in flight is lost or mapped twice, and the keys travel with the inputs, so the
        results are the same."""
        if self._old is not None:
            raise RuntimeError(f"{self.stage}: a change of transport is already in progress")
        old, self.transport = self.transport, new
        pending = set(self._outstanding)
        for msg in self._early:  # (answered by the old transport already)
            if isinstance(msg, tuple) and msg[0] == DATA:
                pending.difference_update(idx for idx, _ in msg[2])
            elif isinstance(msg, tuple) and msg[0] == RETURNED:
                pending.difference_update(idx for idx, _, _ in msg[2])
        for chunk in taken_back:
            pending.difference_update(idx for idx, _, _ in chunk)
            new.submit(chunk)
        if pending:
            self._old, self._old_pending, self._retire = old, pending, retire
        else:
            retire()

    def _fill(self) -> None:
        source = self._source
        chunk_size = self.chunk_size
        while not self._source_done:
            # (called for every result: the in-flight count is inlined)
            n_out = len(self._outstanding)
            room = self.buffer_size - n_out - len(self._done) - len(self._ready)
            # wait for room for a whole chunk, unless the workers are about to run dry
            if room <= 0 or (room < chunk_size and n_out >= chunk_size):
                return
            room = min(chunk_size, room)
            # take the inputs first: if the source raises, nothing is half-registered
            take = getattr(source, "take", None)
            items = (take(room) if take is not None
                     else list(itertools.islice(source, room)))  # type: ignore[arg-type]
            if len(items) < room:
                self._source_done = True
            if not items:
                return
            first = self._next_index
            self._next_index += len(items)
            epoch = self._key_epoch
            k = first - self._epoch_start
            outstanding, chunk = self._outstanding, []
            if k >= len(self._base_pending):  # (the usual case: consecutive stream positions)
                p = self._base_read + k - len(self._base_pending)
                for idx, (pos, dp) in enumerate(items, first):
                    outstanding[idx] = pos
                    chunk.append((idx, (epoch, p), dp))
                    p += 1
            else:
                stream = self._stream_position
                for idx, (pos, dp) in enumerate(items, first):
                    outstanding[idx] = pos
                    chunk.append((idx, (epoch, stream(k)), dp))
                    k += 1
            self.transport.submit(chunk)

    def _handle(self, msg: tuple) -> None:
        kind, payload = msg[0], msg[2]
        if kind == RETURNED:  # inputs a worker handed back, not started: to the transport now
            self.transport.submit(payload)
            return
        if kind == DATA:
            self.answered += len(payload)
            policy, failed = self.policy, self._failed
            for item in payload:
                idx, out = item
                if self._outstanding.pop(idx, None) is None:
                    continue
                if idx < self._epoch_start:
                    self._n_stale -= 1
                    failed.discard(idx)
                    continue
                if policy is not None:
                    policy.seen += 1
                    if failed and idx in failed:  # skipped under the bad-sample policy
                        failed.discard(idx)
                        if self.ordered:
                            self._failed_waiting.add(idx)
                        out = None
                    elif out is None and self.strict:
                        self._none_result(idx)
                elif out is None and self.strict:
                    self._none_result(idx)
                if self.ordered:
                    self._done[idx] = _SKIP if out is None else out
                elif out is not None:
                    self._ready.append(item)  # the (index, result) pair
                else:
                    self._nones += 1
            # (after the message is accounted for: what it calls may swap the transport)
            if self.on_span is not None and len(msg) > 3:
                self.on_span(msg[1], *msg[3])
        elif kind == ERROR:
            idx = payload.index
            pos = self._outstanding.get(idx) if idx is not None else None
            policy = self.policy
            if policy is None or pos is None or idx is None:
                raise_worker_error(payload, pos)
                return
            if idx >= self._epoch_start:  # (an input of an abandoned pass is just dropped)
                self._failed.add(idx)
                policy.failed(self._stream_position(idx - self._epoch_start),
                                   f"{payload.exc_type}: {payload.message}")

    def pending_counts(self) -> tuple[int, int]:
        """``(seen, failed)``: inputs counted by the bad-sample policy that :meth:`progress`
        still reports pending (they will be mapped again after a restore), and how many of them
        failed."""
        start = self._epoch_start
        failed = sum(1 for i in self._failed if i >= start)
        if self.ordered:
            return len(self._done), failed + len(self._failed_waiting)
        return len(self._ready), failed

    def _none_result(self, idx: int) -> None:
        key = self._stream_position(idx - self._epoch_start)
        raise NoneResultError(
            f"{self.stage}: map_func returned None for input index {key} of the epoch; with "
            "strict=True every input must give a result (an epoch has exactly len(ds) "
            "results, as in tensorpack). Return a value, or use strict=False, where None "
            "results are dropped."
        )

    def _pop_ready(self) -> tuple[bool, Any]:
        if self.ordered:
            while self._next_yield in self._done:
                out = self._done.pop(self._next_yield)
                self._failed_waiting.discard(self._next_yield)
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

    def _stream_position(self, k: int) -> int:
        """The stream position of the ``k``-th input dispatched in this pass."""
        nb = len(self._base_pending)
        return self._base_pending[k] if k < nb else self._base_read + k - nb

    def first_undelivered(self) -> int:
        """The oldest stream position not yet delivered (the first of ``progress()``)."""
        read, pending = self.progress()
        return pending[0] if pending else read

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
            msg = self._receive(POLL_INTERVAL)
            if msg is not None:
                self._handle(msg)

    def _receive(self, timeout: float) -> tuple | None:
        """The next message of the workers (``None`` after ``timeout`` seconds): the answers
        of a transport being replaced first; a worker error names the input's position."""
        try:
            if self._early:  # (received ahead by queue_stats: they were waiting already)
                msg = self._early.popleft()
                if isinstance(msg, BaseException):
                    raise msg
                if msg[0] == DATA:
                    self._early_items -= len(msg[2])
                if self.tuner is not None:
                    self.tuner.waited(0.0)
                return msg
            old, tuner = self._old, self.tuner
            if old is not None:
                msg = old.receive(0.0)
                if msg is not None:
                    if tuner is not None:  # (the windows go on: a full buffer of answers
                        tuner.waited(0.0)  # may be waiting there)
                    self._answered_by_old(msg)
                    return msg
                timeout = min(timeout, OLD_POLL)  # (its answers may be the ones due next)
            if tuner is None:
                return self.transport.receive(timeout)
            # the autotuner measures how long the consumer waits for results
            transport, t0 = self.transport, time.perf_counter()
            msg = transport.receive(timeout)
            tuner.waited(time.perf_counter() - t0)
            if msg is not None and self._old is transport:  # (the tuner just replaced it)
                self._answered_by_old(msg)
            return msg
        except WorkerError as e:
            if e.index is not None and e.index in self._outstanding:
                raise WorkerError(
                    e.exc_type, e.exc_message, e.remote_traceback, e.worker_id,
                    self._outstanding[e.index], e.stage,
                ) from e.__cause__
            raise

    def _answered_by_old(self, msg: tuple) -> None:
        """Count the inputs a replaced transport answered (or handed back: they go to the new
        one); retire it after its last one."""
        if msg[0] == DATA:
            self._old_pending.difference_update(idx for idx, _ in msg[2])
        elif msg[0] == RETURNED:  # (:meth:`_handle` submits them to the new transport)
            self._old_pending.difference_update(idx for idx, _, _ in msg[2])
        if not self._old_pending:
            retire, self._old, self._retire = self._retire, None, None
            if retire is not None:
                retire()


def skip_delivered(
    source: Iterator[Any], start: int, read: int, pending: list[int], stage: str
) -> Iterator[Any]:
    """The items of ``source`` (stream positions ``start, start + 1, ...``) at positions in
    ``pending`` or from ``read`` on. Raises :class:`StateMismatchError` if it ends before
    ``read``: the state came from a longer stream."""
    wanted = set(pending)
    pos = start
    for item in source:
        if pos >= read:
            yield item
            yield from source
            return
        if pos in wanted:
            yield item
        pos += 1
    if pos < read:
        raise StateMismatchError(
            f"state for stage {stage}: expected a pass of at least {read} inputs (the state was "
            f"saved after reading {read}), found {pos}; the state was saved from another "
            "pipeline or dataset."
        )


def repeat_passes(ds: Iterable[Any], first_may_be_empty: bool) -> Iterator[tuple[int, Any]]:
    """``(position in pass, datapoint)`` over endless passes of ``ds``; stops on an empty
    pass, except the first one of a restored stream (the rest of a pass saved at its end)."""
    while True:
        n = 0
        for n, dp in enumerate(ds, 1):
            yield n - 1, dp
        if n == 0 and not first_may_be_empty:
            return
        first_may_be_empty = False


def check_progress(state: dict[str, Any], stage: str) -> tuple[int, int, list[int]]:
    """``(child_pos, read, pending)`` of a mapper's state, validated."""
    cpos, read, pending = state.get("child_pos"), state.get("read"), state.get("pending")

    def is_int(x: Any) -> bool:
        return isinstance(x, int) and not isinstance(x, bool) and x >= 0

    ok = (
        is_int(cpos) and is_int(read) and cpos <= read  # type: ignore[operator]
        and isinstance(pending, list)
        and all(is_int(p) and cpos <= p < read for p in pending)
        and all(a < b for a, b in itertools.pairwise(pending))
    )
    if not ok or not isinstance(cpos, int) or not isinstance(read, int):
        raise StateMismatchError(
            f"state for stage {stage}: expected child_pos <= read (ints >= 0) and pending "
            f"(sorted positions from child_pos to below read), found child_pos={cpos!r}, "
            f"read={read!r}, pending={pending!r:.80}; the state is corrupt or from another "
            "version."
        )
    assert isinstance(pending, list)
    return cpos, read, list(pending)
