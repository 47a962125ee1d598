"""A pool of Ray actor slots that can be replaced: which failures mean a lost actor or node,
how a task's error travels to the consumer, the head-node check, :class:`ActorSlots` (results
taken in the order sent) and :class:`ActorPool`.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dataflow.errors import DataFlowTerminated, HeadNodeLostError, WorkerError
from dataflow.ray._session import START_TIMEOUT

logger = logging.getLogger("dataflow.ray")

__all__ = [
    "ActorEvent",
    "ActorPool",
    "ActorSlots",
    "describe",
    "is_lost",
    "task_error",
]


#: Ray errors (names in ``ray.exceptions``) that mean a task or its actor was lost: its
#: process or node died or was killed (out of memory included), or its result was lost with them
LOST_ERRORS = ("RayActorError", "ObjectLostError", "WorkerCrashedError", "NodeDiedError",
               "OutOfMemoryError")


def check_retries(max_retries: Any) -> int:
    """``max_retries`` validated: an int >= 0."""
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ValueError(f"`max_retries` must be an int >= 0, got {max_retries!r}; pass "
                         "e.g. max_retries=3.")
    return max_retries


def is_lost(ray: Any, exc: BaseException) -> bool:
    """Whether ``exc`` (from ``ray.get``) means the task or its actor was lost, which a retry
    elsewhere can fix, as opposed to an error of the task itself (raised by its code, or a
    result that cannot be serialized or deserialized), which is reported at once."""
    kinds = tuple(getattr(ray.exceptions, name) for name in LOST_ERRORS
                  if hasattr(ray.exceptions, name))
    return isinstance(exc, kinds)


def describe(exc: BaseException, limit: int = 300) -> str:
    """``Type: message`` of a Ray error, cut to ``limit`` characters (Ray's are verbose)."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def task_error(exc: BaseException, worker_id: int, stage: str, index: int | None = None
               ) -> WorkerError:
    """A ``WorkerError`` for an error of a task that is not a loss: the actor's method raised
    (e.g. a result Ray could not serialize), or its result cannot be deserialized here.
    (``map_func`` errors travel as values instead.)"""
    cause = getattr(exc, "cause", None)
    typ = type(cause) if isinstance(cause, BaseException) else type(exc)
    name = typ.__qualname__
    if typ.__module__ != "builtins":
        name = f"{typ.__module__}.{name}"
    message = str(cause) if cause is not None else str(exc)
    return WorkerError(name, message, str(exc), worker_id=worker_id, index=index, stage=stage)


@dataclass(frozen=True)
class ActorEvent:
    """Something that happened to a pool's actor, as :meth:`ActorSlots.events` records it.

    ``kind`` is ``"started"`` (the first actors, running), ``"lost"`` (the consumer noticed
    that the actor of slot ``worker`` was lost: a task of it failed so), ``"replaced"`` (a new
    actor was asked for in its place) or ``"ready"`` (that new actor runs). ``time`` is
    ``time.monotonic()`` in the consumer; ``node`` the Ray node id of the actor (``None`` when
    not known yet)."""

    time: float
    kind: str
    worker: int
    node: str | None


#: seconds between two checks that the head node (its GCS) still answers
HEAD_CHECK_INTERVAL = 1.0


def _gcs_address(ray: Any) -> str | None:
    with contextlib.suppress(Exception):
        return str(ray.get_runtime_context().gcs_address)
    return None


def _answers(address: str, timeout: float = 1.0) -> bool:
    """Whether a TCP connection to ``address`` (``host:port``) is accepted."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


class ActorSlots:
    """``n`` actors of ``actor_cls``; slot ``i`` is built by ``make_args(i)`` and can be
    replaced when its actor is lost.

    While a flow waits for results, it checks once per :data:`HEAD_CHECK_INTERVAL` that the
    head node still accepts connections, and raises :class:`~dataflow.errors.HeadNodeLostError`
    when it does not (the actors and Ray's own calls would otherwise wait for it, for about a
    minute)."""

    def __init__(
        self,
        ray: Any,
        actor_cls: type,
        n: int,
        options: dict[str, Any],
        stage: str,
    ) -> None:
        self.ray = ray
        self.actor_cls = ray.remote(actor_cls)
        self.remote_cls = self.actor_cls.options(max_restarts=0, max_task_retries=0, **options)
        self.n = n
        self.options = options
        self.stage = stage
        self.actors: list[Any] = []
        self.generation = [0] * n  # incremented by each replacement of the slot
        self.pids: list[int | None] = [None] * n
        self.nodes: list[str | None] = [None] * n
        self.starting: dict[int, tuple[Any, float]] = {}  # replacements: (ready ref, deadline)
        self.closed = False
        self.head_lost = False
        self.down_nodes: set[str] = set()  # nodes of lost actors whose raylet did not answer
        self.events: list[ActorEvent] = []
        self.gcs = _gcs_address(ray)
        self.next_head_check = time.monotonic() + HEAD_CHECK_INTERVAL

    def _event(self, kind: str, i: int) -> None:
        self.events.append(ActorEvent(time.monotonic(), kind, i, self.nodes[i]))

    def running(self, i: int) -> bool:
        """Whether slot ``i``'s actor was seen running (a replacement not yet: it may wait
        for a node with free resources)."""
        return i not in self.starting

    def start(self, make_args: Callable[[int], tuple]) -> None:
        """Create every actor and wait until they run (errors raised as ``WorkerError``)."""
        ray = self.ray
        self.actors = [self.remote_cls.remote(*make_args(i)) for i in range(self.n)]
        refs = [a.ready.remote() for a in self.actors]
        try:
            idents = ray.get(refs, timeout=START_TIMEOUT)
        except ray.exceptions.GetTimeoutError as e:
            raise self._timeout_error(self.n) from e
        except ray.exceptions.RayError as e:
            raise WorkerError(type(e).__name__, f"a Ray actor failed to start: {e}", str(e),
                              stage=self.stage) from e
        self.pids = [pid for pid, _ in idents]
        self.nodes = [node for _, node in idents]
        for i in range(self.n):
            self._event("started", i)

    def _timeout_error(self, n: int, worker_id: int | None = None) -> WorkerError:
        cpus = self.ray.cluster_resources().get("CPU", 0)
        return WorkerError(
            "GetTimeoutError",
            f"{n} Ray actor(s) with options {self.options} did not start within "
            f"{START_TIMEOUT:.0f} s: the cluster has {cpus:g} CPUs, and the actors of open "
            "flows hold theirs until close() (lower `num_workers`, close other flows, or ask "
            "for fewer resources per actor, e.g. actor_options={'num_cpus': 0.5}), or Ray "
            "could not create them (see its logs).",
            worker_id=worker_id, stage=self.stage,
        )

    def check_open(self) -> None:
        if self.closed:
            raise DataFlowTerminated(f"{self.stage} was closed while being iterated")

    def first_ready(self, refs: Any, timeout: float) -> Any:
        """The first of ``refs`` whose result is ready within ``timeout`` seconds (of several
        ready, the first in the given order), or None (raises if the flow was closed, or a
        replacement actor could not start)."""
        self.check_open()
        if not refs:
            return None
        refs = list(refs)
        ready, _ = self.ray.wait(refs, num_returns=1, timeout=timeout)
        ref = ready[0] if ready else None
        earlier = refs[:refs.index(ref)] if ref is not None else []
        if earlier:
            # Of several results ready at once, ray.wait(num_returns=1) returns any one (Ray
            # collects them in a hash set), so one actor's chunks, which it runs in turn, could
            # come back out of the order it finished them. Take the first ready in the order
            # the refs were given (the order they were sent): only those given before the one
            # returned need asking again.
            ready_now = set(self.ray.wait(earlier, num_returns=len(earlier), timeout=0)[0])
            ref = next((r for r in earlier if r in ready_now), ref)
        if self.starting:
            self.check_starting()
        if time.monotonic() >= self.next_head_check:
            self.check_head()
        return ref

    def check_head(self) -> None:
        """Raise :class:`~dataflow.errors.HeadNodeLostError` if the head node no longer accepts
        connections."""
        self.next_head_check = time.monotonic() + HEAD_CHECK_INTERVAL
        if self.gcs is None or _answers(self.gcs):
            return
        self.head_lost = True  # (Ray cannot kill the actors without the head: close() skips it)
        raise HeadNodeLostError(
            f"{self.stage}: the head node of the Ray cluster (its GCS at {self.gcs}) no longer "
            "answers: it died or was cut off, and with it the placement and the tracking of "
            "every actor. Restart the cluster (or reconnect to a new head) and start the "
            "pipeline again; its state_dict() from before the loss resumes it."
        )

    def fetch(self, refs: Any, timeout: float, worker: int | Callable[[Any], int],
              index: Callable[[Any], int | None] | None = None) -> tuple[Any, Any] | None:
        """``(ref, result)`` of the first of ``refs`` that finished within ``timeout`` seconds,
        or ``None``. A lost task gives ``(ref, exception)``, for the caller to send its work
        again; any other Ray error is raised as a ``WorkerError`` naming the worker
        (``worker(ref)``) and, with ``index``, the input (``index(ref)``)."""
        ref = self.first_ready(refs, timeout)
        if ref is None:
            return None
        ray = self.ray
        try:
            return ref, ray.get(ref)
        except ray.exceptions.RayError as e:
            self.check_open()  # (close() from another thread kills the actors)
            if is_lost(ray, e):
                self.check_head()  # (a node lost with the head: say that)
                return ref, e
            w = worker(ref) if callable(worker) else worker
            raise task_error(e, w, self.stage, None if index is None else index(ref)) from e

    def replace(self, i: int, args: tuple) -> None:
        """Kill slot ``i``'s actor (if it still runs) and start a new one in its place."""
        self.check_open()
        self._event("lost", i)
        node = self.nodes[i]
        if node is not None and not self._node_answers(node):
            self.down_nodes.add(node)
        with contextlib.suppress(Exception):
            self.ray.kill(self.actors[i], no_restart=True)
        self.actors[i] = actor = self._remote_cls().remote(*args)
        self.generation[i] += 1
        self.pids[i] = self.nodes[i] = None
        self.starting[i] = (actor.ready.remote(), time.monotonic() + START_TIMEOUT)
        self._event("replaced", i)
        logger.warning("%s: the Ray actor of worker %d was lost; started a new one",
                       self.stage, i)

    def _node_answers(self, node: str) -> bool:
        """Whether the raylet of ``node`` accepts connections (a node that died does not,
        some seconds before the cluster declares it dead)."""
        with contextlib.suppress(Exception):
            for info in self.ray.nodes():
                if info.get("NodeID") == node:
                    addr = f"{info['NodeManagerAddress']}:{info['NodeManagerPort']}"
                    return bool(info.get("Alive")) and _answers(addr)
        return True  # (not known: do not keep actors off it)

    def _remote_cls(self) -> Any:
        """The actor class for a replacement: kept off the nodes seen down (until the cluster
        declares them dead, Ray may place new actors there), unless the actor options select
        nodes themselves."""
        if not self.down_nodes or "label_selector" in self.options:
            return self.remote_cls
        nodes = ",".join(sorted(self.down_nodes))
        return self.actor_cls.options(max_restarts=0, max_task_retries=0, **self.options,
                                      label_selector={"ray.io/node-id": f"!in({nodes})"})

    def check_starting(self) -> None:
        """Note the replacements that started (their pids); raise for one that could not be
        placed within ``START_TIMEOUT`` (its tasks would wait forever)."""
        for i, (ref, deadline) in list(self.starting.items()):
            ready, _ = self.ray.wait([ref], timeout=0)
            if ready:
                del self.starting[i]
                with contextlib.suppress(self.ray.exceptions.RayError):
                    # (if it died: its tasks report that)
                    self.pids[i], self.nodes[i] = self.ray.get(ref)
                    self._event("ready", i)
            elif time.monotonic() > deadline:
                raise self._timeout_error(1, i)

    def kill_all(self) -> None:
        ray = self.ray
        self.closed = True
        self.starting.clear()
        actors, self.actors = self.actors, []
        if not ray.is_initialized() or self.head_lost:
            return
        for a in actors:
            with contextlib.suppress(Exception):
                ray.kill(a, no_restart=True)


class ActorPool:
    """What a Ray flow tells about its actors (a mixin of ``RayMapData`` and ``RayRunner``)."""

    _slots: ActorSlots | None = None

    def worker_pids(self) -> list[int | None]:
        """The process ids of the actors (``None`` for a replacement not started yet)."""
        return list(self._slots.pids) if self._slots is not None else []

    def worker_nodes(self) -> list[str | None]:
        """The Ray node id of each actor (``None`` for a replacement not started yet)."""
        return list(self._slots.nodes) if self._slots is not None else []

    def actor_events(self) -> list[ActorEvent]:
        """What happened to the actors since the flow started them: started, lost, replaced,
        ready (see :class:`ActorEvent`), in the consumer's ``time.monotonic()``; kept until
        the flow is closed or restarts its actors."""
        return list(self._slots.events) if self._slots is not None else []
