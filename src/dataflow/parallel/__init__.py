"""Parallel execution: runners (N independent copies of a flow) and parallel mappers.

One engine, laid out by concept, one concept per module; the back ends import only these
shared modules, never each other:

* ``_protocol``: the messages between workers and consumer, ``ErrorInfo``, the transport
  protocols;
* ``_worker``: the worker side (``map_loop``, ``runner_loop``, worker seeding);
* ``_scheduler``: the consumer side of a mapper (``MapScheduler``: dispatch, strict and
  ordered reassembly) and its input streams;
* ``_mapper`` / ``_runner``: the two bases (map one stream / run N copies), iteration, counters
  and resumable state; ``_checkpoints``: the child's states a mapper resumes from;
* ``_lifecycle``: start, stop and clean-up of every runner and mapper;
* ``_bootstrap`` (start methods, a worker's bootstrap, parent death) and ``_pool``
  (``ProcessPool``): worker processes;
* ``_wire`` (frames, endpoints), ``_zmq_consumer`` (the consumer's sockets), ``_zmq_worker``
  (the workers' sockets and a map worker's main) and ``_map_processes`` (a mapper's processes
  and its transport, started together): the ZeroMQ transport;
* ``shared_memory/``: large buffers between processes (``_segments``: the files in
  ``/dev/shm``; ``_space``: a pipeline's segments, their clean-up process ``_reaper`` and the
  writers; ``_ring``: a forked worker's shared ring);
* ``autotuning/``: ``budget`` (the CPU budget), ``controller`` (the worker-count controller)
  and ``stage`` (a stage's live tuner).

Back ends: ``thread`` (threads), ``process`` (a ``multiprocessing`` queue), ``zmq_map`` and
``zmq_runner`` (ZeroMQ), ``remote`` (across machines), and :mod:`dataflow.ray`. ``plasma``:
tensorpack's ``PlasmaPutData`` / ``PlasmaGetData`` (datapoints passed as ids of objects in
shared memory; tensorpack had them in this module but not in its ``__all__``). Worker errors
are raised in the consumer as :class:`~dataflow.errors.WorkerError`; nothing hangs, nothing is
lost, no process is left behind.

Autotuning (``tuning``, above the back ends, over ``autotuning/``): a worker count or buffer
of ``"auto"`` (:data:`AUTOTUNE`) is chosen, and a mapper's worker count kept tuned while it
runs (``resize()``), within the process's CPU budget; :func:`autotune` gives a pipeline's stages one
budget; :func:`ParallelMapData` also picks the back end; :func:`autotune_report` says what each
chose and why.

Every runner and mapper can save and restore where its iteration stands (``state_dict()`` /
``load_state_dict()``, JSON-serializable): ordered mappers resume exactly, unordered ones
deliver every input not yet delivered exactly once, runners continue each worker's stream right
after its last delivered datapoint; ``RemoteDataZMQ`` saves its counters only. Each class's
``state_dict()`` docstring says what is exact.
"""

from collections.abc import Callable
from typing import Any

from dataflow.parallel.plasma import PlasmaGetData, PlasmaPutData
from dataflow.parallel.process import MultiProcessPrefetchData, MultiProcessRunner, PrefetchData
from dataflow.parallel.remote import RemoteDataZMQ, send_dataflow_zmq
from dataflow.parallel.thread import MultiThreadMapData, MultiThreadPrefetchData, MultiThreadRunner
from dataflow.parallel.tuning import AUTOTUNE, ParallelMapData, autotune, autotune_report
from dataflow.parallel.zmq_map import (
    MultiProcessMapAndBatchData,
    MultiProcessMapAndBatchDataZMQ,
    MultiProcessMapData,
    MultiProcessMapDataComponentSharedArray,
    MultiProcessMapDataZMQ,
)
from dataflow.parallel.zmq_runner import MultiProcessRunnerZMQ, PrefetchDataZMQ


def ThreadedMapData(ds: Any, nr_thread: int | None = None,
                    map_func: Callable[[Any], Any] | None = None, buffer_size: int = 200,
                    strict: bool = False, **options: Any) -> MultiThreadMapData:
    """tensorpack's older name of :class:`MultiThreadMapData`, with its older parameter name
    (``nr_thread``, now ``num_thread``) and positional ``buffer_size`` and ``strict``: old
    scripts call ``ThreadedMapData(ds, nr_thread=25, map_func=f, buffer_size=1000)``.
    ``options`` are :class:`MultiThreadMapData`'s other keywords."""
    return MultiThreadMapData(ds, nr_thread, map_func, buffer_size=buffer_size, strict=strict,
                              **options)

__all__ = [
    "AUTOTUNE", "MultiProcessMapAndBatchData", "MultiProcessMapAndBatchDataZMQ",
    "MultiProcessMapData", "MultiProcessMapDataComponentSharedArray", "MultiProcessMapDataZMQ",
    "MultiProcessPrefetchData", "MultiProcessRunner", "MultiProcessRunnerZMQ",
    "MultiThreadMapData", "MultiThreadPrefetchData", "MultiThreadRunner", "ParallelMapData",
    "PlasmaGetData", "PlasmaPutData", "PrefetchData", "PrefetchDataZMQ", "RemoteDataZMQ",
    "ThreadedMapData", "autotune", "autotune_report", "send_dataflow_zmq",
]
