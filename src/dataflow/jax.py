"""JAX bridge: ``to_jax(df, prefetch=2, sharding=None)`` yields the datapoints as ``jax.Array``s.

The dataflow keeps doing its own parallelism and batching; the bridge only moves each batch to
the device(s), ``prefetch`` batches ahead of the training step (``jax.device_put`` is
asynchronous, so the copies overlap with the computation)::

    from dataflow.jax import to_jax

    for epoch in range(epochs):
        for images, labels in to_jax(ds, prefetch=2):    # jax.Arrays on the default device
            params, loss = train_step(params, images, labels)

Multi-device batches: pass a ``jax.sharding.Sharding``, e.g. to split the batch axis over the
devices of a mesh::

    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    it = to_jax(ds, sharding=NamedSharding(mesh, PartitionSpec("data")))

or a callable ``hook(array) -> Sharding | Device | jax.Array`` that chooses per array (return a
``jax.Array`` to build it yourself, e.g. with ``jax.make_array_from_process_local_data`` on several
hosts, each with its own :func:`dataflow.shard` of the data).

Guarantees:

* **Exact delivery**: the datapoints of one epoch of ``df``, in order, with their structure
  (lists, tuples, dicts); numeric NumPy arrays and scalars become ``jax.Array`` (dtypes follow
  JAX's rules: 64-bit values become 32-bit unless ``jax_enable_x64`` is on); other values (str,
  bytes, Python numbers, string arrays) pass unchanged.
* **Life cycle**: the bridge calls ``df.reset_state()`` once per process (the first ``to_jax``
  of a flow; do not call it yourself). Each ``to_jax(df)`` iterates one epoch; call it again for
  the next one. ``close()`` (or leaving a ``with`` block, or dropping an unfinished iterator)
  closes ``df``, stopping its workers; an error from the dataflow is raised from ``next()`` and
  closes it too. A later ``to_jax(df)`` resets it again.
* **Checkpoints**: ``state_dict()`` is the dataflow's state after the last batch *returned*, not
  after the prefetched ones. With ``prefetch=0`` that is ``df.state_dict()``, free; with
  ``prefetch > 0`` pass ``track_state=True``, which saves ``df.state_dict()`` after every batch it
  pulls (cheap for most pipelines, but a stage that buffers datapoints, such as
  ``LocallyShuffleData``, encodes its buffer each time). Without it, ``state_dict()`` raises
  rather than return a state that would skip the prefetched batches. Restore with
  ``to_jax(df, ...).load_state_dict(state)`` before the first ``next()``.
"""

from __future__ import annotations

import collections
import functools
import os
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np

from dataflow._optional import import_optional
from dataflow.base import DataFlow
from dataflow.wrappers.batch import map_numeric_arrays

__all__ = ["JaxIterator", "to_jax"]

_RESET: weakref.WeakKeyDictionary[DataFlow, int] = weakref.WeakKeyDictionary()  # flow -> pid


def _import_jax() -> Any:
    return import_optional("jax", "dataflow.jax")


def _placer(jax: Any, sharding: Any) -> Any:
    """``array -> jax.Array`` for the ``sharding`` argument."""
    put = jax.device_put
    if sharding is None:
        return put
    if isinstance(sharding, jax.sharding.Sharding | jax.Device):
        return lambda arr: put(arr, sharding)

    def hook(arr: np.ndarray) -> Any:
        target = sharding(arr)
        if isinstance(target, jax.Array):
            return target
        if isinstance(target, jax.sharding.Sharding | jax.Device):
            return put(arr, target)
        raise TypeError(
            f"the `sharding` hook {sharding!r} returned {type(target).__name__} for an array of "
            f"shape {arr.shape} and dtype {arr.dtype}; it must return a jax.sharding.Sharding, "
            "a jax.Device or a jax.Array."
        )

    return hook


def _converter(place: Any) -> Any:
    return functools.partial(map_numeric_arrays, fn=place)


_END = object()


class JaxIterator(Iterator[Any]):
    """One epoch of a dataflow as ``jax.Array`` batches, ``prefetch`` ahead; see
    :mod:`dataflow.jax`. Made by :func:`to_jax`."""

    def __init__(self, df: DataFlow, prefetch: int, convert: Any, track_state: bool = False
                 ) -> None:
        self.df = df
        self.prefetch = prefetch
        self.track_state = track_state
        self._convert = convert
        self._itr: Iterator[Any] | None = None
        # converted batches ahead of the consumer, each with the flow's state after it
        self._queue: collections.deque[tuple[Any, Any]] = collections.deque()
        self._state: Any = None  # the flow's state after the last batch returned
        self._states = track_state  # whether to save the flow's state after each pull
        self._exhausted = False
        self._closed = False

    def _pull(self) -> bool:
        """Convert (and start the transfer of) one more datapoint; False at the epoch's end."""
        assert self._itr is not None
        dp = next(self._itr, _END)
        if dp is _END:
            self._exhausted = True
            return False
        batch = self._convert(dp)
        state = None
        if self._states:
            try:
                state = self.df.state_dict()
            except NotImplementedError:
                self._states = False
        self._queue.append((batch, state))
        return True

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        try:
            if self._itr is None:
                self._itr = iter(self.df)
            while not self._exhausted and len(self._queue) <= self.prefetch:
                if not self._pull():
                    break
        except BaseException:
            self.close()  # a failed flow: stop its workers; the error goes to the loop
            raise
        if not self._queue:
            self._itr = None
            raise StopIteration
        batch, self._state = self._queue.popleft()
        return batch

    def state_dict(self) -> dict[str, Any]:
        """The dataflow's state after the last batch returned by ``next()``."""
        if self._itr is None or not self._queue:  # nothing fetched ahead
            return self.df.state_dict()
        if not self.track_state:
            raise RuntimeError(
                f"to_jax(prefetch={self.prefetch}) holds {len(self._queue)} batch(es) fetched "
                "ahead, so the dataflow's state is past the batches returned; pass "
                "track_state=True to to_jax (or prefetch=0) to checkpoint."
            )
        if not self._states:
            raise NotImplementedError(
                f"{type(self.df).__name__} cannot save its iteration state, so to_jax cannot "
                "either."
            )
        return self._state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict` into the dataflow, before the first ``next``."""
        if self._itr is not None:
            raise RuntimeError(
                "JaxIterator.load_state_dict must be called before the first next(); make a new "
                "iterator with to_jax(df) and load the state into it."
            )
        self.df.load_state_dict(state)

    def close(self) -> None:
        """Drop the prefetched batches and close the dataflow (stops its workers). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._queue.clear()
        itr, self._itr = self._itr, None
        if itr is not None and hasattr(itr, "close"):
            itr.close()
        _RESET.pop(self.df, None)  # a later to_jax resets the flow again
        self.df.close()

    def __enter__(self) -> JaxIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # an abandoned, unfinished iterator stops the flow's workers
        if not self._exhausted and not self._closed and self._itr is not None:
            try:
                self.close()
            except Exception:
                pass


def to_jax(df: DataFlow, prefetch: int = 2, sharding: Any = None, *, track_state: bool = False
           ) -> JaxIterator:
    """An iterator over one epoch of ``df`` whose numeric arrays are ``jax.Array``s.

    Args:
        df: the dataflow (usually batched, e.g. by ``BatchData``).
        prefetch: batches put on the device ahead of the one returned (0: none).
        sharding: ``None`` (the default device), a ``jax.sharding.Sharding`` or ``jax.Device``
            for every array, or a callable ``hook(array)`` returning one of those or a
            ``jax.Array``.
        track_state: save the flow's state after every batch, so that ``state_dict()`` works
            with ``prefetch > 0`` (see :mod:`dataflow.jax`).
    """
    if not isinstance(df, DataFlow):
        raise TypeError(
            f"`df` must be a DataFlow, got {type(df).__name__}; wrap a list with "
            "DataFromList(lst, shuffle=False) or any iterable with DataFromIterable(it)."
        )
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
        raise ValueError(
            f"`prefetch` must be an int >= 0, got {prefetch!r}; pass e.g. prefetch=2 (batches "
            "transferred ahead), or 0 for none."
        )
    jax = _import_jax()
    if sharding is not None and not (
        isinstance(sharding, jax.sharding.Sharding | jax.Device) or callable(sharding)
    ):
        raise TypeError(
            f"`sharding` must be None, a jax.sharding.Sharding, a jax.Device or a callable "
            f"array -> Sharding, got {sharding!r} (type {type(sharding).__name__})."
        )
    pid = os.getpid()
    if _RESET.get(df) != pid:
        df.reset_state()
        _RESET[df] = pid
    return JaxIterator(df, prefetch, _converter(_placer(jax, sharding)), bool(track_state))
