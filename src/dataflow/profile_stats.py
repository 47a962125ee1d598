"""What :func:`dataflow.profile` measured of one stage (:class:`StageStats`), and the advice it
gives for the bottleneck stage, read from those figures and the stage's ``profile_hint``: for a
parallel stage, from how full its queue was, how busy its workers were and how many cores they
used (waiting, taking turns on the GIL, or running in parallel), and what its autotuner did.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from dataflow.base import DataFlow

__all__ = ["QUEUE_EMPTY", "StageStats"]

#: a parallel stage's queue below this mean fill is "nearly empty": the consumer usually
#: finds no result waiting, so its workers are the slow part
QUEUE_EMPTY = 0.2


@dataclass
class StageStats:
    """What one stage did during the timed run (every figure is documented in
    :func:`dataflow.profile`)."""

    index: int
    depth: int
    name: str
    items: int = 0  # datapoints the stage yielded (to its parent, or to the consumer)
    items_in: int | None = None  # datapoints its children yielded to it (None: a source)
    own_seconds: float = 0.0  # time inside its next() minus time inside its children's
    total_seconds: float = 0.0  # time inside its next(), its children's included
    bytes: int = 0  # bytes of array and buffer data in the datapoints it yielded
    seconds: float = 0.0  # wall time of the run (the same for every stage)
    run_items: int = 0  # datapoints the pipeline delivered in the run (the same for every stage)
    queue_fill: float | None = None  # mean fill fraction of a parallel stage's queue
    workers: int | None = None  # a parallel stage's number of workers at the end of the run
    workers_start: int | None = None  # ... and at its start (an autotuned count changes)
    workers_mean: float | None = None  # ... and on average over the run
    workers_busy: float | None = None  # the share of their time its workers were busy
    workers_cpu: float | None = None  # cores its workers used on average (CPU time / wall)
    skipped: int | None = None  # inputs skipped under the bad-sample policy during the run
    autotune: dict[str, Any] | None = None  # an autotuned stage's controller: count, decisions
    metrics: dict[str, float] | None = None  # a stage's own counters (its profile_metrics())
    notes: list[str] | None = None  # what a stage says of itself (its profile_notes())
    _fill_sum: float = field(default=0.0, repr=False)
    _fill_n: int = field(default=0, repr=False)
    _workers_sum: float = field(default=0.0, repr=False)
    _workers_n: int = field(default=0, repr=False)

    @property
    def own_us_per_item(self) -> float:
        """Microseconds of the stage's own time per datapoint it yielded."""
        return self.own_seconds / self.items * 1e6 if self.items else 0.0

    @property
    def items_per_second(self) -> float:
        """Datapoints it yielded per second of the run: its delivered rate."""
        return self.items / self.seconds if self.seconds > 0 else 0.0

    @property
    def bytes_per_second(self) -> float:
        """Bytes it yielded per second of the run."""
        return self.bytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def ceiling_per_second(self) -> float:
        """The pipeline's datapoints (its outermost stage's ``out``) per second of this
        stage's own time: the most the pipeline could deliver if everything else (the other
        stages, the consumer) took no time. One unit for every stage (a batching stage's
        children count batches, not their own items), so the lowest is the bottleneck's."""
        done = self.run_items or self.items
        return done / self.own_seconds if self.own_seconds > 0 else float("inf")

    @property
    def held(self) -> int | None:
        """Datapoints it took in minus those it yielded: what it buffered during the run
        (negative: it yielded from a buffer filled before the run; a batching stage takes in
        ``batch_size`` per batch)."""
        return None if self.items_in is None else self.items_in - self.items

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if not k.startswith("_")}
        d.update(own_us_per_item=self.own_us_per_item,
                 items_per_second=self.items_per_second,
                 bytes_per_second=self.bytes_per_second,
                 ceiling_per_second=(None if self.own_seconds <= 0
                                     else self.ceiling_per_second))
        return d


#: workers busy less than this share of their time wait for inputs, not for work
WORKERS_IDLE = 0.6
#: cores used by a stage's workers: below WAITS the work waits (I/O, sleeps); at or above
#: RELEASES it runs in parallel (it releases the GIL); between, with several threads busy at
#: once, they take turns on the GIL
WAITS, RELEASES = 0.5, 1.3


def _work_kind(stats: StageStats) -> str | None:
    """``"waits"``, ``"gil"`` (threads taking turns on the GIL), ``"parallel"``, or ``None``
    when the workers' CPU time is unknown."""
    cores, busy, mean = stats.workers_cpu, stats.workers_busy, stats.workers_mean
    if cores is None or busy is None or not mean:
        return None
    if cores < WAITS:
        return "waits"
    if cores >= RELEASES:
        return "parallel"
    return "gil" if busy * mean >= 1.5 else None  # (one worker at a time: it cannot tell)


def _suggest_parallel(stage: DataFlow, stats: StageStats) -> str:
    """The advice for a parallel stage whose queue is nearly empty, consistent with what the
    stage is already doing (an autotuned count, idle workers, work that waits)."""
    name, hint = stats.name, type(stage).profile_hint
    busy = stats.workers_busy
    empty = ("nearly empty" if stats.queue_fill is None
             else f"nearly empty ({100 * stats.queue_fill:.0f}% full)")
    if busy is not None and busy < WORKERS_IDLE:
        return (f"{name}'s queue is {empty}, yet its workers were busy only "
                f"{100 * busy:.0f}% of the time: they wait for inputs, which {name} reads from "
                "the stages below it in this process. Make those faster (see their own time), "
                "or raise buffer_size.")
    kind = _work_kind(stats)
    tuned = stats.autotune
    if tuned is not None:
        now, top = tuned.get("workers"), tuned.get("maximum")
        if now is not None and top is not None and now < top:
            if tuned.get("converged_at") is None:
                return (f"{name}'s queue is {empty} and its autotuner is still adding "
                        f"workers ({now} now, at most {top} in its CPU budget): profile longer "
                        "to see where it settles.")
            return (f"{name}'s queue is {empty}, and its autotuner found that more than "
                    f"{now} workers do not pay (its CPU budget allows {top}): the cores are "
                    "busy elsewhere, or the work contends for something shared; make the work "
                    "cheaper.")
        more = (f"it runs the most workers its CPU budget allows ({top}): give the pipeline "
                "more cores (autotune(ds, cores=...), the container's CPU limit) or make the "
                "work cheaper")
        if kind == "gil" and stats.autotune and tuned.get("backend") == "thread":
            more += ("; its threads take turns on the GIL, so ParallelMapData(backend='auto') "
                     "or MultiProcessMapDataZMQ would run them in parallel")
        return f"{name}'s queue is {empty}: {more}."
    if kind == "waits":
        return (f"{name}'s queue is {empty}: its workers wait (they used "
                f"{stats.workers_cpu:.2f} cores: I/O or sleeps), so more of them help: raise "
                "the worker count, or pass \"auto\"."
                + (" Threads do this as well as processes, without copying data between "
                   "processes." if hint in ("process-map", "ray-map") else ""))
    if hint == "thread-map":
        if kind == "gil":
            return (f"{name}'s queue is {empty}: its {stats.workers_mean:.0f} threads used "
                    f"{stats.workers_cpu:.2f} cores: they take turns on the GIL (pure Python). "
                    "Run the work in processes: MultiProcessMapDataZMQ, or "
                    "ParallelMapData(ds, \"auto\", func), which measures and moves it.")
        return (f"{name}'s queue is {empty}: its threads cannot keep up; add threads "
                "(num_thread, or \"auto\") while cores are idle, or make the work cheaper.")
    if hint in ("process-map", "ray-map"):
        return (f"{name}'s queue is {empty}: its workers cannot keep up; add workers "
                "while cores are idle (or pass \"auto\"), or make the work cheaper. Work that "
                "releases the GIL (OpenCV, most NumPy) runs as fast on MultiThreadMapData "
                "threads without the cost of moving data between processes.")
    return (f"{name}'s queue is {empty}: its workers cannot keep up; add workers while "
            "cores are idle, or make the flow they run cheaper.")


def _suggest_ready(stage: DataFlow, stats: StageStats) -> str:
    """The advice for a parallel stage with the most own time whose results were mostly
    waiting when asked for: its own time is the hand-over, not its workers."""
    name = stats.name
    fill = 100 * (stats.queue_fill or 0.0)
    if type(stage).profile_hint == "thread-map" and _work_kind(stats) == "gil":
        return (f"{name}'s queue is {fill:.0f}% full, yet it has the most own time: its "
                f"{stats.workers_mean:.0f} threads used {stats.workers_cpu:.2f} cores: they "
                "take turns on the GIL (pure Python) with this thread, which waits for its "
                "turn to take their results. Run the work in processes: "
                "MultiProcessMapDataZMQ, or ParallelMapData(ds, \"auto\", func), which "
                "measures and moves it.")
    return (f"{name}'s queue is {fill:.0f}% full (results are waiting when "
            f"they are asked for), yet it has the most own time ({stats.own_us_per_item:,.1f} "
            "us per datapoint out): that is the cost of handing results over in this process "
            "(taking turns on the GIL with its threads, receiving and decoding what its "
            "processes send), not its workers' speed. Hand over fewer, larger datapoints "
            "(batch inside the parallel stage) or smaller ones (encoded).")


def _suggest(stage: DataFlow, stats: StageStats, is_source: bool) -> str:
    name = stats.name
    hint = type(stage).profile_hint
    if stats.queue_fill is not None:
        if stats.queue_fill >= QUEUE_EMPTY:
            return _suggest_ready(stage, stats)
        return _suggest_parallel(stage, stats)
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
