"""``MapData``, ``MapDataComponent``, ``FilterData`` and ``SelectComponent``."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from dataflow.base import DataFlow, ProxyDataFlow
from dataflow.errors import UnknownLengthError

__all__ = ["FilterData", "MapData", "MapDataComponent", "SelectComponent"]


def _check_callable(func: Any, name: str) -> None:
    if not callable(func):
        raise TypeError(f"`{name}` must be callable, got {func!r} (type {type(func).__name__}).")


class MapData(ProxyDataFlow):
    """Yields ``func(dp)`` for each datapoint; a ``None`` result drops the datapoint.

    ``func`` receives a shallow copy of the datapoint (a new list or dict holding the same
    objects), so it may replace components but should not modify arrays in place.
    ``len`` is ``len(ds)``, accurate only if ``func`` never returns ``None``.
    """

    profile_hint = "map"

    def __init__(self, ds: DataFlow, func: Callable[[Any], Any]) -> None:
        super().__init__(ds)
        _check_callable(func, "func")
        self.func = func

    def __iter__(self) -> Iterator[Any]:
        # iter(ds) now, not at the first next(): the child's epoch begins with this iterator
        return self._run(iter(self.ds))

    def _run(self, itr: Iterator[Any]) -> Iterator[Any]:
        func = self.func
        for dp in itr:
            if type(dp) is list:
                dp = dp[:]
            elif isinstance(dp, dict):
                dp = dict(dp)
            ret = func(dp)
            if ret is not None:
                yield ret


class MapDataComponent(MapData):
    """Applies ``func`` to component ``index`` (an int or a dict key) of each datapoint.

    The result replaces that component in a shallow copy (tuples become lists); a ``None`` result
    drops the datapoint.
    """

    def __init__(self, ds: DataFlow, func: Callable[[Any], Any], index: Any = 0) -> None:
        ProxyDataFlow.__init__(self, ds)
        _check_callable(func, "func")
        self.func = func
        self.index = index

    def _run(self, itr: Iterator[Any]) -> Iterator[Any]:
        func, index = self.func, self.index
        for dp in itr:
            ret = func(dp[index])
            if ret is None:
                continue
            dp = dp[:] if type(dp) is list else dict(dp) if isinstance(dp, dict) else list(dp)
            dp[index] = ret
            yield dp


class FilterData(ProxyDataFlow):
    """Keeps the datapoints for which ``predicate(dp)`` is true. The length is unknown."""

    profile_hint = "map"

    def __init__(self, ds: DataFlow, predicate: Callable[[Any], bool]) -> None:
        super().__init__(ds)
        _check_callable(predicate, "predicate")
        self.predicate = predicate

    def __len__(self) -> int:
        raise UnknownLengthError(
            "FilterData has no length: it depends on how many datapoints pass the filter."
        )

    def __iter__(self) -> Iterator[Any]:
        return filter(self.predicate, self.ds)


class _Select:
    """Picklable ``dp -> [dp[i] for i in idxs]``."""

    __slots__ = ("idxs",)

    def __init__(self, idxs: Sequence[Any]) -> None:
        self.idxs = list(idxs)

    def __call__(self, dp: Any) -> list[Any]:
        return [dp[i] for i in self.idxs]


def SelectComponent(ds: DataFlow, idxs: Sequence[Any]) -> MapData:
    """A flow of ``[dp[i] for i in idxs]`` (always a list, also for dict datapoints)."""
    return MapData(ds, _Select(idxs))
