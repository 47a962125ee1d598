"""``DataService(backend="ray")``: the Ray actors (the dispatcher and the workers), and
the driver's handle of the dispatcher actor; the pool of workers is
:mod:`dataflow.service.ray_pool`.

**The dispatcher actor.** ``DataService(..., backend="ray").start()`` in the driver connects to
Ray (``ray_address``, see :func:`dataflow.ray._session.acquire_ray`) and starts one actor,
:class:`_ServiceHost`, that holds an ordinary :class:`~dataflow.service.DataService` built from
the same arguments (marked as *hosted*) and starts it there: its dispatcher thread, its ROUTER
at ``address`` and its pool, a :class:`~dataflow.service.ray_pool.RayPool`, all live in that
actor's process. The driver's
object keeps only a :class:`RemoteService`, which forwards ``address``, ``stats()``,
``worker_pids()`` and ``close()`` to the actor. So the dispatcher is the same code for both
back ends (one dispatcher, two pools), and the driver (a trainer) spends no CPU on it.

The dispatcher actor takes no CPU of the cluster (``num_cpus=0``) and runs on the driver's own
node: ``address`` then means what it means for ``backend="process"`` (a loopback address is
this machine's loopback interface, where this machine's consumers connect). The worker actors
are its children in Ray's terms (it created them): if it dies, Ray ends them too, and if the
driver dies, Ray ends the dispatcher actor. The driver takes no part in serving: consumers talk
to the dispatcher and the workers directly, as for local processes (a dispatcher actor that
was lost shows in the driver's next ``stats()``, a ``RuntimeError``, and in the consumers,
which time out).

**The workers.** Each worker is a :class:`_WorkerActor` (one CPU; threaded, so that a method
answers while another runs), placed by Ray's ``"SPREAD"`` strategy (each new actor on the node
with the fewest). Its ``run()`` is the worker: it binds a ROUTER with
:func:`dataflow.service.worker.bind` and serves with :func:`dataflow.service.worker.serve` until
it is stopped; ``where()`` answers the address it listens at (with its process id and node),
``figures()`` its counters (busy seconds, items, bytes out, dropped messages, inputs
queued). A worker of a loopback service listens on that loopback address, so its actors go
only to the nodes of the dispatcher's machine (all the nodes of a one-machine cluster); a
worker of a service on any other address listens on its node's IP address.

**Notes.** Before each map call a worker writes the input it is on into a small file of
``/dev/shm`` (:class:`_Note`), read by the pool once the worker is lost (see
:mod:`dataflow.service.ray_pool`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

from dataflow import rng as _rng
from dataflow.service import protocol

__all__ = ["NODE_NOTES_ENV", "RemoteService"]

#: seconds an actor's ``where()`` waits for its socket (its ``run()`` binds it)
BIND_TIMEOUT = 60.0
#: seconds the driver waits for the dispatcher actor to start serving (it waits up to
#: ``WORKER_START_TIMEOUT``, 60 s, for its workers)
START_TIMEOUT = 120.0
#: seconds the driver waits for an answer of the dispatcher actor (``stats()``, ``close()``)
CALL_TIMEOUT = 30.0
#: seconds ``close()`` waits for killed actors to be gone
CLOSE_TIMEOUT = 10.0
#: set to "1" in the driver's environment, a service's workers keep their notes on their own
#: nodes, read by tasks pinned there, even on loopback: the path of a cluster of several
#: machines, on one machine (for tests)
NODE_NOTES_ENV = "DATAFLOW_SERVICE_NODE_NOTES"


def _ray() -> Any:
    from dataflow.ray._session import import_ray

    return import_ray()


# ---- the actors ---------------------------------------------------------------------------------


class _WorkerActor:
    """One worker of a service (see the module's docstring): ``run()`` serves until
    ``stop()``; ``where()`` and ``figures()`` answer from other threads meanwhile."""

    def __init__(self, worker_id: int, pipelines: dict[str, tuple], host: str, token: str,
                 global_seed: int | None, curve: tuple[bytes, bytes] | None = None,
                 note: str | None = None, node_note: str | None = None) -> None:
        self.worker_id, self.pipelines, self.host, self.token = worker_id, pipelines, host, token
        self.curve, self.note, self.node_note = curve, note, node_note
        self.global_seed = global_seed
        # busy seconds, items, bytes out, dropped messages, inputs waiting in its queues
        # (then the input being mapped: job number, or -1 for none; epoch, position, index)
        self.counters: Any = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0]
        self.stopping = threading.Event()
        self.bound = threading.Event()
        self.address: str | None = None
        self.error: str | None = None

    def run(self) -> None:
        from dataflow.service.worker import serve

        try:
            sock = self._listen()
            try:
                serve(sock, self.worker_id, self.pipelines, self.token, self.counters,
                      self.stopping)
            finally:
                sock.close(linger=0)
        finally:
            # stopped, or failed before it served: not lost, so there is no input to read, and
            # the pool may not know this node yet to remove the note there itself
            if self.node_note is not None:
                _read_node_note(self.node_note)

    def _listen(self) -> Any:
        """Set up this process as a worker, make its note, and bind its socket (``where()``
        answers from then on, or says why it failed)."""
        from dataflow.ray._session import worker_setup
        from dataflow.service.worker import bind

        try:
            # (the worker id and the input scopes live in the thread that maps: this one)
            worker_setup(self.worker_id, self.global_seed, None, dispatch_globals=True)
            if self.note is not None:  # (the counters in the pool's note: it outlives us)
                self.counters = _Note.attach(self.note)
            elif self.node_note is not None:  # (on this node: read by a task pinned here)
                try:
                    self._own_note = _Note(self.node_note)
                    self.counters = self._own_note.view
                except OSError:  # (no /dev/shm: the worker serves, its crashes unnamed)
                    self.node_note = None
            host = self.host
            if not protocol.is_loopback(host):
                host = _ray().util.get_node_ip_address()
            sock, self.address = bind(host, self.curve)
            return sock
        except BaseException as e:
            self.error = f"{type(e).__name__}: {e}"
            raise
        finally:
            self.bound.set()

    def where(self) -> tuple[str, int, str]:
        """``(address, process id, node id)`` once ``run()`` listens."""
        if not self.bound.wait(BIND_TIMEOUT) or self.address is None:
            raise RuntimeError(f"service worker {self.worker_id} could not listen on "
                               f"{self.host}: {self.error or 'it did not start'}")
        return self.address, os.getpid(), _ray().get_runtime_context().get_node_id()

    def figures(self) -> list[float]:
        return list(self.counters[:5])

    def stop(self) -> None:
        self.stopping.set()


class _ServiceHost:
    """The dispatcher actor: a :class:`~dataflow.service.DataService` started in this actor
    (with a :class:`~dataflow.service.ray_pool.RayPool`), and what the driver's object
    forwards to it. ``lifetime()`` returns never: the driver waits on it to know that the
    actor is gone."""

    def __init__(self, service_class: Any, arguments: dict[str, Any],
                 global_seed: int | None) -> None:
        # (the class comes from the driver: the dispatcher's module imports this one)
        if _rng.get_seed() != global_seed:  # (the driver's, as a process worker inherits it)
            _rng.set_seed(global_seed)
        self.service = service_class(**arguments)
        self.service._hosted = True  # (its dispatcher runs here, not in another actor)

    def start(self) -> str:
        self.service.start()
        assert self.service.address is not None
        return self.service.address

    def stats(self) -> dict[str, Any]:
        return self.service.stats()

    def pids(self) -> list[int]:
        return self.service.worker_pids()

    def close(self, tell_consumers: bool = True) -> None:
        self.service.close(tell_consumers=tell_consumers)

    def lifetime(self) -> None:
        threading.Event().wait()


# ---- the driver's side --------------------------------------------------------------------------


def _arguments(service: Any) -> dict[str, Any]:
    """The arguments of a :class:`~dataflow.service.DataService` that make the same service
    (its resolved token: the actor's environment may not hold the variable)."""
    jobs = {name: {"ds": p.ds, "map_func": p.map_func, "seed": p.seed, "shuffle": p.shuffle}
            for name, p in service._pipelines.items() if name}
    return {"ds": service.ds, "map_func": service.map_func,
            "num_workers": "auto" if service.auto else service.num_workers,
            "backend": "ray", "address": service._requested, "seed": service.seed,
            "shuffle": service.shuffle, "token": service.token, "jobs": jobs or None,
            "worker_timeout": service.worker_timeout, "curve": service._curve_arg}


class RemoteService:
    """The driver's handle of a service whose dispatcher is a :class:`_ServiceHost` actor on
    the driver's node: starts it (connecting to Ray first), forwards calls, closes it."""

    def __init__(self, service: Any) -> None:
        from dataflow.ray._session import acquire_ray

        ray = self._ray = _ray()
        cpus = 1 if service.auto else service.num_workers
        self._owned = acquire_ray(service.ray_address, cpus)
        self.actor: Any = None
        self._life: Any = None
        self.address: str | None = None
        try:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(),
                                                  soft=False)
            options: dict[str, Any] = {}
            if os.environ.get(NODE_NOTES_ENV):  # (the dispatcher's pool reads it)
                options["runtime_env"] = {"env_vars": {NODE_NOTES_ENV: os.environ[
                    NODE_NOTES_ENV]}}
            cls = ray.remote(_ServiceHost).options(
                num_cpus=0, max_concurrency=4, max_restarts=0, max_task_retries=0,
                scheduling_strategy=here, **options)
            self.actor = cls.remote(type(service), _arguments(service), _rng.get_seed())
            self._life = self.actor.lifetime.remote()
            self.address = self._call("start", START_TIMEOUT)
        except BaseException:
            self.close()
            raise

    def _call(self, method: str, timeout: float) -> Any:
        """The answer of the dispatcher actor's ``method``; its own error raised as is."""
        ray = self._ray
        ref = getattr(self.actor, method).remote()
        try:
            return ray.get(ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise RuntimeError(f"DataService: its dispatcher actor did not answer {method}() "
                               f"within {timeout:g} s") from None
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, Exception):
                raise cause from None
            raise
        except ray.exceptions.RayActorError as e:
            raise RuntimeError(f"DataService: its dispatcher actor is gone (its node or "
                               f"process was lost): {e}") from None

    def stats(self) -> dict[str, Any]:
        return dict(self._call("stats", CALL_TIMEOUT))

    def pids(self) -> list[int]:
        return list(self._call("pids", CALL_TIMEOUT))

    def close(self, tell_consumers: bool = True) -> None:
        """Close the hosted service (it tells its consumers, unless ``tell_consumers`` is
        False for a redeploy, and stops its workers), then end the actor and wait until it is
        gone; leave Ray if this service joined it."""
        from dataflow.ray._session import release_ray

        ray, actor, self.actor = self._ray, self.actor, None
        if actor is not None and ray.is_initialized():
            with contextlib.suppress(Exception):
                ray.get(actor.close.remote(tell_consumers), timeout=CALL_TIMEOUT)
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
            with contextlib.suppress(Exception):
                ray.wait([self._life], timeout=CLOSE_TIMEOUT)
        owned, self._owned = self._owned, False
        release_ray(owned)


# ---- a worker's note of its input -------------------------------------------------------------


class _Note:
    """The counters of a worker actor on this machine, in a small file of ``/dev/shm`` that
    the pool makes and both map (the pool unlinks the name once the actor mapped it): among
    them the input its map call is on, which the pool reads when the actor's process ended
    (a map call that ends its process is then known, as for a worker process)."""

    SIZE = 10 * 8  # (ten doubles: the worker's counters)

    def __init__(self, name: str | None = None) -> None:
        import mmap

        from dataflow.parallel.shared_memory import SHM_DIR

        self.path = os.path.join(SHM_DIR, name or _note_name())
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, self.SIZE)
            self.map = mmap.mmap(fd, self.SIZE)
        finally:
            os.close(fd)
        self.view: Any = memoryview(self.map).cast("d")
        self.view[6] = -1.0

    @classmethod
    def attach(cls, path: str) -> Any:
        """The counters of the note at ``path`` (in the actor), as a sequence of floats."""
        import mmap

        fd = os.open(path, os.O_RDWR)
        try:
            return memoryview(mmap.mmap(fd, cls.SIZE)).cast("d")
        finally:
            os.close(fd)

    def read(self) -> tuple[int, int, int, int] | None:
        return self.input_of(self.view)

    @staticmethod
    def input_of(v: Any) -> tuple[int, int, int, int] | None:
        """The input a worker's counters ``v`` say its map call is on (job number, epoch,
        position, index), or ``None`` between calls."""
        return (int(v[6]), int(v[7]), int(v[8]), int(v[9])) if v[6] >= 0 else None

    def unlink(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    def close(self) -> None:
        self.unlink()
        with contextlib.suppress(Exception):
            self.view.release()
            self.map.close()


def _note_name(prefix: str | None = None) -> str:
    """A note's file name in ``/dev/shm``: ``prefix`` (a new one of this process's segments
    when ``None``) and ``-note``."""
    from dataflow.parallel.shared_memory import new_prefix

    return f"{prefix or new_prefix()}-note"


def _read_node_note(name: str) -> tuple[int, int, int, int] | None:
    """The input recorded in the note ``name`` of this node's ``/dev/shm`` (as
    :meth:`_Note.read`), which is removed; ``None`` without one. Run by a task pinned to the
    node of a lost worker on another machine, where the note is."""
    from dataflow.parallel.shared_memory import SHM_DIR

    path = os.path.join(SHM_DIR, name)
    try:
        view = _Note.attach(path)
    except (OSError, ValueError):  # (none, or not sized yet by its actor)
        with contextlib.suppress(OSError):
            os.unlink(path)
        return None
    with contextlib.suppress(OSError):
        os.unlink(path)
    try:
        return _Note.input_of(view)
    finally:
        view.release()


def _sweep_node_notes(prefix: str) -> int:
    """Remove the notes of this node's ``/dev/shm`` whose names start with ``prefix`` (a pool's:
    those of its workers killed before the pool knew their node); how many."""
    from dataflow.parallel.shared_memory import SHM_DIR

    removed = 0
    with contextlib.suppress(OSError):
        for name in os.listdir(SHM_DIR):
            if name.startswith(f"{prefix}-") and name.endswith("-note"):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(SHM_DIR, name))
                    removed += 1
    return removed
