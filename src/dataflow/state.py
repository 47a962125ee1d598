"""Iteration state: the one home of ``state_dict()`` / ``load_state_dict()`` helpers.

A state is a small plain dict that ``json.dumps`` accepts (the format is documented in
``docs/state.md``): the stage's type name (:data:`TYPE`), its counters (:data:`EPOCH`: index of
the epoch in progress, -1 before the first; :data:`POS`: datapoints delivered in it;
:data:`DONE`: whether that epoch is over), seeds (:data:`SEED`), and the child's state under
:data:`CHILD` (or the children's under :data:`CHILDREN`). Every stage gathers its children's
states itself in its ``state_dict()``. Datapoints are stored only where a stage holds a buffer,
encoded with :func:`encode_items` into a string.

Resume rule: after ``load_state_dict(state)``, the next ``__iter__`` continues the epoch in progress
from ``pos``. A state taken after the last datapoint of an epoch counts as ``done``: the next
``__iter__`` starts the following epoch, so the sequence of datapoints is the same as in an
uninterrupted run.

What lives here: :class:`EpochCounter` (the counters of every stage that has them, and
:meth:`EpochCounter.restore_epoch`), :class:`ReaderState` (the whole state of a finite reader
that seeks), :func:`replay_run` and :func:`replaying_iter` (the resume of flows that cannot
seek: replay the epoch and skip the delivered part), :class:`Pacer` (how often a stage may pay
for saving a child's state), and small validation and encoding helpers.
"""

from __future__ import annotations

import base64
import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from dataflow.errors import DataFlowReentrantError, StateMismatchError

__all__ = [
    "CHILD",
    "CHILDREN",
    "DONE",
    "EPOCH",
    "POS",
    "SEED",
    "TYPE",
    "EpochCounter",
    "Pacer",
    "ReaderState",
    "StateMismatchError",
    "check_state",
    "child_state",
    "decode_items",
    "encode_items",
    "epoch_state",
    "finished",
    "mismatch",
    "replay_run",
    "replaying_iter",
    "rng_from_state",
    "rng_state",
    "state_done",
]

TYPE, EPOCH, POS, DONE, SEED, CHILD, CHILDREN = (
    "type", "epoch", "pos", "done", "seed", "child", "children")


def mismatch(stage: Any, what: str, expected: Any, found: Any, hint: str) -> StateMismatchError:
    """A :class:`StateMismatchError` naming the stage, the expected value and the one found."""
    name = stage if isinstance(stage, str) else type(stage).__name__
    return StateMismatchError(
        f"state for stage {name}: expected {what} {expected}, found {found!r}; {hint}"
    )


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
    found_type = state.get(TYPE)
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
    return {EPOCH: int(epoch), POS: int(pos), DONE: bool(done) or epoch < 0}


def child_state(ds: Any) -> dict[str, Any] | None:
    """``ds.state_dict()``, or ``None`` for a flow that cannot save one."""
    try:
        return ds.state_dict()
    except NotImplementedError:
        return None


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
    while DONE not in state and CHILD in state:
        state = state[CHILD]
    return bool(state.get(DONE, False))


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
    if DONE in state:
        return {**state, DONE: True}
    return {k: finished(v) if k in (CHILD, CHILDREN) else v for k, v in state.items()}


def rng_state(rng: Any) -> dict[str, Any]:
    """A ``RandomState``'s state (MT19937) as JSON-safe values."""
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


class DataFlowReentrantGuard:
    """Guards an iteration against a second, concurrent one of the same flow.

    Entering while held raises :class:`DataFlowReentrantError`, a ``RuntimeError``.
    """

    __slots__ = ("_lock", "_owner")

    def __init__(self, owner: str = "This DataFlow") -> None:
        self._owner = owner
        self._lock = threading.Lock()

    def __enter__(self) -> DataFlowReentrantGuard:
        if not self._lock.acquire(blocking=False):
            raise DataFlowReentrantError(
                f"{self._owner} is not reentrant: it is already being iterated. Finish or close "
                "the previous iterator first (for example `it.close()`, or let the `for` loop "
                "end), or build a separate instance for each consumer."
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def check(self) -> None:
        """Raise now (not at the first ``next()``) if an iteration is alive: a flow calls it
        before its ``__iter__`` begins an epoch, so that a refused iteration changes nothing."""
        if self._lock.locked():
            self.__enter__()  # raises

    def __reduce__(self):  # a lock cannot be pickled; a copy starts unlocked
        return (DataFlowReentrantGuard, (self._owner,))


class Pacer:
    """How often a stage may save a state that costs time: at most one ``1/ratio`` of the time
    goes to saving. ``due()`` says whether it is time; ``saved(start)`` records one that began at
    ``perf_counter()`` value ``start``."""

    __slots__ = ("not_before", "ratio")

    def __init__(self, ratio: float = 200.0) -> None:
        self.ratio = ratio
        self.not_before = 0.0

    def due(self, now: float | None = None) -> bool:
        return (time.perf_counter() if now is None else now) >= self.not_before

    def saved(self, start: float) -> float:
        """Record a save that began at ``start``; returns the time it ended."""
        end = time.perf_counter()
        self.not_before = end + self.ratio * (end - start)
        return end


class EpochCounter:
    """Mixin: the ``(epoch, pos, done)`` counters of a stage and their life cycle.

    ``__iter__`` calls :meth:`_begin` itself (not lazily in its generator): the epoch belongs to
    the iterator from the moment it is created, since parents such as ``RandomMixData`` create
    their children's iterators up front. The generator calls :meth:`_end` when it is exhausted,
    and only then: an iterator closed before its end (a ``break``, an exception) leaves the
    epoch *unfinished* at the position it reached, so that a state saved after a ``break``
    resumes at the next datapoint; what the consumer did not receive is not consumed. In the
    same process, the next ``__iter__`` still starts a new epoch (only ``load_state_dict``
    continues one), as in tensorpack. A parent that abandons a child mid-epoch on purpose
    (``JoinData`` at its shortest child, ``FixedSizeData(keep_state=False)``) marks the child's
    state :func:`finished` itself.
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
        """The iterator ``token`` was exhausted: its epoch is over (a newer iterator may own the
        epoch by now). Not called for an iterator closed before its end."""
        if self._token is token:
            self._done = True

    def _counters(self) -> dict[str, Any]:
        return epoch_state(self._epoch - 1, self._pos, self._done)

    def restore_epoch(self, state: dict[str, Any]) -> None:
        """Restore the counters saved in ``state`` (and the seed, if it holds one): the next
        ``__iter__`` continues the saved epoch at ``pos``, or starts the next one if it was
        done. An iterator still alive no longer owns the epoch."""
        if SEED in state and hasattr(self, "_load_seed_state"):
            self._load_seed_state(state[SEED])
        self._epoch, self._pos, self._done = state[EPOCH] + 1, state[POS], state[DONE]
        self._resume = None if state[DONE] else state[POS]
        self._token = None


class ReaderState(EpochCounter):
    """Mixin: ``state_dict()`` / ``load_state_dict()`` of a finite reader with exact ``len``.

    Its state is ``{"type", "size", "shuffle", "epoch", "pos", "done"[, "seed"]}`` plus what
    :meth:`_state_extra` adds (an LMDB key, a TFRecord byte offset). Resuming never re-reads the
    delivered part: the readers seek (cursor key, byte offset, index arithmetic).
    """

    profile_hint: str | None = "reader"

    _shuffle: bool = False

    def _init_reader(self, shuffle: bool, seed: int | None) -> None:
        """The reader's settings (its counters start at their class defaults)."""
        self._shuffle = bool(shuffle)
        self.seed = seed
        self._guard = DataFlowReentrantGuard(type(self).__name__)

    def _begin_epoch(self) -> tuple[object, int, int]:
        """:meth:`_begin` and the index of the epoch: ``(token, epoch, start)``."""
        token, start = self._begin()
        return token, self._epoch - 1, start

    def _state_extra(self) -> dict[str, Any]:
        """Reader-specific entries of the state (positions in the file)."""
        return {}

    def _check_extra(self, state: dict[str, Any]) -> None:
        """Validate the reader-specific entries of ``state`` (before anything is restored)."""

    def _forget_iteration(self) -> None:
        """Drop what the reader keeps about the iteration in progress (cursors, batches)."""

    def state_dict(self) -> dict[str, Any]:
        """Epoch, position, size, shuffle and seed: the epoch's order is re-derived on resume
        and the reader seeks to the position; no datapoint is stored."""
        n = len(self)  # type: ignore[arg-type]
        state: dict[str, Any] = {
            TYPE: type(self).__name__, "size": n, "shuffle": self._shuffle,
            **epoch_state(self._epoch - 1, self._pos, self._done or self._pos >= n),
        }
        if self._shuffle:
            state[SEED] = self._seed_state()  # type: ignore[attr-defined]
        state.update(self._state_extra())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state of the same file (same number of datapoints) and ``shuffle``."""
        check_state(state, self, size=len(self), shuffle=self._shuffle)  # type: ignore[arg-type]
        pos = state.get(POS)
        n = len(self)  # type: ignore[arg-type]
        if not isinstance(pos, int) or isinstance(pos, bool) or not 0 <= pos <= n:
            raise mismatch(self, "a position in", f"[0, {n}]", pos, "the state is damaged.")
        if not state[DONE]:
            self._check_extra(state)
        self._forget_iteration()
        self.restore_epoch(state)


def replay_run(counter: EpochCounter, itr: Iterable[Any], token: object, start: int
               ) -> Iterator[Any]:
    """Yield ``itr`` for the epoch that ``counter`` began (``token``), counting positions from
    0 and skipping the first ``start`` (delivered before a restore): the replaying resume of
    flows that cannot seek."""
    counter._pos = 0
    for dp in itr:
        counter._pos += 1
        if counter._pos > start:
            yield dp
    counter._end(token)


class ReplayState(EpochCounter):
    """The counters of a user-defined flow, and its child's state at the start of the epoch."""

    child_start: dict[str, Any] | None = None

    def to_state(self, flow: Any) -> dict[str, Any]:
        return {TYPE: type(flow).__name__, "mode": "replay", **self._counters(),
                "child_start": self.child_start}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ReplayState:
        rs = cls()
        rs.restore_epoch(state)
        rs.child_start = state.get("child_start")
        return rs


def replaying_iter(fn: Callable[[Any], Iterable[Any]]) -> Callable[[Any], Iterator[Any]]:
    """Wrap a user flow's ``__iter__`` to count epochs and positions, and to replay an epoch up
    to the saved position after ``load_state_dict``. The epoch begins when ``__iter__`` is
    called; it is over when its iterator is exhausted. The flow's children (its
    ``children()``: by default its ``ds``) are restored to their state at the epoch's start."""

    @functools.wraps(fn)
    def __iter__(self: Any) -> Iterator[Any]:  # noqa: N807 (it becomes the class's __iter__)
        rs = self.__dict__.setdefault("_replay", ReplayState())
        restored = rs._resume is not None
        token, start = rs._begin()
        kids = self.children()
        child = kids[0] if len(kids) == 1 else None
        if child is not None:
            if not restored:  # a new epoch: remember where the child starts it
                rs.child_start = child_state(child)
            elif rs.child_start is not None:
                child.load_state_dict(rs.child_start)
        return replay_run(rs, fn(self), token, start)

    __iter__._replay_wrapped = True  # type: ignore[attr-defined]
    return __iter__
