"""Process mappers over ZeroMQ: ``MultiProcessMapDataZMQ``, ``MultiProcessMapAndBatchDataZMQ``
and ``MultiProcessMapDataComponentSharedArray``.

Dispatch cannot lose a request (the flaw of tensorpack's DEALER/REP design): see
:class:`~dataflow.parallel._zmq_consumer.ZmqMapTransport`. Each request is a chunk of inputs,
sent to the least-loaded worker; every input is answered.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from dataflow.base import DataFlow, ProxyDataFlow
from dataflow.errors import UnknownLengthError
from dataflow.parallel._bootstrap import get_context
from dataflow.parallel._map_processes import start_map_processes
from dataflow.parallel._mapper import MapperBase, WorkerCount
from dataflow.parallel._pool import ProcessPool
from dataflow.parallel._scheduler import MapScheduler
from dataflow.parallel._zmq_consumer import RESTART_WINDOW, ZmqMapTransport
from dataflow.parallel.autotuning.stage import default_share, is_auto
from dataflow.parallel.shared_memory import shm_available
from dataflow.state import check_state, decode_items, encode_items
from dataflow.validation import (
    check_callable,
    check_int,
    check_positive_int,
    known_length,
    renamed_kwargs,
)
from dataflow.wrappers.map import replace_component

__all__ = [
    "MultiProcessMapAndBatchData",
    "MultiProcessMapAndBatchDataZMQ",
    "MultiProcessMapData",
    "MultiProcessMapDataComponentSharedArray",
    "MultiProcessMapDataZMQ",
]


class _ZmqMapperBase(MapperBase):
    _worker_arg = "num_proc"
    num_proc = WorkerCount()
    _batch_size: int | None = None

    def _init_zmq(self, start_method: str | None, use_shm: bool, max_restarts: int,
                  seed: int | None) -> None:
        self.seed = seed
        self.max_restarts = check_int(max_restarts, "max_restarts", minimum=0, example=3)
        self.start_method = start_method
        get_context(start_method)  # validate now
        self.use_shm = bool(use_shm) and shm_available()
        self._transport: ZmqMapTransport | None = None
        self._pool: ProcessPool | None = None

    def _start(self) -> None:
        self._transport, self._pool, self._resources = start_map_processes(
            type(self).__name__, self.map_func, self.num_workers, self._inputs, self._batch_size,
            start_method=self.start_method, use_shm=self.use_shm,
            max_restarts=self.max_restarts,
            restart_window=known_length(self.ds) or RESTART_WINDOW)

    def _stop(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool = None
        self._transport = None
        self._release_resources()


class MultiProcessMapDataZMQ(_ZmqMapperBase):
    """Map ``map_func`` over ``ds`` with ``num_proc`` worker processes.

    ``ds`` is iterated in the consumer; inputs and results travel over ZeroMQ (pickle protocol
    5, array memory as separate frames, large arrays through shared memory). At most
    ``buffer_size`` inputs are in flight.

    * ``strict=False`` (tensorpack's default): an endless stream over repeated passes of
      ``ds``; each ``__iter__`` continues it (nothing in flight is lost between them).
    * ``strict=True``: each ``__iter__`` yields exactly the results of one pass of ``ds``
      (the multiset of the serial map), for any ``buffer_size``.
    * ``ordered=False``: results in completion order; ``ordered=True``: in input order.

    ``None`` results are dropped (as ``MapData`` does; tensorpack's strict mode asserted).
    ``len()`` is ``len(ds)``. Random draws made while mapping an input (augmentors,
    ``np.random.*``, ``random.*``, :func:`dataflow.rng.input_rng`) are keyed by the input's place
    in the epoch and the mapper's ``seed`` (else the global seed): with a seed, a strict, ordered
    mapper's output does not depend on the number of workers, the start method or scheduling.

    Unlike tensorpack: no request is ever lost (readiness + ROUTER dispatch), an exception in
    ``map_func`` or a killed worker is raised in the consumer as
    :class:`~dataflow.errors.WorkerError` (with the input's index), and exit never hangs.

    Resumable (``state_dict()`` / ``load_state_dict()``): exact with ``strict=True,
    ordered=True``; strict and unordered, the rest of the epoch holds every undelivered result
    exactly once; ``strict=False``, the stream continues without loss or repetition. Details:
    :meth:`MapperBase.state_dict <dataflow.parallel._mapper.MapperBase.state_dict>`.

    ``num_proc="auto"`` (:data:`dataflow.AUTOTUNE`): the worker count is tuned while it runs,
    within the CPU budget (see :doc:`autotune`); ``buffer_size="auto"``: room for the most
    workers the budget allows. :meth:`resize` changes the count by hand.

    Args:
        start_method: ``None`` (fork on Linux), ``'fork'``, ``'forkserver'`` or ``'spawn'``
            (then ``map_func`` must be picklable: no lambdas).
        use_shm: send arrays of 4 MiB or more through ``/dev/shm`` (Linux).
    """

    @renamed_kwargs(nr_proc="num_proc")
    def __init__(
        self, ds: DataFlow, num_proc: int | str | None = None,
        map_func: Callable[[Any], Any] | None = None, *,
        buffer_size: int | str = 200, strict: bool = False, ordered: bool = False,
        start_method: str | None = None, use_shm: bool = True, max_restarts: int = 3,
        seed: int | None = None, on_error: str = "raise", max_errors: int | float | None = None,
    ) -> None:
        super().__init__(ds, num_proc, map_func, buffer_size, strict, ordered, on_error,
                         max_errors)
        self._init_zmq(start_method, use_shm, max_restarts, seed)


class MultiProcessMapAndBatchDataZMQ(_ZmqMapperBase):
    """Map ``map_func`` in ``num_proc`` processes and batch the results there.

    Each worker maps the inputs it receives, drops ``None`` results, and emits batches of
    ``batch_size`` built with ``BatchData.aggregate_batch`` (arrays, not lists); a worker's
    incomplete batch waits for its next inputs. Endless (over repeated passes of ``ds``); no
    ``len()``. Same as ``BatchData(MapData(ds, map_func), batch_size)`` up to order.

    ``buffer_size`` (inputs in flight) defaults to ``10 * batch_size`` (tensorpack documented
    this default but crashed when it was omitted), at least ``(num_proc + 1) * batch_size``
    (``"auto"``: the same). ``num_proc="auto"``: the CPU budget's cores, fixed (a worker's
    incomplete batch holds inputs back, so this mapper is not resized while it runs).

    ``state_dict()`` saves the batches received but not yet yielded and where the input stream
    stands. After a restore every input not yet delivered in a batch comes exactly once (the
    inputs waiting in the workers' incomplete batches at the save are mapped again); the
    batches are composed differently, so it is not exact.
    """

    @renamed_kwargs(nr_proc="num_proc")
    def __init__(
        self,
        ds: DataFlow,
        num_proc: int | str,
        map_func: Callable[[Any], Any],
        batch_size: int,
        buffer_size: int | str | None = None,
        *,
        start_method: str | None = None, use_shm: bool = True, max_restarts: int = 3,
        seed: int | None = None, on_error: str = "raise", max_errors: int | float | None = None,
    ) -> None:
        if callable(num_proc) and not callable(map_func):
            from dataflow.parallel._mapper import _check_order

            _check_order(type(self).__name__, "num_proc", num_proc, map_func)
        batch_size = check_positive_int(batch_size, "batch_size", 32)
        # "auto": the CPU budget's cores, fixed (a retired worker would keep the inputs of its
        # incomplete batch unanswered, so this mapper is not resized live)
        num_proc = default_share().cores if is_auto(num_proc) else num_proc
        num_proc = check_positive_int(num_proc, "num_proc", 2)
        # each worker may hold batch_size - 1 inputs of an incomplete batch unanswered
        minimum = (num_proc + 1) * batch_size
        if buffer_size is None or is_auto(buffer_size):
            buffer_size = max(10 * batch_size, minimum)
        buffer_size = check_positive_int(buffer_size, "buffer_size", 10 * batch_size)
        if buffer_size <= batch_size:
            raise ValueError(
                f"`buffer_size` must be larger than `batch_size` ({batch_size}), got "
                f"{buffer_size}; pass e.g. buffer_size={10 * batch_size} or leave it None."
            )
        if buffer_size < minimum:
            raise ValueError(
                f"`buffer_size` must be at least (num_proc + 1) * batch_size = {minimum} (each "
                "worker holds the inputs of its incomplete batch), got "
                f"{buffer_size}; raise it or leave it None."
            )
        super().__init__(ds, num_proc, map_func, buffer_size, False, False, on_error,
                         max_errors)
        self.batch_size = self._batch_size = batch_size
        self._batches: deque[Any] = deque()
        self._init_zmq(start_method, use_shm, max_restarts, seed)

    def __len__(self) -> int:
        raise UnknownLengthError(
            "MultiProcessMapAndBatchDataZMQ is endless and has no length; wrap it in "
            "FixedSizeData(df, size) to give it one."
        )

    def _chunk_size(self) -> int:
        return self.batch_size

    def _can_resize(self) -> bool:
        return False  # a retired worker's incomplete batch would hold its inputs back

    _counts_results = False  # a result holds zero or more batches: count the batches

    def _stream(self, sched: MapScheduler) -> Iterator[Any]:
        pending = self._batches  # batches received but not yet yielded survive a break
        while pending:
            self._pos += 1
            yield pending.popleft()
        for batches in sched.run():
            pending.extend(batches)
            while pending:
                self._pos += 1
                yield pending.popleft()

    def state_dict(self) -> dict[str, Any]:
        """Counters, the child's state and the batches received but not yet yielded.

        No loss, no repeat: the inputs in flight at the save, those in the workers' incomplete
        batches included, are dispatched again on restore; not exact (batches are composed
        anew). See :meth:`MapperBase.state_dict`."""
        state = super().state_dict()
        state["batch_size"] = self.batch_size
        state["batches"] = encode_items(list(self._batches))
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state(state, self, batch_size=self.batch_size)
        super().load_state_dict(state)
        self._batches.clear()
        self._batches.extend(decode_items(state["batches"]))


MultiProcessMapData = MultiProcessMapDataZMQ
MultiProcessMapAndBatchData = MultiProcessMapAndBatchDataZMQ


class _ComponentToArray:
    """Worker-side function of :class:`MultiProcessMapDataComponentSharedArray`: maps one
    component, checks the result's shape and dtype, and answers ``(new datapoint,)``, or ``()``
    for a dropped one (a strict mapper takes no ``None``)."""

    def __init__(self, map_func: Callable[[Any], Any], index: Any, shape: tuple[int, ...],
                 dtype: np.dtype) -> None:
        self.map_func, self.index, self.shape, self.dtype = map_func, index, shape, dtype

    def __call__(self, dp: Any) -> tuple[Any, ...]:
        res = self.checked(dp[self.index])
        return () if res is None else (replace_component(dp, self.index, res),)

    def checked(self, component: Any) -> Any:
        """``map_func(component)``, checked: an array of the shape and dtype, or ``None``."""
        res = self.map_func(component)
        if res is None:
            return None
        if not (isinstance(res, np.ndarray) and res.shape == self.shape
                and res.dtype == self.dtype):
            got = (f"an array of shape {res.shape} and dtype {res.dtype}"
                   if isinstance(res, np.ndarray) else f"a {type(res).__name__}")
            raise ValueError(
                f"MultiProcessMapDataComponentSharedArray: map_func returned {got}, but "
                f"output_shape={self.shape} and output_dtype={self.dtype} were given; return "
                "an array of exactly that shape and dtype, or None to drop the datapoint."
            )
        return res


class MultiProcessMapDataComponentSharedArray(ProxyDataFlow):
    """Maps component ``index`` of each datapoint with ``map_func`` in ``num_proc`` processes,
    when every result is an array of one fixed ``output_shape`` and ``output_dtype`` (or
    ``None``, which drops the datapoint), like :class:`~dataflow.MapDataComponent` in parallel.

    tensorpack's name for a mapper whose results come back through shared memory. Here it is a
    strict, ordered :class:`MultiProcessMapDataZMQ`, whose large results travel through shared
    memory anyway: each ``__iter__`` is one pass of ``ds`` in its order (tensorpack's own
    indexed results by worker, so a worker's second result could overwrite its first), and
    ``len()`` is ``len(ds)``. A result of another shape or dtype raises
    :class:`~dataflow.errors.WorkerError` naming both. Keywords: as in
    :class:`MultiProcessMapDataZMQ`.
    """

    @renamed_kwargs(nr_proc="num_proc")
    def __init__(
        self, ds: DataFlow, num_proc: int | str, map_func: Callable[[Any], Any],
        output_shape: Any, output_dtype: Any, index: Any = 0, *,
        buffer_size: int | str = 200, start_method: str | None = None, use_shm: bool = True,
        max_restarts: int = 3, seed: int | None = None, on_error: str = "raise",
        max_errors: int | float | None = None,
    ) -> None:
        check_callable(map_func, "map_func")
        try:
            shape = tuple(int(d) for d in np.atleast_1d(output_shape))
            if any(d < 0 for d in shape):
                raise ValueError
        except (TypeError, ValueError):
            raise ValueError(
                f"`output_shape` must be a tuple of non-negative ints, got {output_shape!r}; "
                "e.g. output_shape=(224, 224, 3)."
            ) from None
        try:
            dtype = np.dtype(output_dtype)
        except TypeError:
            raise TypeError(
                f"`output_dtype` must be a NumPy dtype, got {output_dtype!r}; e.g. "
                "output_dtype='uint8'."
            ) from None
        self.output_shape, self.output_dtype, self.index = shape, dtype, index
        self.map_func = map_func
        # what its workers run; its ``checked`` is the map of one component, checked
        self.component_map = _ComponentToArray(map_func, index, shape, dtype)
        self.ds: MultiProcessMapDataZMQ
        super().__init__(MultiProcessMapDataZMQ(
            ds, num_proc, self.component_map,
            buffer_size=buffer_size, strict=True, ordered=True, start_method=start_method,
            use_shm=use_shm, max_restarts=max_restarts, seed=seed, on_error=on_error,
            max_errors=max_errors,
        ))

    @property
    def num_proc(self) -> int:
        """The worker count of the mapper inside."""
        return self.ds.num_workers

    def __iter__(self) -> Iterator[Any]:
        for out in self.ds:
            if out:
                yield out[0]
