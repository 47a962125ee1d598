"""Source dataflows: ``DataFromList``, ``DataFromGenerator``, ``DataFromIterable``, ``FakeData``,
``DataFromQueue``."""

from __future__ import annotations

import inspect
import queue as queue_mod
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from dataflow.base import DataFlow, RNGDataFlow
from dataflow.errors import DataFlowError, UnknownLengthError

__all__ = ["DataFromGenerator", "DataFromIterable", "DataFromList", "DataFromQueue", "FakeData"]


class FakeData(RNGDataFlow):
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
        self._epoch = 0

    def __len__(self) -> int:
        return self._size

    def _draw(self, rng: np.random.RandomState) -> list[np.ndarray]:
        return [
            (rng.random_sample(shape) * (hi - lo) + lo).astype(dt, copy=False)
            for shape, dt, (lo, hi) in zip(self.shapes, self.dtype, self.domain)
        ]

    def __iter__(self) -> Iterator[list[np.ndarray]]:
        rng = self._epoch_rng(self._epoch)
        self._epoch += 1
        if self.random:
            for _ in range(self._size):
                yield self._draw(rng)
        else:
            arrays = self._draw(rng)
            for _ in range(self._size):
                yield list(arrays)


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


class DataFromList(RNGDataFlow):
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
        self._epoch = 0

    def __len__(self) -> int:
        return len(self.lst)

    def __iter__(self) -> Iterator[Any]:
        epoch = self._epoch
        self._epoch += 1
        if not self.shuffle:
            return iter(self.lst)  # no generator layer: this is the hot path
        return self._shuffled(epoch)

    def _shuffled(self, epoch: int) -> Iterator[Any]:
        lst = self.lst
        for i in self._epoch_rng(epoch).permutation(len(lst)):
            yield lst[i]


class DataFromGenerator(DataFlow):
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
            yield from gen()
            return
        if inspect.isgenerator(gen) or isinstance(gen, Iterator):
            if self._used:
                raise DataFlowError(
                    "DataFromGenerator was given an iterator, which can be iterated only once; "
                    "pass a zero-argument callable that returns a new one, e.g. "
                    "DataFromGenerator(lambda: my_generator())."
                )
            self._used = True
        yield from gen


class DataFromIterable(DataFlow):
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
        yield from self._itr
