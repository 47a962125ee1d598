"""A service worker: one process that maps the dataset indices consumers ask it for.

It binds its own ZeroMQ ROUTER socket (on the service's host, a free port; on Linux, for a
loopback service, an abstract Unix socket, which leaves no file behind and skips TCP; reported
to the service through a pipe) and answers every consumer directly: results never pass through the
dispatcher. Requests from several consumers are served in turn, one item from each consumer
with work waiting (a fair share for every job and rank). Each item is ``map_func(ds[index])``
with its random draws keyed by ``(epoch, position)`` and the service's seed, as in the parallel
mappers (:class:`dataflow.rng.InputScope`).
"""

from __future__ import annotations

import collections
import os
import time
import traceback
from typing import Any

from dataflow import rng as _rng
from dataflow.parallel._bootstrap import worker_bootstrap
from dataflow.service import protocol

__all__ = ["worker_main"]

#: how long a worker waits for requests before looking at its stop flag again
POLL_MS = 100


def worker_main(worker_id: int, parent: tuple, source: Any, map_func: Any,
                inputs: tuple[int, tuple[int, ...]], host: str, token: str, report: Any,
                counters: Any) -> None:
    """Serve map requests until the service stops (it kills its workers; a worker also ends
    when the service's process is gone). ``report`` is a pipe end that receives this worker's
    address once it listens; ``counters`` a shared array: busy seconds, items, bytes out,
    dropped messages."""
    import zmq

    worker_bootstrap(worker_id, parent, dispatch_globals=True)
    ctx: Any = zmq.Context.instance()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 0)
    if host.startswith("ipc://"):  # (a loopback service on Linux: an abstract Unix socket)
        address = f"{host}-{os.getpid()}"
        sock.bind(address)
    else:
        address = f"tcp://{host}:{sock.bind_to_random_port(f'tcp://{host}')}"
    report.send(address)
    report.close()
    scope = _rng.InputScope(*inputs)
    queues: dict[bytes, collections.deque] = {}
    order: collections.deque[bytes] = collections.deque()  # consumers with work, in turn
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)

    def take(block: bool) -> None:
        flags = 0 if block else zmq.NOBLOCK
        while True:
            try:
                frames = sock.recv_multipart(flags)
            except zmq.Again:
                return
            flags = zmq.NOBLOCK
            if len(frames) != 2:
                counters[3] += 1
                continue
            ident, frame = frames
            try:
                msg = protocol.decode(frame)
                items = msg.get("items") if msg["op"] == "map" else None
                if not protocol.token_ok(msg, token) or not isinstance(items, list):
                    raise ValueError("refused")
                checked = [(int(e), int(p), int(i)) for e, p, i in items]
            except (ValueError, TypeError, KeyError):
                counters[3] += 1
                continue
            q = queues.get(ident)
            if q is None:
                q = queues[ident] = collections.deque()
            if not q:
                order.append(ident)
            q.extend(checked)

    while True:
        if not order and not poller.poll(POLL_MS):
            continue
        take(block=False)
        if not order:
            continue
        ident = order.popleft()
        q = queues[ident]
        epoch, pos, index = q.popleft()
        if q:
            order.append(ident)  # (its next item after the other consumers' turn)
        else:
            del queues[ident]
        start = time.perf_counter()
        _rng.set_input_scope(scope)
        scope.begin(epoch, pos)
        try:
            out = {"op": "out", "e": epoch, "p": pos, "r": map_func(source.get(index))}
            try:
                frames = protocol.encode_frames(out)
            except TypeError as e:
                raise TypeError(
                    f"the output of map_func for index {index} cannot be sent to consumers "
                    f"({e}); map_func must return lists, dicts, numbers, strings, bytes and "
                    f"NumPy arrays (got a {type(out['r']).__name__})") from None
        except Exception as e:  # the consumer raises it as a WorkerError
            frames = protocol.encode_frames({
                "op": "err", "e": epoch, "p": pos, "type": type(e).__name__,
                "message": str(e), "traceback": traceback.format_exc(), "worker": worker_id,
                "index": index})
        finally:
            _rng.set_input_scope(None)
        counters[0] += time.perf_counter() - start
        counters[1] += 1
        counters[2] += sum(memoryview(f).nbytes for f in frames)
        sock.send_multipart([ident, *frames], copy=False)
