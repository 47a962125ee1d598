"""``PrintData`` (look at datapoints) and ``TestDataSpeed`` (measure a flow's speed)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np

from dataflow.base import DataFlow, ProxyDataFlow
from dataflow.state import check_state
from dataflow.wrappers._progress import get_tqdm

__all__ = ["PrintData", "SpeedResult", "TestDataSpeed"]


def _summary(obj: Any, depth: int, max_depth: int, max_list: int, indent: str) -> list[str]:
    pad = indent
    if isinstance(obj, np.ndarray):
        line = f"{pad}ndarray dtype={obj.dtype} shape={obj.shape}"
        if obj.size and obj.dtype.kind in "biuf":
            line += f" range=[{obj.min()}, {obj.max()}]"
        return [line]
    if isinstance(obj, np.generic):
        return [f"{pad}{type(obj).__name__} value={obj!r}"]
    if isinstance(obj, bool | int | float | complex):
        return [f"{pad}{type(obj).__name__} value={obj!r}"]
    if isinstance(obj, str | bytes):
        shown: Any = obj if len(obj) <= 40 else (
            obj[:40] + b"..." if isinstance(obj, bytes) else obj[:40] + "...")
        return [f"{pad}{type(obj).__name__} len={len(obj)} value={shown!r}"]
    if isinstance(obj, list | tuple | dict):
        lines = [f"{pad}{type(obj).__name__} of len {len(obj)}"]
        if depth >= max_depth:
            return lines
        items = list(obj.items()) if isinstance(obj, dict) else list(enumerate(obj))
        for key, value in items[:max_list]:
            sub = _summary(value, depth + 1, max_depth, max_list, pad + "  ")
            sub[0] = f"{pad}  [{key!r}] " + sub[0].lstrip()
            lines.extend(sub)
        if len(items) > max_list:
            lines.append(f"{pad}  ... {len(items) - max_list} more")
        return lines
    shape = getattr(obj, "shape", None)
    extra = f" shape={tuple(shape)}" if shape is not None else ""
    return [f"{pad}{type(obj).__name__}{extra}"]


class PrintData(ProxyDataFlow):
    """Passes datapoints through and prints a structural summary of the first ``num`` of them.

    For each component: its type, dtype, shape and value range (arrays) or value (scalars);
    nested lists and dicts to ``max_depth`` levels with at most ``max_list`` children each.
    Output goes to ``file`` (default ``sys.stderr``). The counter restarts at ``reset_state()``.
    Works on NumPy 2 (tensorpack's used the removed ``np.sctypes``).
    """

    def __init__(
        self,
        ds: DataFlow,
        num: int = 1,
        name: str | None = None,
        max_depth: int = 3,
        max_list: int = 3,
        *,
        file: TextIO | None = None,
    ) -> None:
        super().__init__(ds)
        self.num = num
        self.name = name
        self.max_depth = max_depth
        self.max_list = max_list
        self.file = file
        self.cnt = 0

    def reset_state(self) -> None:
        super().reset_state()
        self.cnt = 0

    def state_dict(self) -> dict[str, Any]:
        """How many datapoints were printed, and the child's state."""
        return {"type": "PrintData", "cnt": self.cnt, "child": self.ds.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state(state, self)
        self.cnt = int(state["cnt"])
        self.ds.load_state_dict(state["child"])

    def format(self, dp: Any) -> str:
        """The summary text of one datapoint."""
        title = f"[PrintData{' ' + self.name if self.name else ''}] datapoint {self.cnt}"
        body = _summary(dp, 0, self.max_depth, self.max_list, "  ")
        return "\n".join([title, *body])

    def __iter__(self) -> Iterator[Any]:
        return self._run(iter(self.ds))  # the child's epoch begins with this iterator

    def _run(self, itr: Iterator[Any]) -> Iterator[Any]:
        for dp in itr:
            if self.cnt < self.num:
                print(self.format(dp), file=self.file or sys.stderr)
                self.cnt += 1
            yield dp


@dataclass(frozen=True)
class SpeedResult:
    """What :meth:`TestDataSpeed.start` measured."""

    items: int
    seconds: float

    @property
    def rate(self) -> float:
        """Datapoints per second."""
        return self.items / self.seconds if self.seconds > 0 else float("inf")


class TestDataSpeed(ProxyDataFlow):
    """Measures how fast ``ds`` produces datapoints.

    :meth:`start` resets ``ds`` (unless this wrapper's ``reset_state`` was called), consumes
    ``warmup`` datapoints, then ``size`` datapoints under a tqdm bar showing items/s, and returns
    the measured rate in datapoints per second (also kept as ``self.result``, a
    :class:`SpeedResult`). ``ds`` is re-iterated across epochs until ``size`` is reached.
    Iterating this flow runs :meth:`start` and then yields one full pass of ``ds``.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, ds: DataFlow, size: int = 5000, warmup: int = 0) -> None:
        super().__init__(ds)
        if int(size) < 1:
            raise ValueError(f"`size` must be >= 1, got {size!r}.")
        if int(warmup) < 0:
            raise ValueError(f"`warmup` must be >= 0, got {warmup!r}.")
        self.test_size = int(size)
        self.warmup = int(warmup)
        self._reset_called = False
        self.result: SpeedResult | None = None

    def reset_state(self) -> None:
        self._reset_called = True
        super().reset_state()

    def _items(self) -> Iterator[Any]:
        while True:
            empty = True
            for dp in self.ds:
                empty = False
                yield dp
            if empty:
                return

    def start(self, *, progress: bool = True) -> float:
        """Run the measurement; returns datapoints per second."""
        if not self._reset_called:
            self.reset_state()
        itr = self._items()
        for _ in range(self.warmup):
            if next(itr, None) is None:
                break
        n = 0
        with get_tqdm(total=self.test_size, smoothing=0.2, unit="it", disable=not progress) as bar:
            t0 = time.perf_counter()
            for _dp in itr:
                n += 1
                bar.update(1)
                if n >= self.test_size:
                    break
            seconds = time.perf_counter() - t0
        close = getattr(itr, "close", None)
        if close is not None:
            close()
        self.result = SpeedResult(n, seconds)
        return self.result.rate

    def start_test(self, *, progress: bool = True) -> float:
        """tensorpack's older name of :meth:`start` (same behaviour and result)."""
        return self.start(progress=progress)

    def __iter__(self) -> Iterator[Any]:
        self.start()
        yield from self.ds
