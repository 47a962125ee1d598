"""``RayRunner``: independent copies of a flow, each in a Ray actor (the runners' Ray transport).

Each actor runs the engine's ``runner_loop`` over its copy in a thread, into a bounded queue;
the consumer pulls chunks of messages with one request in flight per actor.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from dataflow import rng as _rng
from dataflow.base import DataFlow
from dataflow.errors import DataFlowTerminated, WorkerError
from dataflow.parallel._bootstrap import globals_seed
from dataflow.parallel._protocol import DATA, END, ERROR, STATE
from dataflow.parallel._runner import RunnerBase
from dataflow.parallel._worker import queue_emitter, runner_loop
from dataflow.ray import _actors as actors
from dataflow.ray import _session as session
from dataflow.validation import check_positive_int

__all__ = ["RayRunner"]

#: seconds an actor's ``next_chunk`` waits for a first message before answering empty
PULL_WAIT = 1.0


class _RunnerActor:
    """A Ray actor running ``runner_loop`` over its copy of ``ds`` into a bounded queue."""

    def __init__(self, ds: DataFlow, worker_id: int, global_seed: int | None, stage: str,
                 start: tuple[Any, int] | None, num_prefetch: int, threads: int,
                 seed: tuple[int, tuple[int, ...]]) -> None:
        session.worker_setup(worker_id, global_seed, seed, threads=threads)
        self.queue: queue.Queue = queue.Queue(num_prefetch)
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=runner_loop, args=(ds, queue_emitter(self.queue, self.stop), worker_id, stage),
            kwargs={"start": start, "checkpoints": True}, name=f"{stage}-{worker_id}",
            daemon=True,
        )

    def ready(self) -> tuple[int, str]:
        return session.actor_identity()

    def next_chunk(self, max_items: int) -> list[tuple]:
        """The next messages (at most ``max_items``; empty after ``PULL_WAIT`` s without any).
        The first call starts the copy (so ``ready()`` answers even for a copy that crashes)."""
        if self.thread.ident is None:
            self.thread.start()
        try:
            out = [self.queue.get(timeout=PULL_WAIT)]
        except queue.Empty:
            return []
        while len(out) < max_items and out[-1][0] not in (END, ERROR):
            try:
                out.append(self.queue.get_nowait())
            except queue.Empty:
                break
        return out


class _RayRunnerTransport:
    """Consumer side: one ``next_chunk`` request in flight per live actor; a lost actor is
    replaced by one that continues its copy's stream right after the last datapoint received
    (from that copy's last state, skipping what was received since)."""

    def __init__(self, slots: actors.ActorSlots, make_args: Callable[[int, Any], tuple],
                 starts: list[tuple[Any, int]], chunk_size: int, max_retries: int) -> None:
        self.ray = slots.ray
        self.make_args = make_args
        self.slots = slots
        self.chunk_size = chunk_size
        self.max_retries = max_retries
        n = slots.n
        self.received = [0] * n  # DATA messages received from each worker (all its actors)
        self.offset = [0] * n  # received[w] when the slot's current actor started
        # last checkpoint of each worker's copy: (received count, state, datapoints to skip)
        self.ckpt: list[tuple[int, Any, int]] = [(0, s, k) for s, k in starts]
        self.failures = [0] * n  # consecutive losses of the slot
        self.requests: dict[Any, int] = {}
        self.pending: deque[tuple] = deque()
        for w in range(n):
            self._request(w)

    def _request(self, w: int) -> None:
        self.requests[self.slots.actors[w].next_chunk.remote(self.chunk_size)] = w

    def receive(self, timeout: float) -> tuple | None:
        if self.pending:
            return self.pending.popleft()
        requests = self.requests
        got = self.slots.fetch(requests, timeout, requests.__getitem__)
        if got is None:
            return None
        ref, msgs = got
        w = requests.pop(ref)
        if isinstance(msgs, BaseException):  # the actor was lost
            self._lost(w, msgs)
            return None
        self.failures[w] = 0
        again = True
        for kind, wid, payload in msgs:
            if kind == DATA:
                self.received[w] += 1
            elif kind == STATE:
                count, state = payload
                payload = (count + self.offset[w], state)
                self.ckpt[w] = (payload[0], state, 0)
            elif kind in (END, ERROR):
                again = False
            self.pending.append((kind, wid, payload))
        if again:
            self._request(w)
        return self.pending.popleft() if self.pending else None

    def _lost(self, w: int, exc: BaseException) -> None:
        self.failures[w] += 1
        if self.failures[w] > self.max_retries:
            raise WorkerError(
                "WorkerDied",
                f"the Ray actor of worker {w} was lost {self.failures[w]} times in a row "
                f"({actors.describe(exc)}). A node or process died; if the flow itself "
                "crashes its process, fix it, else raise `max_retries`.",
                worker_id=w, stage=self.slots.stage,
            ) from exc
        count, state, skip = self.ckpt[w]
        start = (state, skip + self.received[w] - count)
        self.offset[w] = self.received[w]
        self.slots.replace(w, self.make_args(w, start))
        self._request(w)


class RayRunner(actors.ActorPool, RunnerBase):
    """Run ``num_workers`` independent copies of ``ds``, each in a Ray actor.

    The contract of :class:`~dataflow.parallel.MultiProcessRunnerZMQ` (tensorpack's runners):
    each actor resets its copy of ``ds`` as runner worker ``i`` (its random stages key their
    streams by ``i``) and iterates it forever; each ``__iter__`` yields ``len(ds)`` datapoints
    (or forever if the length is unknown); an exception in a copy is raised in the consumer as
    :class:`~dataflow.errors.WorkerError` with the remote traceback.

    Datapoints travel in chunks of up to ``chunk_size`` messages (one request in flight per
    actor, each actor buffering up to ``num_prefetch`` datapoints ahead); NumPy arrays come
    through Ray's object store without copies, as **read-only** views.

    Fault tolerance: when an actor is lost (its process or node died), a new actor restores the
    copy from its last saved state (see ``state_dict()``) and skips what was already received,
    so the worker's stream continues exactly (for flows whose state restores exactly), with no
    datapoint lost or repeated; after ``max_retries`` losses of a worker in a row,
    ``WorkerError("WorkerDied", ...)`` is raised.

    Ray: as :class:`~dataflow.ray.RayMapData` (an initialized Ray is used as is; else
    ``ray.init(address=address)`` or a local Ray, shut down by ``close()`` when no flow uses it);
    ``close()`` kills every actor.

    ``state_dict()`` / ``load_state_dict()``: as :meth:`RunnerBase.state_dict
    <dataflow.parallel._runner.RunnerBase.state_dict>`: each worker's stream continues right after
    its last delivered datapoint.

    Args:
        ds: the flow to copy into each actor (pickled with cloudpickle; the modules it uses must
            be importable on the nodes).
        num_workers: number of actors.
        num_prefetch: datapoints each actor prepares ahead of the consumer.
        chunk_size: at most this many datapoints per request to an actor.
        address, actor_options, max_retries: as for :class:`~dataflow.ray.RayMapData`.
    """

    def __init__(
        self,
        ds: DataFlow,
        num_workers: int,
        *,
        num_prefetch: int = 64,
        chunk_size: int = 16,
        address: str | None = None,
        actor_options: dict[str, Any] | None = None,
        max_retries: int = 3,
    ) -> None:
        session.import_ray()
        super().__init__(ds)
        self.num_workers = self._num_workers = check_positive_int(num_workers, "num_workers")
        self.num_prefetch = check_positive_int(num_prefetch, "num_prefetch", 64)
        self.chunk_size = check_positive_int(chunk_size, "chunk_size", 16)
        self.address = address
        self.actor_options = session.check_options(actor_options)
        self.max_retries = actors.check_retries(max_retries)
        self._owns_ray = False
        self._slots: actors.ActorSlots | None = None

    def _start(self) -> None:
        ray = session.import_ray()
        cpus = float(self.actor_options.get("num_cpus", 1))
        self._owns_ray = session.acquire_ray(self.address, self.num_workers * cpus)
        # (the closures must not refer to self: no cycle, so that garbage collection closes it)
        # the flow by value (not a ray.put reference): a replacement actor then gets it from
        # this process, never from the object store of a node that died
        ds, seed, stage = self.ds, _rng.get_seed(), type(self).__name__
        prefetch, threads = self.num_prefetch, session.actor_threads(self.actor_options)
        seeds = [globals_seed(self, i) for i in range(self.num_workers)]

        def make_args(i: int, start: tuple[Any, int] | None) -> tuple:
            return (ds, i, seed, stage, start, prefetch, threads, seeds[i])

        starts = [self._worker_start(i) for i in range(self.num_workers)]
        self._slots = slots = actors.ActorSlots(ray, _RunnerActor, self.num_workers,
                                         self.actor_options, stage)
        slots.start(lambda i: make_args(i, starts[i]))
        transport = _RayRunnerTransport(slots, make_args, [s or (None, 0) for s in starts],
                                        self.chunk_size, self.max_retries)
        self._transport = transport

    def _stop(self) -> None:
        self._transport = _ClosedTransport()
        if self._slots is not None:
            self._slots.kill_all()
            self._slots = None
        owned, self._owns_ray = self._owns_ray, False
        session.release_ray(owned)


class _ClosedTransport:
    """What a stopped runner receives from: it says so."""

    def receive(self, timeout: float) -> tuple | None:
        raise DataFlowTerminated("RayRunner was closed while being iterated")
