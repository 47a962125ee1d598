"""``RepeatedData``, ``RepeatedDataPoint`` and ``FixedSizeData``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dataflow.base import DataFlow, DataFlowReentrantGuard, ProxyDataFlow
from dataflow.errors import UnknownLengthError
from dataflow.state import check_state, epoch_state, finished, state_done

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
        self._epoch, self._rep, self._done = 0, 0, True
        self._resume: int | None = None

    def __len__(self) -> int:
        if self.num == -1:
            raise UnknownLengthError("RepeatedData(num=-1) repeats forever and has no length.")
        return len(self.ds) * self.num

    def __iter__(self) -> Iterator[Any]:
        rep, self._resume = self._resume, None
        if rep is None:
            self._epoch += 1
            rep = 0
        self._done = False
        num = self.num
        while num == -1 or rep < num:
            self._rep = rep
            empty = True
            for dp in self.ds:
                empty = False
                yield dp
            if empty and num == -1:  # an empty epoch repeated forever would spin without yielding
                break
            rep += 1
        self._done = True

    def state_dict(self) -> dict[str, Any]:
        """Own epoch, the repetition in progress, and the child's state."""
        return {"type": "RepeatedData", "num": self.num, "rep": self._rep,
                **epoch_state(self._epoch - 1, 0, self._done), "child": self.ds.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state(state, self, num=self.num)
        self._epoch, self._rep, self._done = state["epoch"] + 1, state["rep"], state["done"]
        if state["done"]:
            self.ds.load_state_dict(finished(state["child"]))
            self._resume = None
        else:
            self.ds.load_state_dict(state["child"])
            # the repetition in progress continues, or the next one starts if its epoch was over
            self._resume = state["rep"] + (1 if state_done(state["child"]) else 0)


class RepeatedDataPoint(ProxyDataFlow):
    """Yields each datapoint ``num`` times in a row (the same object). ``len = len(ds) * num``."""

    def __init__(self, ds: DataFlow, num: int) -> None:
        super().__init__(ds)
        self.num = _check_int(num, "num", 1)
        self._copies = 0  # copies of the datapoint in progress delivered so far
        self._resume = 0  # copies already delivered of the first datapoint after a restore
        self._before: dict[str, Any] | None = None

    def __len__(self) -> int:
        return len(self.ds) * self.num

    def __iter__(self) -> Iterator[Any]:
        num, ds = self.num, self.ds
        skip, self._resume = self._resume, 0
        itr = iter(ds)
        while True:
            # the child's state before the pull, so that a state taken between the copies of
            # this datapoint can pull it again
            self._before = ds.state_dict()
            dp = next(itr, _END)
            if dp is _END:
                self._copies = 0
                return
            self._copies = skip
            for _ in range(num - skip):
                self._copies += 1
                yield dp
            skip = 0

    def state_dict(self) -> dict[str, Any]:
        """Between the copies of one datapoint: the child's state before it and the number of
        copies delivered (resuming pulls it again); else the child's state."""
        if 0 < self._copies < self.num:
            return {"type": "RepeatedDataPoint", "num": self.num, "copies": self._copies,
                    "child": self._before}
        return {"type": "RepeatedDataPoint", "num": self.num, "copies": 0,
                "child": self.ds.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state(state, self, num=self.num)
        self.ds.load_state_dict(state["child"])
        self._copies = self._resume = int(state["copies"])


_END = object()


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
        self._epoch, self._cnt, self._done = 0, 0, True
        self._resume: int | None = None

    def __len__(self) -> int:
        return self._size

    def reset_state(self) -> None:
        super().reset_state()
        self._itr = None

    def __iter__(self) -> Iterator[Any]:
        with self._guard:
            cnt, self._resume = self._resume, None
            fresh = False  # whether the current iterator of ds is new and has yielded nothing
            if cnt is None:
                self._epoch += 1
                cnt = 0
                if self._itr is None or not self._keep_state:
                    self._itr = iter(self.ds)
                    fresh = True
            elif self._itr is None:
                self._itr = iter(self.ds)  # continues the child's restored epoch
            self._cnt, self._done = cnt, False
            while self._cnt < self._size:
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
                self._cnt += 1
                yield dp
            self._done = True

    def state_dict(self) -> dict[str, Any]:
        """Own epoch and count, and the child's state (its iterator continues across epochs
        with ``keep_state``)."""
        return {"type": "FixedSizeData", "size": self._size, "keep_state": self._keep_state,
                **epoch_state(self._epoch - 1, self._cnt, self._done),
                "child": self.ds.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state(state, self, size=self._size, keep_state=self._keep_state)
        self._epoch, self._cnt, self._done = state["epoch"] + 1, state["pos"], state["done"]
        self._itr = None
        if state["done"] and not self._keep_state:
            self.ds.load_state_dict(finished(state["child"]))  # the next epoch restarts ds
        else:
            self.ds.load_state_dict(state["child"])
        if state["done"]:
            self._resume = None
            if self._keep_state and state["epoch"] >= 0:
                self._itr = iter(self.ds)  # the next epoch continues the child's epoch
        else:
            self._resume = state["pos"]
