"""``RayMapData``: a parallel map whose workers are Ray actors (the mapper's Ray transport)."""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Callable
from typing import Any

from dataflow import rng as _rng
from dataflow.base import DataFlow
from dataflow.errors import WorkerError
from dataflow.parallel._mapper import MapperBase
from dataflow.parallel._worker import map_loop
from dataflow.ray import _actors as actors
from dataflow.ray import _session as session
from dataflow.validation import check_positive_int

__all__ = ["RayMapData"]


class _MapActor:
    """A Ray actor that maps chunks of ``(index, datapoint)`` with the engine's ``map_loop``."""

    def __init__(self, map_func: Callable[[Any], Any], worker_id: int, global_seed: int | None,
                 stage: str, threads: int, inputs: tuple[int, tuple[int, ...]]) -> None:
        session.worker_setup(worker_id, global_seed, None, dispatch_globals=True, threads=threads)
        self.map_func, self.worker_id, self.stage = map_func, worker_id, stage
        self.inputs = inputs

    def ready(self) -> tuple[int, str]:
        return session.actor_identity()

    def map_chunk(self, chunk: list[tuple[int, Any]]) -> list[tuple]:
        """The messages ``map_loop`` emits for ``chunk``: an ``ERROR`` per failed input, then
        one ``DATA`` with every ``(index, result)``."""
        out: list[tuple] = []
        todo = [chunk]
        map_loop(lambda: todo.pop() if todo else None, out.append, self.map_func,
                 self.worker_id, self.stage, self.inputs)
        return out


class _RayMapTransport:
    """Consumer side: least-loaded dispatch of chunks to the running actors.

    When an actor is lost, the slot gets a new actor and the chunks it held go out again, to
    the actors that run (the new one joins them once it has started: it may have to wait for a
    node, and its start costs a second or more); chunks it finished before it was lost are
    delivered. Which of the unfinished chunks it was running is not certain: an actor runs its
    tasks in order, but it may die before the reply of a finished task has left it. So the
    oldest unfinished chunk is only a suspect: it counts a retry and goes out again *alone*, to
    an actor that has nothing else to do and gets nothing else until that chunk is done (the
    least loaded running actor takes no new work until it is idle). A suspect lost while alone
    is what killed its actor: past ``max_retries`` retries it raises (a poison input, not a
    lost node). With ``max_retries=0`` the first loss raises, naming the oldest unfinished
    chunk."""

    def __init__(self, slots: actors.ActorSlots, make_args: Callable[[int], tuple],
                 max_retries: int) -> None:
        self.ray = slots.ray
        self.slots = slots
        self.make_args = make_args
        self.max_retries = max_retries
        # ref -> (slot, generation of the slot's actor, submission number, chunk, retries)
        self.inflight: dict[Any, tuple[int, int, int, list, int]] = {}
        self.load = [0] * slots.n
        self.pending: deque[tuple] = deque()
        self.held: deque[tuple[list, int, bool]] = deque()  # (chunk, retries, alone) to send
        self.alone: dict[int, Any] = {}  # slot -> the ref of the suspect it runs alone
        self._seq = 0

    def submit(self, chunk: list, retries: int = 0, alone: bool = False) -> None:
        """Send ``chunk`` to the least loaded running actor (to a replacement that has not
        started yet only when no actor runs: it may wait for a node); ``alone``: to an idle
        actor, which takes nothing else until it is done (held until one is idle)."""
        self.slots.check_open()
        self.held.append((chunk, retries, alone))
        self._dispatch()

    def _dispatch(self) -> None:
        """Send the held chunks that have an actor to go to, in order."""
        slots = self.slots
        free = [w for w in range(slots.n) if w not in self.alone]
        running = [w for w in free if slots.running(w)] or free
        # an actor set aside for a waiting suspect takes no new work until it is idle
        waiting = any(alone for _, _, alone in self.held)
        reserved = min(running, key=self.load.__getitem__) if waiting and running else None
        keep: deque[tuple[list, int, bool]] = deque()
        for chunk, retries, alone in self.held:
            if alone:
                idle = [w for w in running if self.load[w] == 0]
                w = idle[0] if idle else None
            else:
                usable = [w for w in running if w != reserved]  # (no suspect's actor)
                w = min(usable, key=self.load.__getitem__) if usable else None
            if w is None:
                keep.append((chunk, retries, alone))
                continue
            ref = slots.actors[w].map_chunk.remote(chunk)
            self._seq += 1
            self.inflight[ref] = (w, slots.generation[w], self._seq, chunk, retries)
            self.load[w] += len(chunk)
            if alone:
                self.alone[w] = ref
                running.remove(w)
        self.held = keep

    def receive(self, timeout: float) -> tuple | None:
        if self.pending:
            return self.pending.popleft()
        if self.held:
            self._dispatch()
        inflight = self.inflight
        got = self.slots.fetch(inflight, timeout, lambda r: inflight[r][0],
                               lambda r: inflight[r][3][0][0])
        if got is None:
            return None
        ref, msgs = got
        if isinstance(msgs, BaseException):  # the actor was lost
            w, gen = inflight[ref][:2]
            self._lost(w, gen, msgs)
            return None
        self._pop(ref)
        self.pending.extend(msgs)
        return self.pending.popleft() if self.pending else None

    def _pop(self, ref: Any) -> tuple[int, int, int, list, int]:
        entry = self.inflight.pop(ref)
        self.load[entry[0]] -= len(entry[3])
        if self.alone.get(entry[0]) is ref:
            del self.alone[entry[0]]
        return entry

    def _lost(self, w: int, gen: int, exc: BaseException) -> None:
        isolated = w in self.alone  # it ran a suspect alone: that chunk killed it
        held = sorted((ref for ref, e in self.inflight.items() if e[0] == w and e[1] == gen),
                      key=lambda ref: self.inflight[ref][2])
        lost = []
        for ref in held:
            # a chunk the actor finished before it was lost (its result received) is
            # delivered, not sent again
            got = self.slots.fetch([ref], 0, w, lambda r: self.inflight[r][3][0][0])
            entry = self._pop(ref)
            if got is None or isinstance(got[1], BaseException):
                lost.append(entry)
            else:
                self.pending.extend(got[1])
        self.alone.pop(w, None)
        self.slots.replace(w, self.make_args(w))
        if not lost:
            return
        _, _, _, chunk, retries = lost[0]
        if retries >= self.max_retries and (isolated or self.max_retries == 0):
            raise WorkerError(
                "WorkerDied",
                f"the Ray actor of worker {w} was lost while mapping {len(chunk)} input(s), "
                f"after {retries} retries of them ({actors.describe(exc)}). A node or "
                "process died; if map_func itself crashes the process on these inputs, fix it, "
                "else raise `max_retries`.",
                worker_id=w, index=chunk[0][0], stage=self.slots.stage,
            ) from exc
        self.submit(chunk, retries + 1, alone=True)
        for _, _, _, other, retries in lost[1:]:  # queued behind it: not their fault
            self.submit(other, retries)


class RayMapData(actors.ActorPool, MapperBase):
    """Map ``map_func`` over ``ds`` with ``num_workers`` Ray actors (on a cluster, or a local
    Ray started for the pipeline).

    The same contract as :class:`~dataflow.parallel.MultiProcessMapDataZMQ`: ``ds`` is iterated
    in the consumer, at most ``buffer_size`` inputs are in flight, and

    * ``strict=False`` (tensorpack's default): an endless stream over repeated passes of ``ds``;
      each ``__iter__`` continues it. ``strict=True``: each ``__iter__`` yields exactly the
      results of one pass of ``ds``.
    * ``ordered=False``: results in completion order; ``ordered=True``: in input order.
    * ``None`` results are dropped; an exception in ``map_func`` is raised in the consumer as a
      :class:`~dataflow.errors.WorkerError` with the remote traceback and the input's index.
    * Random draws made while mapping an input (augmentors, ``np.random.*``, ``random.*``)
      are keyed by the input's place in the epoch (see :mod:`dataflow.rng`): with a seed, a
      strict, ordered mapper gives the same results as the local back ends.

    Inputs travel in chunks of ``chunk_size`` (one Ray task each; by default
    ``buffer_size // (2 * num_workers)``, at most 64, fewer for tiny strict epochs), so the
    per-task cost of Ray does not dominate small items: on a cluster with many workers, raise
    ``buffer_size`` with them. NumPy arrays in results come through Ray's object store
    without copies: they are **read-only** views (``BatchData`` copies them anyway; copy one
    before writing into it).

    Fault tolerance: when an actor is lost (its process or node died, or it ran out of memory),
    its chunks in flight are sent again (mapped anew) and the slot gets a new actor; the chunk
    it was running counts a retry, and one lost more than ``max_retries`` times raises
    ``WorkerError("WorkerDied", ...)``. No result is lost or delivered twice: strict epochs
    still yield every result exactly once. Other Ray errors (a result that cannot be serialized
    or deserialized) are raised at once as ``WorkerError``.

    Ray: if ``ray.is_initialized()``, that Ray is used (and never shut down here). Otherwise
    ``reset_state()`` calls ``ray.init(address=address)`` (``None``: ``RAY_ADDRESS`` if set,
    else a new local Ray with one CPU per core, at least ``num_workers``, whose services listen
    on 127.0.0.1 only) and ``close()`` shuts it down once no flow uses it. ``close()`` kills
    every actor.

    Resumable (``state_dict()`` / ``load_state_dict()``) as the other mappers: exact with
    ``strict=True, ordered=True``; see :meth:`MapperBase.state_dict
    <dataflow.parallel._mapper.MapperBase.state_dict>`.

    Args:
        ds: the input flow.
        num_workers: number of actors (the first positional argument after ``ds``, or a
            keyword); ``None``: the cluster's CPUs (the machine's when Ray is
            not initialized and no ``address`` is given).
        map_func: the function to apply; pickled with cloudpickle (lambdas are fine); its
            module must be importable on the cluster's nodes. (The order ``(ds, map_func,
            num_workers)`` of earlier releases is still accepted, with a warning, also as
            ``(ds, map_func, num_workers=n)``.)
        chunk_size: inputs per Ray task.
        address: the Ray cluster to connect to when Ray is not initialized yet.
        actor_options: Ray options of each actor (default ``{"num_cpus": 1}``).
        max_retries: how many times a chunk whose actor was lost is sent again.
    """

    profile_hint = "ray-map"

    _worker_arg = "num_workers"

    def __init__(
        self, ds: DataFlow, *args: int | Callable[[Any], Any] | None,
        num_workers: int | None = None, map_func: Callable[[Any], Any] | None = None,
        buffer_size: int = 200, strict: bool = False, ordered: bool = False,
        chunk_size: int | None = None, address: str | None = None,
        actor_options: dict[str, Any] | None = None, max_retries: int = 3,
        seed: int | None = None, on_error: str = "raise", max_errors: int | float | None = None,
    ) -> None:
        ray = session.import_ray()
        num_workers, map_func = _workers_and_func(args, num_workers, map_func)
        if num_workers is None:
            num_workers = _default_workers(ray, address)
        super().__init__(ds, num_workers, map_func, buffer_size, strict, ordered, on_error,
                         max_errors)
        self.seed = seed
        self.chunk_size = (None if chunk_size is None
                           else check_positive_int(chunk_size, "chunk_size", 16))
        self.address = address
        self.actor_options = session.check_options(actor_options)
        self.max_retries = actors.check_retries(max_retries)
        self._owns_ray = False
        self._slots: actors.ActorSlots | None = None
        self._transport: _RayMapTransport | None = None

    # by default up to 64 inputs per task, half of a worker's share of the buffer (so that each
    # actor has a chunk queued behind the one it runs): a Ray task costs more than a message
    _CHUNK_SHARE, _CHUNK_MAX = 2, 64

    def _chunk_size(self) -> int:
        """``chunk_size``, or the mappers' default with Ray's bounds."""
        return self.chunk_size if self.chunk_size is not None else super()._chunk_size()

    def _start(self) -> None:
        ray = session.import_ray()
        cpus = float(self.actor_options.get("num_cpus", 1))
        self._owns_ray = session.acquire_ray(self.address, self.num_workers * cpus)
        stage = type(self).__name__
        # map_func by value (not a ray.put reference): a replacement actor then gets it from
        # this process, never from the object store of a node that died (whose copy Ray would
        # try to fetch until the cluster declares the node dead, ~30 s)
        func, seed = self.map_func, _rng.get_seed()
        threads = session.actor_threads(self.actor_options)
        inputs = self._inputs

        def make_args(i: int) -> tuple:
            return (func, i, seed, stage, threads, inputs)

        self._slots = slots = actors.ActorSlots(ray, _MapActor, self.num_workers,
                                                 self.actor_options, stage)
        slots.start(make_args)
        self._transport = _RayMapTransport(slots, make_args, self.max_retries)

    def _stop(self) -> None:
        self._transport = None
        if self._slots is not None:
            self._slots.kill_all()
            self._slots = None
        owned, self._owns_ray = self._owns_ray, False
        session.release_ray(owned)


def _workers_and_func(args: tuple, num_workers: Any, map_func: Any) -> tuple[Any, Any]:
    """``(num_workers, map_func)`` from ``RayMapData``'s positional ``args`` and keywords.

    The positional order is ``(num_workers, map_func)``. Earlier releases took
    ``(map_func, num_workers)``: a callable first is read in that order, with a
    ``DeprecationWarning``, whether the count follows it positionally, as ``num_workers=``,
    or not at all. (Keywords alone mean the same in both orders.)"""
    if len(args) > 2:
        raise TypeError(
            f"RayMapData takes at most 2 positional arguments after `ds` (num_workers, "
            f"map_func), got {len(args)}: {args!r}; pass the others by keyword, e.g. "
            "RayMapData(ds, 8, func, buffer_size=400)."
        )
    old = bool(args) and callable(args[0]) and not (len(args) == 2 and callable(args[1]))
    names = ("map_func", "num_workers") if old else ("num_workers", "map_func")
    given = {"num_workers": num_workers, "map_func": map_func}
    for name, value in zip(names, args, strict=False):
        if given[name] is not None:
            raise TypeError(
                f"RayMapData got two values for `{name}`: {value!r} by position and "
                f"{given[name]!r} by keyword; pass it once (the positional order is "
                "(ds, num_workers, map_func))."
            )
        given[name] = value
    if old:
        warnings.warn(
            "RayMapData(ds, map_func, num_workers) is deprecated: the arguments are now "
            "(ds, num_workers, map_func), as in the other mappers; swap them (the old order "
            "is accepted until the next release).",
            DeprecationWarning, stacklevel=3,
        )
    return given["num_workers"], given["map_func"]


def _default_workers(ray: Any, address: str | None) -> int:
    if ray.is_initialized():
        return max(1, int(ray.cluster_resources().get("CPU", 1)))
    if session.cluster_address(address) is None:
        return session.local_cpus()
    raise ValueError(
        f"`num_workers` must be given when connecting to a cluster with address={address!r} "
        "(dataflow does not connect before reset_state()); pass e.g. num_workers=8, or call "
        "ray.init(address=...) first to use one worker per CPU of the cluster."
    )
