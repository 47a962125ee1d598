"""Resumable iteration of the parallel mappers (issue 9): what ``state_dict()`` saves.

A mapper reads its inputs from ``ds`` in the consumer as a *stream* (one pass of ``ds`` for a
strict mapper, endless repeated passes otherwise) whose positions count the inputs read. Its
state holds (see :meth:`~dataflow.parallel._worker.MapScheduler.progress`):

* ``read`` and ``pending``: every input below position ``read`` was delivered (yielded, or
  dropped as ``None``) except the positions in ``pending`` (at most ``buffer_size``);
* ``child_pos`` and ``child``: the child's state taken between two reads, before position
  ``child_pos`` (<= the oldest undelivered input). :class:`Checkpoints` takes such states every
  ``buffer_size`` inputs, paced so that they cost under ~0.5 % of the time; a resume re-reads
  the inputs since the checkpoint before the oldest undelivered one, not the whole pass.

On resume the child is restored to ``child``, the stream is read again from ``child_pos``, and
:func:`skip_delivered` dispatches only the undelivered inputs: ``map_func`` never runs again on
a delivered one.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from dataflow.state import StateMismatchError, state_done

__all__ = [
    "Checkpoints",
    "check_progress",
    "child_state",
    "epoch_over",
    "repeat_passes",
    "skip_delivered",
]

#: a checkpoint may cost at most 1/RATIO of the time between two checkpoints
RATIO = 200


def child_state(ds: Any) -> dict[str, Any] | None:
    """``ds.state_dict()``, or ``None`` for a flow that cannot save one."""
    try:
        return ds.state_dict()
    except NotImplementedError:
        return None


def epoch_over(state: dict[str, Any]) -> dict[str, Any]:
    """A copy of a child's ``state`` whose epoch in progress is over, so that its next
    ``__iter__`` starts a new one: ``done`` is set on the first stage down the ``"child"`` chain
    that has counters (stages without counters answer for their child). Unlike
    :func:`dataflow.state.finished`, the stages below keep their states: a child that
    continues its own child across epochs (``FixedSizeData(keep_state=True)``) still does."""
    if "done" in state or not isinstance(state.get("child"), dict):
        return {**state, "done": True} if "done" in state else state
    return {**state, "child": epoch_over(state["child"])}


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


class Checkpoints:
    """The child's states at positions of the input stream (oldest first)."""

    def __init__(self, ds: Any, every: int, within_pass: bool) -> None:
        self.ds = ds
        self.every = max(1, every)
        # strict: a state saved at the end of the pass (which reports it over) would make the
        # next __iter__ of the child start a new pass instead of finishing this one
        self.within_pass = within_pass
        self.snaps: deque[tuple[int, dict[str, Any] | None]] = deque()
        self._not_before = 0.0  # perf_counter() before which no checkpoint is taken
        self._last_time = 0.0  # when the last one was taken
        self._last_index = 0  # sched.dispatched() then

    def reset(self, pos: int, state: dict[str, Any] | None) -> None:
        """A new stream (or pass) whose first input is at ``pos``, the child being in ``state``."""
        self.snaps = deque([(pos, state)])
        self._not_before = 0.0

    def start(self, pos: int, sched: Any) -> None:
        """:meth:`reset` with the child's current state; the next checkpoint waits as long as
        that state took to save allows."""
        start = time.perf_counter()
        self.reset(pos, child_state(self.ds))
        self._last_time = end = time.perf_counter()
        self._last_index = sched.dispatched()
        self._not_before = end + RATIO * (end - start)

    def take(self, sched: Any) -> int:
        """Scheduler hook (see ``MapScheduler.checkpoint``): save the child's state before the
        next position is read, and drop the checkpoints older than needed for the oldest
        undelivered position. Returns the number of inputs until the next call."""
        if self.snaps and self.snaps[0][1] is None:
            return 1 << 62  # the child has no state: never try again
        start = time.perf_counter()
        if start < self._not_before:  # too soon: come back when it will be time, at this rate
            rate = (sched.dispatched() - self._last_index) / max(start - self._last_time, 1e-9)
            return max(self.every, int(rate * (self._not_before - start)) + 1)
        pos = sched.read_position()
        state = child_state(self.ds)
        if state is None:
            self.snaps = deque([(pos, None)])
            return 1 << 62
        if self.within_pass and state_done(state):
            return self.every
        self.snaps.append((pos, state))
        read, pending = sched.progress()
        first = pending[0] if pending else read
        while len(self.snaps) > 1 and self.snaps[1][0] <= first:
            self.snaps.popleft()
        self._last_time = end = time.perf_counter()
        self._last_index = sched.dispatched()
        self._not_before = end + RATIO * (end - start)
        return self.every

    def select(
        self, read: int, pending: list[int]
    ) -> tuple[int, dict[str, Any] | None, int, list[int]]:
        """``(child_pos, child, read, pending)`` to save: the newest checkpoint at or before the
        oldest undelivered position. (If there is none, which only happens after a failed pass of
        a non-strict mapper, the undelivered inputs before the oldest checkpoint are given up.)"""
        first = pending[0] if pending else read
        for pos, state in reversed(self.snaps):
            if pos <= first:
                return pos, state, read, pending
        pos, state = self.snaps[0]
        return pos, state, max(read, pos), [p for p in pending if p >= pos]


def check_progress(state: dict[str, Any], stage: str) -> tuple[int, int, list[int]]:
    """``(child_pos, read, pending)`` of a mapper's state, validated."""
    cpos, read, pending = state.get("child_pos"), state.get("read"), state.get("pending")

    def is_int(x: Any) -> bool:
        return isinstance(x, int) and not isinstance(x, bool) and x >= 0

    ok = (
        is_int(cpos) and is_int(read) and cpos <= read and isinstance(pending, list)
        and all(is_int(p) and cpos <= p < read for p in pending)
        and all(a < b for a, b in itertools.pairwise(pending))
    )
    if not ok:
        raise StateMismatchError(
            f"state for stage {stage}: expected child_pos <= read (ints >= 0) and pending "
            f"(sorted positions from child_pos to below read), found child_pos={cpos!r}, "
            f"read={read!r}, pending={pending!r:.80}; the state is corrupt or from another "
            "version."
        )
    return cpos, read, list(pending)
