"""``BatchData`` and ``BatchDataByShape``: group consecutive datapoints into batches."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Any

import numpy as np

from dataflow._optional import NO_C_EXT_ENV, c_extensions_off
from dataflow.base import DataFlow, DataFlowReentrantGuard, ProxyDataFlow
from dataflow.errors import UnknownLengthError
from dataflow.state import check_state, decode_items, encode_items

__all__ = ["NUMERIC_KINDS", "BatchData", "BatchDataByShape", "map_numeric_arrays",
           "stack_component"]

try:  # the optional C extension: copies equal arrays into the batch, one memcpy each
    if c_extensions_off():
        raise ImportError(f"turned off by {NO_C_EXT_ENV}=1")
    from dataflow.wrappers._stack import fill as _fill
except ImportError:  # not built (no C compiler), or turned off: NumPy stacks alone
    _fill = None


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


def _mixed(values: Sequence[Any]) -> str:
    return f"values of mixed types: {sorted({type(v).__name__ for v in values})}"


def stack_equal(values: Sequence[Any]) -> np.ndarray | None:
    """``np.asarray(values)`` when every value is a NumPy array (or scalar) of the first's type,
    dtype and shape (the usual batch): each copied in with one ``memcpy``, without NumPy's
    per-element discovery; ``None`` otherwise (or without the C extension), for the caller to
    stack with NumPy, which promotes types and reports ragged shapes."""
    first = values[0]
    dtype = getattr(first, "dtype", None)
    if _fill is None or dtype is None or dtype.kind in "OMmV" or not dtype.isnative:
        return None
    out = np.empty((len(values), *first.shape), dtype)
    return out if _fill(out, values, first) else None


def stack_component(values: Sequence[Any], key: Any = 0) -> np.ndarray:
    """Stack one component of a batch into an array, with dtypes chosen from *all* elements.

    * arrays and NumPy scalars: stacked along a new axis 0 (NumPy's type promotion);
    * Python ``bool`` only: ``bool``; Python ints: ``int32``, or ``int64`` if any value does not
      fit int32; any Python ``float`` among numbers: ``float32`` (as NumPy does, a numeric string
      among floats is converted);
    * ``str``/``bytes``: a NumPy string array.

    Raises ``ValueError`` listing each element's shape when the shapes differ (ragged batch), and
    ``TypeError`` for values that cannot be stacked; both suggest ``use_list=True``.
    """
    first = values[0]
    try:
        ftype = type(first)
        if ftype is np.ndarray or isinstance(first, np.generic):
            out = stack_equal(values)
            if out is not None:
                return out
            return np.asarray(values)  # stacks along a new axis; raises on ragged shapes
        if ftype is float:  # Python floats (ints and bools among them become floats too)
            try:
                return np.asarray(values, dtype=np.float32)
            except (ValueError, TypeError):
                raise TypeError(_mixed(values)) from None
        if ftype is int or ftype is bool:
            types = set(map(type, values))
            if types == {bool}:
                return np.asarray(values, dtype=np.bool_)
            if types <= {int, bool}:
                try:
                    return np.asarray(values, dtype=np.int32)
                except OverflowError:  # a value does not fit int32
                    return np.asarray(values, dtype=np.int64)
            if types <= {int, bool, float}:
                return np.asarray(values, dtype=np.float32)
            raise TypeError(_mixed(values))
        arr = np.asarray(values)
        kind = arr.dtype.kind
        if isinstance(first, str | bytes):
            if kind not in "SU" or not all(type(v) is ftype for v in values):
                raise TypeError(_mixed(values))
            return arr
        if kind == "O":
            raise TypeError(f"cannot stack values of type {ftype.__name__}")
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
        out: list[Any]
        if use_list:
            out = [list(c) for c in zip(*holder)]
        else:
            out = [stack_component(c, k) for k, c in enumerate(zip(*holder))]
        if len(out) != len(first):  # zip stops at the shortest datapoint
            lens = sorted({len(dp) for dp in holder})
            raise ValueError(
                f"BatchData needs datapoints with the same number of components, got {lens}."
            )
        return out
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

    profile_hint = "batch"

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
        return self._run(iter(self.ds))  # the child's epoch begins with this iterator

    def state_dict(self) -> dict[str, Any]:
        """The child's state, and the settings that decide where a batch begins: a state
        loaded into a ``BatchData`` with another ``batch_size`` or ``remainder`` is refused
        (its position would fall inside a batch)."""
        return {"type": type(self).__name__, "batch_size": self.batch_size,
                "remainder": bool(self.remainder), "child": self.ds.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        settings = {"batch_size": self.batch_size, "remainder": bool(self.remainder)}
        # (states saved before the settings were part of them have neither)
        check_state(state, self, **{k: v for k, v in settings.items()
                                    if isinstance(state, dict) and k in state})
        self.ds.load_state_dict(state["child"])

    def _run(self, itr: Iterator[Any]) -> Iterator[Any]:
        bs, use_list = self.batch_size, self.use_list
        while True:
            chunk = list(islice(itr, bs))  # one C-level call per batch, not one per datapoint
            if len(chunk) < bs:
                if self.remainder and chunk:
                    yield _aggregate(chunk, use_list)
                return
            yield _aggregate(chunk, use_list)

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

    def state_dict(self) -> dict[str, Any]:
        """The child's state and, since this flow holds a buffer, the datapoints waiting in the
        buckets (fewer than ``batch_size`` per shape)."""
        buckets = [[list(shape), items] for shape, items in self._buckets.items() if items]
        return {"type": "BatchDataByShape", "batch_size": self.batch_size,
                "buckets": encode_items(buckets), "child": self.ds.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state(state, self, batch_size=self.batch_size)
        self._buckets = {tuple(shape): items for shape, items in decode_items(state["buckets"])}
        self.ds.load_state_dict(state["child"])

    def _run(self, itr: Iterator[Any]) -> Iterator[Any]:
        with self._guard:
            idx, bs, buckets = self.idx, self.batch_size, self._buckets
            for dp in itr:
                shape = np.shape(dp[idx])
                bucket = buckets.setdefault(shape, [])
                bucket.append(dp)
                if len(bucket) == bs:
                    buckets[shape] = []  # emptied before the yield: a saved state is exact
                    yield _aggregate(bucket, self.use_list)


#: NumPy dtype kinds that frameworks take as tensors: bool, int, uint, float, complex
NUMERIC_KINDS = frozenset("biufc")


def map_numeric_arrays(obj: Any, fn: Any) -> Any:
    """``obj`` with every numeric NumPy array or scalar replaced by ``fn(x)``, through lists,
    tuples and dicts (their types kept); anything else is returned as it is."""
    if isinstance(obj, np.ndarray | np.generic):
        return fn(obj) if obj.dtype.kind in NUMERIC_KINDS else obj
    tp = type(obj)
    if tp is list:
        return [map_numeric_arrays(x, fn) for x in obj]
    if tp is tuple:
        return tuple(map_numeric_arrays(x, fn) for x in obj)
    if isinstance(obj, dict):
        return tp((k, map_numeric_arrays(v, fn)) for k, v in obj.items())
    return obj
