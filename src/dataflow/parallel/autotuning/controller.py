"""The worker-count controller of an autotuned stage: hill climbing on measured throughput,
with hysteresis, that gives CPU back when the consumer is the bottleneck.

The controller is a pure function of its measurements: each call of :meth:`Controller.step`
takes one :class:`Measurement` (a window of about half a second: the workers that ran, the
results per second the consumer got, and the fraction of the window the consumer spent waiting
for results) and returns the worker count for the next window. It never reads a clock or the
machine, so tests drive it with recorded or synthetic measurements.

The rules:

* **the consumer is the bottleneck** (it waited less than ``idle_wait`` of the window: results
  were ready whenever it asked): adding a worker cannot help, so none is added; workers are
  given back, to leave the CPU to the consumer (a trainer's own work);
* **the workers are the bottleneck**: try one more worker (or half as many more, for larger
  counts); keep it if the throughput rose by at least ``gain`` (5 %: the count it climbed
  from is too few, a floor), else go back and stop climbing there (a ceiling); then try
  fewer (the cores may be fewer than the workers), unless the count paid in full: a climb to
  it, or a failed give-back from it, measured each worker between it and the count below as
  adding at least ``full`` (75 %) of its share, so that no knee lies between them (with work
  that waits, each of a hundred threads adds 1 %, within a window's noise, and giving them
  back one at a time never settled); a failed give-back of at most ``PAID_STRICT_UP_TO`` (8)
  workers must also leave less than one of them idle (12 -> 6 workers on 10 cores loses 40 %:
  on average 80 % of each share, yet the last two added nothing);
* give-backs take half of the workers until one fails, then one at a time or, from
  ``BISECT_FROM`` (64) workers, half of the gap to the floor (a bisection between the count
  found too few and the count that kept the throughput: one at a time from 256 threads, each
  step inside a window's noise, walked for many seconds); never down to the floor; one that
  keeps the throughput makes the count above the new one a ceiling (fewer did as well: more
  would not pay);
* workers given back are taken back if the throughput fell by more than ``loss`` (4 %) against
  the rate before the first of a run of give-backs (losses do not add up): the count that lost
  is too few (the floor); the buffer of results holds the consumer's supply while the one
  measured window after a give-back shows whether it cost throughput;
* a window right after a change is not measured (new workers start, queues refill);
* **a stage that could move its work to processes** (``move_after`` > 0: a thread stage with
  two cores or more whose work computes) and has been consumer-bound at its minimum for
  ``move_after`` windows in a row moves it (``backend`` becomes ``"process"``), once: the
  parts of the work that hold the GIL then no longer take it from the consumer, whose own
  step (a trainer's Python) may need it;
* **a quick start**: a fresh controller is *starting* (the stage measures short windows while
  it is): a worker-bound window climbs by the factor that would have kept the consumer from
  waiting, ``1 / (1 - wait)`` (at most ``climb``, 4x; at least the usual step): a consumer
  that waited 99 % of the window at 8 workers gets 32, then 128. The start ends at the first
  window that is not such a climb paying in full (each added worker adding ``full`` of its
  share): a climb that did not pay (a ceiling: back, and the usual steps below it) or paid
  less (a knee between the counts: the usual steps find it), a consumer-bound window (the
  usual give-backs), or the maximum reached (the usual give-back probe from the maximum,
  if the climb to it did not pay in full, waits for the first usual window, so that a
  short pass runs at the maximum);
* **hysteresis**: a count found too small (a give-back that made the consumer wait) or too
  large (a climb that did not pay) is a bound that holds for ``hold`` windows; then the
  controller probes again, so it follows a workload that changes.

Every change is a :class:`Decision`, kept (the last ``KEEP_DECISIONS``) for ``state_dict()``
and the profiler.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Controller", "Decision", "Measurement"]

#: decisions a controller keeps for its state and the profiler
KEEP_DECISIONS = 20
#: from this many workers, give-backs after a failed one bisect the gap to the floor: one
#: worker is then under 2 % of the throughput, inside a window's noise, and steps of one walked
#: for seconds (below it, one at a time: behind a consumer each worker may be what it needs)
BISECT_FROM = 64
#: a failed give-back of at most this many workers says "paid in full" only if less than one
#: of them can have been idle (see :meth:`Controller.step`)
PAID_STRICT_UP_TO = 8


@dataclass(frozen=True, slots=True)
class Measurement:
    """One window: ``workers`` ran; the consumer got ``rate`` results per second and spent
    ``wait`` (0 to 1) of the window waiting for them."""

    workers: int
    rate: float
    wait: float


@dataclass(frozen=True, slots=True)
class Decision:
    """At window ``window`` the controller went from ``old`` to ``new`` workers because of
    ``reason``, having measured ``rate`` results per second."""

    window: int
    old: int
    new: int
    reason: str
    rate: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class Controller:
    """Chooses the worker count of one stage, between ``minimum`` and ``maximum`` (which a
    shared budget may lower while it runs), starting at ``start``."""

    minimum: int
    maximum: int
    start: int
    gain: float = 0.05
    loss: float = 0.04
    idle_wait: float = 0.05
    full: float = 0.75
    hold: int = 40
    move_after: int = 0  # consumer-bound windows at the minimum before moving to processes
    climb: float = 4.0  # the largest factor of a climb while starting
    quick_start: bool = True  # start with the quick start (see the module docstring)
    backend: str = "thread"
    workers: int = 0
    window: int = 0
    converged_at: int | None = None  # the first window after which nothing changed
    decisions: list[Decision] = field(default_factory=list)
    _settle: bool = False
    _ceiling: tuple[int, int] | None = None  # (count that did not pay, window it was found)
    _floor: tuple[int, int] | None = None  # (count found too few, window it was found)
    _paid: tuple[int, int] | None = None  # (count a climb paid for, window it was found)
    _probe: tuple[int, float] | None = None  # (count before a climb, its rate)
    _giveback: tuple[int, float] | None = None  # (count before a give-back, reference rate)
    _chain: float | None = None  # the rate before a run of give-backs began
    _halve: bool = True  # give back half of the workers (until a give-back fails)
    _bound: int = 0  # consecutive consumer-bound windows at the minimum
    _starting: bool = True  # climbing fast from the start (see the module docstring)

    def __post_init__(self) -> None:
        self.maximum = max(1, self.maximum)
        self.minimum = max(1, min(self.minimum, self.maximum))
        self.workers = min(max(self.start, self.minimum), self.maximum)
        self._starting = self.quick_start

    def skip_window(self) -> None:
        """Do not measure the next window (a start, a restart: queues fill)."""
        self._settle = True

    @property
    def starting(self) -> bool:
        """The quick start is on: a worker-bound window climbs by the consumer's wait, and
        the stage measures short windows."""
        return self._starting

    def end_start(self) -> None:
        """No quick start (a restored stage goes on from its tuned count), or no more."""
        self._starting = False

    @property
    def settling(self) -> bool:
        """The next window is not measured (it follows a change, a start or a restart)."""
        return self._settle

    def _step_size(self) -> int:
        return max(1, self.workers // 2)

    def _start_climb(self, wait: float) -> int:
        """The count a starting controller climbs to from a worker-bound window in which the
        consumer waited ``wait``: enough workers for it not to have waited, if the workers
        scale (at most ``climb`` times as many; at least the usual step)."""
        n = self.workers
        factor = min(self.climb, 1 / max(1e-9, 1 - wait))
        return max(n + self._step_size(), math.ceil(n * factor - 1e-9))

    def _change(self, new: int, reason: str, rate: float) -> int:
        new = min(max(new, self.minimum), self.maximum)
        if new != self.workers:
            self.decisions.append(Decision(self.window, self.workers, new, reason, round(rate, 2)))
            del self.decisions[:-KEEP_DECISIONS]
            self.workers = new
            self._settle = True
            self.converged_at = None
        elif self.converged_at is None:
            self.converged_at = self.window
        return self.workers

    def _fewer(self, n: int) -> int:
        """The count to give back to from ``n``: half as many (until a give-back failed), then
        one fewer (from :data:`BISECT_FROM` workers: half of the gap to the floor), never the
        floor (a count found too few) or below; ``n`` if none is left to give back."""
        lowest = self.minimum if self._floor is None else max(self.minimum, self._floor[0] + 1)
        if n <= lowest:
            return n
        bisect = (n - lowest + 1) // 2 if n >= BISECT_FROM else 1
        step = n // 2 if self._halve else bisect
        return max(lowest, n - max(1, step))

    def _expire(self) -> None:
        w = self.window
        if self._ceiling is not None and w - self._ceiling[1] >= self.hold:
            self._ceiling = None
        if self._floor is not None and w - self._floor[1] >= self.hold:
            self._floor = None
        if self._paid is not None and w - self._paid[1] >= self.hold:
            self._paid = None

    def _chain_rate(self, rate: float) -> float:
        if self._chain is None:
            self._chain = rate
        return self._chain

    def step(self, m: Measurement) -> int:
        """The worker count for the next window, after measuring ``m``."""
        self.window += 1
        self._expire()
        if self.workers > self.maximum:  # the shared budget shrank
            return self._change(self.maximum, "budget lowered", m.rate)
        if self._settle or m.workers != self.workers:
            self._settle = False
            return self.workers
        n, rate = self.workers, m.rate
        was_starting = self._starting
        probe, self._probe = self._probe, None
        if probe is not None:  # a climb from probe[0]: did it pay?
            before, before_rate = probe
            if rate < before_rate * (1 + self.gain):
                self._ceiling, self._starting = (n, self.window), False
                return self._change(before, f"{n} workers gave no more than {before} "
                                    f"({rate:.1f} vs {before_rate:.1f}/s)", rate)
            self._floor = (before, self.window)  # the climb paid: fewer are too few
            if rate / before_rate - 1 >= self.full * (n / before - 1):
                self._paid = (n, self.window)
            else:
                self._starting = False  # (a knee between them: the usual steps from here)
        back, self._giveback = self._giveback, None
        if back is not None:  # a give-back from back[0]: did it cost throughput?
            before, before_rate = back
            if rate < before_rate * (1 - self.loss):
                self._floor, self._chain, self._halve = (n, self.window), None, False
                # paid in full: each worker given back added `full` of its share; for a few
                # workers, also less than one of them idle (past the cores the last ones add
                # nothing while the others carry a loss that, on average, still looks like
                # `full` of their share: 12 -> 6 on 10 cores); for many, one idle worker is
                # inside the noise, and the average is what can be told
                k = before - n
                share = max(self.full, 1 - 1 / k) if k <= PAID_STRICT_UP_TO else self.full
                if 1 - rate / before_rate >= share * (k / before):
                    self._paid = (before, self.window)
                return self._change(before, f"{n} workers lost throughput "
                                    f"({rate:.1f} vs {before_rate:.1f}/s): back to {before}",
                                    rate)
            self._ceiling = (n + 1, self.window)  # fewer did as well: more would not pay
        bound = m.wait < self.idle_wait  # the consumer is the bottleneck
        self._bound = self._bound + 1 if bound and n == self.minimum else 0
        starting, self._starting = self._starting, False
        if bound:
            fewer = self._fewer(n)
            if fewer < n:
                self._giveback = (n, self._chain_rate(rate))
                return self._change(fewer, f"consumer-bound (waited {m.wait:.0%}): "
                                    f"giving {n - fewer} worker(s) back", rate)
            if self.move_after and self.backend == "thread" and self._bound >= self.move_after:
                return self._move(rate)
        else:  # the workers are the bottleneck
            up = self._start_climb(m.wait) if starting else n + self._step_size()
            if self._ceiling is not None and up >= self._ceiling[0]:
                up = n + 1  # a big step did not pay: a small one may
            up = min(up, self.maximum)
            # (a climb of fewer than `gain` * n workers could not pay even if each added its
            # share: 63 -> 64 is not tried)
            if (up > n and up - n >= self.gain * n
                    and (self._ceiling is None or up < self._ceiling[0])):
                self._probe, self._chain = (n, rate), None
                self._starting = starting  # (it goes on if this climb pays in full)
                return self._change(up, f"worker-bound (consumer waited {m.wait:.0%}): "
                                    "trying more", rate)
            if was_starting:  # (the give-back probe from here waits for a usual window)
                return self._change(n, "", rate)
            fewer = n if self._paid is not None and self._paid[0] == n else self._fewer(n)
            if fewer < n:
                # no more workers (or more did not pay): maybe fewer do as well
                self._giveback = (n, self._chain_rate(rate))
                return self._change(fewer, "no more workers to try: trying fewer", rate)
        return self._change(n, "", rate)

    def override(self, n: int, reason: str) -> int:
        """Run ``n`` workers from now on (within the bounds) for ``reason``, decided outside
        the controller (the stage's own measurement); the controller goes on from there."""
        return self._change(n, reason, 0.0)

    def _move(self, rate: float) -> int:
        """Move the work to processes (once), keeping the count."""
        reason = (f"consumer-bound at {self.workers} worker(s) for {self._bound} windows: the "
                  "work moves to processes (the consumer's own Python keeps the GIL)")
        self.backend, self.move_after, self._bound = "process", 0, 0
        self.decisions.append(Decision(self.window, self.workers, self.workers, reason,
                                       round(rate, 2)))
        del self.decisions[:-KEEP_DECISIONS]
        self._settle = True
        self.converged_at = None
        return self.workers

    def moved_back(self) -> None:
        """The move to processes failed (they could not start): the stage stays on threads
        and does not try again."""
        self.backend, self.move_after = "thread", 0

    def state(self) -> dict[str, Any]:
        """What the controller chose and why, JSON-serializable."""
        return {
            "workers": self.workers, "backend": self.backend,
            "minimum": self.minimum, "maximum": self.maximum,
            "window": self.window, "converged_at": self.converged_at,
            "decisions": [d.to_dict() for d in self.decisions],
        }
