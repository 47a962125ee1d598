"""Reading a flow by position: the shared reader of the snapshot and the data service.

A :class:`~dataflow.snapshot.SnapshotData` computes and stores the output at a dataset
*index*; a :class:`~dataflow.service.DataService` hands its workers indices. Both read the
datapoint at an index themselves, in the process that needs it. Flows that can be read by
index are read in place: a flow whose class says ``by_position = True`` (it answers ``len()``
and ``[i]``: a ``SnapshotData``), ``DataFromList`` and sequences (anything with ``__len__`` and
``__getitem__``, a ``SnapshotData`` included), the dataset loaders, ``NumpyData`` and
``HDF5Data`` (their arrays), and LMDB files (``LMDBSerializer.load`` / ``LMDBData``: each reader
opens the file and reads the key at the index; the keys are the file's ``__keys__`` entry, or
one scan of the keys at start). Any other flow with a ``len()`` (a generator) is read once, in
order, into a list that is indexed: such a flow must be the cheap part of the pipeline (keys,
file names, encoded bytes). A flow without a ``len()`` is refused: it may never end.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["positional", "reads_in_place"]


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
        self._opening = threading.Lock()  # (threads may read at once: one opens the file)

    def __len__(self) -> int:
        return len(self.keys)

    def __getstate__(self) -> dict[str, Any]:
        state = {**self.__dict__, "_env": None}
        del state["_opening"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _opening=threading.Lock())

    def get(self, i: int) -> Any:
        if self._env is None:
            from dataflow.serialize.lmdb_data import acquire_env

            with self._opening:
                if self._env is None:
                    self._env, _key = acquire_env(self.path, self.what, readahead=False)
        key = self.keys[i]
        with self._env.begin() as txn:
            value = txn.get(key)
        if value is None:
            raise KeyError(f"{self.what}: key {key!r} (index {i}) is not in {self.path!r}; "
                           "the file changed since the service started.")
        return self.decode(value) if self.decode is not None else [key, value]


def _is_duck_sequence(ds: Any) -> bool:
    """A sequence that is not registered as one: ``__len__`` and ``__getitem__``, and not a
    DataFlow (a flow's ``[i]``, where it has one, is not how the flow is read)."""
    from dataflow.base import DataFlow

    return (not isinstance(ds, DataFlow) and callable(getattr(ds, "__len__", None))
            and callable(getattr(ds, "__getitem__", None)))


def _length(ds: Any) -> int:
    """``len(ds)`` of a flow to be read once, or a clear error where it has none."""
    if not callable(getattr(ds, "__iter__", None)) or not callable(
            getattr(ds, "reset_state", None)):
        raise TypeError(
            f"`ds` must be a DataFlow or a sequence (``__len__`` and ``__getitem__``) of "
            f"datapoints, got {type(ds).__name__}: {ds!r:.80}. Pass a list, a DataFromList, "
            "an LMDB/Numpy/HDF5 flow or a dataset loader.")
    try:
        size = len(ds)
    except (NotImplementedError, TypeError) as e:
        raise ValueError(
            f"`ds` ({type(ds).__name__}) has no len(): a flow read by position must have a "
            "known size, and one without may never end. Pass a flow with a len() (e.g. "
            "DataFromList(keys) of the keys or file names), or wrap a finite flow in "
            "FixedSizeData(ds, size) to say how many datapoints to read.") from e
    if not isinstance(size, int) or size < 0:
        raise ValueError(f"`ds` ({type(ds).__name__}) has len() {size!r}; it must be an int >= 0.")
    return size


def reads_in_place(ds: Any) -> bool:
    """Whether :func:`positional` reads ``ds`` where it is (by index, a datapoint at a time),
    rather than one pass of it into a list."""
    from dataflow.serialize import HDF5Data, LMDBData
    from dataflow.serialize.npz_format import NumpyData
    from dataflow.sources import DataFromList

    return bool(getattr(type(ds), "by_position", False)) or isinstance(
        ds, DataFromList | LMDBData | NumpyData | HDF5Data | Sequence) or _is_duck_sequence(
        ds) or callable(getattr(ds, "_datapoint", None))


def positional(ds: Any) -> Any:
    """A by-index reader of ``ds`` (``len()`` and ``get(i)``): in place when ``ds`` can be
    read by index, else a list of one pass of its ``len()`` datapoints (read now, in this
    process). A flow without a ``len()`` is refused with a ``ValueError``."""
    from dataflow.serialize import HDF5Data, LMDBData
    from dataflow.serialize.npz_format import NumpyData
    from dataflow.sources import DataFromList

    if getattr(type(ds), "by_position", False):  # a flow that says it reads by position
        return _ByIndex(ds, "__getitem__")
    if isinstance(ds, DataFromList):
        return _ByIndex(list(ds.lst), "__getitem__")
    if isinstance(ds, LMDBData):
        return _LMDBByKey(ds)
    if isinstance(ds, NumpyData):
        return _ByIndex(ds._items, "__getitem__")
    if isinstance(ds, HDF5Data):
        return _Columns(list(ds._columns))
    if isinstance(ds, str | bytes):
        raise TypeError(f"`ds` must be a flow or a sequence of datapoints, got a "
                        f"{type(ds).__name__} ({ds[:40]!r}); pass a list, e.g. [{ds[:20]!r}].")
    if isinstance(ds, Sequence) or _is_duck_sequence(ds):
        return _ByIndex(ds, "__getitem__")
    if callable(getattr(ds, "_datapoint", None)):  # the dataset loaders (IndexedDataset)
        ds.reset_state()
        return _ByIndex(ds, "_datapoint")
    size = _length(ds)
    ds.reset_state()
    items = list(itertools.islice(iter(ds), size))
    close = getattr(ds, "close", None)
    if callable(close):
        close()
    return _ByIndex(items, "__getitem__")
