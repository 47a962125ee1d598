"""The workers' end of the ZeroMQ transport: a worker's socket (:func:`map_worker_channel`,
:func:`runner_worker_channel`) and the main function of a map worker process
(:func:`zmq_map_main`, batching its results when the stage batches).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dataflow.parallel._bootstrap import worker_bootstrap
from dataflow.parallel._protocol import READY
from dataflow.parallel._wire import (
    PLAIN_DECODER,
    FrameCodec,
    import_zmq,
    recv_frames,
    send_frames,
)
from dataflow.parallel._worker import map_loop
from dataflow.parallel.shared_memory import (
    Ring,
    SharedMemoryWriter,
)

__all__ = [
    "map_worker_channel",
    "runner_worker_channel",
]


# ---- worker side ----------------------------------------------------------------------------

#: milliseconds a finished runner worker waits for its last message (END / ERROR) to leave
FINAL_LINGER_MS = 10_000


class WorkerChannel:
    """A worker's socket: ``emit(msg)`` encodes and sends; ``receive()`` (map workers) the next
    chunk; ``close()`` when the worker ends."""

    def __init__(self, sock: Any, ctx: Any, codec: FrameCodec, linger: int) -> None:
        self.sock, self.ctx, self.codec, self.linger = sock, ctx, codec, linger

    def emit(self, msg: tuple) -> None:
        send_frames(self.sock, self.codec.encode(msg))

    def receive(self) -> Any:
        return PLAIN_DECODER.decode(recv_frames(self.sock))

    def close(self) -> None:
        self.sock.close(linger=self.linger)
        self.ctx.term()


def _worker_codec(shm_prefix: str | None, channel: int, ring: Ring | None) -> FrameCodec:
    shm = SharedMemoryWriter(shm_prefix, channel) if shm_prefix else None
    return FrameCodec(shm, ring=ring, worker_id=channel)


def map_worker_channel(address: str, worker_id: int, shm_prefix: str | None,
                       ring: Ring | None, channel: int | None = None) -> WorkerChannel:
    """A map worker's DEALER (identity ``w<id>``), connected to the consumer's ROUTER.

    ``channel`` (default: the worker id) names the worker's ring and shared-memory segments: a
    replacement worker gets a new one, so nothing it sends is confused with what the dead one
    left behind."""
    zmq = import_zmq()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, b"w%d" % worker_id)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.RECONNECT_IVL, 10)
    sock.connect(address)
    channel = worker_id if channel is None else channel
    return WorkerChannel(sock, ctx, _worker_codec(shm_prefix, channel, ring), 0)


def runner_worker_channel(address: str, worker_id: int, hwm: int, shm_prefix: str | None,
                          ring: Ring | None, channel: int | None = None) -> WorkerChannel:
    """A runner worker's PUSH, connected to the consumer's PULL (``channel``: as in
    :func:`map_worker_channel`)."""
    zmq = import_zmq()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.setsockopt(zmq.RECONNECT_IVL, 10)
    sock.connect(address)
    channel = worker_id if channel is None else channel
    return WorkerChannel(sock, ctx, _worker_codec(shm_prefix, channel, ring), FINAL_LINGER_MS)


# ---- starting a mapper's worker processes ---------------------------------------------------


class _Batcher:
    """Worker-side ``finish_chunk`` that turns mapped results into batches of ``batch_size``."""

    def __init__(self, batch_size: int) -> None:
        from dataflow.wrappers import BatchData

        self.aggregate = BatchData.aggregate_batch
        self.batch_size = batch_size
        self.acc: list[Any] = []

    def __call__(self, results: list) -> list:
        # An input is answered when the batch holding its result is sent (a dropped, None
        # result at once), so the consumer's bookkeeping counts the inputs waiting in an
        # incomplete batch as in flight: a saved state re-dispatches them, none is lost.
        out = [(idx, None) for idx, res in results if res is None]
        self.acc.extend((idx, res) for idx, res in results if res is not None)
        batches = []
        bs = self.batch_size
        while len(self.acc) >= bs:
            chunk = self.acc[:bs]
            del self.acc[:bs]
            batches.append(self.aggregate([res for _, res in chunk]))
            out.extend((idx, None) for idx, _ in chunk)
        if batches:
            out[-1] = (out[-1][0], batches)  # type: ignore[assignment]  # (the batches)
        return out


def zmq_map_main(
    map_func: Callable[[Any], Any],
    address: str,
    worker_id: int,
    parent: tuple,
    inputs: tuple[int, tuple[int, ...]],
    shm_prefix: str | None,
    stage: str,
    batch_size: int | None,
    ring: Ring | None,
    channel_id: int | None = None,
    progress: Any = None,
) -> None:
    worker_bootstrap(worker_id, parent, dispatch_globals=True)
    channel = map_worker_channel(address, worker_id, shm_prefix, ring, channel_id)
    channel.emit((READY, worker_id, None))
    finish = _Batcher(batch_size) if batch_size else None
    try:
        map_loop(channel.receive, channel.emit, map_func, worker_id, stage, inputs, finish,
                 progress)
    finally:
        channel.close()
