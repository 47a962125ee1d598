"""``dataflow.snapshot(ds, path)``: put a snapshot at the end of a chain's deterministic prefix.

A chain is a position-readable source followed by 1:1 map stages: ``MapData``,
``MapDataComponent`` (with ``on_error="raise"``: a skipped error would change the positions),
the strict, ordered parallel mappers (``MultiThreadMapData``, ``MultiProcessMapData``...,
``strict=True, ordered=True``) and ``MultiProcessMapDataComponentSharedArray`` (one stage here,
though it holds a strict mapper inside). Walking up from the source, each stage's function is
composed with the ones below it and tested for randomness (:func:`~dataflow.snapshot.
determinism.check_deterministic`, on a few of the source's datapoints); the longest prefix that
passes is replaced by one :class:`~dataflow.snapshot.data.SnapshotData` of the composed
function. The stages above it are unchanged and read the snapshot instead (the same outputs, in
the same order, with the same seeds: a shuffling ``DataFromList`` source's order is the
snapshot's, derived from the source's seed and place in the pipeline).

Where it cut and why is logged and kept on the returned flow's snapshot as ``snap.cut`` (a
:class:`Cut`), or, when nothing could be cut, raised as a ``ValueError`` that says why.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from dataflow.base import DataFlow
from dataflow.parallel._mapper import MapperBase
from dataflow.parallel.zmq_map import MultiProcessMapDataComponentSharedArray as _SharedArray
from dataflow.profiler import public_name
from dataflow.snapshot.data import SnapshotData, _shallow, check_workers
from dataflow.snapshot.determinism import (
    CHECK_INPUTS,
    NondeterministicError,
    check_deterministic,
    func_name,
)
from dataflow.snapshot.source import positional, reads_in_place
from dataflow.sources import DataFromList
from dataflow.wrappers.map import MapData, MapDataComponent, replace_component

__all__ = ["Chain", "Cut", "snapshot"]

logger = logging.getLogger(__name__)


class Chain:
    """The composed function of a chain's map stages, bottom up (picklable when the stages'
    functions are): each step is ``(func, None)`` for a whole-datapoint map or ``(func,
    index)`` for a component map; a ``None`` result drops the datapoint."""

    def __init__(self, steps: list[tuple[Any, Any]]) -> None:
        self.steps = list(steps)

    def __call__(self, dp: Any) -> Any:
        for func, index in self.steps:
            if index is None:
                dp = func(_shallow(dp))
            else:
                ret = func(dp[index])
                dp = None if ret is None else replace_component(dp, index, ret)
            if dp is None:
                return None
        return dp

    def __repr__(self) -> str:
        return f"Chain({', '.join(func_name(f) for f, _ in self.steps)})"


@dataclass
class Cut:
    """Where :func:`snapshot` cut a chain: ``stored`` (the stages in the snapshot, bottom up),
    ``above`` (the stages left after it), ``reason`` (why it stopped there)."""

    stored: list[str] = field(default_factory=list)
    above: list[str] = field(default_factory=list)
    reason: str = ""

    def __str__(self) -> str:
        return (f"snapshot of {' -> '.join(self.stored)}; after it: "
                f"{' -> '.join(self.above) or 'nothing'}. {self.reason}")


def _below(stage: Any) -> Any:
    """The flow a stage of the chain reads (for ``MultiProcessMapDataComponentSharedArray``,
    what the mapper inside it reads), or ``None`` when it reads none or several."""
    holder = _holder(stage)
    children = holder.children()
    return children[0] if len(children) == 1 else None


def _holder(stage: Any) -> Any:
    """The flow that holds a stage's input as its child: the stage itself, or the mapper inside
    ``MultiProcessMapDataComponentSharedArray``."""
    return stage.ds if isinstance(stage, _SharedArray) else stage


def _shown(stage: Any, func: Any) -> str:
    """The name of a stage's function as its user gave it."""
    return func_name(stage.map_func if isinstance(stage, _SharedArray) else func)


def _step(stage: Any) -> tuple[tuple[Any, Any] | None, str]:
    """The map step of a 1:1 stage, or ``None`` and why the chain ends at it."""
    name = type(stage).__name__
    if isinstance(stage, _SharedArray):
        if stage.ds.error_policy is not None:
            return None, f"{name} has on_error={stage.ds.on_error!r} (an error drops a datapoint)"
        # the checked map of the component: the same shape and dtype check as in its workers
        return (stage.component_map.checked, stage.index), ""
    if isinstance(stage, MapDataComponent):
        if stage.error_policy is not None:
            return None, f"{name} has on_error={stage.on_error!r} (an error drops a datapoint)"
        return (stage.func, stage.index), ""
    if isinstance(stage, MapData):
        if stage.error_policy is not None:
            return None, f"{name} has on_error={stage.on_error!r} (an error drops a datapoint)"
        return (stage.func, None), ""
    if isinstance(stage, MapperBase):
        if not (stage.strict and stage.ordered):
            return None, f"{name} is not strict and ordered (its outputs are not 1:1 in order)"
        if stage.error_policy is not None:
            return None, f"{name} has on_error={stage.on_error!r} (an error drops a datapoint)"
        return (stage.map_func, None), ""
    return None, f"{name} is not a 1:1 map stage"


def snapshot(ds: DataFlow, path: str | os.PathLike[str], **kwargs: Any) -> DataFlow:
    """``ds`` with its longest deterministic prefix replaced by a :class:`SnapshotData` under
    ``path`` (``kwargs`` go to it: ``budget``, ``verify``, ``compression``, ``key``...).

    Call it before ``reset_state()``. The chain is found by following ``children()`` down from
    ``ds`` to its source; the map stages right above the source are tested. The snapshot is the
    returned flow itself when every stage of ``ds`` went into it; else the stage above the cut
    reads it (``ds`` changed in place and returned). Raises ``ValueError`` when no stage can
    be snapshotted, with the reason; the cut is logged and kept as ``snap.cut``."""
    if not isinstance(ds, DataFlow):
        raise TypeError(f"`ds` must be a DataFlow, got {type(ds).__name__} {ds!r:.60}; "
                        "dataflow.snapshot cuts a flow's chain of stages.")
    path_: list[Any] = [ds]  # the stages from the top down to the source
    while (below := _below(path_[-1])) is not None:
        path_.append(below)
    source = path_[-1]
    if source.children():
        raise ValueError(f"dataflow.snapshot: {public_name(source)} reads several flows; give "
                         "it one chain (a source and map stages), or snapshot each branch.")
    if not reads_in_place(source):
        raise ValueError(
            f"dataflow.snapshot: the source {public_name(source)} is not read by position (a "
            "list, DataFromList, an LMDB, Numpy or HDF5 flow, a dataset loader, indexed tar "
            "shards (TarShardData), a SnapshotData): a snapshot keys its outputs by position. "
            "Build the chain on such a source, or use SnapshotData(ds, path, map_func=...) on "
            "a flow with a len().")
    shuffled = bool(getattr(source, "shuffle", False) or getattr(source, "_shuffle", False))
    if shuffled and not isinstance(source, DataFromList):
        raise ValueError(
            f"`ds`'s source {public_name(source)} shuffles in its own order: build it with "
            "shuffle=False and shuffle after the snapshot (SnapshotData(..., shuffle=True), "
            "LocallyShuffleData), or snapshot a DataFromList source.")
    chain: list[tuple[Any, tuple[Any, Any]]] = []  # the map stages above the source, bottom up
    reason = "the whole chain is deterministic"
    for st in reversed(path_[:-1]):
        step, why = _step(st)
        if step is None:
            reason = f"the map stages end at {public_name(st)} ({why})"
            break
        chain.append((st, step))
    reader = positional(source)
    inputs = [reader.get(i) for i in range(min(CHECK_INPUTS, len(reader)))]
    steps: list[tuple[Any, Any]] = []
    stored: list[Any] = []
    for st, step in chain:
        try:
            check_deterministic(Chain([*steps, step]), inputs)
        except NondeterministicError:
            reason = (f"{public_name(st)}({_shown(st, step[0])}) is random (its outputs "
                      "differ under two seeds): it and what follows stay after the snapshot")
            break
        steps.append(step)
        stored.append(st)
    if not stored:
        raise ValueError(f"dataflow.snapshot: nothing to snapshot in {public_name(ds)}: "
                         f"{reason}. A snapshot stores a deterministic map of a "
                         "position-readable source (MapData, MapDataComponent, strict ordered "
                         "mappers over a DataFromList, LMDB, Numpy or HDF5 source).")
    top = len(path_) - 1 - len(stored)  # where the snapshot goes in path_
    above = path_[:top]
    options = {"key": None, "budget": None, "verify": 0.01, "compression": None,
               "on_full": "raise", "num_workers": "auto", **kwargs}
    unknown = sorted(set(options) - {"key", "budget", "verify", "compression", "on_full",
                                     "num_workers"})
    if unknown:
        raise TypeError(f"dataflow.snapshot: unknown arguments {unknown}; it takes those of "
                        "SnapshotData: key, budget, verify, compression, on_full, "
                        "num_workers.")
    snap = SnapshotData.__new__(SnapshotData)
    snap._setup(source, path, Chain(steps), options["key"], options["budget"], options["verify"],
                options["compression"], shuffled, getattr(source, "seed", None),
                options["on_full"])
    snap.num_workers = check_workers(options["num_workers"])
    snap._ensure_checked(tested=True)  # (the test above passed: the snapshot needs no other)
    if shuffled:  # the source's order: its seed, at its place in the original chain
        snap._order_depth = len(stored)
    names = [f"{public_name(st)}({_shown(st, func)})" for st, (func, _) in zip(stored, steps)]
    cut = Cut([public_name(source), *names], [public_name(s) for s in reversed(above)], reason)
    snap.cut = cut
    logger.info("dataflow.snapshot under %s: %s", snap.root, cut)
    if not above:
        return snap
    try:
        _holder(above[-1]).replace_child(stored[-1], snap)
    except NotImplementedError as e:
        raise ValueError(f"dataflow.snapshot: the stage above the cut cannot be made to read "
                         f"the snapshot: {e} Or build the pipeline on SnapshotData(...) "
                         "yourself.") from e
    return ds

