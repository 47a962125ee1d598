"""``RepeatedData``, ``RepeatedDataPoint`` and ``FixedSizeData``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dataflow.base import DataFlow, DataFlowReentrantGuard, ProxyDataFlow
from dataflow.errors import UnknownLengthError
from dataflow.state import EpochCounter, check_state, finished, state_done
from dataflow.validation import check_int

__all__ = ["FixedSizeData", "RepeatedData", "RepeatedDataPoint"]


class RepeatedData(EpochCounter, ProxyDataFlow):
    """Repeats the whole epoch of ``ds`` ``num`` times; ``num=-1`` repeats forever.

    ``len`` is ``len(ds) * num``; with ``num=-1`` the length is unknown (``NotImplementedError``).
    """

    def __init__(self, ds: DataFlow, num: int) -> None:
        super().__init__(ds)
        if num != -1:
            check_int(num, "num", 0, hint=" Use num=-1 to repeat forever.")
        self.num = num
        self._rep = 0  # the repetition in progress
        self._resume_rep = 0  # where a restored epoch continues

    def __len__(self) -> int:
        if self.num == -1:
            raise UnknownLengthError("RepeatedData(num=-1) repeats forever and has no length.")
        return len(self.ds) * self.num

    def __iter__(self) -> Iterator[Any]:
        restored = self._resume is not None
        token, _ = self._begin()
        rep = self._resume_rep if restored else 0
        self._rep = rep
        first = iter(self.ds) if self.num == -1 or rep < self.num else iter(())
        return self._run(token, rep, restored, first)

    def _run(
        self, token: object, rep: int, restored: bool, first: Iterator[Any] | None
    ) -> Iterator[Any]:
        num = self.num
        while num == -1 or rep < num:
            self._rep = rep
            empty = True
            itr = first if first is not None else iter(self.ds)
            first = None
            for dp in itr:
                empty = False
                yield dp
            # an empty epoch repeated forever would spin (the rest of a restored one may
            # be empty, though)
            if empty and num == -1 and not restored:
                break
            restored = False
            rep += 1
        self._end(token)

    def state_dict(self) -> dict[str, Any]:
        """Own epoch, the repetition in progress, and the child's state."""
        return {"type": "RepeatedData", "num": self.num, "rep": self._rep, **self._counters(),
                "child": self.ds.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state(state, self, num=self.num)
        self.restore_epoch(state)
        self._rep = state["rep"]
        if state["done"]:
            self.ds.load_state_dict(finished(state["child"]))
        else:
            self.ds.load_state_dict(state["child"])
            # the repetition in progress continues, or the next one starts if its epoch was over
            self._resume_rep = state["rep"] + (1 if state_done(state["child"]) else 0)


class RepeatedDataPoint(ProxyDataFlow):
    """Yields each datapoint ``num`` times in a row (the same object). ``len = len(ds) * num``."""

    def __init__(self, ds: DataFlow, num: int) -> None:
        super().__init__(ds)
        self.num = check_int(num, "num", 1)
        self._copies = 0  # copies of the datapoint in progress delivered so far
        self._resume = 0  # copies already delivered of the first datapoint after a restore
        self._before: dict[str, Any] | None = None

    def __len__(self) -> int:
        return len(self.ds) * self.num

    def __iter__(self) -> Iterator[Any]:
        skip, self._resume = self._resume, 0
        return self._run(iter(self.ds), skip)

    def _run(self, itr: Iterator[Any], skip: int) -> Iterator[Any]:
        num, ds = self.num, self.ds
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


class FixedSizeData(EpochCounter, ProxyDataFlow):
    """Yields exactly ``size`` datapoints per epoch, restarting ``ds`` whenever it ends.

    With ``keep_state=True`` the iterator of ``ds`` continues across epochs
    (``1,2,3 | 4,5,1 | ...``); with ``False`` every epoch starts a new pass. Non-reentrant.
    """

    def __init__(self, ds: DataFlow, size: int, keep_state: bool = True) -> None:
        super().__init__(ds)
        self._size = check_int(size, "size", 0)
        self._keep_state = keep_state
        self._guard = DataFlowReentrantGuard("FixedSizeData")
        self._itr: Iterator[Any] | None = None

    def __len__(self) -> int:
        return self._size

    def reset_state(self) -> None:
        super().reset_state()
        self._itr = None

    def __iter__(self) -> Iterator[Any]:
        restored = self._resume is not None
        token, _ = self._begin()
        fresh = False  # whether the current iterator of ds is new and has yielded nothing
        if not restored and (self._itr is None or not self._keep_state):
            self._new_child_iterator()
            fresh = True
        elif self._itr is None:
            self._itr = iter(self.ds)  # continues the child's restored epoch
        return self._run(token, fresh)

    def _new_child_iterator(self) -> None:
        """End the child's iteration in progress (if any) and begin a new one."""
        old, self._itr = self._itr, None
        close = getattr(old, "close", None)
        if close is not None:
            close()
        self._itr = iter(self.ds)

    def _run(self, token: object, fresh: bool) -> Iterator[Any]:
        with self._guard:
            while self._pos < self._size:
                try:
                    assert self._itr is not None
                    dp = next(self._itr)
                except StopIteration:
                    if fresh:
                        raise ValueError(
                            "FixedSizeData: the wrapped dataflow yielded no datapoint in a "
                            f"whole epoch, so {self._size} datapoints cannot be produced."
                        ) from None
                    self._new_child_iterator()
                    fresh = True
                    continue
                fresh = False
                self._pos += 1
                yield dp
            self._end(token)

    def state_dict(self) -> dict[str, Any]:
        """Own epoch and count, and the child's state (its iterator continues across epochs
        with ``keep_state``)."""
        return {"type": "FixedSizeData", "size": self._size, "keep_state": self._keep_state,
                **self._counters(), "child": self.ds.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state(state, self, size=self._size, keep_state=self._keep_state)
        self.restore_epoch(state)
        self._itr = None
        if state["done"] and not self._keep_state:
            self.ds.load_state_dict(finished(state["child"]))  # the next epoch restarts ds
        else:
            self.ds.load_state_dict(state["child"])
        if state["done"] and self._keep_state and state["epoch"] >= 0:
            self._itr = iter(self.ds)  # the next epoch continues the child's epoch
