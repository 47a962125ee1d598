"""Reading a service's input flow by position.

A :class:`~dataflow.service.DataService` hands its workers dataset *indices*; each worker reads
the datapoint at an index itself, so datapoints never pass through the dispatcher. Flows that
can be read by index are read in place, in the worker: ``DataFromList`` and sequences, the
dataset loaders, ``NumpyData`` and ``HDF5Data`` (their arrays), and LMDB files
(``LMDBSerializer.load`` / ``LMDBData``: each worker opens the file and reads the key at the
index; the keys are the file's ``__keys__`` entry, or one scan of the keys at start). Any
other flow (a generator) is read once, in order, when the service starts, into a list that the
workers index: such a flow must be the cheap part of the pipeline (keys, file names, encoded
bytes), as the service's contract asks.
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


class _Columns:
    """``get(i)``: row ``i`` of equal-length columns (``HDF5Data``'s arrays)."""

    def __init__(self, columns: list[Any]) -> None:
        self.columns = columns

    def __len__(self) -> int:
        return len(self.columns[0]) if self.columns else 0

    def get(self, i: int) -> list[Any]:
        return [c[i] for c in self.columns]


class _LMDBByKey:
    """``get(i)``: the record of the ``i``-th key of an LMDB file, decoded as the flow decodes
    it. The file is opened at the first read, in the process that reads (a worker)."""

    def __init__(self, ds: Any) -> None:
        from dataflow.serialize.lmdb_data import KEYS_KEY, acquire_env, release_env

        self.path, self.what = ds._lmdb_path, ds._what
        self.decode = ds._decoder()
        keys = ds.keys
        if keys is None:  # (no `__keys__` entry and no keys given: one scan of the keys)
            env, key = acquire_env(self.path, self.what)
            try:
                with env.begin() as txn:
                    keys = [k for k in txn.cursor().iternext(keys=True, values=False)
                            if k != KEYS_KEY]
            finally:
                release_env(key)
        self.keys = list(keys)
        self._env: Any = None

    def __len__(self) -> int:
        return len(self.keys)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_env": None}

    def get(self, i: int) -> Any:
        from dataflow.serialize.lmdb_data import acquire_env

        if self._env is None:
            self._env, _key = acquire_env(self.path, self.what, readahead=False)
        key = self.keys[i]
        with self._env.begin() as txn:
            value = txn.get(key)
        if value is None:
            raise KeyError(f"{self.what}: key {key!r} (index {i}) is not in {self.path!r}; "
                           "the file changed since the service started.")
        return self.decode(value) if self.decode is not None else [key, value]


def positional(ds: Any) -> Any:
    """A by-index reader of ``ds`` (``len()`` and ``get(i)``): in place when ``ds`` can be
    read by index, else a list of one pass of it (read now, in this process)."""
    from dataflow.serialize import HDF5Data, LMDBData
    from dataflow.serialize.npz_format import NumpyData
    from dataflow.sources import DataFromList

    if isinstance(ds, DataFromList):
        return _ByIndex(list(ds.lst), "__getitem__")
    if isinstance(ds, LMDBData):
        return _LMDBByKey(ds)
    if isinstance(ds, NumpyData):
        return _ByIndex(ds._items, "__getitem__")
    if isinstance(ds, HDF5Data):
        return _Columns(list(ds._columns))
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
