"""The shared iteration logic of the dataset loaders."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from dataflow.base import DataFlowReentrantGuard, RNGDataFlow
from dataflow.state import StateMismatchError, check_state, epoch_state

__all__ = ["IndexedDataset", "check_choice"]


def check_choice(param: str, value: Any, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise a ValueError that lists them."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(
            f"`{param}` must be one of {', '.join(repr(c) for c in choices)}; got {value!r}."
        )
    return value


class IndexedDataset(RNGDataFlow):
    """A finite dataset of ``len(self)`` datapoints, produced by ``self._datapoint(i)``.

    Each epoch visits every index once, in file order or, with ``shuffle``, in an order drawn
    from ``self._epoch_rng(epoch)`` (so ``seed`` reproduces every epoch). ``_epoch`` counts the
    epochs started and finished; ``_position`` is the number of datapoints already produced in
    the current epoch (an iteration resumes from it). An iteration that ends, or is closed
    early, completes the epoch. Not reentrant.

    Resumable (issue 9): ``state_dict()`` is ``{"type", "size", "shuffle", "epoch", "pos",
    "done"[, "seed"]}``; after ``load_state_dict()`` the next ``__iter__`` continues the epoch
    at ``pos`` (its order is re-derived from the seed; nothing before ``pos`` is loaded).
    An iterator owns the epoch from its creation: a parent that creates its children's
    iterators up front (``RandomMixData``) saves their states in that epoch; a restored
    position goes to the first ``__iter__`` after ``load_state_dict``, even if it never runs.
    """

    shuffle: bool = False
    _owner: object = None
    _owner_started = False
    _last_position = 0

    def _init_iteration(self, shuffle: bool, seed: int | None) -> None:
        self.shuffle = bool(shuffle)
        self.seed = seed
        self._epoch = 0
        self._position = 0
        self._owner: object = None  # the iterator that owns epoch `_epoch`, if any
        self._owner_started = False
        self._last_position = 0  # datapoints delivered in the epoch that ended last
        self._guard = DataFlowReentrantGuard(type(self).__name__)

    def __len__(self) -> int:
        raise NotImplementedError  # pragma: no cover - every loader defines it

    def _datapoint(self, index: int) -> list:
        raise NotImplementedError  # pragma: no cover - every loader defines it

    def _order(self, epoch: int) -> np.ndarray:
        order = np.arange(len(self))
        if self.shuffle:
            self._epoch_rng(epoch).shuffle(order)
        return order

    def __iter__(self) -> Iterator[list]:
        token = object()
        if self._owner is None or not self._owner_started:  # else claimed when the owner ends
            self._claim(token)
        return self._run(token)

    def _claim(self, token: object) -> None:
        """Make iterator ``token`` the owner of the epoch in progress (or of the next one)."""
        if self._owner is not None and not self._owner_started and self._position:
            self._end_epoch()  # a restored position went to an iterator that never ran
        self._owner, self._owner_started = token, False

    def _run(self, token: object) -> Iterator[list]:
        with self._guard:
            if self._owner is not token:  # the previous owner was closed, or never started
                self._claim(token)
            self._owner_started = True
            order = self._order(self._epoch)
            try:
                while self._position < len(order):
                    index = int(order[self._position])
                    self._position += 1
                    yield self._datapoint(index)
            finally:
                if self._owner is token:
                    self._end_epoch()

    def _end_epoch(self) -> None:
        self._owner, self._owner_started = None, False
        self._last_position = self._position
        self._epoch += 1
        self._position = 0

    # ------------------------------------------------------------ resumable iteration
    def state_dict(self) -> dict[str, Any]:
        """Epoch, position, size, shuffle and seed (no datapoint)."""
        n = len(self)
        if self._owner is not None or self._position:  # an epoch in progress
            counters = epoch_state(self._epoch, self._position, self._position >= n)
        else:  # between epochs: the last one ended (or none started)
            counters = epoch_state(self._epoch - 1, self._last_position, True)
        state: dict[str, Any] = {"type": type(self).__name__, "size": n,
                                 "shuffle": bool(self.shuffle), **counters}
        if self.shuffle:
            state["seed"] = self._seed_state()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state of the same dataset split (same size) and ``shuffle``."""
        n = len(self)
        check_state(state, self, size=n, shuffle=bool(self.shuffle))
        pos = state.get("pos")
        if not isinstance(pos, int) or isinstance(pos, bool) or not 0 <= pos <= n:
            raise StateMismatchError(
                f"state for stage {type(self).__name__}: expected a position in [0, {n}], "
                f"found {pos!r}; the state is damaged."
            )
        if "seed" in state:
            self._load_seed_state(state["seed"])
        self._owner, self._owner_started = None, False  # a live iterator no longer owns it
        if state["done"]:
            self._epoch, self._position, self._last_position = state["epoch"] + 1, 0, pos
        else:
            self._epoch, self._position = state["epoch"], pos
