"""``MapData``, ``MapDataComponent``, ``FilterData`` and ``SelectComponent``."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from dataflow.base import DataFlow, ProxyDataFlow
from dataflow.errors import UnknownLengthError
from dataflow.policy import ErrorPolicy, make_policy
from dataflow.state import check_state
from dataflow.validation import check_callable, known_length

__all__ = ["FilterData", "MapData", "MapDataComponent", "SelectComponent"]


class MapData(ProxyDataFlow):
    """Yields ``func(dp)`` for each datapoint; a ``None`` result drops the datapoint.

    ``func`` receives a shallow copy of the datapoint (a new list or dict holding the same
    objects), so it may replace components but should not modify arrays in place.
    ``len`` is ``len(ds)``, accurate only if ``func`` never returns ``None``.

    ``on_error`` / ``max_errors``: what to do when ``func`` raises (see :mod:`dataflow.policy`):
    ``"raise"`` (default), ``"skip"`` or ``"warn"`` (drop the datapoint and count it, and log it).
    """

    profile_hint = "map"
    error_policy: ErrorPolicy | None = None

    def __init__(self, ds: DataFlow, func: Callable[[Any], Any], *, on_error: str = "raise",
                 max_errors: int | float | None = None) -> None:
        super().__init__(ds)
        self.func = check_callable(func, "func")
        self._set_policy(on_error, max_errors)

    def _set_policy(self, on_error: str, max_errors: int | float | None) -> None:
        self.on_error, self.max_errors = on_error, max_errors
        self.error_policy = make_policy(type(self).__name__, on_error, max_errors)
        self._restored = False  # the next __iter__ continues the counts of a restored epoch

    def __iter__(self) -> Iterator[Any]:
        # iter(ds) now, not at the first next(): the child's epoch begins with this iterator
        itr = iter(self.ds)
        policy = self.error_policy
        if policy is None:
            return self._run(itr)
        if self._restored:
            policy.continue_epoch(known_length(self.ds))
        else:
            policy.begin_epoch(known_length(self.ds))
        self._restored = False
        return self._run_guarded(itr, policy)

    def _apply(self, dp: Any) -> Any:
        """The result for one datapoint (``None``: drop it)."""
        if type(dp) is list:
            dp = dp[:]
        elif isinstance(dp, dict):
            dp = dict(dp)
        return self.func(dp)

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

    def _run_guarded(self, itr: Iterator[Any], policy: ErrorPolicy) -> Iterator[Any]:
        apply = self._apply
        for dp in itr:
            policy.seen += 1
            try:
                ret = apply(dp)
            except Exception as e:
                policy.failed(policy.seen - 1, e)
                continue
            if ret is not None:
                yield ret

    def state_dict(self) -> dict[str, Any]:
        """The child's state, and with ``on_error="skip"``/``"warn"`` the error counts of the
        epoch in progress (a restored epoch goes on counting from them)."""
        state = super().state_dict()
        if self.error_policy is not None:
            state["errors"] = self.error_policy.state()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state(state, self)
        super().load_state_dict(state)
        if self.error_policy is not None:
            self.error_policy.load(state.get("errors"))
            self._restored = True


def replace_component(dp: Any, index: Any, value: Any) -> Any:
    """A shallow copy of datapoint ``dp`` (a list, or a dict; tuples become lists) with
    component ``index`` replaced by ``value``."""
    dp = dp[:] if type(dp) is list else dict(dp) if isinstance(dp, dict) else list(dp)
    dp[index] = value
    return dp


class MapDataComponent(MapData):
    """Applies ``func`` to component ``index`` (an int or a dict key) of each datapoint.

    The result replaces that component in a shallow copy (tuples become lists); a ``None`` result
    drops the datapoint. ``on_error`` / ``max_errors``: as in :class:`MapData`.
    """

    def __init__(self, ds: DataFlow, func: Callable[[Any], Any], index: Any = 0, *,
                 on_error: str = "raise", max_errors: int | float | None = None) -> None:
        ProxyDataFlow.__init__(self, ds)
        self.func = check_callable(func, "func")
        self.index = index
        self._set_policy(on_error, max_errors)

    def _apply(self, dp: Any) -> Any:
        ret = self.func(dp[self.index])
        return None if ret is None else replace_component(dp, self.index, ret)

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
        self.predicate = check_callable(predicate, "predicate")

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
