"""``MultiProcessRunnerZMQ``: independent copies of a flow in processes, over ZeroMQ."""

from __future__ import annotations

from typing import Any

from dataflow.base import DataFlow
from dataflow.errors import DataFlowTerminated
from dataflow.parallel import _lifecycle
from dataflow.parallel._base import RunnerBase, check_positive_int
from dataflow.parallel._runner import runner_loop
from dataflow.parallel._transport import (
    Endpoint,
    FrameCodec,
    FrameDecoder,
    import_zmq,
    recv_frames,
    send_frames,
)
from dataflow.parallel.process import ProcessPool
from dataflow.parallel.shared_memory import (
    Ring,
    SharedMemoryWriter,
    cleanup_segments,
    cleanup_stale_segments,
    new_prefix,
    shm_available,
)

__all__ = ["MultiProcessRunnerZMQ", "PrefetchDataZMQ"]

#: milliseconds a finished worker waits for its last message (END / ERROR) to be delivered
FINAL_LINGER_MS = 10_000
#: bytes of each worker's shared ring (fork only), for arrays of 32 KiB to 2 MiB
RING_BYTES = 8 * 1024 * 1024


_stale_checked = False


def make_rings(use_shm: bool, start_method: str | None, n: int) -> list[Ring] | None:
    """One shared ring per worker when workers are forked (they inherit the memory)."""
    global _stale_checked
    if use_shm and not _stale_checked:
        _stale_checked = True
        cleanup_stale_segments()
    if not use_shm or _lifecycle.get_context(start_method).get_start_method() != "fork":
        return None
    return [Ring(RING_BYTES) for _ in range(n)]


def zmq_context():
    zmq = import_zmq()
    return zmq, zmq.Context()


def _zmq_runner_main(
    ds: DataFlow,
    address: str,
    worker_id: int,
    parent: tuple[int, bool],
    hwm: int,
    shm_prefix: str | None,
    ring: Ring | None,
    start: Any = None,
) -> None:
    _lifecycle.worker_bootstrap(worker_id, parent)
    zmq, ctx = zmq_context()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.setsockopt(zmq.RECONNECT_IVL, 10)
    sock.connect(address)
    shm = SharedMemoryWriter(shm_prefix, worker_id) if shm_prefix else None
    codec = FrameCodec(shm, ring=ring, worker_id=worker_id)

    def emit(msg: tuple) -> None:
        send_frames(sock, codec.encode(msg))

    try:
        runner_loop(ds, emit, worker_id, "MultiProcessRunnerZMQ", start=start,
                    checkpoints=True)
    finally:
        sock.close(linger=FINAL_LINGER_MS)
        ctx.term()


class MultiProcessRunnerZMQ(RunnerBase):
    """Run ``num_proc`` independent copies of ``ds`` in processes; collect over ZeroMQ.

    Tensorpack's contract (SPEC 2.6): each worker resets its own copy of ``ds`` and iterates
    it forever, so with ``num_proc > 1`` an unshuffled ``ds`` is seen ``num_proc`` times and
    epochs mix; ``num_proc=1`` keeps data and order. Each ``__iter__`` yields ``len(ds)``
    datapoints (or forever if the length is unknown); ``len()`` is ``len(ds)``.

    Transport: workers PUSH to a PULL socket bound to a private IPC endpoint. Datapoints are
    pickled with protocol 5, array memory out of band: arrays of 32 KiB to 2 MiB through a
    shared-memory ring per worker (forked workers), larger ones through their own
    shared-memory segment (``use_shm``), else as ZeroMQ frames sent without copies. Each
    worker gets a distinct, reproducible seed: it calls
    ``dataflow.rng.set_worker_info(worker_id)`` and then ``ds.reset_state()``.

    Unlike tensorpack: worker exceptions surface as :class:`~dataflow.errors.WorkerError`
    (chained from the original), a killed worker is reported within seconds, ``reset_state()``
    is idempotent, exit never hangs and workers never outlive the consumer.

    ``state_dict()`` saves counters only: the workers iterate independent copies of ``ds``, so
    a restore cannot be exact; the restored epoch yields the datapoints it had left (see
    :meth:`RunnerBase.state_dict <dataflow.parallel._base.RunnerBase.state_dict>`).

    Args:
        ds: the flow to copy into each worker.
        num_proc: number of worker processes.
        hwm: ZeroMQ high-water mark (messages) of each worker and of the consumer.
        start_method: ``None`` (fork on Linux, else spawn), ``'fork'``, ``'forkserver'`` or
            ``'spawn'`` (then ``ds`` must be picklable).
        use_shm: use shared memory for arrays (Linux); ``False``: ZeroMQ frames only.
    """

    def __init__(
        self,
        ds: DataFlow,
        num_proc: int = 1,
        hwm: int = 50,
        *,
        start_method: str | None = None,
        use_shm: bool = True,
    ) -> None:
        super().__init__(ds)
        self.num_proc = self._num_workers = check_positive_int(num_proc, "num_proc")
        self.hwm = check_positive_int(hwm, "hwm", 50)
        self.start_method = start_method
        _lifecycle.get_context(start_method)  # validate now
        self.use_shm = bool(use_shm) and shm_available()
        self._pool: ProcessPool | None = None

    def _start(self) -> None:
        zmq = import_zmq()
        self._resources = res = _lifecycle.Resources()
        endpoint = Endpoint("runner")
        res.add(endpoint.cleanup)
        shm_prefix = new_prefix() if self.use_shm else None
        if shm_prefix is not None:
            res.add(lambda: cleanup_segments(shm_prefix))
        sock = None
        if endpoint.needs_early_bind:
            sock = self._bind(endpoint, res)
        parent = _lifecycle.parent_info()
        rings = make_rings(self.use_shm, self.start_method, self.num_proc)
        decoder = FrameDecoder(rings)
        res.add(decoder.close)
        self._pool = ProcessPool(
            _zmq_runner_main,
            [
                (self.ds, endpoint.address, i, parent, self.hwm, shm_prefix,
                 rings[i] if rings else None, self._worker_start(i))
                for i in range(self.num_proc)
            ],
            start_method=self.start_method,
            name=type(self).__name__,
            picklable=("ds", self.ds),
        )
        self._pool.start()  # before creating the context: never fork a process with
        if sock is None:  # ZeroMQ's I/O threads running
            sock = self._bind(endpoint, res)
        decode = decoder.decode
        copy = rings is not None  # ring messages are small frames: copying them is cheaper
        name = type(self).__name__  # (the closure must not refer to self: no cycle, so that
        # garbage collection runs __del__ -> close() before the sockets are finalized)

        def raw(timeout: float) -> tuple | None:
            res.check(name)
            try:
                while True:
                    try:
                        return decode(recv_frames(sock, zmq.NOBLOCK, copy))
                    except zmq.Again:
                        if not sock.poll(int(timeout * 1000)):
                            return None
            except zmq.ZMQError as e:
                if isinstance(e, zmq.ContextTerminated) or sock.closed:
                    raise DataFlowTerminated(f"{name} was closed while iterating") from e
                raise

        self._receive = self._pool.receiver(raw)  # type: ignore[method-assign]

    def _bind(self, endpoint: Endpoint, res: _lifecycle.Resources) -> Any:
        zmq = import_zmq()
        ctx = zmq.Context()
        sock = ctx.socket(zmq.PULL)
        res.add(ctx.term)
        res.add(lambda: sock.close(linger=0))
        sock.setsockopt(zmq.RCVHWM, self.hwm)
        sock.setsockopt(zmq.LINGER, 0)
        endpoint.bind(sock)
        return sock

    def _stop(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool = None
        self._release_resources()


PrefetchDataZMQ = MultiProcessRunnerZMQ
