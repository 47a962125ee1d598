"""``dataflow.profile``: where a pipeline spends its time, and which stage is the bottleneck.

Each stage of the pipeline (the flow, the flow it wraps, and so on down to the sources) is timed
in place while the pipeline runs: the time spent inside each ``next()`` of a stage, minus the time
spent inside its children's, is the stage's *own* time. Parallel stages additionally report the
fill level of their queues (sampled at each datapoint, when the stage exposes ``queue_stats()``);
time a parallel stage spends waiting for its workers counts as its own.

The report names the stage with the largest own time as the bottleneck and suggests a fix.
It renders as a table (:meth:`ProfileReport.format`), as JSON (:meth:`ProfileReport.to_json`)
and as a Chrome trace-event file (:meth:`ProfileReport.write_trace`), which opens in Perfetto or
``chrome://tracing`` with one row per stage showing when it was busy.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from dataflow.base import DataFlow

__all__ = ["ProfileReport", "StageStats", "pipeline_stages", "profile"]

_MAX_TRACE_EVENTS = 50_000


def _children(flow: DataFlow) -> list[DataFlow]:
    kids: list[DataFlow] = []
    ds = getattr(flow, "ds", None)
    if isinstance(ds, DataFlow):
        kids.append(ds)
    for df in getattr(flow, "df_lists", None) or []:
        if isinstance(df, DataFlow) and all(df is not k for k in kids):
            kids.append(df)
    return kids


def pipeline_stages(flow: DataFlow) -> list[tuple[int, DataFlow]]:
    """The stages of a pipeline, outermost first, as ``(depth, flow)``; shared flows once."""
    out: list[tuple[int, DataFlow]] = []
    seen: set[int] = set()

    def walk(f: DataFlow, depth: int) -> None:
        if id(f) in seen:
            return
        seen.add(id(f))
        out.append((depth, f))
        for child in _children(f):
            walk(child, depth + 1)

    walk(flow, 0)
    return out


def _nbytes(dp: Any) -> int:
    if hasattr(dp, "nbytes"):
        return int(dp.nbytes)
    if isinstance(dp, bytes | bytearray | memoryview):
        return len(dp)
    if isinstance(dp, list | tuple):
        return sum(_nbytes(x) for x in dp)
    if isinstance(dp, dict):
        return sum(_nbytes(x) for x in dp.values())
    return 0


@dataclass
class StageStats:
    """What one stage did during the run."""

    index: int
    depth: int
    name: str
    items: int = 0
    own_seconds: float = 0.0
    total_seconds: float = 0.0
    bytes: int = 0
    queue_fill: float | None = None  # mean fill fraction of a parallel stage's queue
    _fill_sum: float = field(default=0.0, repr=False)
    _fill_n: int = field(default=0, repr=False)

    @property
    def own_us_per_item(self) -> float:
        return self.own_seconds / self.items * 1e6 if self.items else 0.0

    @property
    def items_per_second(self) -> float:
        return self.items / self.own_seconds if self.own_seconds > 0 else float("inf")

    @property
    def bytes_per_second(self) -> float:
        return self.bytes / self.own_seconds if self.own_seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if not k.startswith("_")}
        d.update(own_us_per_item=self.own_us_per_item,
                 items_per_second=(None if self.own_seconds <= 0 else self.items_per_second),
                 bytes_per_second=self.bytes_per_second)
        return d


def _suggest(stage: DataFlow, stats: StageStats, is_source: bool) -> str:
    name = type(stage).__name__
    if stats.queue_fill is not None:
        if stats.queue_fill < 0.2 and "Thread" in name:
            return (f"{name}'s queue is nearly empty: its threads cannot keep up; add threads "
                    "(num_thread) while cores are idle, or move work that holds the GIL (pure "
                    "Python) to processes with MultiProcessMapDataZMQ.")
        if stats.queue_fill < 0.2:
            return (f"{name}'s queue is nearly empty: its workers cannot keep up; add workers "
                    "while cores are idle, or make the work cheaper. Work that releases the GIL "
                    "(OpenCV, most NumPy) runs as fast on MultiThreadMapData threads without "
                    "the cost of moving data between processes.")
        return (f"{name}'s queue is full: the stages after it are slower; look at them.")
    if "Map" in name or "Augment" in name:
        return ("the map function is the bottleneck: run it in parallel with "
                "MultiProcessMapDataZMQ(ds, num_proc, func) (or MultiThreadMapData when it "
                "releases the GIL, e.g. OpenCV), or make it cheaper.")
    if "Batch" in name:
        return ("batching is the bottleneck: batch fewer or smaller components, stack arrays of "
                "one dtype, or use use_list=True for components that need no array.")
    if "Shuffle" in name or "Cache" in name:
        return f"{name} is the bottleneck: use a smaller buffer, or shuffle at the source."
    if is_source:
        return (f"the source {name} is the bottleneck: serialize the data once with "
                "LMDBSerializer.save and read it sequentially, or read it in parallel with "
                "MultiProcessRunnerZMQ.")
    return (f"{name} is the bottleneck: run the stages up to it in parallel with "
            "MultiProcessRunnerZMQ, or make it cheaper.")


@dataclass
class ProfileReport:
    """The result of :func:`profile`."""

    stages: list[StageStats]
    items: int
    seconds: float
    bottleneck: int
    suggestion: str
    trace: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def bottleneck_stage(self) -> StageStats:
        return self.stages[self.bottleneck]

    def to_dict(self) -> dict[str, Any]:
        return {"items": self.items, "seconds": self.seconds,
                "items_per_second": self.items / self.seconds if self.seconds > 0 else None,
                "stages": [s.to_dict() for s in self.stages],
                "bottleneck": {"index": self.bottleneck, "stage": self.bottleneck_stage.name,
                               "suggestion": self.suggestion}}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def write_trace(self, path: str) -> None:
        """Write a Chrome trace-event file (JSON) with one row per stage."""
        meta = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": s.index,
                 "args": {"name": f"{s.index}: {'  ' * s.depth}{s.name}"}} for s in self.stages]
        meta.append({"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "pipeline"}})
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"traceEvents": meta + self.trace, "displayTimeUnit": "ms"}, f)

    def format(self) -> str:
        total_own = sum(s.own_seconds for s in self.stages) or 1.0
        headers = ["#", "stage", "items", "own us/item", "own %", "items/s", "MB/s", "queue"]
        rows = []
        for s in self.stages:
            rows.append([
                str(s.index), "  " * s.depth + s.name, str(s.items),
                f"{s.own_us_per_item:,.1f}", f"{100 * s.own_seconds / total_own:.1f}",
                "-" if s.own_seconds <= 0 else f"{s.items_per_second:,.0f}",
                f"{s.bytes_per_second / 1e6:,.1f}" if s.bytes else "-",
                "-" if s.queue_fill is None else f"{100 * s.queue_fill:.0f}% full",
            ])
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
        line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
        out = ["", "Pipeline profile", "=" * 16, line, "-" * len(line)]
        out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
        rate = self.items / self.seconds if self.seconds > 0 else float("inf")
        out += ["", f"{self.items} datapoints in {self.seconds:.2f} s ({rate:,.1f}/s)",
                f"bottleneck: stage {self.bottleneck} ({self.bottleneck_stage.name}): "
                f"{self.suggestion}"]
        return "\n".join(out)


class _Clock:
    """Nested timing of the stages' ``next()`` calls in one thread."""

    def __init__(self, trace: bool) -> None:
        self.stack: list[float] = []
        self.t0 = time.perf_counter()
        self.trace: list[dict[str, Any]] | None = [] if trace else None

    def timed(self, itr: Iterator[Any], stats: StageStats, stage: DataFlow) -> Iterator[Any]:
        stack, perf = self.stack, time.perf_counter
        queue_stats = getattr(stage, "queue_stats", None)
        while True:
            start = perf()
            stack.append(0.0)
            try:
                dp = next(itr)
            except StopIteration:
                return
            finally:
                dt = perf() - start
                child = stack.pop()
                stats.own_seconds += dt - child
                stats.total_seconds += dt
                if stack:
                    stack[-1] += dt
                if self.trace is not None and len(self.trace) < _MAX_TRACE_EVENTS:
                    self.trace.append({"name": stats.name, "ph": "X", "pid": 0,
                                       "tid": stats.index, "ts": (start - self.t0) * 1e6,
                                       "dur": dt * 1e6})
            stats.items += 1
            stats.bytes += _nbytes(dp)
            if callable(queue_stats):
                qs = queue_stats()
                if qs and qs.get("capacity"):
                    stats._fill_sum += qs["size"] / qs["capacity"]
                    stats._fill_n += 1
            yield dp


def _instrument(flow: DataFlow, clock: _Clock, stats: StageStats) -> type:
    original = type(flow)

    def __iter__(self):  # noqa: N807 (it becomes the subclass's __iter__)
        return clock.timed(original.__iter__(self), stats, self)

    sub = type(original.__name__, (original,), {"__iter__": __iter__,
                                                "__module__": "dataflow.profiler"})
    flow.__class__ = sub
    return original


def profile(
    df: DataFlow, num: int = 1000, warmup: int = 10, trace: bool = False, reset: bool = True
) -> ProfileReport:
    """Run ``num`` datapoints of ``df`` (after ``warmup``) with every stage timed.

    Args:
        df: the pipeline (its outermost flow).
        num: datapoints of ``df`` to time; epochs are repeated if needed.
        warmup: datapoints consumed before timing (worker start-up, caches).
        trace: record busy spans for :meth:`ProfileReport.write_trace`.
        reset: call ``df.reset_state()`` first (pass False if it was already called).
    """
    if num < 1:
        raise ValueError(f"`num` must be >= 1, got {num}.")
    if reset:
        df.reset_state()
    if warmup:
        _consume(df, warmup)
    clock = _Clock(trace)
    stages = pipeline_stages(df)
    stats = [StageStats(i, depth, type(f).__name__) for i, (depth, f) in enumerate(stages)]
    originals = [_instrument(f, clock, s) for (_, f), s in zip(stages, stats)]
    try:
        t0 = time.perf_counter()
        items = _consume(df, num)
        seconds = time.perf_counter() - t0
    finally:
        for (_, f), cls in zip(stages, originals):
            f.__class__ = cls
    for s in stats:
        if s._fill_n:
            s.queue_fill = s._fill_sum / s._fill_n
    # the bottleneck: a parallel stage whose queue runs empty points below it; otherwise the
    # stage with the largest own time
    best = max(range(len(stats)), key=lambda i: stats[i].own_seconds)
    flow = stages[best][1]
    is_source = not _children(flow)
    return ProfileReport(stats, items, seconds, best, _suggest(flow, stats[best], is_source),
                         clock.trace or [])


def _consume(df: DataFlow, n: int) -> int:
    got = 0
    while got < n:
        before = got
        itr = iter(df)
        for _ in itr:
            got += 1
            if got >= n:
                break
        close = getattr(itr, "close", None)
        if close is not None:
            close()
        if got == before:
            break
    return got
