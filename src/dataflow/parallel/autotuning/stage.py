"""Autotuned parallelism: the ``"auto"`` setting (:data:`AUTOTUNE`), the CPU budget that the
autotuned stages of a pipeline share (:class:`CpuShare`), and a stage's live tuner
(:class:`StageTuner`), which measures windows of a mapper's run and applies its
:class:`~dataflow.parallel.autotuning.controller.Controller`'s worker counts.

What the measurements are: a window lasts ``WINDOW`` seconds of iteration (while a thread
stage's controller starts, ``START_WINDOW`` and an answered input per worker); its ``rate``
is inputs the workers answered per second (bounded by the in-flight limit when the consumer
is slow; the first window, which fills the buffer, is not measured), its ``wait`` the
fraction of the window the consumer spent blocked waiting for a result. Time the consumer
spends away from the mapper (the trainer's step) is part of the window: a slow consumer
waits little, so the controller gives workers back. Time between two iterations (an epoch's
end and the next ``__iter__``: an evaluation, a checkpoint) is not: the window is suspended
there and goes on, so that many short epochs are measured as one long one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from dataflow.parallel.autotuning.budget import cpu_budget
from dataflow.parallel.autotuning.controller import Controller, Measurement

__all__ = ["AUTOTUNE", "CpuShare", "StageTuner", "default_share", "is_auto", "resolve_buffer",
           "resolve_runner_count"]

logger = logging.getLogger("dataflow.parallel")

#: pass as a worker count, buffer size or back end to let the pipeline choose (and keep
#: choosing while it runs)
AUTOTUNE = "auto"

#: seconds of iteration per measured window
WINDOW = 0.5

#: seconds of iteration per window of a thread stage whose controller is starting (climbing
#: fast from its first count): such a window also waits for as many answered inputs as there
#: are workers (work that takes long per input gets longer windows), at most ``WINDOW``; the
#: first window of such a stage (it fills the buffer, not measured) lasts this long too, once
#: a first input was answered
START_WINDOW = 0.05

#: a thread stage's window that is not measured because it follows a change (threads start
#: at once, only the queues refill) lasts this fraction of ``WINDOW`` (of ``START_WINDOW``
#: while its controller starts); a process stage's lasts ``WINDOW`` (a new process announces
#: itself before it gets work), and so does the first window of any stage (it fills the
#: buffer) but a starting thread stage's (see ``START_WINDOW``)
THREAD_SETTLE = 0.5

#: thread workers per core the controller may try (threads that wait on storage or release
#: the GIL are cheap: on one core, work that waits 5 ms per item ran 2x faster with 32 threads
#: than with 16, and on two cores work that waits 10 ms 1.6x faster with 256 than with 128;
#: the controller stops where more do not pay)
THREADS_PER_CORE = 128

#: thread workers per core an autotuned thread stage starts with (it climbs or gives back
#: from there)
THREADS_START_PER_CORE = 4

#: the most inputs an ``"auto"`` buffer holds in flight (results of image maps are large; a
#: thread stage with many workers gets smaller chunks instead)
BUFFER_MAX = 512


def is_auto(value: Any) -> bool:
    """``value`` is the ``"auto"`` setting."""
    return isinstance(value, str) and value == AUTOTUNE


def check_count(value: Any, name: str, example: int = 4) -> Any:
    """``value`` if it is a positive int or ``"auto"``, else a ``ValueError`` naming ``name``
    (the parameter as the caller spelled it) that offers both spellings."""
    if is_auto(value) or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return value
    hint = ""
    if isinstance(value, str) and value.strip().lower() == AUTOTUNE:
        hint = f' (did you mean "{AUTOTUNE}"? it is lower-case)'
    raise ValueError(
        f'`{name}` must be a positive int or "{AUTOTUNE}", got {value!r} (type '
        f'{type(value).__name__}){hint}; pass e.g. {name}={example}, or {name}="{AUTOTUNE}" to '
        "let it tune itself."
    )


def resolve_runner_count(value: Any, default_buffer: int | None = None,
                         name: str = "num_workers", example: int = 4) -> Any:
    """A runner's ``"auto"`` worker count: the CPU budget's cores, fixed when it is built (a
    runner's workers each iterate their own copy of the flow, so their number is part of what
    it yields: it is not changed live). ``default_buffer``: the value of an ``"auto"`` buffer
    (its queue of finished datapoints). Anything else is returned unchanged once checked
    (``name``: the parameter, as the caller spelled it)."""
    check_count(value, name, example)
    if is_auto(value):
        return default_buffer if default_buffer is not None else default_share().cores
    return value


def resolve_buffer(buffer_size: Any, maximum: int) -> Any:
    """``buffer_size="auto"``: room for every worker the stage may run to keep several chunks
    in flight (at least 200, tensorpack's default, at most ``BUFFER_MAX``); anything else
    unchanged once checked."""
    check_count(buffer_size, "buffer_size", 200)
    return max(200, min(16 * maximum, BUFFER_MAX)) if is_auto(buffer_size) else buffer_size


class CpuShare:
    """The cores that the autotuned stages sharing it may use together: each stage's
    controller may run at most the cores the others leave (at least one each). A process
    worker counts a core, a thread worker ``1 / THREADS_PER_CORE`` of one."""

    def __init__(self, cores: int | None = None) -> None:
        self.cores = cpu_budget().cores if cores is None else max(1, int(cores))
        self._claims: dict[int, float] = {}

    def claim(self, owner: object, workers: int, per_worker: float) -> None:
        self._claims[id(owner)] = workers * per_worker

    def release(self, owner: object) -> None:
        self._claims.pop(id(owner), None)

    def maximum(self, owner: object, per_worker: float) -> int:
        """Workers ``owner`` may run, given what the other stages claim."""
        others = sum(v for k, v in self._claims.items() if k != id(owner))
        return max(1, int((self.cores - others) / per_worker + 1e-9))


_SHARES: list[CpuShare] = []


def default_share() -> CpuShare:
    """The CPU budget of the autotuned stages not given one: this process's (one for all)."""
    if not _SHARES:
        _SHARES.append(CpuShare())
    return _SHARES[0]


class StageTuner:
    """Measures an autotuned mapper's windows and resizes it as its controller says; logs one
    line per decision."""

    def __init__(self, name: str, controller: Controller, resize: Callable[[int], None],
                 answered: Callable[[], int], share: CpuShare, per_worker: float,
                 move: Callable[[], None] | None = None,
                 probing: Callable[[], bool] | None = None) -> None:
        self.name, self.controller, self._resize = name, controller, resize
        self._move = move  # moves the stage's work to processes (when the controller says)
        # whether the stage still measures its work to choose its back end: a worker-bound
        # window then decides nothing (no climb on work that may move to processes); a
        # consumer-bound one gives workers back as usual (behind a slow consumer, the probe
        # may take seconds: it sees a chunk when the consumer takes its results)
        self._probing = probing
        self._answered, self.share, self.per_worker = answered, share, per_worker
        self._start = time.perf_counter()
        self._count = answered()
        controller.skip_window()  # (the first window fills the buffer)
        self._waited = 0.0
        self._elapsed = 0.0  # iteration time of the window in progress before a suspension
        self._suspended: int | None = None  # (suspended: the inputs answered by then)
        self._changed = False  # the window in progress follows a change
        if controller.window > 0:  # (restored: it goes on from the tuned count)
            controller.end_start()
        self._settle_to: int | None = None  # (see settle_until)
        share.claim(self, controller.workers, per_worker)

    def settle_until(self, answered: int) -> None:
        """The window in progress is not measured, and lasts until ``answered`` inputs were
        answered in all (at most ``WINDOW``): the inputs in flight in chunks of another size
        would come in bursts that a short window misreads."""
        self.controller.skip_window()
        self._settle_to = answered
        self.pause()  # (the window starts now)

    @property
    def starting(self) -> bool:
        """The controller climbs fast from its first count, measuring short windows (see
        ``START_WINDOW``); the stage sizes its chunks for the most workers it may run, so
        that added workers find work and results come as they are mapped, not in bursts."""
        return self.controller.starting

    def _due(self, elapsed: float, count: int) -> bool:
        """Whether the window in progress, ``elapsed`` seconds old, is over."""
        if self._settle_to is not None:
            if count < self._settle_to and elapsed < WINDOW:
                return False
            self._settle_to = None
            return True
        ctl = self.controller
        settle = self._changed and ctl.settling and self.per_worker < 1
        if not ctl.starting or self.per_worker >= 1:
            return elapsed >= (WINDOW * THREAD_SETTLE if settle else WINDOW)
        if elapsed >= WINDOW:
            return True
        if settle:
            return elapsed >= START_WINDOW * THREAD_SETTLE
        answered = count - self._count
        if ctl.settling:  # the first window: once a first input was answered
            return elapsed >= START_WINDOW and answered > 0
        return elapsed >= START_WINDOW and answered >= ctl.workers

    def waited(self, seconds: float) -> None:
        """The consumer waited ``seconds`` for a result; closes the window when it is due."""
        if self._suspended is not None:  # (a result taken before the iteration resumed)
            self.resume()
        self._waited += seconds
        now = time.perf_counter()
        elapsed = self._elapsed + now - self._start
        ctl = self.controller
        count = self._answered()
        if not self._due(elapsed, count):
            return
        m = Measurement(ctl.workers, (count - self._count) / elapsed,
                        min(1.0, self._waited / elapsed))
        self._start, self._count, self._waited, self._elapsed = now, count, 0.0, 0.0
        if (self._probing is not None and not ctl.settling and m.wait >= ctl.idle_wait
                and self._probing()):
            return  # (no climb before the stage knows whether its work moves to processes)
        ctl.maximum = self.share.maximum(self, self.per_worker)
        old, backend, starting = ctl.workers, ctl.backend, ctl.starting
        new = ctl.step(m)
        self._changed = new != old
        if new != old:
            logger.info("%s: %d -> %d workers: %s", self.name, old, new, ctl.decisions[-1].reason)
            self._resize(new)
            self.share.claim(self, new, self.per_worker)
        elif starting and not ctl.starting:
            self._resize(new)  # (the same count: the chunks are sized for it again)
        if ctl.backend != backend and self._move is not None:
            logger.info("%s: %s", self.name, ctl.decisions[-1].reason)
            self._move()

    def set_workers(self, n: int, reason: str) -> None:
        """The stage runs ``n`` workers from now on for ``reason`` (a measurement of its own):
        a decision of the controller's, from which it goes on."""
        self.controller.override(n, reason)
        self._changed = True
        self.share.claim(self, self.controller.workers, self.per_worker)

    def moved(self, per_worker: float | None) -> None:
        """The stage's work moved to processes, each worker taking ``per_worker`` of a core;
        ``None``: the move failed, the stage stays as it was."""
        if per_worker is None:
            self.controller.moved_back()
            return
        self.controller.backend, self.controller.move_after = "process", 0
        self.per_worker = per_worker
        self.share.claim(self, self.controller.workers, per_worker)
        self.controller.maximum = self.share.maximum(self, per_worker)

    def pause(self) -> None:
        """The window in progress is dropped: the next one starts now (a settle, a restart)."""
        self._start = time.perf_counter()
        self._count = self._answered()
        self._waited, self._elapsed, self._suspended = 0.0, 0.0, None

    def suspend(self) -> None:
        """The consumer stopped iterating (an epoch ended, or it left the loop): the window in
        progress keeps what it measured, and its clock stops until :meth:`resume`."""
        if self._suspended is None:
            self._elapsed += time.perf_counter() - self._start
            self._suspended = self._answered()

    def resume(self) -> None:
        """The consumer iterates again: the suspended window goes on (the inputs answered
        meanwhile, the ones in flight of an endless stream, are not counted in it)."""
        if self._suspended is not None:
            self._count += self._answered() - self._suspended
            self._suspended = None
            self._start = time.perf_counter()

    def close(self) -> None:
        self.share.release(self)

    def state(self) -> dict[str, Any]:
        return self.controller.state()
