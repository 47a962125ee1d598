"""The autotuner's public entry points: :func:`autotune` (one CPU budget for every autotuned
stage of a pipeline) and :func:`ParallelMapData` (a parallel map whose back end, thread or
process, is chosen by measuring whether ``map_func`` holds the GIL).

This module sits above the back ends (it builds one of them); the back ends never import it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from dataflow.base import DataFlow
from dataflow.parallel._mapper import MapperBase
from dataflow.parallel.autotuning.stage import AUTOTUNE, CpuShare, default_share, is_auto
from dataflow.parallel.thread import MultiThreadMapData
from dataflow.parallel.zmq_map import MultiProcessMapDataZMQ
from dataflow.validation import check_callable, check_choice

__all__ = ["AUTOTUNE", "ParallelMapData", "autotune", "choose_backend"]

logger = logging.getLogger("dataflow.parallel")

#: datapoints the back-end probe reads from the input flow
PROBE_INPUTS = 8
#: the probe maps its inputs again until this many seconds passed (or PROBE_CALLS calls)
PROBE_SECONDS, PROBE_CALLS = 0.05, 64


def autotune(ds: DataFlow, cores: int | None = None) -> DataFlow:
    """Give every stage of ``ds`` whose worker count is ``"auto"`` one CPU budget of ``cores``
    (default: this process's, from its affinity and cgroup quota): their controllers share it,
    so two autotuned mappers never claim more cores together than the budget. Returns ``ds``.
    Call it before iterating."""
    share = CpuShare(cores)
    seen: set[int] = set()

    def walk(flow: DataFlow) -> None:
        if id(flow) in seen:
            return
        seen.add(id(flow))
        if isinstance(flow, MapperBase) and flow.autotuned:
            flow.cpu_share = share
        for child in flow.children():
            walk(child)

    walk(ds)
    return ds


def choose_backend(cpu_ratio: float, speedup: float, cores: int) -> tuple[str, str]:
    """``(backend, reason)`` from the probe's figures: ``cpu_ratio``, the CPU time of one
    thread mapping serially over its wall time; ``speedup``, the throughput of two threads
    over one's. Work that mostly waits (``cpu_ratio < 0.5``) or scales in threads (``speedup
    >= 1.5``: it releases the GIL) runs in threads; work that holds the GIL runs in processes,
    unless the budget has a single core (then processes gain nothing but copies)."""
    if cpu_ratio < 0.5:
        return "thread", f"it waits (CPU {cpu_ratio:.0%} of wall time): threads"
    if cores < 2:
        return "thread", "one core in the budget: threads (processes would only add copies)"
    if speedup >= 1.5:
        return "thread", f"it releases the GIL (2 threads: {speedup:.2f}x one): threads"
    return "process", f"it holds the GIL (2 threads: {speedup:.2f}x one): processes"


def _thread_start(cpu_ratio: float, start: int, cores: int) -> int:
    """The first thread count of an autotuned thread stage whose work the probe measured:
    work that computes (``cpu_ratio >= 0.5``, releasing the GIL) starts at a thread per core
    of the budget, not at the ``start`` (several per core) that work which waits starts with:
    the controller climbs from there if more pay, instead of finding its way down from a
    crowd of threads through windows that the crowd makes noisy."""
    return max(1, min(start, cores)) if cpu_ratio >= 0.5 else start


def may_move(cpu_ratio: float, cores: int) -> bool:
    """Whether an autotuned thread stage whose work the probe measured may move it to
    processes when its consumer is the bottleneck: work that computes (``cpu_ratio >= 0.5``;
    the parts of it that hold the GIL take it from the consumer) with a core to spare for the
    process (a budget of two cores or more). Work that waits holds the GIL for little."""
    return cpu_ratio >= 0.5 and cores >= 2


def _timed_calls(func: Callable[[Any], Any], inputs: list[Any], n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        func(inputs[i % len(inputs)])
    return time.perf_counter() - start


def _probe(map_func: Callable[[Any], Any], inputs: list[Any]) -> tuple[float, float]:
    """``(cpu_ratio, speedup)`` of ``map_func`` on ``inputs`` (see :func:`choose_backend`).
    The global random generators are restored afterwards."""
    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        calls = 0
        while calls < PROBE_CALLS and (calls < len(inputs)
                                       or time.perf_counter() - wall0 < PROBE_SECONDS):
            map_func(inputs[calls % len(inputs)])
            calls += 1
        wall = time.perf_counter() - wall0
        cpu_ratio = (time.thread_time() - cpu0) / wall if wall > 0 else 1.0
        serial = _timed_calls(map_func, inputs, 2 * calls)
        threads = [threading.Thread(target=_timed_calls, args=(map_func, inputs, calls))
                   for _ in range(2)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        parallel = time.perf_counter() - start
        return cpu_ratio, (serial / parallel if parallel > 0 else 1.0)
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)


def ParallelMapData(ds: DataFlow, num_workers: int | str = AUTOTUNE,
                    map_func: Callable[[Any], Any] | None = None, *,
                    backend: str = AUTOTUNE, **options: Any) -> MapperBase:
    """A parallel ``MapData``: :class:`MultiThreadMapData` (``backend="thread"``) or
    :class:`MultiProcessMapDataZMQ` (``backend="process"``) with ``num_workers`` workers
    (``"auto"``: tuned while it runs). ``backend="auto"`` measures ``map_func`` on the first
    datapoints of ``ds`` (resetting ``ds`` in this process and reading a few datapoints before
    the mapper starts; the mapper resets it again, so a seeded ``ds`` yields the same) and logs
    one line saying what it chose and why (see :func:`choose_backend`). ``options``: the
    chosen mapper's keywords (``buffer_size``, ``strict``, ``ordered``, ``seed``...).

    With both on auto, a thread stage whose work computes (rather than waits) and whose
    budget has two cores or more moves its work to one process, once, when the consumer has
    been the bottleneck at one thread for a few windows (two seconds): the parts of the work
    that hold the GIL then stop taking it from the consumer's own Python. The process takes
    the new inputs and those the threads had not started; the threads answer what they hold,
    then end. Nothing is lost, mapped twice or reordered, the results stay a function of
    (seed, position), and ``autotune_state()["backend"]`` says ``"process"`` from then on (a
    restored state starts there)."""
    func = check_callable(map_func, "map_func", "lambda dp: [dp[0] * 2]")
    check_choice("backend", backend, (AUTOTUNE, "thread", "process"))
    cpu_ratio = None  # measured by the probe
    if is_auto(backend):
        ds.reset_state()
        inputs: list[Any] = []
        for dp in ds:
            inputs.append(dp)
            if len(inputs) == PROBE_INPUTS:
                break
        if inputs:
            cpu_ratio, speedup = _probe(func, inputs)
            backend, why = choose_backend(cpu_ratio, speedup, default_share().cores)
        else:
            backend, why = "thread", "the input flow is empty: threads"
        logger.info("ParallelMapData(%s): %s", getattr(func, "__name__", type(func).__name__),
                    why)
    if backend == "thread":
        mapper = MultiThreadMapData(ds, num_workers, func, **options)
        if mapper.autotuned and cpu_ratio is not None:
            cores = default_share().cores
            mapper.resize(_thread_start(cpu_ratio, mapper.num_workers, cores))
            mapper._may_move = may_move(cpu_ratio, cores)
        return mapper
    return MultiProcessMapDataZMQ(ds, num_workers, func, **options)
