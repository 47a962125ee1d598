"""Flows that combine several flows: ``ConcatData``, ``JoinData``, ``RandomChooseData``,
``RandomMixData``."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from dataflow.base import DataFlow, RNGDataFlow
from dataflow.errors import DataFlowError, UnknownLengthError
from dataflow.state import StateMismatchError, check_state, epoch_state, finished, state_done

__all__ = ["ConcatData", "JoinData", "RandomChooseData", "RandomMixData"]

log = logging.getLogger(__name__)


def _check_flows(df_lists: Any, name: str = "df_lists") -> list[DataFlow]:
    if not isinstance(df_lists, list | tuple) or not df_lists:
        raise ValueError(f"`{name}` must be a non-empty list of DataFlows, got {df_lists!r}.")
    for i, df in enumerate(df_lists):
        if not isinstance(df, DataFlow):
            raise TypeError(
                f"`{name}[{i}]` must be a DataFlow, got {type(df).__name__}; wrap lists with "
                "DataFromList."
            )
    return list(df_lists)


def _reset_distinct(flows: Sequence[DataFlow]) -> None:
    seen: set[int] = set()
    for df in flows:
        if id(df) not in seen:
            seen.add(id(df))
            df.reset_state()


def _close_distinct(flows: Sequence[DataFlow]) -> None:
    seen: set[int] = set()
    for df in flows:
        if id(df) not in seen:
            seen.add(id(df))
            df.close()


class _MultiFlow(DataFlow):
    """Shared bookkeeping of the flows over several children: own (epoch, pos, done) counters
    and the children's states under ``"children"``."""

    df_lists: list[DataFlow]
    _epoch = 0
    _pos = 0
    _done = True
    _resume: int | None = None
    _children_done: list[bool] | None = None  # after a restore: which children were at their end

    def reset_state(self) -> None:
        _reset_distinct(self.df_lists)

    def close(self) -> None:
        _close_distinct(self.df_lists)

    def _begin(self) -> int:
        """Start the next epoch, or continue a restored one; returns the start position."""
        start, self._resume = self._resume, None
        if start is None:
            self._epoch += 1
            start = 0
            self._children_done = None
        self._pos, self._done = start, False
        return start

    def _iter_child(self, i: int) -> Any:
        """An iterator of child ``i``; empty if it was restored at the end of its epoch."""
        if self._children_done is not None and self._children_done[i]:
            return iter(())
        return iter(self.df_lists[i])

    def _counters_state(self, **extra: Any) -> dict[str, Any]:
        return {"type": type(self).__name__, "num_flows": len(self.df_lists), **extra,
                **epoch_state(self._epoch - 1, self._pos, self._done),
                "children": [df.state_dict() for df in self.df_lists]}

    def _load_counters(self, state: dict[str, Any], **expected: Any) -> None:
        check_state(state, self, num_flows=len(self.df_lists), **expected)
        children = state["children"]
        self._epoch, self._pos, self._done = state["epoch"] + 1, state["pos"], state["done"]
        if state["done"]:
            children = finished(children)
            self._resume, self._children_done = None, None
        else:
            self._resume = state["pos"]
            self._children_done = [state_done(c) for c in children]
        if len({id(df) for df in self.df_lists}) != len(self.df_lists):
            raise StateMismatchError(
                f"{type(self).__name__} lists the same flow instance twice; its state cannot be "
                "restored. Use separate instances."
            )
        for df, child in zip(self.df_lists, children):
            df.load_state_dict(child)


class ConcatData(_MultiFlow):
    """Chains the flows one after another. ``len`` is the sum of the lengths."""

    def __init__(self, df_lists: Sequence[DataFlow]) -> None:
        self.df_lists = _check_flows(df_lists)
        self._current = 0  # index of the flow in progress

    def __len__(self) -> int:
        return sum(len(df) for df in self.df_lists)

    def __iter__(self) -> Iterator[Any]:
        self._begin()
        first = self._current
        for i in range(first, len(self.df_lists)):
            self._current = i
            for dp in self._iter_child(i) if i == first else iter(self.df_lists[i]):
                self._pos += 1
                yield dp
        self._current, self._done = 0, True

    def state_dict(self) -> dict[str, Any]:
        """Own counters, the flow in progress and every child's state."""
        return self._counters_state(current=self._current)

    def _begin(self) -> int:
        if self._resume is None:
            self._current = 0
        return super()._begin()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._load_counters(state)
        self._current = 0 if state["done"] else int(state["current"])


class JoinData(_MultiFlow):
    """Zips the flows: list datapoints are concatenated, dict datapoints merged (later keys win).

    Stops at the shortest flow; ``len`` is the minimum length. All flows must yield the same
    kind of datapoint (all lists or all dicts).
    """

    def __init__(self, df_lists: Sequence[DataFlow]) -> None:
        self.df_lists = _check_flows(df_lists)
        try:
            lens = [len(df) for df in self.df_lists]
        except NotImplementedError:
            return
        if len(set(lens)) > 1:
            log.warning("JoinData: the flows have different lengths %s; it stops at the shortest.",
                        lens)

    def __len__(self) -> int:
        return min(len(df) for df in self.df_lists)

    def state_dict(self) -> dict[str, Any]:
        """Own counters and every child's state."""
        return self._counters_state()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._load_counters(state)

    def __iter__(self) -> Iterator[Any]:
        self._begin()
        for dps in zip(*(self._iter_child(i) for i in range(len(self.df_lists)))):
            self._pos += 1
            first = dps[0]
            if isinstance(first, dict):
                out: Any = {}
                for i, dp in enumerate(dps):
                    if not isinstance(dp, dict):
                        raise TypeError(_mixed_message(dps, i))
                    out.update(dp)
            else:
                out = []
                for i, dp in enumerate(dps):
                    if isinstance(dp, dict):
                        raise TypeError(_mixed_message(dps, i))
                    out.extend(dp)
            yield out
        self._done = True


def _mixed_message(dps: Sequence[Any], i: int) -> str:
    kinds = [type(dp).__name__ for dp in dps]
    return (
        f"JoinData cannot join datapoints of different kinds {kinds} (flow {i} differs): make "
        "every flow yield lists, or every flow yield dicts."
    )


def _parse_weighted(df_lists: Any) -> tuple[list[DataFlow], np.ndarray]:
    if not isinstance(df_lists, list | tuple) or not df_lists:
        raise ValueError(f"`df_lists` must be a non-empty list, got {df_lists!r}.")
    if all(isinstance(x, list | tuple) and len(x) == 2 for x in df_lists):
        flows = _check_flows([x[0] for x in df_lists])
        probs = np.asarray([float(x[1]) for x in df_lists], dtype=np.float64)
        if (probs < 0).any() or not math.isclose(probs.sum(), 1.0, rel_tol=0, abs_tol=1e-6):
            raise ValueError(
                f"RandomChooseData: the probabilities {probs.tolist()} must be >= 0 and sum to 1 "
                f"(they sum to {probs.sum()!r}); normalize them."
            )
        return flows, probs / probs.sum()
    flows = _check_flows(df_lists)
    return flows, np.full(len(flows), 1.0 / len(flows))


class RandomChooseData(RNGDataFlow):
    """At each step yields the next datapoint of a randomly chosen flow.

    ``df_lists`` is a list of flows (equal probability) or of ``(flow, probability)`` pairs whose
    probabilities sum to 1 (within 1e-6). Stops as soon as the chosen flow is exhausted.
    The length is unknown.
    """

    def __init__(self, df_lists: Sequence[Any], *, seed: int | None = None) -> None:
        self.df_lists, self.probs = _parse_weighted(df_lists)
        self.seed = seed
        self._epoch, self._pos, self._done = 0, 0, True
        self._resume: int | None = None
        self._children_done: list[bool] | None = None

    def reset_state(self) -> None:
        super().reset_state()
        _reset_distinct(self.df_lists)

    def close(self) -> None:
        _close_distinct(self.df_lists)

    def __iter__(self) -> Iterator[Any]:
        start = _MultiFlow._begin(self)  # type: ignore[arg-type]
        rng = self._epoch_rng(self._epoch - 1)
        itrs = [_MultiFlow._iter_child(self, i) for i in range(len(self.df_lists))]  # type: ignore[arg-type]
        n, probs = len(itrs), self.probs
        picks = 0
        while True:
            for k in rng.choice(n, size=_CHUNK, p=probs):
                picks += 1
                if picks <= start:  # restored: these picks were made before the state was saved
                    continue
                try:
                    dp = next(itrs[k])
                except StopIteration:
                    self._done = True
                    return
                self._pos += 1
                yield dp

    def state_dict(self) -> dict[str, Any]:
        """Own counters (the number of picks), the seed and every child's state."""
        return _MultiFlow._counters_state(self, seed=self._seed_state())  # type: ignore[arg-type]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _MultiFlow._load_counters(self, state)  # type: ignore[arg-type]
        self._load_seed_state(state["seed"])


_CHUNK = 256


class RandomMixData(RNGDataFlow):
    """Mixes the flows at random so that each is consumed exactly ``len(flow)`` times.

    Needs the length of every flow; ``len`` is their sum. A flow that yields fewer datapoints
    than its ``len`` raises :class:`DataFlowError` naming it.
    """

    def __init__(self, df_lists: Sequence[DataFlow], *, seed: int | None = None) -> None:
        self.df_lists = _check_flows(df_lists)
        for i, df in enumerate(self.df_lists):
            try:
                len(df)
            except NotImplementedError as e:
                raise UnknownLengthError(
                    f"RandomMixData needs the length of every flow; `df_lists[{i}]` "
                    f"({type(df).__name__}) has none. Use RandomChooseData instead."
                ) from e
        self.seed = seed
        self._epoch, self._pos, self._done = 0, 0, True
        self._resume: int | None = None
        self._children_done: list[bool] | None = None

    def reset_state(self) -> None:
        super().reset_state()
        _reset_distinct(self.df_lists)

    def close(self) -> None:
        _close_distinct(self.df_lists)

    def __len__(self) -> int:
        return sum(len(df) for df in self.df_lists)

    def __iter__(self) -> Iterator[Any]:
        start = _MultiFlow._begin(self)  # type: ignore[arg-type]
        rng = self._epoch_rng(self._epoch - 1)
        lens = [len(df) for df in self.df_lists]
        order = np.repeat(np.arange(len(lens)), lens)
        rng.shuffle(order)
        itrs = [_MultiFlow._iter_child(self, i) for i in range(len(self.df_lists))]  # type: ignore[arg-type]
        for k in order[start:].tolist():
            try:
                dp = next(itrs[k])
            except StopIteration:
                raise DataFlowError(
                    f"RandomMixData: `df_lists[{k}]` ({type(self.df_lists[k]).__name__}) ended "
                    f"before yielding its len() = {lens[k]} datapoints; its length must be exact."
                ) from None
            self._pos += 1
            yield dp
        self._done = True

    def state_dict(self) -> dict[str, Any]:
        """Own counters, the seed (the order of an epoch is re-derived) and the children's."""
        return _MultiFlow._counters_state(self, seed=self._seed_state())  # type: ignore[arg-type]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _MultiFlow._load_counters(self, state)  # type: ignore[arg-type]
        self._load_seed_state(state["seed"])
