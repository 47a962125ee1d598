"""Reading a service's input flow by position.

A :class:`~dataflow.service.DataService` hands its workers dataset *indices*; each worker reads
the datapoint at an index itself, so datapoints never pass through the dispatcher. Flows that
can be read by index (``DataFromList``, sequences, the dataset loaders, ``NumpyData``) are read in
place, in the worker. Any other flow (an LMDB file, a generator) is read once, in order, when the
service starts, into a list that the workers index: such a flow must be the cheap part of the
pipeline (keys, file names, encoded bytes), as the service's contract asks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["positional"]


class _ByIndex:
    """``get(i)`` over a flow or sequence that answers ``[i]`` (or a loader's ``_datapoint``)."""

    def __init__(self, items: Any, getter: str) -> None:
        self.items, self.getter = items, getter

    def __len__(self) -> int:
        return len(self.items)

    def get(self, i: int) -> Any:
        return getattr(self.items, self.getter)(i)


def positional(ds: Any) -> _ByIndex:
    """A by-index reader of ``ds``: in place when ``ds`` can be read by index, else a list of
    one pass of it (read now, in this process)."""
    from dataflow.sources import DataFromList

    if isinstance(ds, DataFromList):
        return _ByIndex(list(ds.lst), "__getitem__")
    if isinstance(ds, Sequence) and not isinstance(ds, str | bytes):
        return _ByIndex(ds, "__getitem__")
    if callable(getattr(ds, "_datapoint", None)):  # the dataset loaders (IndexedDataset)
        ds.reset_state()
        return _ByIndex(ds, "_datapoint")
    ds.reset_state()
    items = list(ds)
    close = getattr(ds, "close", None)
    if callable(close):
        close()
    return _ByIndex(items, "__getitem__")
