"""The DataFlow protocol: ``DataFlow``, ``ProxyDataFlow``, ``RNGDataFlow``.

A DataFlow is an iterable of datapoints. A datapoint is a ``list`` of components (preferred) or
a ``dict``. The contract, kept from tensorpack:

* ``reset_state()`` must be called **once, by the process that iterates the flow**, before the
  first ``__iter__``. It does process-local set-up: deriving random streams, opening database
  handles, starting workers. After it, a flow is not fork-safe. Wrappers forward it.
* ``__iter__()`` yields the datapoints of one epoch. A finite flow can be iterated again right
  after an iteration finished. Many flows are *not reentrant*: iterating one while a previous
  iteration is alive raises :class:`~dataflow.errors.DataFlowReentrantError` (a ``RuntimeError``).
* ``__len__()`` is the number of datapoints of one epoch. Where it is unknown it raises
  :class:`~dataflow.errors.UnknownLengthError`, a ``NotImplementedError`` that is also a
  ``TypeError`` so that ``list(df)`` still works. It is accurate only where the docstring says so.
* ``close()`` releases what the flow started (workers, sockets, handles); it is idempotent and
  cascades to the flows it wraps. Every flow is a context manager that closes on exit.

The legacy names ``get_data()`` and ``size()`` keep working, both for calling and for defining:
a subclass that only defines ``get_data``/``size`` gets ``__iter__``/``__len__`` from them.
"""

from __future__ import annotations

import functools
import threading
from abc import ABCMeta, abstractmethod
from collections.abc import Iterator
from typing import Any

import numpy as np

from dataflow import rng as _rng
from dataflow.errors import DataFlowReentrantError, DataFlowTerminated, UnknownLengthError
from dataflow.state import EpochCounter, StateMismatchError, check_state, replay_run

__all__ = [
    "DataFlow",
    "DataFlowReentrantGuard",
    "DataFlowTerminated",
    "ProxyDataFlow",
    "RNGDataFlow",
]


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

    def __reduce__(self):  # a lock cannot be pickled; a copy starts unlocked
        return (DataFlowReentrantGuard, (self._owner,))


class DataFlowMeta(ABCMeta):
    """Maps the legacy ``get_data``/``size`` definitions onto ``__iter__``/``__len__``, and gives
    user-defined flows that do not implement ``state_dict`` a replaying one (see
    :meth:`DataFlow.state_dict`)."""

    def __new__(mcls, name, bases, namespace, **kwargs):
        if "get_data" in namespace and "__iter__" not in namespace:
            namespace["__iter__"] = namespace["get_data"]
        if "size" in namespace and "__len__" not in namespace:
            namespace["__len__"] = namespace["size"]
        module = namespace.get("__module__", "")
        builtin = module == "dataflow" or module.startswith("dataflow.")
        if (
            not builtin
            and "__iter__" in namespace
            and "state_dict" not in namespace
            and not getattr(namespace["__iter__"], "_replay_wrapped", False)
        ):
            namespace["__iter__"] = _replaying_iter(namespace["__iter__"])
            # a replaying flow saves its own position, even if a base class delegates
            namespace["state_dict"] = DataFlow.state_dict
            namespace["load_state_dict"] = DataFlow.load_state_dict
        return super().__new__(mcls, name, bases, namespace, **kwargs)


class _ReplayState(EpochCounter):
    """The counters of a user-defined flow, and its child's state at the start of the epoch."""

    child_start: dict[str, Any] | None = None


def _replaying_iter(fn):
    """Wrap a user flow's ``__iter__`` to count epochs and positions, and to replay an epoch up
    to the saved position after ``load_state_dict``. The epoch begins when ``__iter__`` is
    called; it is over when its iterator is exhausted or closed."""

    @functools.wraps(fn)
    def __iter__(self):  # noqa: N807 (it becomes the class's __iter__)
        rs = self.__dict__.setdefault("_replay", _ReplayState())
        restored = rs._resume is not None
        token, start = rs._begin()
        child = getattr(self, "ds", None)
        if isinstance(child, DataFlow):
            if not restored:  # a new epoch: remember where the child starts it
                try:
                    rs.child_start = child.state_dict()
                except NotImplementedError:
                    rs.child_start = None
            elif rs.child_start is not None:
                child.load_state_dict(rs.child_start)
        return replay_run(rs, fn(self), token, start)

    __iter__._replay_wrapped = True
    return __iter__


class DataFlow(metaclass=DataFlowMeta):
    """Base class of every dataflow. See the module docstring for the contract."""

    @abstractmethod
    def __iter__(self) -> Iterator[Any]:
        """Yield the datapoints of one epoch."""

    def __len__(self) -> int:
        raise UnknownLengthError(
            f"{type(self).__name__} does not know its length; iterate it to count, or wrap it "
            "in FixedSizeData(df, size) to give it one."
        )

    def __bool__(self) -> bool:
        # A flow is a thing, not a container: `if df:` must not depend on (or fail on) its length.
        return True

    def reset_state(self) -> None:
        """Process-local initialization; call once, in the process that iterates."""

    def close(self) -> None:
        """Release resources started by this flow. Idempotent; the default does nothing."""

    def __enter__(self) -> DataFlow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # resumable iteration
    def state_dict(self) -> dict[str, Any]:
        """The iteration state: a small JSON-serializable dict (see :mod:`dataflow.state`).

        Built-in flows save exact counters, seeds and their children's states. A user-defined
        flow that does not implement ``state_dict`` gets this default, which records the epoch and
        the position in it (and the state of ``self.ds`` at the start of the epoch, if any) and
        *replays* the epoch up to that position on resume: exact when the flow yields the same
        datapoints for the same input, which random flows drawing from a continuing stream do not.
        """
        rs = self.__dict__.get("_replay")
        if rs is None and not getattr(type(self).__iter__, "_replay_wrapped", False):
            raise NotImplementedError(
                f"{type(self).__name__} cannot save its iteration state: implement "
                "state_dict() and load_state_dict() for it."
            )
        rs = rs or _ReplayState()
        return {"type": type(self).__name__, "mode": "replay", **rs._counters(),
                "child_start": rs.child_start}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`; the next ``__iter__`` continues from it."""
        if not getattr(type(self).__iter__, "_replay_wrapped", False):
            raise NotImplementedError(
                f"{type(self).__name__} cannot restore an iteration state: implement "
                "state_dict() and load_state_dict() for it."
            )
        check_state(state, self, mode="replay")
        rs = _ReplayState()
        rs._restore_counters(state)
        rs.child_start = state.get("child_start")
        self.__dict__["_replay"] = rs

    # legacy names
    def get_data(self) -> Iterator[Any]:
        """Legacy alias of ``__iter__``."""
        return self.__iter__()

    def size(self) -> int:
        """Legacy alias of ``__len__``."""
        return self.__len__()


class ProxyDataFlow(DataFlow):
    """Base class of flows that wrap one other flow, ``self.ds``; forwards the whole contract."""

    def __init__(self, ds: DataFlow) -> None:
        if not isinstance(ds, DataFlow):
            raise TypeError(
                f"`ds` must be a DataFlow, got {type(ds).__name__}; wrap a list with "
                "DataFromList(lst, shuffle=False) or any iterable with DataFromIterable(it)."
            )
        self.ds = ds

    def reset_state(self) -> None:
        self.ds.reset_state()

    def __len__(self) -> int:
        return len(self.ds)

    def __iter__(self) -> Iterator[Any]:
        return self.ds.__iter__()

    def close(self) -> None:
        self.ds.close()

    def state_dict(self) -> dict[str, Any]:
        """The wrapped flow's state (a proxy that yields what ``ds`` yields has none of its own)."""
        return {"type": type(self).__name__, "child": self.ds.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state(state, self)
        self.ds.load_state_dict(state["child"])


class RNGDataFlow(DataFlow):
    """A flow that owns a random stream, ``self.rng`` (a ``numpy.random.RandomState``).

    ``reset_state()`` derives ``self.rng`` from ``self.seed`` (a constructor argument of every
    random flow), else the global :func:`dataflow.set_seed`, else fresh OS entropy; mixed with
    the stage's ordinal and the worker id (see :mod:`dataflow.rng`). Built-in flows draw a new,
    derived stream for every epoch, so an epoch can be reproduced from (seed, epoch) alone.
    """

    rng: np.random.RandomState | None = None
    seed: int | None = None
    _seed_seq: np.random.SeedSequence | None = None
    _rng_stage: int | None = None

    def _derive_seed_sequence(self) -> np.random.SeedSequence:
        if self.seed is not None:  # an explicit seed does not depend on other stages
            return _rng.derive_seed_sequence(self.seed, 0)
        if self._rng_stage is None:
            self._rng_stage = _rng.next_stage_ordinal()
        return _rng.derive_seed_sequence(None, self._rng_stage)

    def reset_state(self) -> None:
        self._seed_seq = self._derive_seed_sequence()
        self.rng = _rng.rng_from_sequence(self._seed_seq)

    def _seed_state(self) -> dict[str, Any]:
        """The seed of this stage's streams, to store in its state (ints, JSON-safe)."""
        if self._seed_seq is None:
            self.reset_state()
        assert self._seed_seq is not None
        return {"entropy": int(self._seed_seq.entropy),
                "spawn_key": [int(k) for k in self._seed_seq.spawn_key]}

    def _load_seed_state(self, seed: dict[str, Any]) -> None:
        try:
            self._seed_seq = np.random.SeedSequence(int(seed["entropy"]),
                                                    spawn_key=tuple(seed["spawn_key"]))
        except (KeyError, TypeError, ValueError) as e:
            raise StateMismatchError(
                f"state for stage {type(self).__name__}: expected a seed "
                f"{{'entropy': int, 'spawn_key': [int, ...]}}, found {seed!r}."
            ) from e
        self.rng = _rng.rng_from_sequence(self._seed_seq)

    def _epoch_rng(self, epoch: int) -> np.random.RandomState:
        """The stream of epoch ``epoch``: a pure function of (seed, stage, worker, epoch)."""
        if self._seed_seq is None:
            self.reset_state()
        assert self._seed_seq is not None
        return _rng.rng_from_sequence(self._seed_seq, epoch + 1)
