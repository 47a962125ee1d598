"""The input checkpoints of a parallel mapper.

The mapper reads its child ahead of what it has delivered (up to ``buffer_size`` inputs in
flight), so the child's current state is not where a restore must start. While it reads, the
mapper keeps :class:`Checkpoints`, states of its child at positions of the input stream; its
``state_dict()`` saves the newest one at or before the oldest undelivered input, and which
inputs after it were already delivered.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from dataflow.state import Pacer, child_state, state_done

__all__ = [
    "Checkpoints",
]

_END = object()


class _Reader:
    """What :meth:`Checkpoints.read` returns: an iterator, and ``take(n)``, the next ``n``
    items at once (the scheduler's path: the items between two checkpoints are taken by
    ``itertools.islice``, without a Python step per item)."""

    __slots__ = ("ckpt", "it")

    def __init__(self, ckpt: Checkpoints, it: Iterator[Any], origin: int) -> None:
        self.ckpt, self.it = ckpt, it
        ckpt.position = origin

    def take(self, n: int) -> list[Any]:
        ckpt, out = self.ckpt, []
        while n > 0:
            pos = ckpt.position
            if pos >= ckpt.next_at:  # before the child reads position pos
                ckpt._take(pos)
            want = min(n, ckpt.next_at - pos)
            got = list(itertools.islice(self.it, want))
            ckpt.position = pos + len(got)
            out += got
            if len(got) < want:
                break  # the child's stream is over
            n -= want
        return out

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        got = self.take(1)
        if not got:
            raise StopIteration
        return got[0]


class Checkpoints:
    """The child's states at positions of the input stream (oldest first), taken by the
    mapper while it reads its child (:meth:`read`), paced to cost under 0.5 % of the time."""

    def __init__(self, ds: Any, every: int, within_pass: bool) -> None:
        self.ds = ds
        self.every = max(1, every)
        # strict: a state saved at the end of the pass (which reports it over) would make the
        # next __iter__ of the child start a new pass instead of finishing this one
        self.within_pass = within_pass
        self.snaps: deque[tuple[int, dict[str, Any] | None]] = deque()
        self.pacer = Pacer()
        self.next_at = 0  # stream position of the next checkpoint
        self.position = 0  # the stream position read next
        self._last = (0.0, 0)  # (time, position) of the last checkpoint
        self.first_undelivered: Callable[[], int] = lambda: self.position

    def reset(self, pos: int, state: dict[str, Any] | None) -> None:
        """A new stream (or pass) whose first input is at ``pos``, the child being in ``state``."""
        self.snaps = deque([(pos, state)])
        self.pacer.not_before = 0.0
        self.position = pos
        self.next_at = pos + self.every

    def start(self, pos: int) -> None:
        """:meth:`reset` with the child's current state; the next checkpoint waits as long as
        saving that state took allows."""
        start = time.perf_counter()
        self.reset(pos, child_state(self.ds))
        self._last = (self.pacer.saved(start), pos)
        self.next_at = pos + self.every

    def read(self, items: Iterator[Any], origin: int) -> _Reader:
        """``items`` (the child's stream from position ``origin``), taking checkpoints between
        two reads when they are due."""
        return _Reader(self, iter(items), origin)

    def _take(self, pos: int) -> None:
        """Save the child's state before position ``pos`` is read, and drop the checkpoints
        older than needed for the oldest undelivered position."""
        if self.snaps and self.snaps[0][1] is None:
            self.next_at = 1 << 62  # the child has no state: never try again
            return
        start = time.perf_counter()
        if not self.pacer.due(start):  # too soon: come back when it will be time, at this rate
            last_time, last_pos = self._last
            rate = (pos - last_pos) / max(start - last_time, 1e-9)
            self.next_at = pos + max(self.every,
                                     int(rate * (self.pacer.not_before - start)) + 1)
            return
        state = child_state(self.ds)
        if state is None:
            self.snaps = deque([(pos, None)])
            self.next_at = 1 << 62
            return
        self.next_at = pos + self.every
        if self.within_pass and state_done(state):
            return
        self.snaps.append((pos, state))
        first = self.first_undelivered()
        while len(self.snaps) > 1 and self.snaps[1][0] <= first:
            self.snaps.popleft()
        self._last = (self.pacer.saved(start), pos)

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
