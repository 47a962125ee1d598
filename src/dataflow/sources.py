"""Source dataflows: ``DataFromList``, ``DataFromGenerator``, ``DataFromIterable``, ``FakeData``,
``DataFromQueue``."""

from __future__ import annotations

import inspect
import operator
import queue as queue_mod
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from dataflow.base import DataFlow, RNGDataFlow
from dataflow.errors import DataFlowError, UnknownLengthError
from dataflow.state import EpochCounter, check_state, epoch_state, replay_run

__all__ = ["DataFromGenerator", "DataFromIterable", "DataFromList", "DataFromQueue", "FakeData"]


class FakeData(EpochCounter, RNGDataFlow):
    """Random arrays of given shapes, for testing and benchmarking.

    Args:
        shapes: one shape per component.
        size: number of datapoints per epoch (``len``).
        random: if False, one set of arrays is drawn per epoch and yielded ``size`` times
            (a new list each time, the same arrays).
        dtype: one dtype for every component, or a list with one per component.
        domain: ``(low, high)`` for every component, or a list with one pair per component.
        seed: base seed of this flow's random stream (see :mod:`dataflow.rng`).
    """

    def __init__(
        self,
        shapes: Sequence[Sequence[int]],
        size: int = 1000,
        random: bool = True,
        dtype: Any = "float32",
        domain: Any = (0, 1),
        *,
        seed: int | None = None,
    ) -> None:
        if not isinstance(shapes, list | tuple) or not all(
            isinstance(s, list | tuple) for s in shapes
        ):
            raise TypeError(
                f"`shapes` must be a list of shapes (one per component), got {shapes!r}; "
                "for one component write [[28, 28]]."
            )
        if int(size) < 0:
            raise ValueError(f"`size` must be >= 0, got {size!r}.")
        n = len(shapes)
        self.shapes = [tuple(int(d) for d in s) for s in shapes]
        self._size = int(size)
        self.random = random
        dtypes = list(dtype) if isinstance(dtype, list | tuple) else [dtype] * n
        domains = list(domain) if isinstance(domain[0], list | tuple) else [tuple(domain)] * n
        if len(dtypes) != n:
            raise ValueError(
                f"`dtype` has {len(dtypes)} entries for {n} shapes: give one per shape."
            )
        if len(domains) != n:
            raise ValueError(
                f"`domain` has {len(domains)} pairs for {n} shapes: give one per shape."
            )
        self.dtype = [np.dtype(d) for d in dtypes]
        self.domain = [(float(lo), float(hi)) for lo, hi in domains]
        self.seed = seed

    def __len__(self) -> int:
        return self._size

    def _draw(self, rng: np.random.RandomState) -> list[np.ndarray]:
        return [
            (rng.random_sample(shape) * (hi - lo) + lo).astype(dt, copy=False)
            for shape, dt, (lo, hi) in zip(self.shapes, self.dtype, self.domain)
        ]

    def __iter__(self) -> Iterator[list[np.ndarray]]:
        token, start = self._begin()
        return self._run(token, start, self._epoch_rng(self._epoch - 1))

    def _run(self, token: object, start: int, rng: np.random.RandomState) -> Iterator[Any]:
        if self.random:
            for _ in range(start):  # re-draw the delivered part: the stream continues
                self._draw(rng)
            for _ in range(start, self._size):
                self._pos += 1
                yield self._draw(rng)
        else:
            arrays = self._draw(rng)
            for _ in range(start, self._size):
                self._pos += 1
                yield list(arrays)
        self._end(token)

    def state_dict(self) -> dict[str, Any]:
        """Epoch, position and seed; resuming re-draws the delivered part (no datapoints kept)."""
        state = self._counters()
        state["done"] = state["done"] or self._pos >= self._size
        return {"type": "FakeData", "size": self._size, "seed": self._seed_state(), **state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state(state, self, size=self._size)
        self.restore_epoch(state)


class DataFromQueue(DataFlow):
    """Yields ``queue.get()`` forever; no length. Works with ``queue.Queue`` and
    ``multiprocessing.Queue``."""

    def __init__(self, queue: queue_mod.Queue) -> None:
        if not hasattr(queue, "get"):
            raise TypeError(f"`queue` must have a get() method, got {type(queue).__name__}.")
        self.queue = queue

    def __iter__(self) -> Iterator[Any]:
        get = self.queue.get
        while True:
            yield get()

    def state_dict(self) -> dict[str, Any]:
        """Nothing to save: what was taken from the queue is gone, the rest is still in it."""
        return {"type": "DataFromQueue"}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state(state, self)


class DataFromList(EpochCounter, RNGDataFlow):
    """Datapoints from a list. ``len = len(lst)``.

    With ``shuffle=True`` each epoch visits the elements in a new random order (the list itself
    is never modified); the order of epoch ``e`` depends only on (seed, e).
    """

    def __init__(
        self, lst: Sequence[Any], shuffle: bool = True, *, seed: int | None = None
    ) -> None:
        if not hasattr(lst, "__len__") or not hasattr(lst, "__getitem__"):
            raise TypeError(
                f"`lst` must be a list (or sequence), got {type(lst).__name__}; "
                "use DataFromIterable for other iterables."
            )
        self.lst = lst
        self.shuffle = shuffle
        self.seed = seed
        self._itr: Iterator[Any] | None = None  # iterator whose length hint gives the position
        self._itr_len = 0

    def __len__(self) -> int:
        return len(self.lst)

    def __iter__(self) -> Iterator[Any]:
        _token, start = self._begin()
        lst = self.lst
        n = len(lst)
        if not self.shuffle:
            # no generator layer: this is the hot path; the position is read off the iterator
            self._itr = itr = iter(lst if start == 0 else lst[start:])
            self._itr_len = n
            return itr
        order = self._epoch_rng(self._epoch - 1).permutation(n)[start:].tolist()
        self._itr = order_itr = iter(order)
        self._itr_len = n
        return map(lst.__getitem__, order_itr)

    def _position(self) -> tuple[int, bool]:
        """(delivered, over) of the epoch in progress, read off its iterator."""
        if self._itr is None:
            return self._pos, self._done
        # an iterator its consumer dropped before its end leaves the epoch unfinished, as a
        # closed generator does: a state saved after a `break` resumes at the next datapoint
        pos = self._itr_len - operator.length_hint(self._itr)
        return pos, pos >= self._itr_len

    def state_dict(self) -> dict[str, Any]:
        """Epoch, position, list length and seed (the order of an epoch is re-derived)."""
        pos, done = self._position()
        state: dict[str, Any] = {"type": "DataFromList", "size": len(self.lst),
                                 **epoch_state(self._epoch - 1, pos, done)}
        if self.shuffle:
            state["seed"] = self._seed_state()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state(state, self, size=len(self.lst))
        self.restore_epoch(state)
        self._itr = None


class DataFromGenerator(EpochCounter, DataFlow):
    """Datapoints from a generator.

    ``gen`` is either a zero-argument callable returning a fresh iterable (called once per epoch)
    or an iterable. A generator *object* can be iterated only once: a second epoch raises a
    :class:`DataFlowError` instead of silently yielding nothing. The length is unknown
    (``len`` raises ``NotImplementedError``, unlike tensorpack's ``TypeError``).
    """

    def __init__(self, gen: Callable[[], Iterable[Any]] | Iterable[Any]) -> None:
        if not callable(gen) and not isinstance(gen, Iterable):
            raise TypeError(
                f"`gen` must be a zero-argument callable returning an iterable, or an iterable; "
                f"got {type(gen).__name__}."
            )
        self._gen = gen
        self._used = False

    def __len__(self) -> int:
        raise UnknownLengthError(
            "DataFromGenerator has no length; wrap it in FixedSizeData(df, size) if you know it."
        )

    def __iter__(self) -> Iterator[Any]:
        gen = self._gen
        if callable(gen) and not isinstance(gen, Iterable):
            return _replay(self, gen())
        if inspect.isgenerator(gen) or isinstance(gen, Iterator):
            if self._used:
                raise DataFlowError(
                    "DataFromGenerator was given an iterator, which can be iterated only once; "
                    "pass a zero-argument callable that returns a new one, e.g. "
                    "DataFromGenerator(lambda: my_generator())."
                )
            self._used = True
        return _replay(self, gen)

    def state_dict(self) -> dict[str, Any]:
        """Epoch and position; resuming calls ``gen`` again and skips the delivered part, which
        is exact when ``gen`` yields the same datapoints every time."""
        return _replay_state(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _replay_load(self, state)


def _replay(flow: Any, itr: Iterable[Any]) -> Iterator[Any]:
    """Begin an epoch of ``flow`` now and iterate ``itr``; after a restore, skip what was
    delivered."""
    token, start = flow._begin()
    return replay_run(flow, itr, token, start)


def _replay_state(flow: Any) -> dict[str, Any]:
    return {"type": type(flow).__name__, **flow._counters()}


def _replay_load(flow: Any, state: dict[str, Any]) -> None:
    check_state(state, flow)
    flow.restore_epoch(state)


class DataFromIterable(EpochCounter, DataFlow):
    """Datapoints from an iterable; ``len`` is ``len(iterable)`` when it has one."""

    def __init__(self, iterable: Iterable[Any]) -> None:
        if not isinstance(iterable, Iterable):
            raise TypeError(f"`iterable` must be iterable, got {type(iterable).__name__}.")
        self._itr = iterable
        try:
            self._len: int | None = len(iterable)  # type: ignore[arg-type]
        except TypeError:
            self._len = None

    def __len__(self) -> int:
        if self._len is None:
            raise UnknownLengthError(
                f"DataFromIterable over a {type(self._itr).__name__} has no length."
            )
        return self._len

    def __iter__(self) -> Iterator[Any]:
        return _replay(self, self._itr)

    def state_dict(self) -> dict[str, Any]:
        """Epoch and position; resuming re-iterates the iterable and skips the delivered part."""
        return _replay_state(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _replay_load(self, state)
