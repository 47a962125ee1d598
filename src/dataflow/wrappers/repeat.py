"""``RepeatedData``, ``RepeatedDataPoint`` and ``FixedSizeData``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dataflow.base import DataFlow, DataFlowReentrantGuard, ProxyDataFlow
from dataflow.errors import UnknownLengthError

__all__ = ["FixedSizeData", "RepeatedData", "RepeatedDataPoint"]


def _check_int(value: Any, name: str, minimum: int, hint: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"`{name}` must be an int, got {value!r} (type {type(value).__name__}).")
    if value < minimum:
        raise ValueError(f"`{name}` must be >= {minimum}, got {value}.{hint}")
    return value


class RepeatedData(ProxyDataFlow):
    """Repeats the whole epoch of ``ds`` ``num`` times; ``num=-1`` repeats forever.

    ``len`` is ``len(ds) * num``; with ``num=-1`` the length is unknown (``NotImplementedError``).
    """

    def __init__(self, ds: DataFlow, num: int) -> None:
        super().__init__(ds)
        if num != -1:
            _check_int(num, "num", 0, " Use num=-1 to repeat forever.")
        self.num = num

    def __len__(self) -> int:
        if self.num == -1:
            raise UnknownLengthError("RepeatedData(num=-1) repeats forever and has no length.")
        return len(self.ds) * self.num

    def __iter__(self) -> Iterator[Any]:
        if self.num == -1:
            while True:
                empty = True
                for dp in self.ds:
                    empty = False
                    yield dp
                if empty:  # an empty epoch repeated forever would spin without yielding
                    return
        else:
            for _ in range(self.num):
                yield from self.ds


class RepeatedDataPoint(ProxyDataFlow):
    """Yields each datapoint ``num`` times in a row (the same object). ``len = len(ds) * num``."""

    def __init__(self, ds: DataFlow, num: int) -> None:
        super().__init__(ds)
        self.num = _check_int(num, "num", 1)

    def __len__(self) -> int:
        return len(self.ds) * self.num

    def __iter__(self) -> Iterator[Any]:
        num = self.num
        for dp in self.ds:
            for _ in range(num):
                yield dp


class FixedSizeData(ProxyDataFlow):
    """Yields exactly ``size`` datapoints per epoch, restarting ``ds`` whenever it ends.

    With ``keep_state=True`` the iterator of ``ds`` continues across epochs
    (``1,2,3 | 4,5,1 | ...``); with ``False`` every epoch starts a new pass. Non-reentrant.
    """

    def __init__(self, ds: DataFlow, size: int, keep_state: bool = True) -> None:
        super().__init__(ds)
        self._size = _check_int(size, "size", 0)
        self._keep_state = keep_state
        self._guard = DataFlowReentrantGuard("FixedSizeData")
        self._itr: Iterator[Any] | None = None

    def __len__(self) -> int:
        return self._size

    def reset_state(self) -> None:
        super().reset_state()
        self._itr = None

    def __iter__(self) -> Iterator[Any]:
        with self._guard:
            fresh = False  # whether the current iterator of ds is new and has yielded nothing
            if self._itr is None or not self._keep_state:
                self._itr = iter(self.ds)
                fresh = True
            cnt = 0
            while cnt < self._size:
                try:
                    dp = next(self._itr)
                except StopIteration:
                    if fresh:
                        raise ValueError(
                            "FixedSizeData: the wrapped dataflow yielded no datapoint in a whole "
                            f"epoch, so {self._size} datapoints cannot be produced."
                        ) from None
                    self._itr = iter(self.ds)
                    fresh = True
                    continue
                fresh = False
                cnt += 1
                yield dp
