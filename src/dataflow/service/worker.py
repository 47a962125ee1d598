"""A service worker: it maps the dataset indices consumers ask it for.

It binds its own ZeroMQ ROUTER socket (on the service's host, a free port; on Linux, for a
loopback service, an abstract Unix socket, which leaves no file behind and skips TCP) and
answers every consumer directly: results never pass through the dispatcher. Requests from
several consumers are served in turn, one item from each consumer with work waiting (a fair
share for every job and rank). Each item is ``map_func(ds[index])`` of the pipeline the request
names, with its random draws keyed by ``(epoch, position)`` and that pipeline's seed, as in the
parallel mappers (:class:`dataflow.rng.InputScope`).

A consumer on this machine may name a shared ring (``"ring"``: a segment it created in
``/dev/shm``, see :class:`dataflow.parallel.shared_memory.Ring`) in its requests: the worker
maps it (and unlinks the name) and copies the arrays of its answers there instead of sending
them through the socket, one copy each way and no kernel buffers. An answer that does not fit
the ring now travels in the socket as usual. A ring unused for :data:`RING_IDLE` seconds is
unmapped; a consumer that comes back finds the answer flagged ``"nr"`` and makes a new one.

:func:`serve` is the loop itself (a Ray actor runs it in a thread); :func:`worker_main` is
the entry point of a worker process.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
import time
import traceback
from collections.abc import Callable, MutableSequence
from typing import Any

from dataflow import rng as _rng
from dataflow.parallel._bootstrap import worker_bootstrap
from dataflow.parallel.shared_memory import SHM_DIR, Ring
from dataflow.service import protocol

__all__ = ["BEAT_INTERVAL", "bind", "serve", "worker_main"]

#: how long a worker waits for requests before looking at its stop flag again
POLL_MS = 100
#: seconds after which the shared ring of a consumer that asked nothing is unmapped
RING_IDLE = 300.0
#: seconds between two heartbeats of a worker process (the pool's sign that it runs)
BEAT_INTERVAL = 0.2
#: seconds after which a turn ends early (its answers go, the consumer's next items wait for
#: its next turn)
TURN_SECONDS = 0.5
#: items of one consumer mapped in a turn and answered in one message (a turn of each
#: consumer with work waiting, in order: fair shares; one message for several items: fewer
#: wake-ups of both sides)
TURN = 4


def bind(host: str, curve: tuple[bytes, bytes] | None = None) -> tuple[Any, str]:
    """A ROUTER socket listening on ``host`` (``ipc://@name``: an abstract Unix socket,
    made unique by this process's id and a counter), and its address; a CURVE server of the
    key pair ``curve`` when given."""
    import zmq

    sock: Any = zmq.Context.instance().socket(zmq.ROUTER)
    try:
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 0)
        if curve is not None:
            protocol.curve_server(sock, curve)
        if host.startswith("ipc://"):
            address = f"{host}-{os.getpid()}-{next(_names)}"
            sock.bind(address)
        else:
            address = f"tcp://{host}:{sock.bind_to_random_port(f'tcp://{host}')}"
    except BaseException:  # (keys ZeroMQ refuses, an address it cannot bind)
        sock.close(linger=0)
        raise
    return sock, address


_names = iter(range(1 << 62))


def worker_main(worker_id: int, parent: tuple, pipelines: dict[str, tuple], host: str,
                token: str, report: Any, counters: Any,
                curve: tuple[bytes, bytes] | None = None) -> None:
    """A worker process: serve until the service stops (it kills its workers; a worker also
    ends when the service's process is gone). ``report`` is a pipe end that receives this
    worker's address once it listens."""
    worker_bootstrap(worker_id, parent, dispatch_globals=True)
    sock, address = bind(host, curve)
    threading.Thread(target=_heartbeat, args=(counters,), name="dataflow-service-heartbeat",
                     daemon=True).start()
    report.send(address)
    report.close()
    serve(sock, worker_id, pipelines, token, counters)


def _heartbeat(counters: Any) -> None:
    """Count, forever, in ``counters[5]``: the pool's sign that this process runs (a frozen
    one stops counting; see :mod:`dataflow.service.pool`)."""
    while True:
        counters[5] += 1
        time.sleep(BEAT_INTERVAL)


class _Raised:
    """A map call that raised, in its turn's place."""

    __slots__ = ("error", "traceback")

    def __init__(self, error: BaseException, tb: str) -> None:
        self.error, self.traceback = error, tb


def _error(e: BaseException, epoch: int, pos: int, index: int, worker_id: int,
           tb: str) -> list[Any]:
    message = str(e)
    if isinstance(e, SystemExit):
        message = (f"map_func called sys.exit({e.code!r}) (the worker went on; raise an "
                   "exception instead)")
    return protocol.encode_frames({
        "op": "err", "e": epoch, "p": pos, "type": type(e).__name__,
        "message": message[:protocol.MAX_TEXT // 2], "traceback": tb[-protocol.MAX_TEXT // 2:],
        "worker": worker_id, "index": index})


def _answers(outs: list[list], ring: Any, worker_id: int, extra: dict[str, Any]
             ) -> list[list[Any]]:
    """The messages (frames each) that answer ``outs`` (``[epoch, position, result, index]``
    each): one ``out`` message; if a result cannot be encoded, one message per item, an
    error naming the result's type for each one that cannot."""
    try:
        return [protocol.encode_frames({"op": "out", "o": [o[:3] for o in outs], **extra},
                                       ring)]
    except Exception:  # (one of them cannot travel: each on its own)
        pass
    msgs: list[list[Any]] = []
    for epoch, pos, result, index in outs:
        try:
            msgs.append(protocol.encode_frames({"op": "out", "o": [[epoch, pos, result]],
                                                **extra}, ring))
        except Exception as e:
            msgs.append(protocol.encode_frames({
                "op": "err", "e": epoch, "p": pos, "type": type(e).__name__, "message": (
                    f"the output of map_func for index {index} cannot be sent to consumers: "
                    f"{unsendable(result, 'output') or type(e).__name__}. map_func must "
                    "return lists, dicts with str or int keys, numbers, strings that encode "
                    "as UTF-8, bytes and NumPy arrays of a numeric dtype; return a torch "
                    "tensor or a PIL image as a NumPy array (np.asarray(x))"),
                "traceback": "", "worker": worker_id, "index": index}))
    return msgs


def unsendable(obj: Any, path: str, depth: int = 0) -> str | None:
    """Where in ``obj`` a value is that cannot travel to consumers, and what it is (None:
    nothing found)."""
    import numpy as np

    if depth > 50:
        return f"{path} is nested more than 50 levels deep"
    if obj is None or isinstance(obj, bool | int | float | bytes | np.bool_ | np.number):
        return None
    if isinstance(obj, str):
        try:
            obj.encode()
        except UnicodeEncodeError as e:
            return (f"{path} is a str that is not valid UTF-8 ({e.reason} at {e.start}: "
                    f"{obj!r:.60}; e.g. a file name from os.fsdecode: send os.fsencode(name))")
        return None
    if isinstance(obj, np.ndarray):
        return (None if obj.dtype.kind in "biufc" and not obj.dtype.hasobject else
                f"{path} is a NumPy array of dtype {obj.dtype} (only numeric dtypes travel)")
    if isinstance(obj, list | tuple):
        for k, x in enumerate(obj):
            found = unsendable(x, f"{path}[{k}]", depth + 1)
            if found:
                return found
        return None
    if isinstance(obj, dict):
        for key, x in obj.items():
            if type(key) not in (str, int, float, bytes, bool, type(None)) or key == b"nd":
                return f"{path} has a key {key!r:.40} ({type(key).__name__}) that a consumer " \
                       "could not decode (keys must be str or int)"
            found = unsendable(x, f"{path}[{key!r:.40}]", depth + 1)
            if found:
                return found
        return None
    return f"{path} is a {type(obj).__module__}.{type(obj).__qualname__}"


def _send(sock: Any, ident: bytes, msgs: list[list[Any]],
          counters: MutableSequence[float]) -> None:
    for frames in msgs:
        counters[2] += sum(memoryview(f).nbytes for f in frames)
        # (small frames are copied: a zero-copy frame costs a hand-over to ZeroMQ's freeing
        # thread; the arrays of a consumer on this machine went into its ring)
        sock.send_multipart([ident, *frames], copy=len(frames) == 1)


def _open_ring(name: Any) -> Ring | None:
    if not isinstance(name, str) or "/" in name or not name.startswith("dataflow-"):
        return None
    try:
        return Ring.attach(os.path.join(SHM_DIR, name))
    except (OSError, ValueError):
        return None


def serve(sock: Any, worker_id: int, pipelines: dict[str, tuple], token: str,
          counters: MutableSequence[float], stop: threading.Event | None = None,
          on_item: Callable[[], None] | None = None) -> None:
    """Answer map requests on ``sock`` until ``stop`` is set (never, for a process worker).
    ``pipelines``: job name -> ``(source, map_func, (entropy, spawn key) of its inputs)``;
    ``counters``: busy seconds, items, bytes out, dropped messages, inputs waiting in the
    queues (updated in place)."""
    import zmq

    scopes = {name: _rng.InputScope(*inputs) for name, (_s, _f, inputs) in pipelines.items()}
    sizes = {name: len(source) for name, (source, _f, _i) in pipelines.items()}
    jobs = {name: k for k, name in enumerate(sorted(pipelines))}  # (numbers, for counters)
    queues: dict[bytes, collections.deque] = {}
    order: collections.deque[bytes] = collections.deque()  # consumers with work, in turn
    rings: dict[bytes, tuple[str, Ring | None, float]] = {}  # ident -> (name, ring, last use)
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)

    def take() -> None:
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) != 2:
                counters[3] += 1
                continue
            ident, frame = frames
            try:
                msg = protocol.decode(frame)
                if not protocol.token_ok(msg, token):
                    raise ValueError("token")
                protocol.check(msg, "worker")
                job = msg.get("j", "")
                if job not in pipelines:
                    raise ValueError("unknown job")
                size = sizes[job]
                # (only indices of the pipeline: never one counted from its end)
                checked = [(job, e, p, i) for e, p, i in msg["items"] if i < size]
                if len(checked) != len(msg["items"]):
                    raise ValueError("index out of range")
            except ValueError:
                counters[3] += 1
                continue
            ring_name = msg.get("ring")
            if ring_name is not None:
                known = rings.get(ident)
                if known is None or known[0] != ring_name:
                    if known is not None and known[1] is not None:
                        known[1].close()
                    rings[ident] = (ring_name, _open_ring(ring_name), time.monotonic())
            q = queues.get(ident)
            if q is None:
                q = queues[ident] = collections.deque()
            if not q:
                order.append(ident)
            q.extend(checked)
            counters[4] += len(checked)

    last_sweep = time.monotonic()
    while stop is None or not stop.is_set():
        if not order and not poller.poll(POLL_MS):
            now = time.monotonic()
            if now - last_sweep > RING_IDLE / 10:
                last_sweep = now
                for ident, (_name, ring, used) in list(rings.items()):
                    if now - used > RING_IDLE:
                        del rings[ident]
                        if ring is not None:
                            ring.close()
            continue
        take()
        if not order:
            continue
        ident = order.popleft()
        q = queues[ident]
        ring_entry = rings.get(ident)
        ring = None
        if ring_entry is not None:
            ring = ring_entry[1]
            rings[ident] = (ring_entry[0], ring, time.monotonic())
        start = time.perf_counter()
        outs: list[list] = []
        mapped = 0
        # up to TURN items, and no more once the turn took TURN_SECONDS: slow map calls are
        # answered one by one, so that a consumer hears from its worker at least that often
        while q and mapped < TURN and (
                mapped == 0 or time.perf_counter() - start < TURN_SECONDS):
            job, epoch, pos, index = q.popleft()
            mapped += 1
            source, map_func, _inputs = pipelines[job]
            scope = scopes[job]
            _rng.set_input_scope(scope)
            scope.begin(epoch, pos)
            # (the input being mapped: if the call ends this process, the pool tells which)
            counters[6], counters[7], counters[8], counters[9] = jobs[job], epoch, pos, index
            try:
                outs.append([epoch, pos, map_func(source.get(index)), index])
            except (Exception, SystemExit) as e:  # the consumer raises it as a WorkerError
                outs.append([epoch, pos, _Raised(e, traceback.format_exc()), index])
            finally:
                counters[6] = -1
                _rng.set_input_scope(None)
        answers: list[list[Any]] = []
        if outs:
            # (the ring it named could not be mapped: it may make another)
            extra = {"nr": 1} if ring_entry is not None and ring is None else {}
            head = ring.head if ring is not None else 0
            answers = _answers([o for o in outs if not isinstance(o[2], _Raised)], ring,
                               worker_id, extra) if any(
                not isinstance(o[2], _Raised) for o in outs) else []
            # (the outputs, then the errors: each is raised at its turn by the consumer)
            answers += [_error(o[2].error, o[0], o[1], o[3], worker_id, o[2].traceback)
                        for o in outs if isinstance(o[2], _Raised)]
            if ring is not None:
                counters[2] += ring.head - head  # (bytes sent through the ring)
        # (the figures are counted before the answers go: a reader may look right after)
        if q:
            order.append(ident)  # (its next items after the other consumers' turn)
        else:
            del queues[ident]
        counters[0] += time.perf_counter() - start
        counters[1] += mapped
        counters[4] = sum(len(x) for x in queues.values())
        _send(sock, ident, answers, counters)
        if on_item is not None:
            on_item()
    for _name, ring, _used in rings.values():
        if ring is not None:
            with contextlib.suppress(Exception):
                ring.close()
