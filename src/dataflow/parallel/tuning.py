"""The autotuner's public entry points: :func:`autotune` (one CPU budget for every autotuned
stage of a pipeline), :func:`autotune_report` (what every autotuned stage chose, and why) and
:func:`ParallelMapData` (a parallel map whose back end, thread or process, is chosen by
measuring on its stream whether ``map_func`` holds the GIL).

This module sits above the back ends (it builds one of them); the back ends never import it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from dataflow.base import DataFlow
from dataflow.parallel._mapper import MapperBase
from dataflow.parallel.autotuning.backend import choose_backend
from dataflow.parallel.autotuning.stage import AUTOTUNE, CpuShare, check_count, is_auto
from dataflow.parallel.thread import MultiThreadMapData
from dataflow.parallel.zmq_map import MultiProcessMapDataZMQ
from dataflow.profiler import pipeline_stages
from dataflow.validation import check_callable, check_choice, check_positive_int

__all__ = ["AUTOTUNE", "ParallelMapData", "autotune", "autotune_report", "choose_backend"]

logger = logging.getLogger("dataflow.parallel")


def autotune(ds: DataFlow, cores: int | None = None) -> DataFlow:
    """Give every stage of ``ds`` whose worker count is ``"auto"`` one CPU budget of ``cores``
    (default: this process's, from its affinity and cgroup quota): their controllers share it,
    so two autotuned mappers never claim more cores together than the budget. Returns ``ds``.
    Call it before iterating."""
    if cores is not None:
        cores = check_positive_int(cores, "cores", 4)
    share = CpuShare(cores)
    for _, flow in pipeline_stages(ds):
        if isinstance(flow, MapperBase) and flow.autotuned:
            flow.cpu_share = share
    return ds


def autotune_report(ds: DataFlow) -> list[dict[str, Any]]:
    """What every self-tuning stage of the pipeline ``ds`` chose, and why: one dict per stage
    whose worker count is ``"auto"`` or whose back end ``ParallelMapData`` chooses, outermost
    first. Each holds ``stage`` (its class), ``depth`` (0 for ``ds`` itself, 1 for its
    child...), and, for an ``"auto"`` count, the controller's ``workers``, ``backend``,
    ``minimum``/``maximum``, ``window``, ``converged_at`` and its last ``decisions`` (each
    ``{"window", "before", "after", "reason", "rate"}``); ``backend_choice`` is the back-end
    measurement's ``{"backend", "reason", "overlap", "cores"}``. Works before, while and after
    iterating, wherever the stages sit in the pipeline; JSON-serializable."""
    report: list[dict[str, Any]] = []
    for depth, flow in pipeline_stages(ds):
        if not isinstance(flow, MapperBase):
            continue
        state = flow.autotune_state()
        choice = getattr(flow, "backend_choice", None)
        if state is None and not getattr(flow, "_choose", False):
            continue
        entry: dict[str, Any] = {"stage": type(flow).__name__, "depth": depth}
        if state is not None:
            entry.update(state)
        elif choice is not None:
            entry["backend_choice"] = choice.to_dict()
        report.append(entry)
    return report


def ParallelMapData(ds: DataFlow, num_workers: int | str = AUTOTUNE,
                    map_func: Callable[[Any], Any] | None = None, *,
                    backend: str = AUTOTUNE, **options: Any) -> MapperBase:
    """A parallel ``MapData``: :class:`MultiThreadMapData` (``backend="thread"``) or
    :class:`MultiProcessMapDataZMQ` (``backend="process"``) with ``num_workers`` workers
    (``"auto"``: tuned while it runs). ``options``: the mapper's keywords (``buffer_size``,
    ``strict``, ``ordered``, ``seed``...).

    ``backend="auto"`` returns a :class:`MultiThreadMapData` that measures its own first
    chunks on the real stream (no extra call of ``map_func``; nothing before
    ``reset_state()``): each thread reports the wall-clock time and its CPU time of every
    chunk it maps. Work that waits, or that uses more than one core while threads map at
    once (it releases the GIL), stays on threads; work that uses a single core however many
    threads map (it holds the GIL) moves to worker processes, unless the CPU budget has one
    core. The results are the same either way (random draws are keyed by each input's
    place), nothing in flight is lost or mapped twice, and the state's type does not depend
    on the choice. One INFO log line says what it chose and why; so does
    :func:`autotune_report` (``"backend_choice"``). The measurement is documented in
    :mod:`dataflow.parallel.autotuning.backend`.

    With both on auto, a thread stage whose work computes (rather than waits) and whose
    budget has two cores or more also moves its work to one process, once, when the
    consumer has been the bottleneck at one thread for a few windows (two seconds): the
    parts of the work that hold the GIL then stop taking it from the consumer's own Python.
    ``autotune_state()["backend"]`` says ``"process"`` from then on (a restored state starts
    there)."""
    func = check_callable(map_func, "map_func", "lambda dp: [dp[0] * 2]")
    check_choice("backend", backend, (AUTOTUNE, "thread", "process"))
    check_count(num_workers, "num_workers")  # (named as this function spells it)
    if backend == "process":
        return MultiProcessMapDataZMQ(ds, num_workers, func, **options)
    mapper = MultiThreadMapData(ds, num_workers, func, **options)
    mapper._choose = is_auto(backend)
    return mapper
