"""Parallel execution: runners (N independent copies of a flow) and parallel mappers.

One engine (:mod:`dataflow.parallel._worker`) with three back ends: threads, ``multiprocessing``
queues and ZeroMQ. Worker errors are raised in the consumer as
:class:`~dataflow.errors.WorkerError`; nothing hangs, nothing is lost, no process is left behind.

Every runner and mapper can save and restore where its iteration stands (``state_dict()`` /
``load_state_dict()``, JSON-serializable): ordered mappers resume exactly, unordered ones
deliver every input not yet delivered exactly once, runners continue each worker's stream right
after its last delivered datapoint; ``RemoteDataZMQ`` saves its counters only. Each class's
``state_dict()`` docstring says what is exact.
"""

from collections.abc import Callable
from typing import Any

from dataflow.parallel.process import MultiProcessPrefetchData, MultiProcessRunner, PrefetchData
from dataflow.parallel.remote import RemoteDataZMQ, send_dataflow_zmq
from dataflow.parallel.thread import MultiThreadMapData, MultiThreadPrefetchData, MultiThreadRunner
from dataflow.parallel.zmq_map import (
    MultiProcessMapAndBatchData,
    MultiProcessMapAndBatchDataZMQ,
    MultiProcessMapData,
    MultiProcessMapDataZMQ,
)
from dataflow.parallel.zmq_runner import MultiProcessRunnerZMQ, PrefetchDataZMQ


def ThreadedMapData(
    ds: Any,
    nr_thread: int | None = None,
    map_func: Callable[[Any], Any] | None = None,
    buffer_size: int = 200,
    strict: bool = False,
    *,
    ordered: bool = False,
) -> MultiThreadMapData:
    """tensorpack's older name of :class:`MultiThreadMapData`, with its older parameter name
    (``nr_thread``, now ``num_thread``): old scripts call
    ``ThreadedMapData(ds, nr_thread=25, map_func=f, buffer_size=1000)``."""
    return MultiThreadMapData(ds, nr_thread, map_func, buffer_size=buffer_size, strict=strict,
                              ordered=ordered)

__all__ = [
    "MultiProcessMapAndBatchData",
    "MultiProcessMapAndBatchDataZMQ",
    "MultiProcessMapData",
    "MultiProcessMapDataZMQ",
    "MultiProcessPrefetchData",
    "MultiProcessRunner",
    "MultiProcessRunnerZMQ",
    "MultiThreadMapData",
    "MultiThreadPrefetchData",
    "MultiThreadRunner",
    "PrefetchData",
    "PrefetchDataZMQ",
    "RemoteDataZMQ",
    "ThreadedMapData",
    "send_dataflow_zmq",
]
