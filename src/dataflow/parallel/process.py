"""``MultiProcessRunner``: independent copies of a flow in processes, through one
``multiprocessing`` queue (works with every start method and on Windows).

A message is pickled once in the worker. A large one (raw records of tens of KB, images) does
not go through the queue's pipe when the workers are forked: a pipe holds 64 KiB, so every such
message would cost the writer and the reader several system calls and context switches (the
queue then runs at a fraction of the memory's speed). The worker copies it into its shared ring
(:class:`~dataflow.parallel.shared_memory.Ring`) and puts only the slot on the queue; the
consumer copies it out. The queue keeps each worker's messages in order, which is the order the
ring releases them in. Messages too large for the ring, and every message under spawn or
forkserver, go through the queue."""

from __future__ import annotations

import pickle
import queue
from typing import Any

from dataflow.base import DataFlow
from dataflow.parallel._bootstrap import get_context, globals_seed, parent_info, worker_bootstrap
from dataflow.parallel._lifecycle import Resources
from dataflow.parallel._pool import PooledTransport, ProcessPool, start_pool
from dataflow.parallel._runner import RunnerBase
from dataflow.parallel._worker import runner_loop
from dataflow.parallel.shared_memory import RING_BYTES, Ring
from dataflow.validation import check_positive_int, renamed_kwargs

__all__ = ["MultiProcessPrefetchData", "MultiProcessRunner", "PrefetchData"]


#: pickled messages of at least this many bytes go through the worker's ring (a smaller one
#: fits the pipe in one write)
RING_MIN_BYTES = 16 * 1024


def _mp_runner_main(
    ds: DataFlow, q: Any, worker_id: int, parent: tuple, seed: tuple, start: Any = None,
    ring: Ring | None = None,
) -> None:
    worker_bootstrap(worker_id, parent, globals_seed=seed)

    def emit(msg: tuple) -> None:
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        if ring is not None and len(data) >= RING_MIN_BYTES:
            slot = ring.write(memoryview(data))
            if slot is not None:
                q.put((worker_id, *slot))  # a tuple: the consumer reads the ring
                return
        q.put(data)

    runner_loop(ds, emit, worker_id, "MultiProcessRunner", start=start, checkpoints=True)
    q.close()
    q.join_thread()  # flush the last message (END / ERROR) before exiting


class _QueueTransport(PooledTransport):
    """The consumer side: ``get`` from the queue, with the pool's death checks."""

    def __init__(self, q: Any, pool: ProcessPool, res: Resources, name: str,
                 rings: list[Ring] | None) -> None:
        self.q, self.pool, self.res, self.name = q, pool, res, name
        self.rings = rings

    def _raw(self, timeout: float) -> tuple | None:
        self.res.check(self.name)
        try:
            item = self.q.get(timeout=timeout)
        except queue.Empty:
            return None
        if type(item) is tuple:  # a slot of worker item[0]'s ring
            assert self.rings is not None
            wid, off, n, head = item
            return self.rings[wid].loads(off, n, head)
        return pickle.loads(item)


class MultiProcessRunner(RunnerBase):
    """Run ``num_proc`` independent copies of ``ds`` in processes, through one queue.

    The contract of :class:`MultiProcessRunnerZMQ` (copies, epochs, seeds, errors, resumable
    state), through a ``multiprocessing.Queue(num_prefetch)``: it works with every start
    method and on Windows; :class:`MultiProcessRunnerZMQ` is faster. Unlike it, a worker that
    dies is not replaced: the death is raised as a :class:`~dataflow.errors.WorkerError` (the
    queue may be left locked by a process killed while writing to it, so it is not used
    again); and ``reset_state()`` twice is fine.

    Args:
        ds: the flow to copy into each worker.
        num_prefetch: capacity of the queue.
        num_proc: number of worker processes.
        start_method: ``None`` (fork on Linux, else spawn), ``'fork'``, ``'forkserver'`` or
            ``'spawn'`` (then ``ds`` must be picklable).
    """

    @renamed_kwargs(nr_prefetch="num_prefetch", nr_proc="num_proc")
    def __init__(
        self,
        ds: DataFlow,
        num_prefetch: int,
        num_proc: int,
        *,
        start_method: str | None = None,
    ) -> None:
        super().__init__(ds)
        self.num_prefetch = check_positive_int(num_prefetch, "num_prefetch", 16)
        self.num_proc = self._num_workers = check_positive_int(num_proc, "num_proc")
        self.start_method = start_method
        get_context(start_method)  # validate now
        self._pool: ProcessPool | None = None
        self._queue: Any = None

    def _start(self) -> None:
        ctx = get_context(self.start_method)
        self._queue = ctx.Queue(self.num_prefetch)
        rings = ([Ring(RING_BYTES) for _ in range(self.num_proc)]
                 if ctx.get_start_method() == "fork" else None)  # inherited by the workers
        parent = parent_info()
        self._pool = start_pool(
            _mp_runner_main,
            [(self.ds, self._queue, i, parent, globals_seed(self, i),
              self._worker_start(i), rings[i] if rings else None)
             for i in range(self.num_proc)],
            self.start_method, type(self).__name__,
            ("ds", self.ds))
        q = self._queue
        self._queue = None
        self._resources = res = Resources()
        res.add(q.join_thread)
        res.add(q.close)
        for ring in rings or ():
            res.add(ring.close)
        self._transport = _QueueTransport(q, self._pool, res, type(self).__name__, rings)

    def _stop(self) -> None:
        self._transport = None
        if self._pool is not None:
            self._pool.terminate()
            self._pool = None
        if self._queue is not None:  # a start that failed half-way
            self._queue.close()
            self._queue = None
        self._release_resources()


PrefetchData = MultiProcessRunner
MultiProcessPrefetchData = MultiProcessRunner
