"""PyTorch bridge: ``to_torch(df)`` gives a ``torch.utils.data.IterableDataset``.

Recommended use: the dataflow does its own parallelism (``MultiProcessMapDataZMQ``,
``MultiProcessRunnerZMQ``, ...) and batching (``BatchData``), and PyTorch adds nothing::

    from torch.utils.data import DataLoader
    from dataflow.torch import to_torch

    loader = DataLoader(to_torch(ds), batch_size=None, num_workers=0)
    for epoch in range(epochs):
        for images, labels in loader:     # torch.Tensors, sharing memory with the arrays
            ...

An ImageNet-style loader that decodes only the crop of each JPEG (see docs/jpeg.md); the
decoder releases the GIL, so threads use every core::

    augs = imgaug.AugmentorList([imgaug.GoogleNetRandomCropAndResize(),
                                 imgaug.Flip(horiz=True)])
    ds = LMDBSerializer.load("train.lmdb", shuffle=False)        # [jpeg bytes, label]
    ds = LocallyShuffleData(ds, 1000, seed=0)
    ds = MultiThreadMapData(ds, 8, lambda dp: [augs.augment_jpeg(dp[0], color="rgb"), dp[1]])
    loader = DataLoader(to_torch(BatchData(ds, 64)), batch_size=None, num_workers=0)

Guarantees:

* **Exact delivery**: the datapoints of ``df``, in its order, with its structure (lists stay
  lists, tuples tuples, dicts dicts; a DataLoader's ``default_convert`` then makes tuples lists).
  Numeric NumPy arrays become tensors *without a copy* (``torch.from_numpy``: the tensor shares
  the array's memory), NumPy scalars 0-d tensors; other values (str, bytes, Python numbers,
  string arrays) pass unchanged. An array that is not writable
  (e.g. ``np.frombuffer`` over bytes) or has negative strides is copied first, since PyTorch
  supports neither: only then is there a copy. With ``pin_memory=True`` each tensor is copied into
  pinned (page-locked) memory for fast, asynchronous host-to-device transfers; without an
  accelerator, pinning is skipped (with a log message), as ``DataLoader(pin_memory=True)`` does.
* **Life cycle**: the dataset calls ``df.reset_state()`` itself, once, in the process that
  iterates (do not call it yourself). An iteration that is abandoned (the loader's iterator is
  closed or garbage-collected, e.g. after ``break``) or fails closes ``df``, which stops its
  workers; the next iteration resets it again. ``close()`` closes it explicitly. Errors raised by
  the dataflow (a ``WorkerError`` from its workers included) come out of the loader's loop.
* **Stages with worker processes** (``MultiProcessMapDataZMQ``, ``MultiProcessRunnerZMQ``,
  ...) cannot run inside DataLoader workers, which are daemonic: with ``num_workers > 0`` such a
  dataflow raises one :class:`~dataflow.errors.DataFlowError` that says so, from each worker
  before it starts anything (and before any warning). Use ``num_workers=0``.
* **Length**: ``len(dataset)`` is ``len(df)`` where the dataflow knows it, else ``TypeError``
  (:class:`~dataflow.errors.UnknownLengthError`).
* **Checkpoints** (``num_workers=0``): ``state_dict()`` / ``load_state_dict()`` forward to
  ``df``; with ``batch_size=None`` the loader fetches nothing ahead, so the state matches the
  datapoints the training loop has received.

``num_workers > 0`` also works for dataflows without process stages, without duplicates: in
each DataLoader worker the dataset takes the shard ``shard(df, worker_id, num_workers,
drop_remainder=False)``, so the union over workers is exactly one epoch of ``df`` (interleaved,
in a worker-dependent order). This needs every worker's
copy of ``df`` to yield the same sequence: random stages without ``seed=`` draw the same streams in
every worker (seeded from the DataLoader's per-iteration base seed, or from ``dataflow.set_seed``
when set), but a parallel stage must be ``ordered=True, strict=True``. Every worker runs the
*whole* pipeline and skips the others' datapoints, and thread-based parallel stages start their
threads in every worker (logged as a warning): duplicated work, which is why ``num_workers=0`` is
the recommended setting.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from dataflow._optional import import_optional
from dataflow.base import DataFlow
from dataflow.errors import DataFlowError
from dataflow.wrappers.batch import map_numeric_arrays

__all__ = ["to_torch"]  # DataFlowIterableDataset: defined on first access (needs torch)

_log = logging.getLogger(__name__)


def _import_torch() -> Any:
    return import_optional("torch", "dataflow.torch")  # (imports torch.utils.data)


def _converter(torch: Any, pin: bool) -> Any:
    from_numpy = torch.from_numpy

    def tensor(arr: np.ndarray) -> Any:
        if not arr.flags.writeable or any(s < 0 for s in arr.strides):
            arr = np.array(arr)  # PyTorch cannot wrap these: the only copy
        t = from_numpy(arr)
        return t.pin_memory() if pin else t

    return functools.partial(map_numeric_arrays, fn=lambda x: tensor(np.asarray(x)))


def _can_pin(torch: Any) -> bool:
    acc = getattr(torch, "accelerator", None)
    if acc is not None:
        return bool(acc.is_available())
    return bool(torch.cuda.is_available())


def _worker_stages(df: DataFlow) -> list[DataFlow]:
    """The stages of ``df`` (found through ``children()``) that run their own workers."""
    from dataflow.parallel._lifecycle import Lifecycle

    found: list[DataFlow] = []
    todo, seen = [df], set()
    while todo:
        flow = todo.pop(0)
        if id(flow) in seen:
            continue
        seen.add(id(flow))
        if isinstance(flow, Lifecycle):
            found.append(flow)
        todo += flow.children()
    return found


def _parallel_stage(df: DataFlow) -> str | None:
    """The name of the first stage of ``df`` that runs its own workers (threads or processes)."""
    stages = _worker_stages(df)
    return type(stages[0]).__name__ if stages else None


def _process_stage(df: DataFlow) -> str | None:
    """The name of the first stage of ``df`` whose workers are processes (anything but the
    thread back ends), which cannot start inside a DataLoader worker (a daemonic process)."""
    from dataflow.parallel import MultiThreadMapData, MultiThreadRunner

    for stage in _worker_stages(df):
        if not isinstance(stage, MultiThreadMapData | MultiThreadRunner):
            return type(stage).__name__
    return None


def _in_worker_error(stage: str) -> DataFlowError:
    return DataFlowError(
        f"to_torch: {stage} cannot start its worker processes inside a DataLoader worker (a "
        "daemonic process cannot have children). Use DataLoader(batch_size=None, "
        "num_workers=0) and let the dataflow parallelize."
    )


class _Bridge:
    """The dataset's logic, independent of ``IterableDataset`` (which needs torch to exist)."""

    def __init__(self, df: DataFlow, pin_memory: bool, seed: int | None) -> None:
        self.df = df
        self.pin_memory = pin_memory
        self._seed = seed  # dataflow's global seed when the dataset was made
        self._pid: int | None = None  # the process that set up _flow
        self._flow: DataFlow | None = None  # df, or this DataLoader worker's shard of it
        self._needs_reset = True

    def _setup(self) -> DataFlow:
        """The flow this process iterates: ``df``, or its shard in a DataLoader worker."""
        if self._flow is not None and self._pid == os.getpid():
            return self._flow
        torch = _import_torch()
        info = torch.utils.data.get_worker_info()
        flow = self.df
        if info is not None:
            stage = _process_stage(self.df)
            if stage is not None:  # before anything starts (or warns about duplicated work)
                raise _in_worker_error(stage)
        if info is not None and info.num_workers > 1:
            from dataflow.rng import set_seed
            from dataflow.sharding import ShardData

            # the same streams in every worker: their shards of one sequence stay disjoint
            set_seed(self._seed if self._seed is not None else info.seed - info.id)
            flow = ShardData(flow, info.id, info.num_workers, drop_remainder=False)
            threads = _parallel_stage(self.df)  # (thread-based: process stages raised above)
            if threads is not None and info.id == 0:
                _log.warning(
                    "to_torch: each of the %d DataLoader workers runs its own copy of %s and "
                    "keeps 1/%d of the results; use DataLoader(num_workers=0) and let the "
                    "dataflow parallelize.", info.num_workers, threads, info.num_workers)
        if info is not None:
            import multiprocessing.util

            # a worker that is shut down mid-epoch never finishes our generator
            multiprocessing.util.Finalize(self, flow.close, exitpriority=10)
        self._pid, self._flow, self._needs_reset = os.getpid(), flow, True
        return flow

    def __iter__(self) -> Iterator[Any]:
        flow = self._setup()
        torch = _import_torch()
        pin = self.pin_memory
        if pin and not _can_pin(torch):
            _log.info("to_torch(pin_memory=True): no accelerator is available, so tensors are "
                      "not pinned.")
            pin = False
        in_worker = torch.utils.data.get_worker_info() is not None
        return self._run(flow, _converter(torch, pin), in_worker)

    def _run(self, flow: DataFlow, convert: Any, in_worker: bool) -> Iterator[Any]:
        finished = False
        try:
            self._ensure_reset(flow)
            for dp in flow:
                yield convert(dp)
            finished = True
        except AssertionError as e:  # a process stage that _process_stage does not know
            if in_worker and "daemonic processes are not allowed to have children" in str(e):
                raise _in_worker_error(_parallel_stage(self.df) or "a stage of the dataflow"
                                       ) from e
            raise
        finally:
            # abandoned or failed: stop the flow's workers (a worker process always does)
            if not finished or in_worker:
                self._close_flow()

    def _ensure_reset(self, flow: DataFlow) -> None:
        if self._needs_reset:
            flow.reset_state()
            self._needs_reset = False

    def _close_flow(self) -> None:
        flow = self._flow if self._flow is not None else self.df
        flow.close()
        self._needs_reset = True

    def close(self) -> None:
        """Close the dataflow (stops its workers). Idempotent; a later iteration resets it."""
        self._close_flow()

    def __len__(self) -> int:
        return len(self.df)

    def state_dict(self) -> dict[str, Any]:
        """``df.state_dict()`` (for ``num_workers=0``)."""
        return self.df.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Reset ``df`` (if this dataset has not) and load ``state`` into it: the next
        iteration continues from it (for ``num_workers=0``)."""
        self._ensure_reset(self._setup())
        self.df.load_state_dict(state)

    def __reduce__(self) -> Any:  # to a spawned worker: the configuration, not the process state
        return (_rebuild, (self.df, self.pin_memory, self._seed))


def _rebuild(df: DataFlow, pin_memory: bool, seed: int | None) -> Any:
    return _dataset_class()(df, pin_memory, seed)


_CLASS: list[type] = []


def _dataset_class() -> type:
    """``DataFlowIterableDataset``, defined on first use (it subclasses a torch class)."""
    if not _CLASS:
        torch = _import_torch()

        class DataFlowIterableDataset(_Bridge, torch.utils.data.IterableDataset):  # type: ignore[name-defined]
            """A dataflow as a ``torch.utils.data.IterableDataset``; see :mod:`dataflow.torch`.
            Made by :func:`to_torch`."""

            __module__ = __name__

        _CLASS.append(DataFlowIterableDataset)
    return _CLASS[0]


def to_torch(df: DataFlow, pin_memory: bool = False) -> Any:
    """``df`` as a ``torch.utils.data.IterableDataset`` (see :mod:`dataflow.torch`).

    Use it with ``DataLoader(dataset, batch_size=None, num_workers=0)`` when the dataflow batches
    and parallelizes itself (recommended); ``num_workers > 0`` splits a dataflow without process
    stages between the workers without duplicates (one with process stages raises a
    DataFlowError). ``pin_memory=True`` copies tensors into pinned memory.
    """
    if not isinstance(df, DataFlow):
        raise TypeError(
            f"`df` must be a DataFlow, got {type(df).__name__}; wrap a list with "
            "DataFromList(lst, shuffle=False) or any iterable with DataFromIterable(it)."
        )
    if not isinstance(pin_memory, bool):
        raise TypeError(
            f"`pin_memory` must be a bool, got {pin_memory!r} (type {type(pin_memory).__name__})."
        )
    from dataflow.rng import get_seed

    return _dataset_class()(df, pin_memory, get_seed())


def __getattr__(name: str) -> Any:
    if name == "DataFlowIterableDataset":
        return _dataset_class()
    raise AttributeError(f"module 'dataflow.torch' has no attribute {name!r}")
