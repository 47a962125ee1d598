"""Ray plumbing shared by the Ray back end: the lazy import, the Ray session a pipeline starts
(or joins), worker set-up inside actors, and a pool of actor slots that can be replaced.

Ray is imported only here, inside functions: ``import dataflow.ray`` works without it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from dataflow._optional import import_optional
from dataflow.errors import DataFlowTerminated, HeadNodeLostError, WorkerError
from dataflow.parallel._processes import THREAD_ENV_VARS, seed_worker

__all__ = [
    "ActorEvent",
    "ActorPool",
    "ActorSlots",
    "RayHooks",
    "acquire_ray",
    "actor_identity",
    "actor_threads",
    "check_options",
    "cluster_address",
    "describe",
    "import_ray",
    "is_lost",
    "local_cpus",
    "loopback_node",
    "release_ray",
    "task_error",
    "worker_setup",
]

logger = logging.getLogger("dataflow.ray")

#: seconds to wait for the actors of a pool to start (placement, imports, unpickling)
START_TIMEOUT = 60.0

#: Ray's system settings for a Ray that dataflow starts itself. Ray runs its worker processes at
#: niceness 15, below everything else on the machine; the actors of a flow are an input
#: pipeline, which the trainer waits on, so they run at the priority of the process that started
#: them, as the process back ends' workers do (at 15, a trainer that keeps the cores busy
#: starves them: an actor's start-up took minutes behind two busy processes on two cores).
LOCAL_SYSTEM_CONFIG = {"worker_niceness": 0}


def import_ray() -> Any:
    """The ``ray`` package, or an ``ImportError`` naming the extra to install."""
    return import_optional("ray", "the Ray back end of dataflow")


# ---- the Ray session --------------------------------------------------------------------------


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class RayHooks:
    """The process-wide hooks that ``ray.init()`` installs for a driver and ``ray.shutdown()``
    leaves behind: a SIGTERM handler (inherited by forked processes), ``sys.excepthook`` and
    ``PYTHONBREAKPOINT`` (``breakpoint()`` would start Ray's remote debugger). (The ``RAY_*``
    environment variables it sets are kept: a later ``ray.init()`` in the process needs them.)

    Create it before ``ray.init()``, call :meth:`after_init` after it and :meth:`restore` after
    ``ray.shutdown()``: what Ray set and nobody changed since is put back as it was.
    """

    ENV = ("PYTHONBREAKPOINT",)

    def __init__(self) -> None:
        self.sigterm = signal.getsignal(signal.SIGTERM) if _main_thread() else None
        self.excepthook = sys.excepthook
        self.env = {k: os.environ.get(k) for k in self.ENV}
        self.ray_sigterm: Any = None
        self.ray_excepthook: Any = None
        self.ray_env: dict[str, str | None] = {}

    def after_init(self) -> None:
        if self.sigterm is not None:
            self.ray_sigterm = signal.getsignal(signal.SIGTERM)
        self.ray_excepthook = sys.excepthook
        self.ray_env = {k: os.environ.get(k) for k in self.ENV}

    def restore(self) -> None:
        if (self.sigterm is not None and _main_thread()
                and signal.getsignal(signal.SIGTERM) is self.ray_sigterm):
            signal.signal(signal.SIGTERM, self.sigterm)
        if sys.excepthook is self.ray_excepthook:
            sys.excepthook = self.excepthook
        for k, v in self.ray_env.items():
            before = self.env[k]
            if os.environ.get(k) != v or v == before:
                continue  # not set by Ray, or changed since: not ours to undo
            if before is None:
                del os.environ[k]
            else:
                os.environ[k] = before


class _Session:
    """The Ray this module started (or connected to) for the pipelines, and how many use it."""

    lock = threading.Lock()
    started = False
    users = 0
    hooks: RayHooks | None = None


def local_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, else the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def cluster_address(address: str | None) -> str | None:
    """The cluster a flow connects to: ``address``, else Ray's ``RAY_ADDRESS`` environment
    variable (set by ``ray job submit`` for the jobs it runs), else None (a local Ray)."""
    return address if address is not None else (os.environ.get("RAY_ADDRESS") or None)


#: the only address the services of a local Ray started by dataflow listen on
LOOPBACK = "127.0.0.1"


@contextlib.contextmanager
def loopback_node(ray: Any) -> Iterator[None]:
    """Make ``ray.init()`` start a local Ray whose services listen on :data:`LOOPBACK` only.

    On Linux Ray replaces a node address of 127.0.0.1 by the machine's network address (so
    that other nodes could join), and its servers listen on every interface. It keeps the
    loopback address when it runs as a single-machine Ray, as it does on macOS and Windows
    (``ray._private.ray_constants.ENABLE_RAY_CLUSTER`` false, which the processes it starts
    read from ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``): both are set for the start only.
    """
    constants: Any = getattr(getattr(ray, "_private", None), "ray_constants", None)
    var = getattr(constants, "ENABLE_RAY_CLUSTERS_ENV_VAR", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
    saved_env = os.environ.get(var)
    saved = getattr(constants, "ENABLE_RAY_CLUSTER", None)
    os.environ[var] = "0"
    if saved is not None:
        constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if saved is not None:
            constants.ENABLE_RAY_CLUSTER = saved
        if saved_env is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = saved_env


def _is_loopback(address: str) -> bool:
    """Whether ``address`` (``host:port``) names this machine's loopback interface."""
    host = address.rsplit(":", 1)[0].strip("[]") if ":" in address else address
    return host in ("localhost", "::1") or host.startswith("127.")


def acquire_ray(address: str | None, cpus_needed: float) -> bool:
    """Make sure Ray is initialized; return whether the caller must :func:`release_ray`.

    If Ray is already initialized (``ray.init()`` called by the user), it is used as is (and
    ``address`` ignored) and never shut down by dataflow. Otherwise dataflow calls
    ``ray.init()``: connecting to ``address`` (or ``RAY_ADDRESS``, see :func:`cluster_address`;
    a loopback address such as ``127.0.0.1:6379``, the address of a local Ray started by a flow
    in another process, is kept as is), or starting a new local Ray with one CPU per core (at
    least ``cpus_needed``), whose services listen on the loopback interface only, without a
    dashboard: whoever reaches the ports of a Ray that does not authenticate (older Rays, or
    ``RAY_AUTH_MODE=disabled``) can run code in it. A local Ray is always a new
    one: a cluster started with ``ray start`` on this machine (even one that crashed and left
    its address in Ray's temporary directory) is joined only when given as ``address``. It is
    shut down when the last flow that uses it is closed.
    """
    num_cpus = max(local_cpus(), math.ceil(cpus_needed))
    ray = import_ray()
    with _Session.lock:
        if ray.is_initialized():
            if not _Session.started:
                return False  # the user's Ray
            _Session.users += 1
            return True
        address = cluster_address(address)
        hooks = RayHooks()
        if address is None:
            with loopback_node(ray):
                ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
                         log_to_driver=False, _node_ip_address=LOOPBACK,
                         _system_config=LOCAL_SYSTEM_CONFIG)
            node = ray.util.get_node_ip_address()
            if node != LOOPBACK:  # (a Ray whose start-up changed: say so, it is reachable)
                logger.warning(
                    "the local Ray started by dataflow listens on %s, not only on %s: whoever "
                    "can reach that address can run code in it. Start Ray yourself, bound as "
                    "you need (ray start --head --node-ip-address=...), and pass its address.",
                    node, LOOPBACK,
                )
        elif _is_loopback(address):  # (Ray would replace 127.0.0.1 by the network address)
            with loopback_node(ray):
                ray.init(address=address, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
        hooks.after_init()
        _Session.started, _Session.users, _Session.hooks = True, 1, hooks
        return True


def release_ray(owned: bool) -> None:
    """Undo one :func:`acquire_ray` that returned True; the last one shuts Ray down."""
    if not owned:
        return
    ray = import_ray()
    with _Session.lock:
        _Session.users -= 1
        if _Session.users > 0 or not _Session.started:
            return
        _Session.started, _Session.users = False, 0
        with contextlib.suppress(Exception):
            ray.shutdown()
        if _Session.hooks is not None:
            _Session.hooks.restore()
            _Session.hooks = None


# ---- inside an actor --------------------------------------------------------------------------


def worker_setup(worker_id: int, global_seed: int | None,
                 globals_seed: tuple[int, tuple[int, ...]] | None, dispatch_globals: bool = False,
                 threads: int = 1) -> None:
    """First thing an actor runs: BLAS/OpenCV limited to ``threads`` (the actor's CPUs), the
    worker id and seeds of :mod:`dataflow.rng` (as the process back end's ``worker_bootstrap``
    does).

    Unpickling the actor's arguments may have imported OpenCV already (with a thread per core
    of the node, which the other actors compete with): it is limited here. (An actor's process
    is started fresh by Ray, not forked from a threaded parent: this is safe.)"""
    for k in THREAD_ENV_VARS:
        os.environ[k] = str(threads)
    cv2 = sys.modules.get("cv2")
    if cv2 is not None:
        with contextlib.suppress(Exception):
            cv2.setNumThreads(threads)
    seed_worker(worker_id, global_seed, globals_seed, dispatch_globals)


def actor_identity() -> tuple[int, str]:
    """What an actor's ``ready()`` answers: its process id and the id of its Ray node."""
    ray = import_ray()
    return os.getpid(), ray.get_runtime_context().get_node_id()


# ---- consumer side ----------------------------------------------------------------------------


def actor_threads(options: dict[str, Any]) -> int:
    """Threads for BLAS/OpenCV inside an actor: its whole CPUs, at least one."""
    return max(1, int(options.get("num_cpus", 1)))


#: the actor options a pool starts from: one CPU per actor, and actors spread over the nodes
#: (Ray's ``"SPREAD"`` strategy: each new actor goes to the node with the fewest of them, so
#: that losing a node loses as few as possible and the nodes' CPUs and links share the work;
#: Ray's default would pack them onto the driver's node while it has free CPUs)
DEFAULT_OPTIONS: dict[str, Any] = {"num_cpus": 1, "scheduling_strategy": "SPREAD"}


def check_options(actor_options: Any) -> dict[str, Any]:
    """``actor_options`` over :data:`DEFAULT_OPTIONS` (a given key replaces the default)."""
    if actor_options is None:
        return dict(DEFAULT_OPTIONS)
    if not isinstance(actor_options, dict):
        raise TypeError(
            f"`actor_options` must be a dict of Ray actor options or None, got "
            f"{actor_options!r} (type {type(actor_options).__name__}); pass e.g. "
            "actor_options={'num_cpus': 1}."
        )
    return {**DEFAULT_OPTIONS, **actor_options}


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
