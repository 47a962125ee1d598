"""``dataflow.profile``: where a pipeline spends its time, and which stage is the bottleneck.

Each stage of the pipeline (the flow, the flow it wraps, and so on down to the sources) is timed
in place while the pipeline runs: the time spent inside each ``next()`` of a stage, minus the time
spent inside its children's, is the stage's *own* time. Parallel stages additionally report the
fill level of their queues (sampled at each datapoint, when the stage exposes ``queue_stats()``);
time a parallel stage spends waiting for its workers counts as its own.

The report names the stage with the largest own time as the bottleneck and suggests a fix for
its kind (each stage class declares it in ``profile_hint``); when the pipeline spends less than a
fifth of the time producing (the consumer is slower than every stage), there is no bottleneck.
It renders as a table (:meth:`ProfileReport.format`), as JSON (:meth:`ProfileReport.to_json`)
and as a Chrome trace-event file (:meth:`ProfileReport.write_trace`), which opens in Perfetto or
``chrome://tracing`` with one row per stage showing when it was busy, and one row per worker of
each parallel stage showing when that worker was busy (between its busy spans it waits).

A stage may also report its own counters through a method ``profile_metrics() -> dict`` (read
after the run; a streaming source gives network MB/s, bytes in flight and cache hits), printed
under the table; a stage whose time is I/O wait says so with ``profile_hint = "network"``, and
the suggestion then names the network.

Stages are observed through :func:`dataflow.base.instrument` (nothing about the flows is
changed), found through :meth:`DataFlow.children`.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from dataflow.base import DataFlow, instrument

__all__ = ["ProfileReport", "StageStats", "pipeline_stages", "profile"]

_MAX_TRACE_EVENTS = 50_000
#: below this share of the wall time spent producing, the consumer is the bottleneck
CONSUMER_BOUND = 0.2


def public_name(flow: Any) -> str:
    """The name of ``flow``'s class, or of its first public base (``LMDBData`` for the private
    class ``LMDBSerializer.load`` returns)."""
    for cls in type(flow).__mro__:
        if not cls.__name__.startswith("_"):
            return cls.__name__
    return type(flow).__name__


def pipeline_stages(flow: DataFlow) -> list[tuple[int, DataFlow]]:
    """The stages of a pipeline, outermost first, as ``(depth, flow)``; shared flows once."""
    out: list[tuple[int, DataFlow]] = []
    seen: set[int] = set()

    def walk(f: DataFlow, depth: int) -> None:
        if id(f) in seen:
            return
        seen.add(id(f))
        out.append((depth, f))
        for child in f.children():
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
    workers: int | None = None  # a parallel stage's number of workers
    workers_busy: float | None = None  # the share of their time its workers were busy
    skipped: int | None = None  # inputs skipped under the bad-sample policy during the run
    autotune: dict[str, Any] | None = None  # an autotuned stage's controller: count, decisions
    metrics: dict[str, float] | None = None  # a stage's own counters (its profile_metrics())
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
    name = stats.name
    hint = type(stage).profile_hint
    if stats.queue_fill is not None:
        if stats.queue_fill >= 0.2:
            return f"{name}'s queue is full: the stages after it are slower; look at them."
        if hint == "thread-map":
            return (f"{name}'s queue is nearly empty: its threads cannot keep up; add threads "
                    "(num_thread) while cores are idle, or move work that holds the GIL (pure "
                    "Python) to processes with MultiProcessMapDataZMQ.")
        if hint in ("process-map", "ray-map"):
            return (f"{name}'s queue is nearly empty: its workers cannot keep up; add workers "
                    "while cores are idle, or make the work cheaper. Work that releases the GIL "
                    "(OpenCV, most NumPy) runs as fast on MultiThreadMapData threads without "
                    "the cost of moving data between processes.")
        return (f"{name}'s queue is nearly empty: its workers cannot keep up; add workers while "
                "cores are idle, or make the flow they run cheaper.")
    if hint == "map":
        return ("the map function is the bottleneck: run it in parallel with "
                "MultiProcessMapDataZMQ(ds, num_proc, func) (or MultiThreadMapData when it "
                "releases the GIL, e.g. OpenCV), or make it cheaper.")
    if hint == "batch":
        return ("batching is the bottleneck: batch fewer or smaller components, stack arrays of "
                "one dtype, or use use_list=True for components that need no array.")
    if hint == "buffer":
        return f"{name} is the bottleneck: use a smaller buffer, or shuffle at the source."
    if hint == "reader":
        return (f"the reader {name} is the bottleneck: read it sequentially (shuffle=False, "
                "then LocallyShuffleData for randomness), keep the file on a local disk, or "
                "read it in parallel with MultiProcessRunnerZMQ; decode records after it, in "
                "a parallel mapper.")
    if hint == "network":  # the stage waits on downloads: its own time is I/O wait
        rate = (stats.metrics or {}).get("mb_per_s")
        at = "" if rate is None else f" (at {rate:,.1f} MB/s)"
        return (f"the network is the bottleneck: {name} waits for shard bytes{at}; raise "
                "prefetch_bytes, use a cache_dir on a local disk, or read from storage closer "
                "to this machine.")
    if hint == "remote":
        return (f"{name} is the bottleneck: the senders or the network cannot keep up; add "
                "senders, or send smaller (encoded) datapoints.")
    if is_source:
        return (f"the source {name} is the bottleneck: serialize the data once with "
                "LMDBSerializer.save and read it sequentially, or read it in parallel with "
                "MultiProcessRunnerZMQ.")
    return (f"{name} is the bottleneck: run the stages up to it in parallel with "
            "MultiProcessRunnerZMQ, or make it cheaper.")


@dataclass
class ProfileReport:
    """The result of :func:`profile`. ``bottleneck`` is the index of the slowest stage, or
    ``None`` when the consumer was slower than the whole pipeline."""

    stages: list[StageStats]
    items: int
    seconds: float
    bottleneck: int | None
    suggestion: str
    trace: list[dict[str, Any]] = field(default_factory=list, repr=False)
    worker_rows: list[tuple[int, int, str]] = field(default_factory=list, repr=False)

    @property
    def bottleneck_stage(self) -> StageStats | None:
        return None if self.bottleneck is None else self.stages[self.bottleneck]

    def to_dict(self) -> dict[str, Any]:
        stage = self.bottleneck_stage
        return {"items": self.items, "seconds": self.seconds,
                "items_per_second": self.items / self.seconds if self.seconds > 0 else None,
                "stages": [s.to_dict() for s in self.stages],
                "bottleneck": {"index": self.bottleneck,
                               "stage": None if stage is None else stage.name,
                               "suggestion": self.suggestion}}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def write_trace(self, path: str) -> None:
        """Write a Chrome trace-event file (JSON): one row per stage (process "pipeline"), and
        one per worker of each parallel stage (process "workers")."""
        meta = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": s.index,
                 "args": {"name": f"{s.index}: {'  ' * s.depth}{s.name}"}} for s in self.stages]
        meta.append({"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "pipeline"}})
        if self.worker_rows:
            meta.append({"name": "process_name", "ph": "M", "pid": 1,
                         "args": {"name": "workers"}})
            meta += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid,
                      "args": {"name": label}} for tid, _, label in self.worker_rows]
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"traceEvents": meta + self.trace, "displayTimeUnit": "ms"}, f)

    def format(self) -> str:
        total_own = sum(s.own_seconds for s in self.stages) or 1.0
        headers = ["#", "stage", "items", "own us/item", "own %", "items/s", "MB/s", "queue",
                   "workers", "skipped"]
        rows = []
        for s in self.stages:
            rows.append([
                str(s.index), "  " * s.depth + s.name, str(s.items),
                f"{s.own_us_per_item:,.1f}", f"{100 * s.own_seconds / total_own:.1f}",
                "-" if s.own_seconds <= 0 else f"{s.items_per_second:,.0f}",
                f"{s.bytes_per_second / 1e6:,.1f}" if s.bytes else "-",
                "-" if s.queue_fill is None else f"{100 * s.queue_fill:.0f}% full",
                "-" if s.workers_busy is None else f"{s.workers} {100 * s.workers_busy:.0f}% busy",
                "-" if s.skipped is None else str(s.skipped),
            ])
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
        line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
        out = ["", "Pipeline profile", "=" * 16, line, "-" * len(line)]
        out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        rate = self.items / self.seconds if self.seconds > 0 else float("inf")
        stage = self.bottleneck_stage
        verdict = (f"no bottleneck: {self.suggestion}" if stage is None else
                   f"bottleneck: stage {self.bottleneck} ({stage.name}): {self.suggestion}")
        for s in self.stages:
            if s.metrics:
                out.append(f"stage {s.index} ({s.name}): " + ", ".join(
                    f"{k} {v:,.1f}" if isinstance(v, float) else f"{k} {v}"
                    for k, v in s.metrics.items()))
        out += ["", f"{self.items} datapoints in {self.seconds:.2f} s ({rate:,.1f}/s)", verdict]
        out += _autotune_lines(self.stages)
        return "\n".join(out)


class _Clock:
    """Nested timing of the stages' ``next()`` calls in one thread."""

    def __init__(self, trace: bool) -> None:
        self.stack: list[float] = []
        self.t0 = time.perf_counter()
        self.trace: list[dict[str, Any]] | None = [] if trace else None

    def timed(self, stage: DataFlow, itr: Iterator[Any], stats: StageStats) -> Iterator[Any]:
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


class _Workers:
    """Busy spans of the workers of the parallel stages, as trace events and busy shares."""

    def __init__(self, clock: _Clock) -> None:
        self.clock = clock
        self.rows: list[tuple[int, int, str]] = []  # (trace tid, stage index, label)
        self.busy: dict[int, float] = {}  # stage index -> busy seconds of all its workers

    def attach(self, flow: Any, stats: StageStats) -> bool:
        trace_workers = getattr(flow, "trace_workers", None)
        if not callable(trace_workers):
            return False
        n = int(getattr(flow, "num_workers", None) or getattr(flow, "_num_workers", 0) or 0)
        stats.workers = n or None
        base = 1000 * (stats.index + 1)
        self.rows += [(base + w, stats.index, f"{stats.index}: {stats.name} worker {w}")
                      for w in range(n)]
        self.busy[stats.index] = 0.0
        clock, trace = self.clock, self.clock.trace

        def record(worker: int, start: float, end: float, waited: float) -> None:
            busy = max(0.0, end - start - waited)
            self.busy[stats.index] += busy
            if trace is not None and len(trace) < _MAX_TRACE_EVENTS:
                trace.append({"name": "busy", "ph": "X", "pid": 1, "tid": base + worker,
                              "ts": (start - clock.t0) * 1e6, "dur": busy * 1e6})

        trace_workers(record)
        return True


def profile(
    df: DataFlow,
    num: int = 1000,
    warmup: int = 10,
    trace: bool = False,
    reset: bool = True,
    consume: Any = None,
) -> ProfileReport:
    """Run ``num`` datapoints of ``df`` (after ``warmup``) with every stage timed.

    Args:
        df: the pipeline (its outermost flow).
        num: datapoints of ``df`` to time; epochs are repeated if needed.
        warmup: datapoints consumed before timing (worker start-up, caches).
        trace: record busy spans for :meth:`ProfileReport.write_trace`.
        reset: call ``df.reset_state()`` first and ``df.close()`` at the end (pass False if it
            was already reset: the pipeline is then left running).
        consume: a function called with each datapoint, standing for the consumer (e.g. a
            training step); its time is the consumer's.
    """
    if isinstance(num, bool) or not isinstance(num, int) or num < 1:
        raise ValueError(f"`num` must be an int >= 1, got {num!r}; pass e.g. num=200.")
    if reset:
        df.reset_state()
    try:
        return _profile(df, num, warmup, trace, consume)
    finally:
        if reset:
            df.close()


#: decisions of each autotuned stage shown by ProfileReport.format()
_SHOWN_DECISIONS = 3


def _autotune_lines(stages: list[StageStats]) -> list[str]:
    """What the autotuner of each autotuned stage chose and why (its last decisions)."""
    out = []
    for s in stages:
        if s.autotune is None:
            continue
        tuned = s.autotune
        done = tuned.get("converged_at")
        backend = tuned.get("backend")  # (a thread stage may have moved to processes)
        out.append(f"autotune: stage {s.index} ({s.name}): {tuned['workers']} workers"
                   + (f" ({backend})" if backend else "")
                   + (f", steady since window {done}" if done is not None else ", tuning"))
        out += [f"  window {d['window']}: {d['old']} -> {d['new']}: {d['reason']}"
                for d in tuned.get("decisions", [])[-_SHOWN_DECISIONS:]]
    return out


def _profile(df: DataFlow, num: int, warmup: int, trace: bool, consume: Any) -> ProfileReport:
    if warmup:
        _consume(df, warmup, consume)
    clock = _Clock(trace)
    stages = pipeline_stages(df)
    stats = [StageStats(i, depth, public_name(f)) for i, (depth, f) in enumerate(stages)]
    workers = _Workers(clock)
    traced = [f for (_, f), s in zip(stages, stats) if workers.attach(f, s)]
    policies = [getattr(f, "error_policy", None) for _, f in stages]
    skipped0 = [None if p is None else p.total for p in policies]
    for (_, f), s in zip(stages, stats):
        instrument(f, functools.partial(clock.timed, stats=s))
    try:
        t0 = time.perf_counter()
        items = _consume(df, num, consume)
        seconds = time.perf_counter() - t0
    finally:
        for _, f in stages:
            instrument(f, None)
        for f in traced:
            f.trace_workers(None)  # type: ignore[attr-defined]  # (attached by _Workers)
    for (_, f), s in zip(stages, stats):
        metrics = getattr(f, "profile_metrics", None)  # a stage's counters, e.g. network I/O
        if callable(metrics):
            s.metrics = dict(metrics())
    for s, p, before in zip(stats, policies, skipped0):
        if p is not None and before is not None:
            s.skipped = p.total - before
    for (_, f), s in zip(stages, stats):
        tuned = getattr(f, "autotune_state", None)
        s.autotune = tuned() if callable(tuned) else None
    for s in stats:
        if s._fill_n:
            s.queue_fill = s._fill_sum / s._fill_n
        if s.index in workers.busy and s.workers and seconds > 0:
            s.workers_busy = min(1.0, workers.busy[s.index] / (s.workers * seconds))
    producing = stats[0].total_seconds if stats else 0.0
    if seconds > 0 and producing < CONSUMER_BOUND * seconds:
        return ProfileReport(
            stats, items, seconds, None,
            f"the pipeline spends {100 * producing / seconds:.0f}% of the time producing "
            "datapoints; the consumer takes the rest, so it is the one to make faster.",
            clock.trace or [], workers.rows)
    best = max(range(len(stats)), key=lambda i: stats[i].own_seconds)
    flow = stages[best][1]
    return ProfileReport(stats, items, seconds, best,
                         _suggest(flow, stats[best], not flow.children()),
                         clock.trace or [], workers.rows)


def _consume(df: DataFlow, n: int, consume: Any = None) -> int:
    got = 0
    while got < n:
        before = got
        itr = iter(df)
        for dp in itr:
            if consume is not None:
                consume(dp)
            got += 1
            if got >= n:
                break
        close = getattr(itr, "close", None)
        if close is not None:
            close()
        if got == before:
            break
    return got
