"""``dataflow.profile``: where a pipeline spends its time, and which stage is the bottleneck.

Each stage of the pipeline (the flow, the flow it wraps, and so on down to the sources) is timed
in place while the pipeline runs: the time spent inside each ``next()`` of a stage, minus the time
spent inside its children's, is the stage's *own* time. Parallel stages additionally report the
fill level of their queues (sampled at each datapoint, when the stage exposes ``queue_stats()``);
time a parallel stage spends waiting for its workers counts as its own.

The report names the stage with the largest own time as the bottleneck (the lowest ceiling in
the table: its ceiling is the pipeline's datapoints per second of that stage's own time) and
suggests a fix for its kind (each stage class declares it in ``profile_hint``) and for what its
queue showed; when the consumer (``consume=``) took more time than any stage, there is no
bottleneck in the pipeline: the consumer is the one to make faster.
It renders as a table (:meth:`ProfileReport.format`), as JSON (:meth:`ProfileReport.to_json`)
and as a Chrome trace-event file (:meth:`ProfileReport.write_trace`), which opens in Perfetto or
``chrome://tracing`` with one row per stage showing when it was busy, and one row per worker of
each parallel stage showing when that worker was busy (between its busy spans it waits).

A stage may also report its own counters through a method ``profile_metrics() -> dict`` (read
after the run; a streaming source gives network MB/s, bytes in flight and cache hits), printed
under the table, and notes through ``profile_notes() -> list[str]`` (an image flow that decodes
JPEG without the fast path says so, and how to get it); a stage whose time is I/O wait says
so with ``profile_hint = "network"``, and the suggestion then names the network.

Stages are observed through :func:`dataflow.base.instrument` (nothing about the flows is
changed), found through :meth:`DataFlow.children`.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from dataflow.base import DataFlow, instrument
from dataflow.profile_stats import StageStats, _suggest

__all__ = ["ProfileReport", "StageStats", "pipeline_stages", "profile"]

_MAX_TRACE_EVENTS = 50_000

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
    #: seconds spent in ``consume`` (None: no consumer was given)
    consumer_seconds: float | None = None

    @property
    def bottleneck_stage(self) -> StageStats | None:
        return None if self.bottleneck is None else self.stages[self.bottleneck]

    def to_dict(self) -> dict[str, Any]:
        stage = self.bottleneck_stage
        return {"items": self.items, "seconds": self.seconds,
                "items_per_second": self.items / self.seconds if self.seconds > 0 else None,
                "consumer_seconds": self.consumer_seconds,
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
        """The report as a table; each column is explained in :func:`profile`'s docstring."""
        total_own = sum(s.own_seconds for s in self.stages) or 1.0
        headers = ["#", "stage", "in", "out", "out/s", "MB/s", "own us/out", "own %",
                   "ceiling/s", "queue", "workers", "skipped"]
        rows = []
        for s in self.stages:
            rows.append([
                str(s.index), "  " * s.depth + s.name,
                "-" if s.items_in is None else str(s.items_in), str(s.items),
                f"{s.items_per_second:,.1f}",
                f"{s.bytes_per_second / 1e6:,.1f}" if s.bytes else "-",
                f"{s.own_us_per_item:,.1f}", f"{100 * s.own_seconds / total_own:.1f}",
                "-" if s.own_seconds <= 0 else f"{s.ceiling_per_second:,.0f}",
                "-" if s.queue_fill is None else f"{100 * s.queue_fill:.0f}% full",
                _workers_cell(s),
                "-" if s.skipped is None else str(s.skipped),
            ])
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
        line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
        out = ["", "Pipeline profile", "=" * 16, line, "-" * len(line)]
        out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        rate = self.items / self.seconds if self.seconds > 0 else float("inf")
        stage = self.bottleneck_stage
        verdict = (f"no bottleneck: {self.suggestion}" if stage is None else
                   f"bottleneck: stage {self.bottleneck} ({stage.name}, "
                   f"{100 * stage.own_seconds / total_own:.1f}% of the own time, the lowest "
                   f"ceiling: {stage.ceiling_per_second:,.0f}/s): {self.suggestion}")
        for s in self.stages:
            if s.metrics:
                out.append(f"stage {s.index} ({s.name}): " + ", ".join(
                    f"{k} {v:,.1f}" if isinstance(v, float) else f"{k} {v}"
                    for k, v in s.metrics.items()))
        notes = dict.fromkeys(n for s in self.stages for n in (s.notes or ()))
        out += [f"note: {n}" for n in notes]
        run = f"{self.items} datapoints in {self.seconds:.2f} s ({rate:,.1f}/s)"
        if self.consumer_seconds is not None:
            run += (f"; the consumer took {self.consumer_seconds:.2f} s "
                    f"({100 * self.consumer_seconds / (self.seconds or 1.0):.0f}% of the run)")
        out += ["", run, verdict]
        out += _autotune_lines(self.stages)
        return "\n".join(out)


def _workers_cell(s: StageStats) -> str:
    """``8->60 (avg 41.2), 48% busy, 1.9 cores``: the count at the start and end of the run
    (one number if it did not change), how busy they were and the cores they used."""
    if s.workers is None:
        return "-"
    count = str(s.workers)
    if s.workers_start is not None and s.workers_start != s.workers:
        count = f"{s.workers_start}->{s.workers}"
        if s.workers_mean is not None:
            count += f" (avg {s.workers_mean:.1f})"
    parts = [count]
    if s.workers_busy is not None:
        parts.append(f"{100 * s.workers_busy:.0f}% busy")
    if s.workers_cpu is not None:
        parts.append(f"{s.workers_cpu:.2f} cores")
    return ", ".join(parts)


class _Clock:
    """Nested timing of the stages' ``next()`` calls in one thread."""

    def __init__(self, trace: bool) -> None:
        self.stack: list[float] = []
        self.t0 = time.perf_counter()
        self.trace: list[dict[str, Any]] | None = [] if trace else None

    def timed(self, stage: DataFlow, itr: Iterator[Any], stats: StageStats) -> Iterator[Any]:
        stack, perf = self.stack, time.perf_counter
        queue_stats = getattr(stage, "queue_stats", None)
        count_workers = stats.workers is not None
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
            if count_workers:  # (an autotuned count changes while it runs)
                stats._workers_sum += _worker_count(stage)
                stats._workers_n += 1
            yield dp


def _worker_count(flow: Any) -> int:
    return int(getattr(flow, "num_workers", None) or getattr(flow, "_num_workers", 0) or 0)


class _Workers:
    """Busy spans of the workers of the parallel stages, as trace events and busy shares,
    and the CPU time the workers report with them."""

    def __init__(self, clock: _Clock) -> None:
        self.clock = clock
        self.rows: list[tuple[int, int, str]] = []  # (trace tid, stage index, label)
        self.busy: dict[int, float] = {}  # stage index -> busy seconds of all its workers
        self.cpu: dict[int, float | None] = {}  # stage index -> their CPU seconds, if known

    def attach(self, flow: Any, stats: StageStats) -> bool:
        trace_workers = getattr(flow, "trace_workers", None)
        if not callable(trace_workers):
            return False
        n = _worker_count(flow)
        stats.workers = stats.workers_start = n or None
        base = 1000 * (stats.index + 1)
        self.rows += [(base + w, stats.index, f"{stats.index}: {stats.name} worker {w}")
                      for w in range(n)]
        self.busy[stats.index] = 0.0
        self.cpu[stats.index] = None
        clock, trace = self.clock, self.clock.trace
        rows = [n]  # workers with a trace row

        def record(worker: int, start: float, end: float, waited: float,
                   cpu: float | None = None) -> None:
            busy = max(0.0, end - start - waited)
            self.busy[stats.index] += busy
            if cpu is not None:
                self.cpu[stats.index] = (self.cpu[stats.index] or 0.0) + cpu
            if worker >= rows[0]:  # (workers added while it runs: their own trace rows)
                self.rows += [(base + w, stats.index, f"{stats.index}: {stats.name} worker {w}")
                              for w in range(rows[0], worker + 1)]
                rows[0] = worker + 1
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
    """Run ``num`` datapoints of ``df`` (after ``warmup``) with every stage timed; return a
    :class:`ProfileReport` (``.format()``: a table; ``.to_json()``; ``.write_trace(path)``).

    The table has one row per stage, outermost first (children indented). Its columns, all
    over the timed run only (``warmup`` excluded):

    * ``in``: datapoints the stage's children yielded to it (``-`` for a source, and for a
      runner, whose children run in its worker processes);
    * ``out``: datapoints the stage yielded. ``in - out`` is what it held back: a batching
      stage takes ``batch_size`` in per datapoint out; a buffering stage (``LocallyShuffleData``,
      a parallel mapper reading ahead) yields what it read before the run, or keeps what it
      reads for later, so its ``in`` and ``out`` differ by what its buffer gained or lost;
    * ``out/s`` and ``MB/s``: ``out`` (and the array bytes in it) per second of the run: the
      rate the stage delivered. Every stage of a 1:1 pipeline delivers at the same rate;
    * ``own us/out``: the stage's own time per datapoint out: the time inside its
      ``next()`` minus the time inside its children's (a parallel stage's own time includes
      waiting for its workers);
    * ``own %``: its share of the pipeline's own time, all stages together;
    * ``ceiling/s``: the pipeline's datapoints (the first row's ``out``) per second of the
      stage's own time: the most the pipeline could deliver if the other stages and the
      consumer took no time. One unit for every row, so the bottleneck (the most own time)
      has the lowest;
    * ``queue``: a parallel stage's finished results waiting to be taken (in its transport
      too), as a share of its buffer, averaged over its datapoints: nearly empty (under 20%),
      the consumer usually waits for its workers; fuller, results are waiting when asked for;
    * ``workers``: a parallel stage's worker count at the start and end of the run (one
      number if it did not change; an ``"auto"`` stage's average in brackets), the share of
      their time they were busy mapping, and the cores they used (their CPU time over the
      run's wall time; shown where the workers report it): a few busy workers using well
      under one core wait on I/O; several using about one core in all take turns on the GIL;
    * ``skipped``: inputs dropped under ``on_error="skip"``/``"warn"``.

    Under the table: each stage's own counters (``profile_metrics()``), the datapoints
    delivered per second (and the consumer's seconds, with ``consume``), and the verdict:
    the stage with the most own time (the lowest ceiling), with its share and ceiling, and
    advice that matches what it already does (an ``"auto"`` stage still adding workers, idle
    workers waiting for inputs, work that waits or holds the GIL, a queue whose results were
    waiting: the hand-over costs), or "no bottleneck" when the consumer took more time than
    any stage's own time (it is the slower part).
    Then, for each ``"auto"`` stage, its worker count and last decisions (see
    :func:`dataflow.autotune_report`), and a note when it was still tuning at the end.

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
        choice = tuned.get("backend_choice")
        if choice:
            out.append(f"  back end: {choice['reason']}")
        out += [f"  window {d['window']}: {d['old']} -> {d['new']}: {d['reason']}"
                for d in tuned.get("decisions", [])[-_SHOWN_DECISIONS:]]
        if done is None:
            out.append(f"  note: still tuning when the run ended (window {tuned.get('window')}):"
                       " the figures above mix its start-up worker count with later ones; "
                       "profile longer (a larger num) to measure where it settles.")
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
    consumed = [0.0]
    try:
        t0 = time.perf_counter()
        items = _consume(df, num, consume, consumed)
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
        notes = getattr(f, "profile_notes", None)  # e.g. a decoder running without its fast path
        if callable(notes):
            s.notes = list(notes()) or None
    for s, p, before in zip(stats, policies, skipped0):
        if p is not None and before is not None:
            s.skipped = p.total - before
    for (_, f), s in zip(stages, stats):
        tuned = getattr(f, "autotune_state", None)
        s.autotune = tuned() if callable(tuned) else None
    by_id = {id(f): s for (_, f), s in zip(stages, stats)}
    for (_, f), s in zip(stages, stats):
        s.seconds, s.run_items = seconds, items
        kids = [by_id[id(c)] for c in f.children() if id(c) in by_id]
        s.items_in = sum(k.items for k in kids) if kids else None
        if s.items_in == 0 and s.items:  # (a runner's children run in its workers, unseen)
            s.items_in = None
        if s.workers is not None:
            s.workers = _worker_count(f) or s.workers
            s.workers_mean = (s._workers_sum / s._workers_n if s._workers_n
                              else float(s.workers))
    for s in stats:
        if s._fill_n:
            s.queue_fill = s._fill_sum / s._fill_n
        if s.index in workers.busy and s.workers_mean and seconds > 0:
            s.workers_busy = min(1.0, workers.busy[s.index] / (s.workers_mean * seconds))
            cpu = workers.cpu.get(s.index)
            s.workers_cpu = None if cpu is None else cpu / seconds
    best = max(range(len(stats)), key=lambda i: stats[i].own_seconds)
    consumer = consumed[0] if consume is not None else None
    if consumer is not None and consumer >= stats[best].own_seconds:
        top = stats[best]
        return ProfileReport(
            stats, items, seconds, None,
            f"the consumer took {consumer:.2f} s of the {seconds:.2f} s run, more than any "
            f"stage's own time (the most: stage {best}, {top.name}, {top.own_seconds:.2f} s), "
            "so it is the one to make faster.",
            clock.trace or [], workers.rows, consumer)
    flow = stages[best][1]
    return ProfileReport(stats, items, seconds, best,
                         _suggest(flow, stats[best], not flow.children()),
                         clock.trace or [], workers.rows, consumer)


def _consume(df: DataFlow, n: int, consume: Any = None,
             consumed: list[float] | None = None) -> int:
    """Take ``n`` datapoints of ``df`` (over several epochs if needed), each given to
    ``consume``; the seconds spent in ``consume`` are added to ``consumed[0]``."""
    got, perf = 0, time.perf_counter
    while got < n:
        before = got
        itr = iter(df)
        for dp in itr:
            if consume is not None:
                t = perf()
                consume(dp)
                if consumed is not None:
                    consumed[0] += perf() - t
            got += 1
            if got >= n:
                break
        close = getattr(itr, "close", None)
        if close is not None:
            close()
        if got == before:
            break
    return got
