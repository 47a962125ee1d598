"""The pool of a :class:`~dataflow.service.DataService`: the workers that map, and nothing else.

A pool starts workers, tells the dispatcher where each one listens, replaces one that dies and
grows or shrinks when asked. It knows nothing of consumers or epochs: each worker runs
:func:`dataflow.service.worker.worker_main` and answers consumers directly. This module holds
the pool of local processes (``backend="process"``); :mod:`dataflow.service.ray_pool` holds the
one of Ray actors. Both give the dispatcher the same view, :class:`PoolWorker` and the methods
of :class:`ProcessPool`.

A worker given back (the pool shrank) is simply stopped: its consumers learn at their next
heartbeat that it is gone and ask the others for what it did not answer, as after a crash.

A worker that gives no sign of life for ``worker_timeout`` seconds (a process frozen by
``SIGSTOP`` or a cgroup freezer, a node cut off from the network without its connections
closing) is treated as lost the same way: killed and replaced. A sign of life is a heartbeat
of the worker process (a thread that counts every
:data:`~dataflow.service.worker.BEAT_INTERVAL`), or CPU time that the process used (Linux:
``/proc/<pid>/stat``; a map call that computes in C while it holds the GIL silences the
heartbeat, not this), or, for a Ray actor, an answer to the pool's calls (which need the GIL:
there the timeout must exceed the longest time a map call holds it). ``None``: never.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import time
from dataclasses import dataclass
from typing import Any

from dataflow.parallel._bootstrap import get_context, limited_thread_env, parent_info
from dataflow.service.worker import BEAT_INTERVAL, worker_main

__all__ = ["Pool", "PoolWorker", "ProcessPool", "Waiting", "WorkerSpec"]

logger = logging.getLogger("dataflow.service")

#: a worker that ends within this many seconds of its start ends "quickly": its slot's next
#: start waits, longer each time (a crash loop backs off)
QUICK = 5.0
#: the first wait and the longest one, in seconds
BACKOFF_FIRST, BACKOFF_MAX = 0.2, 5.0


@dataclass
class WorkerSpec:
    """What every worker of a service is started with: ``pipelines`` maps a job name
    (``""``: the default pipeline) to ``(source, map_func, inputs)``; workers listen on
    ``host`` (``ipc://@<name>`` for an abstract Unix socket) and check ``token``; with
    ``curve`` (a key pair), their sockets encrypt (ZeroMQ CURVE)."""

    pipelines: dict[str, tuple[Any, Any, tuple[int, tuple[int, ...]]]]
    host: str
    token: str
    curve: tuple[bytes, bytes] | None = None  # (the CURVE key pair of their sockets)


def process_cpu_ticks(pid: int) -> int | None:
    """The CPU time process ``pid`` used (user and system, clock ticks), or None where
    ``/proc`` cannot tell (not Linux, the process gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # (utime, stime: fields 14 and 15 of the line)


class PoolWorker:
    """One worker as the dispatcher sees it: its slot ``wid``, how many times that slot was
    restarted (``generation``), its ``address`` once it listens, and its figures."""

    def __init__(self, wid: int, generation: int) -> None:
        self.wid, self.generation = wid, generation
        self.address: str | None = None
        self.started = time.monotonic()
        self.alive_at = self.started  # (the last sign of life the pool saw)
        self.ticks: int | None = None  # (its process's CPU time, when last read)
        self.why: str | None = None  # (why it was lost, once it was)
        #: the input its map call was on when its process ended: (job number, epoch,
        #: position, index), or None
        self.crashed_on: tuple[int, int, int, int] | None = None

    def figures(self) -> tuple[float, ...]:
        """``(busy seconds, items, bytes out, dropped messages)`` since it started, and the
        inputs waiting in its queues now."""
        raise NotImplementedError

    def look_at_cpu(self, pid: int, now: float) -> None:
        """A sign of life if its process ``pid`` (on this machine) used CPU since the last
        look: a map call that computes with the GIL held gives no other meanwhile."""
        ticks = process_cpu_ticks(pid)
        if ticks is not None and ticks != self.ticks:
            self.ticks, self.alive_at = ticks, now


class Waiting(PoolWorker):
    """A slot whose next worker starts at ``due`` (its last ones ended quickly)."""

    def __init__(self, wid: int, generation: int, due: float) -> None:
        super().__init__(wid, generation)
        self.due = due

    def figures(self) -> tuple[float, ...]:
        return (0.0, 0.0, 0.0, 0.0, 0.0)


class _ProcessWorker(PoolWorker):
    def __init__(self, wid: int, generation: int, proc: Any, pipe: Any, counters: Any) -> None:
        super().__init__(wid, generation)
        self.proc, self.pipe, self.counters = proc, pipe, counters
        self.beats = 0.0  # (the heartbeat count when alive_at was set)

    def figures(self) -> tuple[float, ...]:
        return tuple(float(x) for x in self.counters[:5])


class Pool:
    """What every pool shares: its slots, ``workers()``, and ``resize(n)``; a pool starts a
    worker with ``_spawn(slot, generation)`` and stops one with ``_stop(worker)``."""

    _workers: list[Any]
    restarts: int
    _quick: dict[int, int]  # slot -> how many of its workers ended quickly in a row
    #: seconds without a sign of life after which a started worker is replaced (None: never)
    worker_timeout: float | None = None

    def _spawn(self, wid: int, generation: int) -> Any:
        raise NotImplementedError

    def _stop(self, w: Any) -> None:
        raise NotImplementedError

    def workers(self) -> list[PoolWorker]:
        return list(self._workers)

    def _replace(self, k: int, w: Any, lost: list[PoolWorker]) -> None:
        """Stop worker ``w`` (slot ``k``), start the next generation of its slot: at once,
        or, when its last workers ended quickly one after another, after a wait that doubles
        each time (up to :data:`BACKOFF_MAX`)."""
        lost.append(w)
        self._stop(w)
        self._lost(w)
        quick = self._quick
        now = time.monotonic()
        quick[w.wid] = quick.get(w.wid, 0) + 1 if now - w.started < QUICK else 0
        if quick[w.wid] >= 2:
            wait = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (quick[w.wid] - 2))
            logger.warning("DataService: the workers of slot %d ended %d times in a row within "
                           "%g s of their start; the next one starts in %g s", w.wid,
                           quick[w.wid], QUICK, wait)
            self._workers[k] = Waiting(w.wid, w.generation + 1, now + wait)
        else:
            self._workers[k] = self._spawn(w.wid, w.generation + 1)
        self.restarts += 1

    def _start_due(self, now: float) -> None:
        """Start the workers whose wait is over."""
        for k, w in enumerate(self._workers):
            if isinstance(w, Waiting) and now >= w.due:
                new = self._spawn(w.wid, w.generation)
                new.started = w.started  # (a quick end counts from the wait's start)
                self._workers[k] = new

    def _lost(self, w: Any) -> None:
        """What a pool learns from a lost worker before it starts the next one."""

    def _replace_silent(self, now: float, lost: list[PoolWorker]) -> None:
        """Replace each started worker without a sign of life for ``worker_timeout``."""
        if self.worker_timeout is None:
            return
        for k, w in enumerate(list(self._workers)):
            if isinstance(w, Waiting):
                continue
            if w.address is not None and now - w.alive_at > self.worker_timeout:
                w.why = (f"no sign of life for {now - w.alive_at:.1f} s (a frozen process or "
                         "an unreachable node): killed")
                self._replace(k, w, lost)

    def resize(self, n: int) -> None:
        """Run ``n`` workers: start new slots, or stop the highest ones."""
        while len(self._workers) < n:
            self._workers.append(self._spawn(len(self._workers), 0))
        while len(self._workers) > max(n, 0):
            w = self._workers.pop()
            if not isinstance(w, Waiting):
                self._stop(w)


class ProcessPool(Pool):
    """Workers as local processes (``start_method``: how they start, as for the mappers)."""

    #: the kind of pool, as ``stats()`` names it
    backend = "process"

    def __init__(self, spec: WorkerSpec, start_method: str | None = None,
                 worker_timeout: float | None = None) -> None:
        self.spec = spec
        self.worker_timeout = worker_timeout
        self._ctx: Any = get_context(start_method)
        self._parent = parent_info()
        self._workers: list[_ProcessWorker] = []
        self.restarts = 0
        self._quick = {}

    def _spawn(self, wid: int, generation: int) -> _ProcessWorker:
        recv, send = multiprocessing.Pipe(duplex=False)
        # busy seconds, items, bytes out, dropped messages, inputs queued; heartbeats; the
        # input being mapped (job number or -1, epoch, position, index)
        counters = self._ctx.Array("d", 10, lock=False)
        counters[6] = -1
        proc = self._ctx.Process(
            target=worker_main, name=f"dataflow-service-worker-{wid}",
            args=(wid, self._parent, self.spec.pipelines, self.spec.host, self.spec.token,
                  send, counters, self.spec.curve), daemon=True)
        with limited_thread_env():
            proc.start()
        send.close()
        return _ProcessWorker(wid, generation, proc, recv, counters)

    def check(self) -> list[PoolWorker]:
        """Read the addresses of starting workers and the heartbeats; replace each worker that
        died or fell silent. Returns the workers that were lost."""
        lost: list[PoolWorker] = []
        now = time.monotonic()
        self._start_due(now)
        for k, w in enumerate(list(self._workers)):
            if isinstance(w, Waiting):
                continue
            if w.address is None:
                with contextlib.suppress(EOFError, OSError):
                    if w.pipe.poll():
                        w.address = w.pipe.recv()
                        w.alive_at = now
            if w.proc.exitcode is not None:
                if w.counters[6] >= 0:  # (its map call ended the process)
                    w.crashed_on = tuple(int(x) for x in w.counters[6:10])  # type: ignore
                self._replace(k, w, lost)
                continue
            beats = w.counters[5]
            if beats != w.beats:
                w.beats, w.alive_at = beats, now
            elif now - w.alive_at > 2 * BEAT_INTERVAL:  # (no beat: is it computing?)
                w.look_at_cpu(w.proc.pid, now)
        self._replace_silent(now, lost)
        return lost

    def exit_code(self, w: PoolWorker) -> Any:
        return w.why or getattr(getattr(w, "proc", None), "exitcode", None)

    def pids(self) -> list[int]:
        """The workers' process ids (the benchmarks and tests kill them)."""
        return [w.proc.pid for w in self._workers if not isinstance(w, Waiting)]

    def _stop(self, w: _ProcessWorker) -> None:
        with contextlib.suppress(Exception):
            w.proc.kill()  # (SIGKILL ends a stopped process too)
        with contextlib.suppress(Exception):
            w.proc.join(timeout=10)
        with contextlib.suppress(Exception):
            w.pipe.close()

    def close(self) -> None:
        workers = [w for w in self._workers if not isinstance(w, Waiting)]
        self._workers = []
        for w in workers:
            with contextlib.suppress(Exception):
                w.proc.kill()
        for w in workers:
            self._stop(w)
