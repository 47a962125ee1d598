"""``BatchData`` and ``BatchDataByShape``: group consecutive datapoints into batches."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from dataflow.base import DataFlow, DataFlowReentrantGuard, ProxyDataFlow
from dataflow.errors import UnknownLengthError

__all__ = ["BatchData", "BatchDataByShape", "stack_component"]

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _describe(values: Sequence[Any]) -> str:
    parts = []
    for i, v in enumerate(values):
        shape = getattr(v, "shape", None)
        dtype = getattr(v, "dtype", None)
        desc = type(v).__name__
        if shape is not None:
            desc += f" shape={tuple(shape)}"
        if dtype is not None:
            desc += f" dtype={dtype}"
        parts.append(f"  element {i}: {desc}")
    return "\n".join(parts)


def stack_component(values: list[Any], key: Any = 0) -> np.ndarray:
    """Stack one component of a batch into an array, with dtypes chosen from *all* elements.

    * arrays and NumPy scalars: stacked along a new axis 0 (NumPy's type promotion);
    * Python ``bool`` only: ``bool``; Python ints: ``int32``, or ``int64`` if any value does not
      fit int32; any Python ``float`` among numbers: ``float32``;
    * ``str``/``bytes``: a NumPy string array.

    Raises ``ValueError`` listing each element's shape when the shapes differ (ragged batch), and
    ``TypeError`` for values that cannot be stacked; both suggest ``use_list=True``.
    """
    first = values[0]
    try:
        if type(first) in (int, float, bool):  # Python numbers: the common fast path
            arr = np.asarray(values)
            kind = arr.dtype.kind
            if kind == "i":
                if arr.dtype.itemsize > 4:
                    lo, hi = arr.min(), arr.max()
                    if lo >= _INT32_MIN and hi <= _INT32_MAX:
                        arr = arr.astype(np.int32)
                return arr
            if kind == "f":
                return arr.astype(np.float32) if arr.dtype == np.float64 else arr
            if kind in "bu":
                return arr
            raise TypeError(f"values of mixed types: {sorted({type(v).__name__ for v in values})}")
        if isinstance(first, np.ndarray | np.generic):
            return np.stack(values) if isinstance(first, np.ndarray) else np.asarray(values)
        if isinstance(first, str | bytes):
            if not all(isinstance(v, type(first)) for v in values):
                raise TypeError(
                    f"values of mixed types: {sorted({type(v).__name__ for v in values})}"
                )
            return np.asarray(values)
        arr = np.asarray(values)
        if arr.dtype == object:
            raise TypeError(f"cannot stack values of type {type(first).__name__}")
        return arr
    except ValueError as e:
        raise ValueError(
            f"BatchData cannot stack component {key!r}: the elements have different shapes "
            f"({e}).\n{_describe(values)}\nMake the shapes equal (resize or pad in a MapData "
            "before batching), batch by shape with BatchDataByShape, or pass use_list=True."
        ) from e
    except TypeError as e:
        raise TypeError(
            f"BatchData cannot stack component {key!r}: {e}.\n{_describe(values)}\n"
            "Convert the component to numbers or arrays first, or pass use_list=True."
        ) from e


def _aggregate(holder: list[Any], use_list: bool) -> Any:
    first = holder[0]
    if isinstance(first, list | tuple):
        n = len(first)
        if use_list:
            return [[dp[k] for dp in holder] for k in range(n)]
        return [stack_component([dp[k] for dp in holder], k) for k in range(n)]
    if isinstance(first, dict):
        if use_list:
            return {k: [dp[k] for dp in holder] for k in first}
        return {k: stack_component([dp[k] for dp in holder], k) for k in first}
    raise ValueError(
        f"BatchData needs list, tuple or dict datapoints, got {type(first).__name__}; "
        "wrap each datapoint in a list with MapData(df, lambda x: [x])."
    )


class BatchData(ProxyDataFlow):
    """Groups ``batch_size`` consecutive datapoints into one.

    The batch has the datapoints' structure (list or dict) with each component stacked along a
    new axis 0 (see :func:`stack_component` for dtypes), or, with ``use_list=True``, a Python list.
    ``remainder=True`` also emits the last, smaller batch of an epoch. ``len`` is
    ``len(ds) // batch_size`` (plus one with a remainder).
    """

    def __init__(
        self, ds: DataFlow, batch_size: int, remainder: bool = False, use_list: bool = False
    ) -> None:
        super().__init__(ds)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer):
            raise TypeError(f"`batch_size` must be an int, got {batch_size!r}.")
        if batch_size < 1:
            raise ValueError(f"`batch_size` must be >= 1, got {batch_size}.")
        if not remainder:
            try:
                n = len(ds)
            except NotImplementedError:
                pass
            else:
                if batch_size > n:
                    raise ValueError(
                        f"`batch_size`={batch_size} is larger than the dataflow's length {n}, so "
                        "no batch would ever be produced; use a smaller batch_size or "
                        "remainder=True."
                    )
        self.batch_size = int(batch_size)
        self.remainder = remainder
        self.use_list = use_list

    def __len__(self) -> int:
        n = len(self.ds)
        q, r = divmod(n, self.batch_size)
        return q + (1 if self.remainder and r else 0)

    def __iter__(self) -> Iterator[Any]:
        bs, use_list = self.batch_size, self.use_list
        holder: list[Any] = []
        append = holder.append
        for dp in self.ds:
            append(dp)
            if len(holder) == bs:
                yield _aggregate(holder, use_list)
                holder.clear()
        if self.remainder and holder:
            yield _aggregate(holder, use_list)

    @staticmethod
    def aggregate_batch(data_holder: list[Any], use_list: bool = False) -> Any:
        """Aggregate a list of datapoints into one batch (tensorpack's static helper)."""
        if not data_holder:
            raise ValueError("`data_holder` is empty: there is nothing to aggregate.")
        return _aggregate(data_holder, use_list)


class BatchDataByShape(BatchData):
    """Batches datapoints whose component ``idx`` has the same shape.

    Datapoints are kept in one bucket per shape; a bucket is emitted when it holds ``batch_size``.
    Leftovers are never emitted, and the buckets persist across epochs. Non-reentrant.
    The length is unknown.
    """

    def __init__(self, ds: DataFlow, batch_size: int, idx: Any) -> None:
        super().__init__(ds, batch_size, remainder=False)
        self.idx = idx
        self._guard = DataFlowReentrantGuard("BatchDataByShape")
        self._buckets: dict[tuple[int, ...], list[Any]] = {}

    def __len__(self) -> int:
        raise UnknownLengthError("BatchDataByShape has no length: it depends on the shapes.")

    def reset_state(self) -> None:
        super().reset_state()
        self._buckets = {}

    def __iter__(self) -> Iterator[Any]:
        with self._guard:
            idx, bs, buckets = self.idx, self.batch_size, self._buckets
            for dp in self.ds:
                shape = np.shape(dp[idx])
                bucket = buckets.setdefault(shape, [])
                bucket.append(dp)
                if len(bucket) == bs:
                    yield _aggregate(bucket, self.use_list)
                    del bucket[:]
