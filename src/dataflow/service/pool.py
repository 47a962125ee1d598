"""The pool of a :class:`~dataflow.service.DataService`: the workers that map, and nothing else.

A pool starts workers, tells the dispatcher where each one listens, replaces one that dies and
grows or shrinks when asked. It knows nothing of consumers or epochs: each worker runs
:func:`dataflow.service.worker.worker_main` and answers consumers directly. This module holds
the pool of local processes (``backend="process"``); :mod:`dataflow.service.ray_pool` holds the
one of Ray actors. Both give the dispatcher the same view, :class:`PoolWorker` and the methods
of :class:`ProcessPool`.

A worker given back (the pool shrank) is simply stopped: its consumers learn at their next
heartbeat that it is gone and ask the others for what it did not answer, as after a crash.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
from dataclasses import dataclass
from typing import Any

from dataflow.parallel._bootstrap import get_context, limited_thread_env, parent_info
from dataflow.service.worker import worker_main

__all__ = ["Pool", "PoolWorker", "ProcessPool", "WorkerSpec"]


@dataclass
class WorkerSpec:
    """What every worker of a service is started with: ``pipelines`` maps a job name
    (``""``: the default pipeline) to ``(source, map_func, inputs)``; workers listen on
    ``host`` (``ipc://@<name>`` for an abstract Unix socket) and check ``token``."""

    pipelines: dict[str, tuple[Any, Any, tuple[int, tuple[int, ...]]]]
    host: str
    token: str


class PoolWorker:
    """One worker as the dispatcher sees it: its slot ``wid``, how many times that slot was
    restarted (``generation``), its ``address`` once it listens, and its figures."""

    def __init__(self, wid: int, generation: int) -> None:
        self.wid, self.generation = wid, generation
        self.address: str | None = None
        self.started = time.monotonic()

    def figures(self) -> tuple[float, ...]:
        """``(busy seconds, items, bytes out, dropped messages)`` since it started, and the
        inputs waiting in its queues now."""
        raise NotImplementedError


class _ProcessWorker(PoolWorker):
    def __init__(self, wid: int, generation: int, proc: Any, pipe: Any, counters: Any) -> None:
        super().__init__(wid, generation)
        self.proc, self.pipe, self.counters = proc, pipe, counters

    def figures(self) -> tuple[float, ...]:
        return tuple(float(x) for x in self.counters)


class Pool:
    """What every pool shares: its slots, ``workers()``, and ``resize(n)``; a pool starts a
    worker with ``_spawn(slot, generation)`` and stops one with ``_stop(worker)``."""

    _workers: list[Any]

    def _spawn(self, wid: int, generation: int) -> Any:
        raise NotImplementedError

    def _stop(self, w: Any) -> None:
        raise NotImplementedError

    def workers(self) -> list[PoolWorker]:
        return list(self._workers)

    def resize(self, n: int) -> None:
        """Run ``n`` workers: start new slots, or stop the highest ones."""
        while len(self._workers) < n:
            self._workers.append(self._spawn(len(self._workers), 0))
        while len(self._workers) > max(n, 0):
            self._stop(self._workers.pop())


class ProcessPool(Pool):
    """Workers as local processes (``start_method``: how they start, as for the mappers)."""

    #: the kind of pool, as ``stats()`` names it
    backend = "process"

    def __init__(self, spec: WorkerSpec, start_method: str | None = None) -> None:
        self.spec = spec
        self._ctx: Any = get_context(start_method)
        self._parent = parent_info()
        self._workers: list[_ProcessWorker] = []
        self.restarts = 0

    def _spawn(self, wid: int, generation: int) -> _ProcessWorker:
        recv, send = multiprocessing.Pipe(duplex=False)
        counters = self._ctx.Array("d", 5, lock=False)
        proc = self._ctx.Process(
            target=worker_main, name=f"dataflow-service-worker-{wid}",
            args=(wid, self._parent, self.spec.pipelines, self.spec.host, self.spec.token,
                  send, counters), daemon=True)
        with limited_thread_env():
            proc.start()
        send.close()
        return _ProcessWorker(wid, generation, proc, recv, counters)

    def check(self) -> list[PoolWorker]:
        """Read the addresses of starting workers; replace each worker that died. Returns
        the workers that died."""
        dead: list[PoolWorker] = []
        for k, w in enumerate(list(self._workers)):
            if w.address is None:
                with contextlib.suppress(EOFError, OSError):
                    if w.pipe.poll():
                        w.address = w.pipe.recv()
            if w.proc.exitcode is not None:
                dead.append(w)
                with contextlib.suppress(Exception):
                    w.pipe.close()
                self._workers[k] = self._spawn(w.wid, w.generation + 1)
                self.restarts += 1
        return dead

    def exit_code(self, w: PoolWorker) -> Any:
        return getattr(getattr(w, "proc", None), "exitcode", None)

    def pids(self) -> list[int]:
        """The workers' process ids (the benchmarks and tests kill them)."""
        return [w.proc.pid for w in self._workers]

    def _stop(self, w: _ProcessWorker) -> None:
        with contextlib.suppress(Exception):
            w.proc.kill()
        with contextlib.suppress(Exception):
            w.proc.join(timeout=10)
            w.pipe.close()

    def close(self) -> None:
        workers, self._workers = self._workers, []
        for w in workers:
            with contextlib.suppress(Exception):
                w.proc.kill()
        for w in workers:
            self._stop(w)
