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
* ``children()`` lists the flows a flow iterates; ``replace_child(old, new)`` makes it read
  ``new`` in the place of one of them (before ``reset_state()``), wherever it holds it.

The legacy names ``get_data()`` and ``size()`` keep working, both for calling and for defining:
a subclass that only defines ``get_data``/``size`` gets ``__iter__``/``__len__`` from them.
"""

from __future__ import annotations

import functools
from abc import ABCMeta, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from dataflow import rng as _rng
from dataflow.errors import (
    DataFlowError,
    DataFlowTerminated,
    StateMismatchError,
    UnknownLengthError,
)
from dataflow.state import (
    DataFlowReentrantGuard,
    ReplayState,
    check_state,
    replaying_iter,
    rng_from_state,
    rng_state,
)

__all__ = [
    "DataFlow",
    "DataFlowReentrantGuard",
    "DataFlowTerminated",
    "ProxyDataFlow",
    "RNGDataFlow",
]


class DataFlowMeta(ABCMeta):
    """Maps the legacy ``get_data``/``size`` definitions onto ``__iter__``/``__len__``; makes
    every ``reset_state()`` assign the pipeline's stage paths when it is the outermost one (see
    :mod:`dataflow.rng`); lets :func:`instrument` observe each stage's iterators; and gives
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
            namespace["__iter__"] = replaying_iter(namespace["__iter__"])
            # a replaying flow saves its own position, even if a base class delegates
            namespace["state_dict"] = DataFlow.state_dict
            namespace["load_state_dict"] = DataFlow.load_state_dict
        if "reset_state" in namespace and not hasattr(namespace["reset_state"], "_scoped"):
            namespace["reset_state"] = _scoped_reset(namespace["reset_state"])
        if "__iter__" in namespace and not hasattr(namespace["__iter__"], "_probed"):
            namespace["__iter__"] = _probed_iter(namespace["__iter__"])
        cls = super().__new__(mcls, name, bases, namespace, **kwargs)
        reset = getattr(cls, "reset_state", None)
        if reset is not None and not hasattr(reset, "_scoped"):  # inherited from a mixin
            cls.reset_state = _scoped_reset(reset)
        return cls


def _scoped_reset(fn):
    """``reset_state`` inside :func:`dataflow.rng.reset_scope`: the outermost call (the user's)
    makes its flow the root of the stage paths."""

    @functools.wraps(fn)
    def reset_state(self):
        with _rng.reset_scope(self):
            return fn(self)

    reset_state._scoped = True
    return reset_state


def _probed_iter(fn):
    """``__iter__`` that hands the iterator to the stage's probe, if :func:`instrument` set one
    (only the most derived ``__iter__`` does, so a ``super().__iter__()`` is not seen twice)."""

    @functools.wraps(fn)
    def __iter__(self):  # noqa: N807 (it becomes the class's __iter__)
        itr = fn(self)
        probe = self.__dict__.get("_probe")
        if probe is None or type(self).__iter__ is not __iter__:
            return itr
        return probe(self, itr)

    __iter__._probed = True
    if hasattr(fn, "_replay_wrapped"):
        __iter__._replay_wrapped = True
    return __iter__


def instrument(flow: DataFlow, probe: Callable[[DataFlow, Iterator[Any]], Iterator[Any]] | None
               ) -> None:
    """Observe ``flow``'s iterations: each ``iter(flow)`` returns ``probe(flow, iterator)``
    instead of the iterator (``None`` removes the probe). Used by :func:`dataflow.profile`."""
    if probe is None:
        flow.__dict__.pop("_probe", None)
    else:
        flow.__dict__["_probe"] = probe


class DataFlow(metaclass=DataFlowMeta):
    """Base class of every dataflow. See the module docstring for the contract."""

    #: what kind of stage this is, for :func:`dataflow.profile`'s advice: ``"map"``,
    #: ``"batch"``, ``"buffer"`` (shuffles or caches), ``"reader"`` (reads a file),
    #: ``"thread-map"`` / ``"process-map"`` / ``"ray-map"`` (parallel mappers), ``"runner"``,
    #: ``"remote"``; ``None``: any other (a stage without children is a source).
    profile_hint: str | None = None

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

    def children(self) -> list[DataFlow]:
        """The flows this flow iterates, in a fixed order (the order that gives their paths in
        :mod:`dataflow.rng`). Built-in flows say it; for any other flow the default is its
        ``ds`` attribute when that is a DataFlow (the tensorpack convention), else none."""
        ds = self.__dict__.get("ds")
        return [ds] if isinstance(ds, DataFlow) else []

    def replace_child(self, old: DataFlow, new: DataFlow) -> None:
        """Make this flow read ``new`` where it read ``old``, one of its :meth:`children`
        (every place it holds it: a mapper's checkpoints of it too). Call it before
        ``reset_state()``: a stage whose workers run keeps reading what they were given.

        Checks the arguments, then calls the hook :meth:`_replace_child`. Built-in flows
        implement the hook; a flow that keeps its child as ``ds`` and does not override
        ``children()`` gets one that sets ``ds``; any other flow raises ``NotImplementedError``
        until it implements ``_replace_child``."""
        if not isinstance(new, DataFlow):
            raise TypeError(f"`new` must be a DataFlow, got {type(new).__name__} {new!r:.60}; "
                            "wrap a list with DataFromList(lst, shuffle=False).")
        children = self.children()
        if not any(child is old for child in children):
            names = [type(child).__name__ for child in children]
            raise ValueError(f"`old` ({type(old).__name__}) is not a child of "
                             f"{type(self).__name__}, whose children() are {names}; pass one "
                             "of them (the very object, not an equal one).")
        self._replace_child(old, new)
        if any(child is old for child in self.children()) and old is not new:
            raise RuntimeError(f"{type(self).__name__}._replace_child left `old` among its "
                               "children(); it must replace every place that holds it.")

    def _replace_child(self, old: DataFlow, new: DataFlow) -> None:
        """Hook of :meth:`replace_child` (``old`` is one of :meth:`children`): put ``new`` in
        its place in every attribute that holds it."""
        if type(self).children is DataFlow.children:  # (the child is `ds`: the default)
            self.__dict__["ds"] = new
            return
        raise NotImplementedError(
            f"{type(self).__name__} cannot replace its child {type(old).__name__}: it says "
            "its children() but not how to replace one. Implement "
            "_replace_child(self, old, new) to put `new` everywhere it holds `old`.")

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
        the position in it (and the state of its child at the start of the epoch, if any) and
        *replays* the epoch up to that position on resume: exact when the flow yields the same
        datapoints for the same input, which random flows drawing from a continuing stream do not.
        """
        rs = self.__dict__.get("_replay")
        if rs is None and not getattr(type(self).__iter__, "_replay_wrapped", False):
            raise NotImplementedError(
                f"{type(self).__name__} cannot save its iteration state: implement "
                "state_dict() and load_state_dict() for it."
            )
        return (rs or ReplayState()).to_state(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`; the next ``__iter__`` continues from it."""
        if not getattr(type(self).__iter__, "_replay_wrapped", False):
            raise NotImplementedError(
                f"{type(self).__name__} cannot restore an iteration state: implement "
                "state_dict() and load_state_dict() for it."
            )
        check_state(state, self, mode="replay")
        self.__dict__["_replay"] = ReplayState.from_state(state)

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

    def children(self) -> list[DataFlow]:
        return [self.ds]

    def _replace_child(self, old: DataFlow, new: DataFlow) -> None:
        self.ds = new

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

    ``reset_state()`` derives the stage's streams from ``self.seed`` (a constructor argument of
    every random flow), else the global :func:`dataflow.set_seed`, else fresh OS entropy, and
    from the stage's path in its pipeline and the runner worker it runs in (see
    :mod:`dataflow.rng`). Built-in flows draw a new, derived stream for every epoch, so an epoch
    can be reproduced from (seed, path, epoch) alone.

    As in tensorpack, assigning ``ds.rng = np.random.RandomState(42)`` after ``reset_state()``
    pins the stage: every epoch then draws from that generator, continuing it. The next
    ``reset_state()`` unpins it. Iterating a random stage before ``reset_state()`` raises.
    """

    seed: int | None = None
    _seed_seq: np.random.SeedSequence | None = None
    _stream: np.random.RandomState | None = None  # the stage's own stream
    _pinned: np.random.RandomState | None = None  # a generator assigned by the user
    _pinned_start: dict[str, Any] | None = None  # its state when the epoch in progress began

    @property
    def rng(self) -> np.random.RandomState | None:
        """The stage's generator: the one the user assigned, else its derived stream."""
        return self._pinned if self._pinned is not None else self._stream

    @rng.setter
    def rng(self, value: np.random.RandomState | None) -> None:
        self._pinned = value

    def reset_state(self) -> None:
        self._seed_seq = _rng.stage_sequence(self.seed, _rng.path_of(self))
        self._stream = _rng.derive_rng(self._seed_seq)
        self._pinned = self._pinned_start = None

    def _sequence(self) -> np.random.SeedSequence:
        """The stage's seed sequence (derived without storing it before ``reset_state()``)."""
        if self._seed_seq is not None:
            return self._seed_seq
        return _rng.stage_sequence(self.seed, _rng.path_of(self))

    def _seed_state(self) -> dict[str, Any]:
        """The seed of this stage's streams, to store in its state (ints, JSON-safe)."""
        entropy, spawn_key = _rng.seed_words(self._sequence())
        state: dict[str, Any] = {"entropy": entropy, "spawn_key": list(spawn_key)}
        if self._pinned is not None:
            state["pinned"] = self._pinned_start
        return state

    def _load_seed_state(self, seed: dict[str, Any]) -> None:
        try:
            self._seed_seq = np.random.SeedSequence(int(seed["entropy"]),
                                                    spawn_key=tuple(seed["spawn_key"]))
        except (KeyError, TypeError, ValueError) as e:
            raise StateMismatchError(
                f"state for stage {type(self).__name__}: expected a seed "
                f"{{'entropy': int, 'spawn_key': [int, ...]}}, found {seed!r}."
            ) from e
        self._stream = _rng.derive_rng(self._seed_seq)
        pinned = seed.get("pinned")
        if pinned is not None:
            self._pinned = rng_from_state(pinned)

    def _epoch_rng(self, epoch: int) -> np.random.RandomState:
        """The stream of epoch ``epoch``: a pure function of (seed, path, worker, epoch), or
        the pinned generator."""
        if self._pinned is not None:
            try:
                self._pinned_start = rng_state(self._pinned)
            except (AttributeError, KeyError, TypeError, ValueError):
                self._pinned_start = None  # not an MT19937 RandomState: cannot be saved
            return self._pinned
        self._require_reset()
        assert self._seed_seq is not None
        return _rng.epoch_rng(self._seed_seq, epoch)

    def _require_reset(self) -> None:
        """Raise the error of a random stage iterated before ``reset_state()``."""
        if self.rng is None:
            raise DataFlowError(
                f"{type(self).__name__} was iterated before reset_state(): call "
                "reset_state() once, in the process that iterates, before iterating it (it "
                "derives the stage's random streams)."
            )
