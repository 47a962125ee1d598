"""Iteration state: ``state_dict()`` / ``load_state_dict()`` helpers.

A state is a small plain dict that ``json.dumps`` accepts: the stage's type name, its counters
(``epoch``: index of the epoch in progress, -1 before the first; ``pos``: datapoints delivered in
it; ``done``: whether that epoch is over), seeds, and the child's state under ``"child"`` (or the
children's under ``"children"``). Datapoints are stored only where a stage holds a buffer, encoded
with :func:`encode_items` into a string.

Resume rule: after ``load_state_dict(state)``, the next ``__iter__`` continues the epoch in progress
from ``pos``. A state taken after the last datapoint of an epoch counts as ``done``: the next
``__iter__`` starts the following epoch, so the sequence of datapoints is the same as in an
uninterrupted run.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator
from typing import Any

from dataflow.errors import DataFlowError

__all__ = [
    "EpochCounter",
    "StateMismatchError",
    "check_state",
    "decode_items",
    "encode_items",
    "epoch_state",
    "finished",
    "replay_run",
    "rng_from_state",
    "rng_state",
    "state_done",
]


class StateMismatchError(DataFlowError, ValueError):
    """A state does not match the pipeline it is loaded into."""


def check_state(state: Any, stage: Any, **expected: Any) -> dict[str, Any]:
    """Validate ``state`` for ``stage`` (a flow or a name): its type and the ``expected`` values.

    Raises :class:`StateMismatchError` naming the stage, the expected value and the one found.
    """
    name = stage if isinstance(stage, str) else type(stage).__name__
    if not isinstance(state, dict):
        raise StateMismatchError(
            f"state for stage {name}: expected a dict from {name}.state_dict(), found "
            f"{type(state).__name__} {state!r:.80}."
        )
    found_type = state.get("type")
    if found_type != name:
        raise StateMismatchError(
            f"state for stage {name}: expected type {name!r}, found {found_type!r}; the state was "
            "saved from a pipeline of another structure."
        )
    for key, value in expected.items():
        if state.get(key) != value:
            raise StateMismatchError(
                f"state for stage {name}: expected {key}={value!r}, found "
                f"{key}={state.get(key)!r}; the state was saved from another pipeline or dataset."
            )
    return state


def epoch_state(epoch: int, pos: int, done: bool) -> dict[str, Any]:
    """The counters of a stage; before the first epoch (``epoch`` -1) it is always done."""
    return {"epoch": int(epoch), "pos": int(pos), "done": bool(done) or epoch < 0}


def encode_items(items: list[Any]) -> str:
    """Datapoints -> a JSON-safe string (msgpack with NumPy support, base64)."""
    import msgpack
    import msgpack_numpy

    packed = msgpack.packb(list(items), default=msgpack_numpy.encode, use_bin_type=True)
    return base64.b64encode(packed).decode("ascii")


def decode_items(text: str) -> list[Any]:
    """Inverse of :func:`encode_items` (tuples come back as lists)."""
    import msgpack
    import msgpack_numpy

    items = msgpack.unpackb(
        base64.b64decode(text), object_hook=msgpack_numpy.decode, raw=False,
        strict_map_key=False,
    )
    return _writable(items)


def _writable(obj: Any) -> Any:
    """Decoded arrays are read-only views of the message; give back writable arrays."""
    if isinstance(obj, list):
        return [_writable(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _writable(v) for k, v in obj.items()}
    if hasattr(obj, "flags") and not obj.flags.writeable:
        return obj.copy()
    return obj


def state_done(state: dict[str, Any]) -> bool:
    """Whether the epoch in progress of the stage saved in ``state`` is over (a stage without
    counters of its own answers for its child)."""
    while "done" not in state and "child" in state:
        state = state["child"]
    return bool(state.get("done", False))


def finished(state: Any) -> Any:
    """A copy of ``state`` whose epoch is over: loading it makes the next ``__iter__`` start a
    new epoch. Used for children that a parent abandoned mid-epoch.

    Only the outermost stages with counters are marked (a stage without counters of its own
    answers for its child): each of them decides on load what an epoch's end means for its own
    children (``FixedSizeData(keep_state=True)``, for one, keeps its child's epoch going).
    """
    if isinstance(state, list):
        return [finished(s) for s in state]
    if not isinstance(state, dict):
        return state
    if "done" in state:
        return {**state, "done": True}
    return {k: finished(v) if k in ("child", "children") else v for k, v in state.items()}


def rng_state(rng: Any) -> dict[str, Any]:
    """A ``RandomState``'s state as JSON-safe values."""
    st = rng.get_state(legacy=False)
    return {"key": [int(x) for x in st["state"]["key"]], "pos": int(st["state"]["pos"]),
            "has_gauss": int(st["has_gauss"]), "gauss": float(st["gauss"])}


def rng_from_state(state: dict[str, Any]) -> Any:
    """Inverse of :func:`rng_state`: a ``RandomState`` that continues the saved stream."""
    import numpy as np

    rng = np.random.RandomState(np.random.MT19937(0))
    rng.set_state({
        "bit_generator": "MT19937",
        "state": {"key": np.asarray(state["key"], dtype=np.uint32), "pos": state["pos"]},
        "has_gauss": state["has_gauss"], "gauss": state["gauss"],
    })
    return rng


class EpochCounter:
    """Mixin: the ``(epoch, pos, done)`` counters of a stage and their life cycle.

    ``__iter__`` calls :meth:`_begin` itself (not lazily in its generator): the epoch belongs to
    the iterator from the moment it is created, since parents such as ``RandomMixData`` create
    their children's iterators up front. The generator calls :meth:`_end` in a ``finally``:
    an epoch is over when its iterator is exhausted *or closed*, so the next ``__iter__`` starts
    a new epoch, in an uninterrupted run and after a restore alike.
    """

    _epoch = 0  # epochs started
    _pos = 0  # datapoints delivered in the epoch in progress
    _done = True  # the epoch in progress is over
    _resume: int | None = None  # where the next __iter__ continues, after a restore
    _token: object | None = None  # identifies the iterator that owns the epoch in progress

    def _begin(self) -> tuple[object, int]:
        """Start the next epoch, or continue a restored one: ``(token, start position)``."""
        start, self._resume = self._resume, None
        if start is None:
            self._epoch += 1
            start = 0
        self._pos, self._done = start, False
        self._token = token = object()
        return token, start

    def _end(self, token: object) -> None:
        """The iterator ``token`` ended or was closed (a newer one may own the epoch by now)."""
        if self._token is token:
            self._done = True

    def _counters(self) -> dict[str, Any]:
        return epoch_state(self._epoch - 1, self._pos, self._done)

    def _restore_counters(self, state: dict[str, Any]) -> None:
        self._epoch, self._pos, self._done = state["epoch"] + 1, state["pos"], state["done"]
        self._resume = None if state["done"] else state["pos"]
        self._token = None


def replay_run(counter: EpochCounter, itr: Iterable[Any], token: object, start: int
               ) -> Iterator[Any]:
    """Yield ``itr`` for the epoch that ``counter`` began (``token``), counting positions from
    0 and skipping the first ``start`` (delivered before a restore): the replaying resume of
    flows that cannot seek."""
    counter._pos = 0
    try:
        for dp in itr:
            counter._pos += 1
            if counter._pos > start:
                yield dp
    finally:
        counter._end(token)
