"""The Ray session of a pipeline: the lazy import (Ray is imported only inside functions, so
``import dataflow.ray`` works without it), the session a pipeline starts or joins and leaves,
and the set-up of a worker inside an actor.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from dataflow._optional import import_optional
from dataflow.parallel._bootstrap import THREAD_ENV_VARS, seed_worker

__all__ = [
    "RayHooks",
    "acquire_ray",
    "actor_identity",
    "actor_threads",
    "check_options",
    "cluster_address",
    "import_ray",
    "local_cpus",
    "loopback_node",
    "release_ray",
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
