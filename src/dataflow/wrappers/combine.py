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
    df_lists: list[DataFlow]

    def reset_state(self) -> None:
        _reset_distinct(self.df_lists)

    def close(self) -> None:
        _close_distinct(self.df_lists)


class ConcatData(_MultiFlow):
    """Chains the flows one after another. ``len`` is the sum of the lengths."""

    def __init__(self, df_lists: Sequence[DataFlow]) -> None:
        self.df_lists = _check_flows(df_lists)

    def __len__(self) -> int:
        return sum(len(df) for df in self.df_lists)

    def __iter__(self) -> Iterator[Any]:
        for df in self.df_lists:
            yield from df


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

    def __iter__(self) -> Iterator[Any]:
        for dps in zip(*self.df_lists):
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
        self._epoch = 0

    def reset_state(self) -> None:
        super().reset_state()
        _reset_distinct(self.df_lists)

    def close(self) -> None:
        _close_distinct(self.df_lists)

    def __iter__(self) -> Iterator[Any]:
        rng = self._epoch_rng(self._epoch)
        self._epoch += 1
        itrs = [iter(df) for df in self.df_lists]
        n, probs = len(itrs), self.probs
        while True:
            for k in rng.choice(n, size=256, p=probs):
                try:
                    yield next(itrs[k])
                except StopIteration:
                    return


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
        self._epoch = 0

    def reset_state(self) -> None:
        super().reset_state()
        _reset_distinct(self.df_lists)

    def close(self) -> None:
        _close_distinct(self.df_lists)

    def __len__(self) -> int:
        return sum(len(df) for df in self.df_lists)

    def __iter__(self) -> Iterator[Any]:
        rng = self._epoch_rng(self._epoch)
        self._epoch += 1
        lens = [len(df) for df in self.df_lists]
        order = np.repeat(np.arange(len(lens)), lens)
        rng.shuffle(order)
        itrs = [iter(df) for df in self.df_lists]
        for k in order.tolist():
            try:
                dp = next(itrs[k])
            except StopIteration:
                raise DataFlowError(
                    f"RandomMixData: `df_lists[{k}]` ({type(self.df_lists[k]).__name__}) ended "
                    f"before yielding its len() = {lens[k]} datapoints; its length must be exact."
                ) from None
            yield dp
