"""Ray Data interop: a DataFlow as a ``ray.data.Dataset`` and a ``ray.data.Dataset`` as a
DataFlow, both streaming (nothing is materialised: rows move block by block, as the consumer
pulls them).

Rows and datapoints: a datapoint that is a list or tuple becomes a row whose columns are its
components, named by ``columns`` (default ``"0"``, ``"1"``, ...); a dict datapoint is a row as
it is. Back from Ray Data, a row becomes a list of its values in column order (or the dict
itself with ``as_dict=True``), so that ``DataFromRayDataset(to_ray_dataset(df))`` yields the
datapoints of ``df``. NumPy arrays stay arrays (Ray's tensor columns): one shape per column
per block travels as one contiguous tensor, other shapes as ragged tensors.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from dataflow._optional import import_optional
from dataflow.base import DataFlow
from dataflow.errors import UnknownLengthError
from dataflow.sources import DataFromIterable
from dataflow.validation import check_positive_int, known_length

__all__ = ["DataFromRayDataset", "to_ray_dataset"]

#: rows per block that ``to_ray_dataset`` yields by default
ROWS_PER_BLOCK = 256

#: the size up to which Ray Data merges the blocks of ``to_ray_dataset`` by default (Ray's own
#: default, 128 MiB, would hold a whole pass of small datapoints before the first row is out)
BLOCK_BYTES = 4 * 1024 * 1024


def to_ray_dataset(df: DataFlow, columns: Sequence[str] | None = None,
                   rows_per_block: int = ROWS_PER_BLOCK, block_bytes: int = BLOCK_BYTES) -> Any:
    """A ``ray.data.Dataset`` whose rows are the datapoints of one pass of ``df``.

    Streaming: nothing runs until the dataset is consumed; then one Ray task resets ``df``
    (in a Ray worker process: ``df`` is pickled with cloudpickle) and iterates it, yielding
    blocks of ``rows_per_block`` rows that Ray Data passes downstream while the next are
    made (Ray Data merges them up to ``block_bytes``); Ray Data's backpressure stops the task
    when the consumer falls behind, so at most a few blocks are ahead of it, whatever the size
    of ``df``, endless ones included.

    Guarantees: each execution of the dataset (each ``iter_rows()``, ``iter_batches()``,
    ``take()``, ...) is one pass of a copy of ``df`` as it was when ``to_ray_dataset`` was
    called (pickled then: each execution gives the same first epoch, the same datapoints for a
    seeded ``df``), every datapoint of it exactly once, in ``df``'s order (keep it through
    later parallel stages with Ray Data's
    ``DataContext.get_current().execution_options.preserve_order = True``). The read is one
    task, so it is not parallel: put the heavy work in later Ray Data stages (``map_batches``)
    or before, in ``df`` (e.g. a :class:`~dataflow.ray.RayMapData`). There is no resume: Ray
    Data does not save an iteration's position (``df``'s own ``state_dict`` is that of the
    copy in the Ray task).

    The dataset's length (``count()`` without executing) is ``len(df)`` when known.

    Args:
        df: the flow.
        columns: names of a list/tuple datapoint's components (default ``"0"``, ``"1"``, ...);
            dict datapoints keep their keys.
        rows_per_block: rows per block that the read task makes.
        block_bytes: Ray Data merges consecutive blocks up to this size (and splits larger
            ones): the unit in which rows reach the consumer.
    """
    data = _import_data()
    if not isinstance(df, DataFlow):
        raise TypeError(f"`df` must be a DataFlow, got {df!r} (type {type(df).__name__}); "
                        "wrap an iterable with DataFromIterable(...).")
    rows = check_positive_int(rows_per_block, "rows_per_block", ROWS_PER_BLOCK)
    names = None if columns is None else _check_columns(columns)
    size = check_positive_int(block_bytes, "block_bytes", BLOCK_BYTES)
    source = _datasource_class()(df, names, rows)
    ds = data.read_datasource(source, override_num_blocks=1)
    ds.context.target_max_block_size = size  # (this dataset's own copy of the context)
    return ds


def _import_data() -> Any:
    """``ray.data``, or an ``ImportError`` naming the extra to install."""
    return import_optional("ray.data", "the Ray Data interop of dataflow")


def _check_columns(columns: Any) -> tuple[str, ...]:
    if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
        raise TypeError(f"`columns` must be a sequence of str, got {columns!r}; pass e.g. "
                        "columns=['image', 'label'].")
    names = tuple(columns)
    if len(set(names)) != len(names):
        raise ValueError(f"`columns` must be distinct, got {list(names)!r}.")
    return names


def _row(dp: Any, names: tuple[str, ...] | None) -> dict[str, Any]:
    if isinstance(dp, dict):
        return dp
    if not isinstance(dp, (list, tuple)):
        raise TypeError(f"to_ray_dataset: a datapoint must be a list, tuple or dict, got "
                        f"{type(dp).__name__}: {dp!r:.100}")
    if names is None:
        return {str(i): v for i, v in enumerate(dp)}
    if len(names) != len(dp):
        raise ValueError(f"to_ray_dataset: a datapoint has {len(dp)} components, but "
                         f"`columns` names {len(names)}: {list(names)!r}.")
    return dict(zip(names, dp, strict=True))


def _column(values: list[Any]) -> Any:
    """One column of a block: stacked when every value is an array of one shape and dtype."""
    first = values[0]
    if isinstance(first, np.ndarray) and all(
            isinstance(v, np.ndarray) and v.shape == first.shape and v.dtype == first.dtype
            for v in values):
        return np.stack(values)
    if all(isinstance(v, (int, float, bool, np.number, np.bool_)) for v in values):
        return np.asarray(values)
    out = np.empty(len(values), dtype=object)  # (ragged arrays, str, bytes, objects)
    out[:] = values
    return out


def _block(rows: list[dict[str, Any]]) -> Any:
    from ray.data.block import BlockAccessor

    keys = list(rows[0])
    for r in rows:
        if list(r) != keys:
            raise ValueError(f"to_ray_dataset: rows of one dataset must have the same columns; "
                             f"got {keys!r} and {list(r)!r}.")
    return BlockAccessor.batch_to_block({k: _column([r[k] for r in rows]) for k in keys})


def _read(df: DataFlow, names: tuple[str, ...] | None, rows_per_block: int
          ) -> Iterator[Any]:
    """What the read task runs: one pass of ``df``, block by block."""
    df.reset_state()
    rows: list[dict[str, Any]] = []
    try:
        for dp in df:
            rows.append(_row(dp, names))
            if len(rows) == rows_per_block:
                yield _block(rows)
                rows = []
        if rows:
            yield _block(rows)
    finally:  # (also when Ray Data stops the read early: its workers, if any, are ended)
        df.close()


@functools.cache
def _datasource_class() -> type:
    """The ``ray.data.Datasource`` of ``to_ray_dataset`` (defined once Ray is imported)."""
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    class FlowDatasource(Datasource):
        """One read task: one pass of the flow."""

        def __init__(self, df: DataFlow, names: tuple[str, ...] | None, rows: int) -> None:
            super().__init__()
            self.df, self.names, self.rows = df, names, rows

        def get_name(self) -> str:
            return f"DataFlow({type(self.df).__name__})"

        def estimate_inmemory_data_size(self) -> int | None:
            return None

        def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                           data_context: Any = None) -> list[Any]:
            df, names, rows = self.df, self.names, self.rows
            meta = BlockMetadata(num_rows=known_length(df), size_bytes=None,
                                 input_files=None, exec_stats=None)
            return [ReadTask(lambda: _read(df, names, rows), meta,
                             per_task_row_limit=per_task_row_limit)]

    return FlowDatasource


class _Rows:
    """Re-iterable rows of a Ray dataset as datapoints (each ``iter`` executes it anew)."""

    def __init__(self, ds: Any, columns: tuple[str, ...] | None, as_dict: bool) -> None:
        self.ds, self.columns, self.as_dict = ds, columns, as_dict

    def __len__(self) -> int:
        if isinstance(self.ds, _import_data().dataset.MaterializedDataset):
            return int(self.ds.count())
        raise TypeError("a Ray dataset that is not materialized has no known length")

    def __iter__(self) -> Iterator[Any]:
        cols, as_dict = self.columns, self.as_dict
        for row in self.ds.iter_rows():
            if as_dict:
                yield dict(row) if cols is None else {c: row[c] for c in cols}
            else:
                yield list(row.values()) if cols is None else [row[c] for c in cols]


class DataFromRayDataset(DataFromIterable):
    """The rows of a ``ray.data.Dataset`` as datapoints, streamed with ``ds.iter_rows()``.

    Each ``__iter__`` executes ``ds`` anew (Ray Data's streaming execution: blocks are made
    as they are consumed, with backpressure; nothing is materialised) and yields every row of
    it exactly once, as a list of its values in column order (``columns``: those columns, in
    that order; ``as_dict=True``: the row as a dict). The order is the dataset's: its own
    order if its execution keeps it (one read task, or
    ``DataContext.get_current().execution_options.preserve_order = True``), else the order in
    which parallel tasks finish their blocks.

    ``len()`` is known for a ``MaterializedDataset`` (``ds.materialize()``) only: anything else
    would execute the dataset to count it.

    Resumable (``state_dict()`` / ``load_state_dict()``, as :class:`DataFromIterable`): the
    restored pass executes ``ds`` again and skips the rows already delivered, which is exact
    when the dataset's order is deterministic (see above) and its rows are the same each time.
    """

    def __init__(self, ds: Any, columns: Sequence[str] | None = None,
                 as_dict: bool = False) -> None:
        if not isinstance(ds, _import_data().Dataset):
            raise TypeError(f"`ds` must be a ray.data.Dataset, got {ds!r:.100} (type "
                            f"{type(ds).__name__}); make one with e.g. ray.data.from_items(...).")
        names = None if columns is None else _check_columns(columns)
        self.ds = ds
        super().__init__(_Rows(ds, names, bool(as_dict)))

    def __len__(self) -> int:
        if self._len is None:
            raise UnknownLengthError(
                "DataFromRayDataset over a Ray dataset that is not materialized has no length "
                "(counting its rows would execute it); call ds.materialize() first to know it."
            )
        return self._len

