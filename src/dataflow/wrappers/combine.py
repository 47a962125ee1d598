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
from dataflow.state import EpochCounter, StateMismatchError, check_state, finished, state_done

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


class _Children(EpochCounter):
    """Mixin of the flows over several children: own counters (:class:`EpochCounter`) and the
    children's states under ``"children"``."""

    df_lists: list[DataFlow]
    _children_done: list[bool] | None = None  # after a restore: which children were at their end

    def children(self) -> list[DataFlow]:
        return list(self.df_lists)

    def _replace_child(self, old: DataFlow, new: DataFlow) -> None:
        self.df_lists = [new if df is old else df for df in self.df_lists]

    def _begin_children(self) -> tuple[object, int]:
        restored = self._resume is not None
        token, start = self._begin()
        if not restored:
            self._children_done = None
        return token, start

    def _iter_child(self, i: int) -> Any:
        """An iterator of child ``i``; empty if it was restored at the end of its epoch."""
        if self._children_done is not None and self._children_done[i]:
            return iter(())
        return iter(self.df_lists[i])

    def _children_state(self, **extra: Any) -> dict[str, Any]:
        return {"type": type(self).__name__, "num_flows": len(self.df_lists), **extra,
                **self._counters(), "children": [df.state_dict() for df in self.df_lists]}

    def _load_children(self, state: dict[str, Any], **expected: Any) -> None:
        check_state(state, self, num_flows=len(self.df_lists), **expected)
        if len({id(df) for df in self.df_lists}) != len(self.df_lists):
            raise StateMismatchError(
                f"{type(self).__name__} lists the same flow instance twice; its state cannot be "
                "restored. Use separate instances."
            )
        children = state["children"]
        self.restore_epoch(state)
        if state["done"]:
            children = finished(children)
            self._children_done = None
        else:
            self._children_done = [state_done(c) for c in children]
        for df, child in zip(self.df_lists, children):
            df.load_state_dict(child)


class _SeededChildren(_Children):
    """State of the random flows over several children: own counters (RandomChooseData: the
    number of picks), the seed (an epoch's draws are re-derived) and every child's state."""

    def reset_state(self) -> None:
        RNGDataFlow.reset_state(self)  # type: ignore[arg-type]
        _reset_distinct(self.df_lists)

    def close(self) -> None:
        _close_distinct(self.df_lists)

    def state_dict(self) -> dict[str, Any]:
        return self._children_state(seed=self._seed_state())  # type: ignore[attr-defined]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._load_children(state)
        self._load_seed_state(state["seed"])  # type: ignore[attr-defined]


class _MultiFlow(_Children, DataFlow):
    def reset_state(self) -> None:
        _reset_distinct(self.df_lists)

    def close(self) -> None:
        _close_distinct(self.df_lists)


class ConcatData(_MultiFlow):
    """Chains the flows one after another. ``len`` is the sum of the lengths."""

    def __init__(self, df_lists: Sequence[DataFlow]) -> None:
        self.df_lists = _check_flows(df_lists)
        self._current = 0  # index of the flow in progress

    def __len__(self) -> int:
        return sum(len(df) for df in self.df_lists)

    def __iter__(self) -> Iterator[Any]:
        restored = self._resume is not None
        token, _ = self._begin_children()
        if not restored:
            self._current = 0
        first = self._iter_child(self._current)  # the first child's epoch begins now
        return self._run(token, self._current, first)

    def _run(self, token: object, start: int, first: Iterator[Any]) -> Iterator[Any]:
        for i in range(start, len(self.df_lists)):
            self._current = i
            for dp in first if i == start else iter(self.df_lists[i]):
                self._pos += 1
                yield dp
        self._end(token)

    def state_dict(self) -> dict[str, Any]:
        """Own counters, the flow in progress and every child's state."""
        return self._children_state(current=self._current)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._load_children(state)
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
        return self._children_state()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._load_children(state)

    def __iter__(self) -> Iterator[Any]:
        token, _ = self._begin_children()
        return self._run(token, [self._iter_child(i) for i in range(len(self.df_lists))])

    def _run(self, token: object, itrs: list[Iterator[Any]]) -> Iterator[Any]:
        for dps in zip(*itrs):
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
        self._end(token)


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


class RandomChooseData(_SeededChildren, RNGDataFlow):
    """At each step yields the next datapoint of a randomly chosen flow.

    ``df_lists`` is a list of flows (equal probability) or of ``(flow, probability)`` pairs whose
    probabilities sum to 1 (within 1e-6). Stops as soon as the chosen flow is exhausted.
    The length is unknown.
    """

    def __init__(self, df_lists: Sequence[Any], *, seed: int | None = None) -> None:
        self.df_lists, self.probs = _parse_weighted(df_lists)
        self.seed = seed

    def __iter__(self) -> Iterator[Any]:
        token, start = self._begin_children()
        rng = self._epoch_rng(self._epoch - 1)
        itrs = [self._iter_child(i) for i in range(len(self.df_lists))]
        return self._run(token, start, rng, itrs)

    def _run(self, token: object, start: int, rng: Any, itrs: list[Any]) -> Iterator[Any]:
        n, probs = len(itrs), self.probs
        picks = 0
        while True:
            for k in rng.choice(n, size=_CHUNK, p=probs):
                picks += 1
                if picks <= start:  # restored: these picks were made before the save
                    continue
                try:
                    dp = next(itrs[k])
                except StopIteration:
                    self._end(token)
                    return
                self._pos += 1
                yield dp
        self._end(token)



_CHUNK = 256


class RandomMixData(_SeededChildren, RNGDataFlow):
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

    def __len__(self) -> int:
        return sum(len(df) for df in self.df_lists)

    def __iter__(self) -> Iterator[Any]:
        token, start = self._begin_children()
        rng = self._epoch_rng(self._epoch - 1)
        lens = [len(df) for df in self.df_lists]
        order = np.repeat(np.arange(len(lens)), lens)
        rng.shuffle(order)
        itrs = [self._iter_child(i) for i in range(len(self.df_lists))]
        return self._run(token, order[start:].tolist(), lens, itrs)

    def _run(self, token: object, order: list[int], lens: list[int], itrs: list[Any]
             ) -> Iterator[Any]:
        for k in order:
            try:
                dp = next(itrs[k])
            except StopIteration:
                raise DataFlowError(
                    f"RandomMixData: `df_lists[{k}]` ({type(self.df_lists[k]).__name__}) "
                    f"ended before yielding its len() = {lens[k]} datapoints; its length "
                    "must be exact."
                ) from None
            self._pos += 1
            yield dp
        self._end(token)

