"""``MultiProcessRunnerZMQ``: independent copies of a flow in processes, over ZeroMQ."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dataflow.base import DataFlow
from dataflow.errors import DataFlowError
from dataflow.parallel._bootstrap import get_context, globals_seed, parent_info, worker_bootstrap
from dataflow.parallel._lifecycle import Resources
from dataflow.parallel._pool import ProcessPool, start_pool
from dataflow.parallel._runner import RunnerBase
from dataflow.parallel._wire import Endpoint
from dataflow.parallel._worker import runner_loop
from dataflow.parallel._zmq_consumer import ZmqRunnerTransport
from dataflow.parallel._zmq_worker import runner_worker_channel
from dataflow.parallel.autotuning.stage import resolve_runner_count
from dataflow.parallel.shared_memory import Ring, SegmentSpace, make_rings, shm_available
from dataflow.validation import check_int, check_positive_int, known_length, renamed_kwargs

__all__ = ["MultiProcessRunnerZMQ", "PrefetchDataZMQ"]


def _zmq_runner_main(
    ds: DataFlow,
    address: str,
    worker_id: int,
    parent: tuple,
    seed: tuple,
    hwm: int,
    shm_prefix: str | None,
    ring: Ring | None,
    start: Any = None,
    channel_id: int | None = None,
) -> None:
    worker_bootstrap(worker_id, parent, globals_seed=seed)
    channel = runner_worker_channel(address, worker_id, hwm, shm_prefix, ring, channel_id)
    try:
        runner_loop(ds, channel.emit, worker_id, "MultiProcessRunnerZMQ", start=start,
                    checkpoints=True)
    finally:
        channel.close()


class MultiProcessRunnerZMQ(RunnerBase):
    """Run ``num_proc`` independent copies of ``ds`` in processes; collect over ZeroMQ.

    Tensorpack's contract: each worker resets its own copy of ``ds`` and iterates
    it forever, so with ``num_proc > 1`` an unshuffled ``ds`` is seen ``num_proc`` times and
    epochs mix; ``num_proc=1`` keeps data and order. Each ``__iter__`` yields ``len(ds)``
    datapoints (or forever if the length is unknown); ``len()`` is ``len(ds)``.

    Transport: workers PUSH to a PULL socket bound to a private IPC endpoint. Datapoints are
    pickled with protocol 5, array memory out of band: arrays of 32 KiB to 2 MiB through a
    shared-memory ring per worker (forked workers), larger ones through their own
    shared-memory segment (``use_shm``), else as ZeroMQ frames sent without copies. Each
    worker resets its copy as runner worker ``i``: its random stages key their streams by
    ``i`` (distinct and reproducible), and ``np.random`` / ``random`` are seeded per worker.

    As in tensorpack, ``reset_state()`` must be called once before iterating, and a second call
    raises (until ``close()``). Unlike tensorpack: worker exceptions surface as
    :class:`~dataflow.errors.WorkerError` (chained from the original), a killed worker is
    reported within seconds, exit never hangs and workers never outlive the consumer.

    ``state_dict()`` saves counters only: the workers iterate independent copies of ``ds``, so
    a restore cannot be exact; the restored epoch yields the datapoints it had left (see
    :meth:`RunnerBase.state_dict <dataflow.parallel._runner.RunnerBase.state_dict>`).

    Args:
        ds: the flow to copy into each worker.
        num_proc: number of worker processes; ``"auto"``: the CPU budget's cores (the
            affinity and cgroup quota; fixed, as the count is part of what is yielded).
        hwm: ZeroMQ high-water mark (messages) of each worker and of the consumer.
        start_method: ``None`` (fork on Linux, else spawn), ``'fork'``, ``'forkserver'`` or
            ``'spawn'`` (then ``ds`` must be picklable).
        use_shm: use shared memory for arrays (Linux); ``False``: ZeroMQ frames only.
    """

    _user_reset = False  # reset_state() was called (and close() not since)

    @renamed_kwargs(nr_proc="num_proc")
    def __init__(
        self,
        ds: DataFlow,
        num_proc: int | str = 1,
        hwm: int | str = 50,
        *,
        start_method: str | None = None,
        use_shm: bool = True,
        max_restarts: int = 3,
    ) -> None:
        super().__init__(ds)
        self.max_restarts = check_int(max_restarts, "max_restarts", minimum=0, example=3)
        num_proc = resolve_runner_count(num_proc, name="num_proc")
        hwm = resolve_runner_count(hwm, 50, "hwm", 50)
        self.num_proc = self._num_workers = check_positive_int(num_proc, "num_proc")
        self.hwm = check_positive_int(hwm, "hwm", 50)
        self.start_method = start_method
        get_context(start_method)  # validate now
        self.use_shm = bool(use_shm) and shm_available()
        self._pool: ProcessPool | None = None

    def reset_state(self) -> None:
        """Start the workers. As in tensorpack, call it once, in the process that iterates: a
        second call raises (it usually means the flow is reset in the wrong process), until
        ``close()``."""
        if self._user_reset and not self._closed:
            raise DataFlowError(
                "MultiProcessRunnerZMQ.reset_state() was called twice. Call it once, in the "
                "process that iterates the flow (a second call usually means it is also reset "
                "elsewhere, e.g. in a forked worker); to start fresh workers, close() it first."
            )
        self._user_reset = True
        super().reset_state()

    def __iter__(self) -> Iterator[Any]:
        if not self._user_reset:
            raise DataFlowError(
                "MultiProcessRunnerZMQ was iterated before reset_state(): call reset_state() "
                "once, in the process that iterates it, before iterating (as tensorpack "
                "requires)."
            )
        return super().__iter__()

    def _restart(self) -> None:
        RunnerBase.reset_state(self)

    def close(self) -> None:
        super().close()
        self._user_reset = False

    def _start(self) -> None:
        self._resources = res = Resources()
        endpoint = Endpoint("runner")
        res.add(endpoint.cleanup)
        space = SegmentSpace.open() if self.use_shm else None  # None: /dev/shm is too small
        shm_prefix = space.prefix if space is not None else None
        if space is not None:
            res.add(space.close)
        name = type(self).__name__
        method = get_context(self.start_method).get_start_method()
        rings = make_rings(self.use_shm, method, self.num_proc)
        transport = ZmqRunnerTransport(endpoint, self.hwm, res, rings, name, shm_prefix)
        if endpoint.needs_early_bind:  # tcp: the port is known only once bound
            transport.bind()
        parent = parent_info()
        ds, address, hwm = self.ds, endpoint.address, self.hwm
        seeds = [globals_seed(self, i) for i in range(self.num_proc)]

        def args(w: int, channel: int, ring: Ring | None, start: Any) -> tuple:
            return (ds, address, w, parent, seeds[w], hwm, shm_prefix, ring, start, channel)

        starts = [self._worker_start(i) for i in range(self.num_proc)]
        self._pool = start_pool(  # before creating the context: never fork a process with
            _zmq_runner_main,
            [args(i, i, rings[i] if rings else None, starts[i]) for i in range(self.num_proc)],
            self.start_method, name, ("ds", self.ds))
        transport.bind()  # ZeroMQ's I/O threads running (a replacement is forked later)
        n = known_length(self.ds)
        transport.attach(self._pool, args, self.max_restarts, starts,
                         n * self.num_proc if n else 10_000)
        self._transport = transport

    def _stop(self) -> None:
        self._transport = None
        if self._pool is not None:
            self._pool.terminate()
            self._pool = None
        self._release_resources()


PrefetchDataZMQ = MultiProcessRunnerZMQ
