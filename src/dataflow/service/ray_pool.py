"""``DataService(backend="ray")``: the pool of worker actors, in the dispatcher actor (the
actors themselves, and the driver's handle of the dispatcher actor, are in
:mod:`dataflow.service.ray_actors`).

**Nothing blocks the dispatcher.** The dispatcher calls :meth:`RayPool.check` every
``MONITOR_INTERVAL``; it never waits for an actor: one ``ray.wait(..., timeout=0)`` looks at
every pending call. Each actor's ``run()`` call stays pending while the actor lives; when it
resolves (always with an error: the actor was killed, or its process or node was lost), the
pool replaces the worker with a new generation of the same slot, away from the lost node if
that node's raylet does not answer any more (Ray declares a node dead only seconds later, and
would place actors there until then). Ray reports the lost actor of a killed process or node in
about a second (its pending calls fail when their connection closes), then consumers learn
from their next heartbeat that the worker is gone and ask the others. Figures are fetched in
the background, at most one call in flight per worker (``PoolWorker.figures()`` is the last
answer), and each answer is the worker's sign of life (and, for the workers of a loopback
service, all on this machine, CPU time that their process used: a map call computing with the
GIL held delays the answers): a worker without one for ``worker_timeout`` seconds (its process
frozen, or its machine gone without closing its connections, which Ray's own health checks
would notice only later) is killed and replaced in the same way.

**The input a lost worker was on.** Before each map call a worker notes the input in a small file of
``/dev/shm`` (:class:`~dataflow.service.ray_actors._Note`), so that a call that ends its process is
known and not asked a third time. For a loopback service (every actor on this machine) the pool
makes the note and maps it too, and reads it when the actor is lost. An actor on another machine
makes its note on its own node; when it is lost, the pool reads (and removes) it with a task pinned
to that node and replaces the worker only then, so that consumers learn of the loss and of the input
together. ``close()`` removes, on every node, the notes of workers killed before they said where
they run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from typing import Any

from dataflow import rng as _rng
from dataflow.service import protocol
from dataflow.service.pool import Pool, PoolWorker, Waiting, WorkerSpec
from dataflow.service.ray_actors import (
    CLOSE_TIMEOUT,
    NODE_NOTES_ENV,
    _Note,
    _note_name,
    _ray,
    _read_node_note,
    _sweep_node_notes,
    _WorkerActor,
)

__all__ = ["NODE_NOTES_ENV", "RayPool"]

logger = logging.getLogger("dataflow.service")

#: seconds between two reads of a worker's figures
FIGURES_INTERVAL = 0.25
#: seconds the pool waits for the raylet of a lost worker's node to accept a connection
NODE_PROBE_TIMEOUT = 0.5
#: seconds between two reads of the cluster's nodes for :meth:`RayPool.cpus`
CPUS_INTERVAL = 5.0
#: Ray's label of a node's id, for keeping new actors off (or on) some nodes
NODE_LABEL = "ray.io/node-id"
#: seconds the pool waits for the note of a lost worker on another machine (read by a task on
#: that worker's node) before it replaces the worker without knowing its last input
NOTE_READ_TIMEOUT = 10.0


class _ActorWorker(PoolWorker):
    """A worker actor as the dispatcher sees it, with the pool's pending calls to it."""

    def __init__(self, wid: int, generation: int, actor: Any) -> None:
        super().__init__(wid, generation)
        self.actor = actor
        self.run_ref = actor.run.remote()
        self.where_ref: Any = actor.where.remote()
        self.figures_ref: Any = None
        self.figures_at = 0.0
        self.last = (0.0, 0.0, 0.0, 0.0, 0.0)
        self.pid: int | None = None
        self.node: str | None = None
        self.error: str | None = None
        self.note: _Note | None = None
        #: the name of its note on its own node (a worker on another machine), until read
        self.node_note: str | None = None
        #: the task reading that note once the worker was lost, and until when it may take
        self.reading: tuple[Any, float] | None = None

    def figures(self) -> tuple[float, ...]:
        return self.last


class _ClusterShare:
    """The CPU budget of ``num_workers="auto"`` for a Ray pool: the cluster's CPUs (not this
    process's cores, which the process pool shares with the autotuned stages)."""

    def __init__(self, pool: RayPool) -> None:
        self.pool = pool

    def claim(self, owner: object, workers: int, per_worker: float) -> None:
        pass

    def release(self, owner: object) -> None:
        pass

    def maximum(self, owner: object, per_worker: float) -> int:
        return max(1, int(self.pool.cpus() / per_worker))


class RayPool(Pool):
    """The workers of a service as Ray actors; the view :class:`ProcessPool` gives the
    dispatcher (see the module's docstring). Made in the dispatcher actor; ``address``: the
    cluster to join when Ray is not initialized in this process yet."""

    #: the kind of pool, as ``stats()`` names it
    backend = "ray"

    def __init__(self, spec: WorkerSpec, address: str | None = None,
                 worker_timeout: float | None = None) -> None:
        from dataflow.parallel.shared_memory import new_prefix
        from dataflow.ray._session import acquire_ray

        ray = self._ray = _ray()
        self.spec = spec
        self.worker_timeout = worker_timeout
        self._owned = acquire_ray(address, 1)
        self._pipelines = ray.put(spec.pipelines)  # (once in the object store, for every actor)
        self._seed = _rng.get_seed()
        self._ip = ray.util.get_node_ip_address()
        self._local = protocol.is_loopback(spec.host)
        # a worker on another machine keeps its note there (see _read_on)
        self._node_notes = not self._local or os.environ.get(NODE_NOTES_ENV) == "1"
        self._cls = ray.remote(_WorkerActor)
        #: the names of the workers' notes on their nodes start with it
        self._note_prefix = new_prefix()
        self._cleaning: list[Any] = []  # (those tasks for the notes of stopped workers)
        self._tasks: dict[Any, Any] = {}  # (those functions as Ray's remote functions)
        self._down: set[str] = set()  # nodes of lost workers whose raylet did not answer
        self._workers: list[_ActorWorker] = []
        self._quick = {}
        self._cpus: tuple[float, int] = (-CPUS_INTERVAL, 1)  # (read at, CPUs)
        self.restarts = 0
        self.share = _ClusterShare(self)

    # ---- placement ---------------------------------------------------------------------------

    def _nodes(self) -> list[dict[str, Any]]:
        """The living nodes with CPUs where this pool's workers may go."""
        nodes = [n for n in self._ray.nodes()
                 if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
        if self._local:  # (this machine's nodes: where a loopback address is reachable)
            nodes = [n for n in nodes if n.get("NodeManagerAddress") == self._ip]
        return nodes

    def _options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"num_cpus": 1, "max_concurrency": 4, "max_restarts": 0,
                                   "max_task_retries": 0, "scheduling_strategy": "SPREAD"}
        if not self._local and not self._down:
            return options  # (any node)
        alive = [n for n in self._ray.nodes() if n.get("Alive")]
        keep = [n["NodeID"] for n in self._nodes() if n["NodeID"] not in self._down]
        if len(keep) < len(alive):
            if not keep:  # (none left: wait for this node's CPUs rather than go elsewhere)
                keep = [self._ray.get_runtime_context().get_node_id()]
            options["label_selector"] = {NODE_LABEL: f"in({','.join(sorted(keep))})"}
        return options

    def cpus(self) -> int:
        """The CPUs of the nodes this pool may use (for ``num_workers="auto"``), read at most
        every :data:`CPUS_INTERVAL` seconds."""
        now = time.monotonic()
        if now - self._cpus[0] >= CPUS_INTERVAL:
            with contextlib.suppress(Exception):
                total = sum(n["Resources"]["CPU"] for n in self._nodes())
                self._cpus = (now, max(1, int(total)))
        return self._cpus[1]

    def _spawn(self, wid: int, generation: int) -> _ActorWorker:
        note = _Note() if not self._node_notes else None
        node_note = (_note_name(f"{self._note_prefix}-{wid}-{generation}")
                     if self._node_notes else None)
        actor = self._cls.options(**self._options()).remote(
            wid, self._pipelines, self.spec.host, self.spec.token, self._seed, self.spec.curve,
            note.path if note is not None else None, node_note)
        w = _ActorWorker(wid, generation, actor)
        w.note, w.node_note = note, node_note
        return w

    def _read_on(self, node: str, name: str, func: Any = _read_node_note) -> Any:
        """A task that runs ``func(name)`` on node ``node``: reads the note ``name`` there and
        removes it (or removes every note of a prefix). No CPU of the cluster: the workers hold
        them."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        task = self._tasks.get(func)
        if task is None:
            task = self._tasks[func] = self._ray.remote(func)
        return task.options(
            num_cpus=0, max_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(name)

    def _read_note(self, w: _ActorWorker, now: float) -> bool:
        """For a lost worker whose note is on its node (another machine): start the task that
        reads it, unless that node is lost too (its notes with it). Whether it started; the
        worker is then replaced once the note is read, so that its consumers learn of the loss
        and of the input it was on together."""
        name, node = w.node_note, w.node
        if name is None or node is None:
            return False
        if self._node_lost(node):
            w.node_note = None  # (gone with its node)
            return False
        w.node_note = None  # (the task removes it)
        w.reading = (self._read_on(node, name), now + NOTE_READ_TIMEOUT)
        w.alive_at = now + NOTE_READ_TIMEOUT  # (not taken for a frozen worker meanwhile)
        return True

    def _note_read(self, w: _ActorWorker) -> tuple[int, int, int, int] | None:
        """What the task reading ``w``'s note found (``None``: nothing, or no answer yet)."""
        assert w.reading is not None
        ref, w.reading = w.reading[0], None
        try:
            got = self._ray.get(ref, timeout=0)
        except Exception:
            return None
        return None if got is None else tuple(int(x) for x in got)  # type: ignore[return-value]

    def _node_lost(self, node: str | None) -> bool:
        """Whether the raylet of ``node`` no longer accepts connections (a node that died
        does not, seconds before the cluster declares it dead)."""
        from dataflow.ray._actors import _answers

        if node is None:
            return False
        with contextlib.suppress(Exception):
            for info in self._ray.nodes():
                if info.get("NodeID") == node:
                    if not info.get("Alive"):
                        return True
                    addr = f"{info['NodeManagerAddress']}:{info['NodeManagerPort']}"
                    return not _answers(addr, NODE_PROBE_TIMEOUT)
        return False

    # ---- the dispatcher's view ---------------------------------------------------------------

    def check(self) -> list[PoolWorker]:
        """Read what the workers answered (addresses, figures) without waiting; replace each
        worker whose actor is gone. Returns the workers that were lost."""
        ray = self._ray
        self._start_due(time.monotonic())
        refs = []
        for w in self._workers:
            if isinstance(w, Waiting):
                continue
            refs.append(w.run_ref)
            if w.reading is not None:
                refs.append(w.reading[0])
            if w.address is None and w.where_ref is not None:
                refs.append(w.where_ref)
            if w.figures_ref is not None:
                refs.append(w.figures_ref)
        ready = set(ray.wait(refs, num_returns=len(refs), timeout=0)[0]) if refs else set()
        lost: list[PoolWorker] = []
        now = time.monotonic()
        for k, w in enumerate(list(self._workers)):
            if isinstance(w, Waiting):
                continue
            if w.reading is not None:  # (lost; its note on its node being read)
                if w.reading[0] in ready or now >= w.reading[1]:
                    w.crashed_on = self._note_read(w)
                    self._replace(k, w, lost)
                continue
            if w.run_ref in ready:  # (run() ends only with its actor)
                w.error = self._outcome(w.run_ref)
                if w.note is not None:  # (the input its map call was on, if any)
                    w.crashed_on = w.note.read()
                elif self._read_note(w, now):
                    continue
                self._replace(k, w, lost)
                continue
            if w.where_ref is not None and w.where_ref in ready:
                with contextlib.suppress(ray.exceptions.RayError):  # (run() tells it too)
                    w.address, w.pid, w.node = ray.get(w.where_ref)
                    w.alive_at = now
                w.where_ref = None
                if w.note is not None:  # (mapped by the actor: the name can go)
                    w.note.unlink()
            if w.figures_ref is not None and w.figures_ref in ready:
                with contextlib.suppress(ray.exceptions.RayError):
                    w.last = tuple(ray.get(w.figures_ref))
                    w.alive_at = now  # (an answer: the actor's process runs and is reachable)
                w.figures_ref = None
            if w.figures_ref is None and w.address is not None \
                    and now - w.figures_at >= FIGURES_INTERVAL:
                w.figures_ref, w.figures_at = w.actor.figures.remote(), now
            elif self._local and w.pid is not None and now - w.alive_at > 4 * FIGURES_INTERVAL:
                w.look_at_cpu(w.pid, now)  # (no answer: on this machine, is it computing?)
        self._replace_silent(now, lost)
        return lost

    def _lost(self, w: _ActorWorker) -> None:
        """Place no worker on the node of a lost one whose raylet does not answer."""
        if self._node_lost(w.node):
            self._down.add(str(w.node))

    def _outcome(self, ref: Any) -> str:
        """How a worker's ``run()`` ended (a ready ref: no wait), in a few words."""
        from dataflow.ray._actors import describe

        try:
            self._ray.get(ref, timeout=0)
        except Exception as e:
            return describe(e, 200)
        return "stopped"

    def exit_code(self, w: PoolWorker) -> Any:
        """Why a lost worker ended (Ray's error, in short)."""
        return w.why or getattr(w, "error", None)

    def pids(self) -> list[int]:
        """The process ids of the workers that listen (on their nodes)."""
        return [w.pid for w in self._workers
                if not isinstance(w, Waiting) and w.pid is not None]

    def _stop(self, w: _ActorWorker) -> None:
        with contextlib.suppress(Exception):
            self._ray.kill(w.actor, no_restart=True)
        if w.note is not None:
            w.note.close()
        if w.node_note is not None and w.node is not None:  # (its note on its node goes too)
            with contextlib.suppress(Exception):
                self._cleaning.append(self._read_on(w.node, w.node_note))
            w.node_note = None
        if self._cleaning:  # (forget those done)
            done = set(self._ray.wait(self._cleaning, num_returns=len(self._cleaning),
                                      timeout=0)[0])
            self._cleaning = [r for r in self._cleaning if r not in done]

    def close(self) -> None:
        """Kill every worker actor and wait (a bounded time) until they are gone."""
        from dataflow.ray._session import release_ray

        workers = [w for w in self._workers if not isinstance(w, Waiting)]
        self._workers = []
        if workers and self._ray.is_initialized():
            for w in workers:
                if self._node_notes:  # (removed below, with the others of their nodes)
                    w.node_note = None
                self._stop(w)
                if w.reading is not None:  # (a lost worker's note being read and removed)
                    self._cleaning.append(w.reading[0])
            with contextlib.suppress(Exception):
                self._ray.wait([w.run_ref for w in workers], num_returns=len(workers),
                               timeout=CLOSE_TIMEOUT)
            cleaning, self._cleaning = self._cleaning, []
            if self._node_notes:  # (the notes of workers killed before they said where)
                with contextlib.suppress(Exception):
                    cleaning += [self._read_on(n["NodeID"], self._note_prefix, _sweep_node_notes)
                                 for n in self._nodes() if n["NodeID"] not in self._down]
            if cleaning:  # (the notes of workers on other machines, removed there)
                with contextlib.suppress(Exception):
                    self._ray.wait(cleaning, num_returns=len(cleaning), timeout=CLOSE_TIMEOUT)
        owned, self._owned = self._owned, False
        release_ray(owned)
