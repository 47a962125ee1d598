"""Iteration state (issue 9) shared by the serializer-backed readers.

A reader counts ``_epoch`` (epochs started), ``_pos`` (datapoints delivered in the epoch in
progress) and ``_resume`` (the position the next ``__iter__`` continues from after
:meth:`ReaderState.load_state_dict`, else ``None``); ``__iter__`` begins the epoch when it is
called (see :meth:`ReaderState._begin_epoch`) and returns the generator. Its state is
``{"type", "size", "shuffle", "epoch", "pos", "done"[, "seed"]}`` plus what
:meth:`ReaderState._state_extra` adds (an LMDB key, a TFRecord byte offset). Resuming never
re-reads the delivered part: the readers seek (cursor key, byte offset, index arithmetic).
"""

from __future__ import annotations

from typing import Any

from dataflow.sources import _load_epoch
from dataflow.state import StateMismatchError, check_state, epoch_state

__all__ = ["ReaderState", "mismatch"]


def mismatch(stage: Any, what: str, expected: Any, found: Any, hint: str) -> StateMismatchError:
    """A :class:`StateMismatchError` naming the stage, the expected value and the one found."""
    name = stage if isinstance(stage, str) else type(stage).__name__
    return StateMismatchError(
        f"state for stage {name}: expected {what} {expected}, found {found!r}; {hint}"
    )


class ReaderState:
    """Mixin: ``state_dict()`` / ``load_state_dict()`` of a finite reader with exact ``len``."""

    _epoch: int
    _pos: int
    _resume: int | None = None
    _shuffle: bool = False
    _finished: bool = False  # the epoch in progress ended (also: its iterator was closed)

    def _begin_epoch(self) -> tuple[object, int, int]:
        """Start the next epoch, or continue a restored one: ``(token, epoch index, start)``.

        Called by ``__iter__`` itself, not lazily by its generator: the epoch belongs to the
        iterator from the moment it is created (a parent that creates its children's
        iterators up front, such as ``RandomMixData``, saves their states in this epoch).
        """
        start, self._resume = self._resume, None
        if start is None:
            self._epoch += 1
            start = 0
        self._pos = start
        self._finished = False
        self._token = token = object()
        return token, self._epoch - 1, start

    def _end_epoch(self, token: object) -> None:
        """Called when the iteration ``token`` ends or is closed: unless a newer iterator
        already began an epoch, the epoch is over (the next ``__iter__`` starts a new one)."""
        if self.__dict__.get("_token") is token:
            self._finished = True

    def _state_extra(self) -> dict[str, Any]:
        """Reader-specific entries of the state (positions in the file)."""
        return {}

    def _check_extra(self, state: dict[str, Any]) -> None:
        """Validate the reader-specific entries of ``state`` (before anything is restored)."""

    def state_dict(self) -> dict[str, Any]:
        """Epoch, position, size, shuffle and seed: the epoch's order is re-derived on resume
        and the reader seeks to the position; no datapoint is stored."""
        n = len(self)  # type: ignore[arg-type]
        state: dict[str, Any] = {
            "type": type(self).__name__, "size": n, "shuffle": self._shuffle,
            **epoch_state(self._epoch - 1, self._pos, self._finished or self._pos >= n),
        }
        if self._shuffle:
            state["seed"] = self._seed_state()  # type: ignore[attr-defined]
        state.update(self._state_extra())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state of the same file (same number of datapoints) and ``shuffle``."""
        check_state(state, self, size=len(self), shuffle=self._shuffle)  # type: ignore[arg-type]
        pos = state.get("pos")
        n = len(self)  # type: ignore[arg-type]
        if not isinstance(pos, int) or isinstance(pos, bool) or not 0 <= pos <= n:
            raise mismatch(self, "a position in", f"[0, {n}]", pos, "the state is damaged.")
        if not state["done"]:
            self._check_extra(state)
        self._token = None  # an iterator still alive no longer owns the epoch
        self._forget_iteration()
        _load_epoch(self, state)
        self._finished = bool(state["done"])

    def _forget_iteration(self) -> None:
        """Drop what the reader keeps about the iteration in progress (cursors, batches)."""
