""":func:`start_map_processes`: a mapper's worker processes and the consumer's transport to
them, started together (for the ZMQ mappers, and for a thread mapper whose work moves to
processes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dataflow.parallel._bootstrap import get_context, parent_info
from dataflow.parallel._lifecycle import Resources
from dataflow.parallel._pool import ProcessPool
from dataflow.parallel._zmq_consumer import ZmqMapTransport
from dataflow.parallel._zmq_worker import zmq_map_main
from dataflow.parallel.shared_memory import (
    Ring,
    SegmentSpace,
    make_rings,
)

__all__ = [
    "start_map_processes",
]


def start_map_processes(
    stage: str, func: Callable[[Any], Any], num_proc: int, inputs: tuple[int, tuple[int, ...]],
    batch_size: int | None, *, start_method: str | None, use_shm: bool, max_restarts: int,
    restart_window: int,
) -> tuple[ZmqMapTransport, ProcessPool, Resources]:
    """Start ``num_proc`` worker processes mapping ``func`` (batching by ``batch_size``, if
    given) and the consumer's transport to them: ``(transport, pool, resources)``; the caller
    stops them with ``pool.terminate()`` and then ``resources.close()`` (in the thread that
    receives). A thread stage whose work moves to processes starts them the same way."""
    res = Resources()
    space = SegmentSpace.open() if use_shm else None  # None: /dev/shm is too small
    shm_prefix = space.prefix if space is not None else None
    if space is not None:
        res.add(space.close)
    ctx = get_context(start_method)
    rings = make_rings(use_shm, ctx.get_start_method(), num_proc)
    try:
        transport = ZmqMapTransport(num_proc, shm_prefix, rings, res, stage)
        parent = parent_info()
        address = transport.endpoint.address

        def args(slot: int, channel: int, ring: Ring | None, progress: Any) -> tuple:
            return (func, address, slot, parent, inputs, shm_prefix, stage, batch_size, ring,
                    channel, progress)

        progress = [ctx.Value("q", -1, lock=False) for _ in range(num_proc)]
        pool = ProcessPool(
            zmq_map_main,
            [args(i, i, rings[i] if rings else None, progress[i]) for i in range(num_proc)],
            start_method=start_method, name=stage, picklable=("map_func", func), mapper=True,
        )
        transport.attach(pool, args, max_restarts, progress, restart_window,
                         lambda: ctx.Value("q", -1, lock=False))
        pool.start()
    except BaseException:
        res.close()
        raise
    return transport, pool, res
