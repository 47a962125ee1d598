"""``LocallyShuffleData``: shuffle within a sliding buffer, for flows too large to shuffle."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from dataflow import rng as _rng
from dataflow.base import DataFlow, DataFlowReentrantGuard, ProxyDataFlow, RNGDataFlow
from dataflow.errors import UnknownLengthError
from dataflow.state import (
    EpochCounter,
    check_state,
    decode_items,
    encode_items,
    rng_from_state,
    rng_state,
)
from dataflow.wrappers.repeat import RepeatedData

__all__ = ["LocallyShuffleData"]

_END = object()


class LocallyShuffleData(EpochCounter, ProxyDataFlow, RNGDataFlow):
    """Shuffles the datapoints of ``ds`` within a buffer of ``buffer_size``.

    Incoming datapoints (from ``ds`` repeated forever) are appended ``num_reuse`` times each to a
    FIFO buffer; once it is full, every append first yields the oldest element; the buffer is
    shuffled every ``shuffle_interval`` incoming datapoints (default ``max(1, buffer_size // 3)``).
    The buffer and the position in ``ds`` persist across epochs, so epochs mix at the boundary.

    As in tensorpack, iteration is **endless** by default, although ``len()`` reports
    ``len(ds) * num_reuse`` (scripts take ``itertools.islice(flow, n)`` over many epochs, or
    let the trainer count steps). To take one epoch's worth: ``itertools.islice(flow,
    len(flow))``, or ``finite=True``: then each ``__iter__`` yields exactly ``len(ds) *
    num_reuse`` datapoints and stops (endless anyway when ``len(ds)`` is unknown), and the next
    one continues from the same buffer.

    Differences from tensorpack: any ``buffer_size >= 1`` works, and ``finite=True`` exists.
    Non-reentrant.
    """

    profile_hint = "buffer"

    def __init__(
        self,
        ds: DataFlow,
        buffer_size: int,
        num_reuse: int = 1,
        shuffle_interval: int | None = None,
        *,
        seed: int | None = None,
        finite: bool = False,
    ) -> None:
        ProxyDataFlow.__init__(self, ds)
        if not isinstance(finite, bool):
            raise TypeError(
                f"`finite` must be a bool, got {finite!r} (type {type(finite).__name__}); "
                "finite=True stops each iteration after len(ds) * num_reuse datapoints."
            )
        for name, value in (("buffer_size", buffer_size), ("num_reuse", num_reuse)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be an int >= 1, got {value!r}.")
        if shuffle_interval is None:
            shuffle_interval = max(1, buffer_size // 3)
        if isinstance(shuffle_interval, bool) or not isinstance(shuffle_interval, int) or (
            shuffle_interval < 1
        ):
            raise ValueError(
                f"`shuffle_interval` must be an int >= 1 or None, got {shuffle_interval!r}."
            )
        self.buffer_size = buffer_size
        self.num_reuse = num_reuse
        self.shuffle_interval = shuffle_interval
        self.seed = seed
        self.finite = finite
        self._guard = DataFlowReentrantGuard("LocallyShuffleData")
        self._buffer: deque[Any] = deque(maxlen=buffer_size)
        self._repeat = RepeatedData(ds, -1)  # ds, epoch after epoch
        self._source: Iterator[Any] | None = None
        self._incoming = 0  # datapoints taken from ds since reset_state
        self._current: Any = None  # the datapoint being appended num_reuse times
        self._pending = 0  # copies of it still to append

    def reset_state(self) -> None:
        ProxyDataFlow.reset_state(self)
        RNGDataFlow.reset_state(self)
        self._buffer.clear()
        self._source = None
        self._incoming = 0
        self._current, self._pending = None, 0

    def _replace_child(self, old: DataFlow, new: DataFlow) -> None:
        super()._replace_child(old, new)
        self._repeat.replace_child(old, new)  # (what it reads, epoch after epoch)

    def __len__(self) -> int:
        return len(self.ds) * self.num_reuse

    def _shuffle(self) -> None:
        items = list(self._buffer)
        rng = self.rng
        assert rng is not None  # (checked when the iteration began)
        rng.shuffle(items)
        self._buffer.clear()
        self._buffer.extend(items)

    def __iter__(self) -> Iterator[Any]:
        self._require_reset()
        token, start = self._begin()
        if self._source is None:
            self._source = iter(self._repeat)
        return self._run(token, start)

    def _run(self, token: object, start: int) -> Iterator[Any]:
        with self._guard:
            remaining: int | None = None  # endless, as in tensorpack
            if self.finite:
                try:
                    remaining = len(self) - start
                except UnknownLengthError:
                    remaining = None
            source, buf = self._source, self._buffer
            assert source is not None
            reuse, interval, size = self.num_reuse, self.shuffle_interval, self.buffer_size
            while remaining is None or remaining > 0:
                if self._pending == 0:
                    dp = next(source, _END)
                    if dp is _END:  # ds yields nothing at all: flush the buffer and stop
                        while buf and (remaining is None or remaining > 0):
                            if remaining is not None:
                                remaining -= 1
                            self._pos += 1
                            yield buf.popleft()
                        break
                    self._current, self._pending = dp, reuse
                    self._incoming += 1
                    if self._incoming % interval == 0:
                        self._shuffle()
                if len(buf) == size:
                    out = buf.popleft()
                    buf.append(self._current)
                    self._pending -= 1
                    if remaining is not None:
                        remaining -= 1
                    self._pos += 1
                    yield out
                else:
                    buf.append(self._current)
                    self._pending -= 1
            self._end(token)

    def state_dict(self) -> dict[str, Any]:
        """Own counters, the random stream, the position in ``ds`` and, since this flow holds a
        buffer, the buffered datapoints (at most ``buffer_size``, plus the one being reused)."""
        rng = self.rng if self.rng is not None else _rng.derive_rng(self._sequence())
        return {
            "type": "LocallyShuffleData", "buffer_size": self.buffer_size,
            "num_reuse": self.num_reuse, **self._counters(),
            "incoming": self._incoming, "pending": self._pending, "rng": rng_state(rng),
            "buffer": encode_items([*self._buffer, self._current] if self._pending else
                                   list(self._buffer)),
            "child": self._repeat.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state(state, self, buffer_size=self.buffer_size, num_reuse=self.num_reuse)
        self.restore_epoch(state)
        self._incoming, self._pending = state["incoming"], state["pending"]
        self._stream = rng_from_state(state["rng"])
        items = decode_items(state["buffer"])
        self._current = items.pop() if self._pending else None
        self._buffer.clear()
        self._buffer.extend(items)
        self._repeat.load_state_dict(state["child"])
        self._source = None
