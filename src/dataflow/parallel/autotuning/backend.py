"""Threads or processes: the back-end choice of ``ParallelMapData(backend="auto")``, measured
on the stage's real stream.

The stage starts on threads. While its first inputs are mapped, every chunk a thread maps
reports its wall-clock span and the thread's CPU seconds in it (``time.thread_time``); no
extra call of the map function is made. From those spans :class:`BackendProbe` computes:

* ``busy``: the time at least one thread was mapping (the union of the spans);
* ``overlap``: the threads' mapping time over ``busy`` (how many mapped at once, on average);
* ``cores``: the threads' CPU seconds over ``busy`` (the cores they used while mapping).

Work that waits (I/O, sleeps) uses little CPU while it maps: threads. Work that computes
while releasing the GIL (OpenCV, NumPy kernels) uses more than one core when threads overlap:
threads. Work that holds the GIL uses one core at most, however many threads overlap (they
take turns): processes, unless the budget has a single core. The probe decides once it has
seen enough (:data:`PROBE_CHUNKS` chunks over :data:`PROBE_SECONDS` of mapping), or at
:data:`PROBE_LIMIT` seconds with what it has.

Threads that release the GIL also use about one core when the cores are busy with something
else (the consumer's own work, other processes): two threads of OpenCV work beside a Python
consumer on two cores used 1.0-1.3 cores. So the probe also reads how much of the process's
cores stood idle while it measured (Linux: ``/proc/stat``, the CPUs of the process's
affinity): work that holds the GIL leaves cores idle; where none were (less than
:data:`IDLE_ENOUGH` of a core), one core's worth tells nothing, and the stage stays on
threads (its controller still moves the work if the consumer waits for it at one thread).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

__all__ = ["BackendChoice", "BackendProbe", "choose_backend", "may_move", "thread_start"]

#: the probe decides after at least this many chunks over this many seconds of mapping
PROBE_CHUNKS, PROBE_SECONDS = 8, 0.05
#: ... or, whatever it has, after this many seconds since the first chunk began (or chunks)
PROBE_LIMIT, PROBE_MAX_CHUNKS = 2.0, 256
#: cores used while mapping below which the work waits, and from which it releases the GIL
WAITS_BELOW, RELEASES_FROM = 0.5, 1.3
#: the threads overlapped enough to tell whether the work holds the GIL
OVERLAP_ENOUGH = 1.5
#: cores idle on average while the probe measured, below which "about one core used" may be
#: threads held back by other work rather than by the GIL
IDLE_ENOUGH = 0.5


@dataclass(frozen=True)
class BackendChoice:
    """What the probe measured and chose (``backend``: ``"thread"`` or ``"process"``)."""

    backend: str
    reason: str
    computes: bool  # the work computes (rather than waits): one thread per core to start
    overlap: float
    cores: float

    def to_dict(self) -> dict[str, object]:
        return {"backend": self.backend, "reason": self.reason,
                "overlap": round(self.overlap, 2), "cores": round(self.cores, 2)}


def choose_backend(overlap: float, cores_used: float, budget: int,
                   idle: float | None = None) -> BackendChoice:
    """The choice from the probe's figures (see the module docstring): ``overlap``, threads
    mapping at once on average; ``cores_used``, cores they used while mapping; ``budget``,
    the cores the stage may use; ``idle``, cores of the process's that stood idle meanwhile
    (``None``: not known)."""
    figures = f"{overlap:.1f} threads mapping at once used {cores_used:.2f} cores"
    if cores_used < WAITS_BELOW:
        return BackendChoice("thread", f"it waits ({figures}): threads", False, overlap,
                             cores_used)
    if cores_used >= RELEASES_FROM:
        return BackendChoice("thread", f"it releases the GIL ({figures}): threads", True,
                             overlap, cores_used)
    if overlap < OVERLAP_ENOUGH:
        return BackendChoice(
            "thread", f"it computes, but the threads never mapped at once ({figures}), so "
            "whether it holds the GIL is unknown: threads", True, overlap, cores_used)
    if budget < 2:
        return BackendChoice("thread", "one core in the budget: threads (processes would "
                             "only add copies)", True, overlap, cores_used)
    if idle is not None and idle < IDLE_ENOUGH:
        return BackendChoice(
            "thread", f"it computes ({figures}), but the cores were busy ({idle:.2f} idle), "
            "so whether it holds the GIL is unknown: threads", True, overlap, cores_used)
    return BackendChoice("process", f"it holds the GIL ({figures}): processes", True,
                         overlap, cores_used)


class BackendProbe:
    """Collects the chunk spans of a thread stage's first inputs; :meth:`add` returns the
    :class:`BackendChoice` once it can tell, else ``None``."""

    def __init__(self, budget: int, idle: bool = False) -> None:
        self.budget = budget
        self._spans: list[tuple[float, float]] = []
        self._cpu = self._wall = 0.0
        self._first = float("inf")
        # (``idle``: read the idle time of the process's cores, where the OS tells it)
        self._idle0 = idle_seconds() if idle else None

    def add(self, start: float, end: float, cpu: float) -> BackendChoice | None:
        spans = self._spans
        spans.append((start, end))
        self._cpu += cpu
        self._wall += end - start
        self._first = min(self._first, start)
        late = end - self._first >= PROBE_LIMIT or len(spans) >= PROBE_MAX_CHUNKS
        # (the union of the spans is at most their sum: it is computed once that may do)
        if not late and (len(spans) < PROBE_CHUNKS or self._wall < PROBE_SECONDS):
            return None
        busy = _union(spans)
        if not late and busy < PROBE_SECONDS:
            return None
        busy = max(busy, 1e-9)
        idle = None
        if self._idle0 is not None:
            now = idle_seconds()
            if now is not None:
                idle = (now[0] - self._idle0[0]) / max(now[1] - self._idle0[1], 1e-9)
        return choose_backend(self._wall / busy, self._cpu / busy, self.budget, idle)


def idle_seconds() -> tuple[float, float] | None:
    """``(idle seconds of the CPUs this process may run on, since boot; monotonic clock)``
    from ``/proc/stat`` (Linux), or ``None`` where it cannot be read."""
    try:
        cpus = {f"cpu{c}" for c in os.sched_getaffinity(0)}
        hz = os.sysconf("SC_CLK_TCK")
        with open("/proc/stat") as f:
            lines = [line.split() for line in f if line.startswith("cpu")]
    except (OSError, AttributeError, ValueError):
        return None
    # columns: user nice system idle iowait ...: idle and iowait are time the CPU stood idle
    ticks = sum(int(p[4]) + int(p[5]) for p in lines if p[0] in cpus and len(p) > 5)
    return ticks / hz, time.monotonic()


def _union(spans: list[tuple[float, float]]) -> float:
    """The length of the union of the intervals ``spans``."""
    total, reach = 0.0, float("-inf")
    for s, e in sorted(spans):
        if e <= reach:
            continue
        total += e - max(s, reach)
        reach = e
    return total


def thread_start(computes: bool, start: int, cores: int) -> int:
    """The thread count of an autotuned thread stage once the probe measured its work: work
    that computes (releasing the GIL) runs a thread per core of the budget, not the
    ``start`` (several per core) that work which waits starts with: the controller climbs
    from there if more pay, instead of finding its way down from a crowd of threads through
    windows that the crowd makes noisy."""
    return max(1, min(start, cores)) if computes else start


def may_move(computes: bool, cores: int) -> bool:
    """Whether an autotuned thread stage whose work the probe measured may move it to
    processes when its consumer is the bottleneck: work that computes (the parts of it that
    hold the GIL take it from the consumer) with a core to spare for the process (a budget of
    two cores or more). Work that waits holds the GIL for little."""
    return computes and cores >= 2
