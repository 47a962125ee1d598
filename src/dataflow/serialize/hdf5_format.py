"""``HDF5Serializer`` and ``HDF5Data``: one HDF5 dataset per datapoint component.

Layout (tensorpack's): for ``data_paths=['image', 'label']`` the file holds datasets ``image``
(shape ``(N, *image_shape)``) and ``label`` (shape ``(N,)``); datapoint ``i`` is
``[image[i], label[i]]``. Components must be numbers or arrays of one shape per component;
``str`` components are stored as UTF-8 variable-length strings and ``bytes`` as
variable-length ``uint8`` (attribute ``dataflow_kind = 'bytes'``), and load back as such.

Differences from tensorpack, on purpose: saving streams in batches into resizable datasets
(bounded memory instead of one list per component); a component of the wrong shape, dtype or
kind gets an error naming the datapoint, component and path; dict datapoints are accepted
(components are looked up by ``data_paths``); writes are atomic; ``HDF5Data`` checks that the
datasets exist and have equal lengths, with clear errors.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from itertools import islice
from typing import Any

import numpy as np

from dataflow.base import RNGDataFlow
from dataflow.serialize._atomic import (
    CorruptFileError,
    ProgressMeter,
    begin_save,
    check_data_paths,
    check_source_path,
    describe,
    import_optional,
)
from dataflow.serialize._atomic_write import atomic_output, check_output
from dataflow.state import ReaderState
from dataflow.wrappers.batch import stack_equal

__all__ = ["HDF5Data", "HDF5Serializer"]

_KIND_ATTR = "dataflow_kind"
_BATCH_BYTES = 32 << 20


class HDF5Data(ReaderState, RNGDataFlow):
    """Yields ``[ds[i] for ds in data_paths]`` from an HDF5 file, all loaded into memory.

    Args:
        filename: the HDF5 file.
        data_paths: the dataset names, one per datapoint component.
        shuffle: a new random order every epoch (else file order).
        seed: seed of the orders (default: the global seed, else OS entropy).

    Numeric components come out as NumPy scalars / arrays (e.g. ``np.int64``), ``str`` and
    ``bytes`` components as Python ``str`` / ``bytes``. ``len`` is exact; not reentrant.
    Resumable: ``state_dict()`` saves epoch, position and seed; a restored flow continues at
    the position by index arithmetic.
    """

    def __init__(
        self,
        filename: str | os.PathLike,
        data_paths: list[str],
        shuffle: bool = True,
        *,
        seed: int | None = None,
    ) -> None:
        h5py = import_optional("h5py", "HDF5Data")
        self._filename = check_source_path(filename, "HDF5Data", "filename")
        self._data_paths = check_data_paths(data_paths)
        self._init_reader(shuffle, seed)
        try:
            f = h5py.File(self._filename, "r")
        except OSError as e:
            raise CorruptFileError(
                f"HDF5Data: {self._filename!r} is not a readable HDF5 file ({e}); it is corrupt, "
                "truncated or of another format."
            ) from e
        with f:
            self._columns = [self._read(f, p) for p in self._data_paths]
        lens = [len(c) for c in self._columns]
        if len(set(lens)) > 1:
            sizes = ", ".join(f"{p!r}: {n}" for p, n in zip(self._data_paths, lens))
            raise CorruptFileError(
                f"HDF5Data: the datasets of {self._filename!r} have different lengths ({sizes}); "
                "every data path must hold one entry per datapoint."
            )
        self._size = lens[0]

    def _read(self, f: Any, path: str) -> Any:
        if path not in f:
            names: list[str] = []
            f.visit(names.append)
            raise KeyError(
                f"HDF5Data: {self._filename!r} has no dataset {path!r}; it holds {names}. "
                "Check `data_paths`."
            )
        ds = f[path]
        kind = ds.attrs.get(_KIND_ATTR, "")
        if kind == "bytes":
            return [x.tobytes() for x in ds[...]]
        if ds.dtype.kind == "O" or ds.dtype.kind == "S":
            import h5py

            if h5py.check_string_dtype(ds.dtype) is not None:
                return ds.asstr()[...] if ds.dtype.kind == "O" else ds[...]
        return ds[...]

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[list[Any]]:
        return self._run(*self._begin_epoch())

    def _run(self, token: object, epoch: int, start: int) -> Iterator[list[Any]]:
        with self._guard:
            cols = self._columns
            if self._shuffle:
                order = self._epoch_rng(epoch).permutation(self._size)[start:].tolist()
                if len(cols) == 2:
                    a, b = cols
                    for self._pos, i in enumerate(order, start + 1):
                        yield [a[i], b[i]]
                else:
                    for self._pos, i in enumerate(order, start + 1):
                        yield [c[i] for c in cols]
            else:
                rows = zip(*(c[start:] for c in cols)) if start else zip(*cols)
                for self._pos, dp in enumerate(rows, start + 1):
                    yield list(dp)
            self._end(token)


class _Column:
    """One growing dataset; created from the first batch, which fixes shape and dtype."""

    def __init__(self, f: Any, path: str, index: int) -> None:
        self.f = f
        self.path = path
        self.index = index
        self.ds: Any = None
        self.kind = ""

    def _error(self, first: int, msg: str) -> ValueError:
        return ValueError(
            f"HDF5Serializer.save: component {self.index} (data path {self.path!r}) of the "
            f"datapoints from index {first} {msg}"
        )

    def _as_array(self, values: tuple, first: int) -> np.ndarray:
        v0 = values[0]
        kind = self._batch_kind(values, first)
        if kind == "bytes":
            arr = np.empty(len(values), dtype=object)
            for i, v in enumerate(values):
                arr[i] = np.frombuffer(v, dtype=np.uint8)
            return arr
        try:
            stacked = stack_equal(values)
            arr = np.asarray(values) if stacked is None else stacked
        except ValueError as e:
            shapes = sorted({np.shape(v) for v in values})
            raise self._error(first, f"have different shapes {shapes[:4]}: {e}") from e
        if kind == "str":
            return arr.astype(object)
        if arr.dtype.kind not in "biufc":
            if any(isinstance(v, str | bytes | bytearray) for v in values):
                raise self._error(first, "mix numbers/arrays with str or bytes")
            raise self._error(
                first,
                f"hold {describe(v0)} (dtype {arr.dtype}) which HDF5Serializer cannot store; "
                "components must be numbers, arrays of one shape, str or bytes",
            )
        return arr

    def _batch_kind(self, values: tuple, first: int) -> str:
        """``'bytes'``, ``'str'`` or ``''`` (numeric); the same for every batch."""
        if isinstance(values[0], bytes | bytearray):
            kind = "bytes"
            if not all(isinstance(v, bytes | bytearray) for v in values):
                raise self._error(first, "mix bytes with other types")
        elif isinstance(values[0], str):
            kind = "str"
            if not all(isinstance(v, str) for v in values):
                raise self._error(first, "mix str with other types")
        else:
            kind = ""
        if self.ds is None:
            self.kind = kind
        elif kind != self.kind:
            names = {"bytes": "bytes", "str": "str", "": "numbers/arrays"}
            raise self._error(first, f"hold {names[kind]} but earlier ones hold {names[self.kind]}")
        return kind

    def append(self, values: tuple, first: int) -> None:
        arr = self._as_array(values, first)
        if self.ds is None:
            self._create(arr)
        ds = self.ds
        assert ds is not None
        if arr.shape[1:] != ds.shape[1:]:
            raise self._error(first, f"have shape {arr.shape[1:]}, earlier ones {ds.shape[1:]}")
        if self.kind == "" and not np.can_cast(arr.dtype, ds.dtype, "safe"):
            raise self._error(
                first,
                f"have dtype {arr.dtype} but earlier ones {ds.dtype}; cast them to one "
                "dtype (e.g. with MapDataComponent) before saving",
            )
        n0 = ds.shape[0]
        ds.resize(n0 + len(arr), axis=0)
        ds[n0:] = arr

    def _create(self, arr: np.ndarray) -> None:
        import h5py

        if self.kind == "bytes":
            dtype = h5py.vlen_dtype(np.dtype(np.uint8))
        elif self.kind == "str":
            dtype = h5py.string_dtype("utf-8")
        else:
            dtype = arr.dtype
        row_bytes = max(1, int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize)
        rows = 4096 if self.kind else max(1, min(1 << 16, (4 << 20) // row_bytes))
        self.ds = self.f.create_dataset(
            self.path,
            shape=(0, *arr.shape[1:]),
            maxshape=(None, *arr.shape[1:]),
            dtype=dtype,
            chunks=(rows, *arr.shape[1:]),  # whole rows, ~4 MB: h5py's auto chunks are slow
        )
        if self.kind:
            self.ds.attrs[_KIND_ATTR] = self.kind


def _check_row(dp: Any, idx: int, paths: list[str]) -> Any:
    """``dp`` as a list/tuple of ``len(paths)`` components, or a clear error."""
    if isinstance(dp, dict):
        try:
            return [dp[p] for p in paths]
        except KeyError as e:
            raise KeyError(
                f"HDF5Serializer.save: datapoint {idx} is a dict without key {e.args[0]!r}; "
                f"its keys are {sorted(map(str, dp))}, `data_paths` is {paths}."
            ) from None
    n = len(paths)
    if not isinstance(dp, list | tuple) or len(dp) != n:
        raise ValueError(
            f"HDF5Serializer.save: datapoint {idx} is {describe(dp)}, with "
            f"{len(dp) if isinstance(dp, list | tuple) else 'no'} components, but "
            f"`data_paths` names {n}: {paths}. Give one data path per component."
        )
    return dp


def _checked(batch: list[Any], first: int, paths: list[str]) -> list[Any]:
    """The batch with every datapoint checked; C-speed when all are lists of the right length."""
    n = len(paths)
    types = set(map(type, batch))
    if types <= {list, tuple} and set(map(len, batch)) == {n}:
        return batch
    return [_check_row(dp, first + i, paths) for i, dp in enumerate(batch)]


def _nbytes(dp: Any) -> int:
    total = 0
    for v in dp:
        total += len(v) if isinstance(v, bytes | str) else getattr(v, "nbytes", 8)
    return total


class HDF5Serializer:
    """Save a DataFlow to an HDF5 file (one dataset per component) / load it back."""

    @staticmethod
    def save(
        df: Any,
        path: str | os.PathLike,
        data_paths: list[str],
        *,
        overwrite: bool = True,
        progress: bool = True,
    ) -> None:
        """Write one epoch of ``df`` (after ``df.reset_state()``) to ``path`` atomically.

        An existing file is replaced, as in tensorpack (a re-run preprocessing script works),
        but only once the new one is complete: until then, and if the save fails, the old file
        stays as it was. ``overwrite=False`` refuses an existing file (FileExistsError).
        """
        h5py = import_optional("h5py", "HDF5Serializer")
        paths = check_data_paths(data_paths)
        what = "HDF5Serializer.save"
        path, meter = begin_save(df, os.fspath(path), what, "HDF5", overwrite, progress,
                                 check_output)
        try:
            with atomic_output(path, what, overwrite) as tmp, open(tmp, "w+b", buffering=0) as raw:
                guarded = _GuardedFile(raw)
                with h5py.File(guarded, "w") as f:
                    _write_rows(f, df, paths, meter, guarded)
                guarded.check()
        finally:
            meter.close()

    @staticmethod
    def load(
        path: str | os.PathLike,
        data_paths: list[str],
        shuffle: bool = True,
        *,
        seed: int | None = None,
    ) -> HDF5Data:
        """``HDF5Data(path, data_paths, shuffle)``."""
        return HDF5Data(path, data_paths, shuffle, seed=seed)


class _GuardedFile(io.RawIOBase):
    """A file for h5py's ``fileobj`` driver that never reports a failed write to HDF5.

    When the disk fails (full, quota, EFBIG), HDF5 is left with an open file it cannot flush
    and crashes the process at exit (observed with h5py 3.14). So the first ``OSError`` is
    recorded, later writes are dropped, HDF5 closes normally, and :meth:`check` raises it.
    """

    def __init__(self, raw: Any) -> None:
        super().__init__()
        self.raw = raw
        self.error: OSError | None = None

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        return self.raw.readinto(b)

    def write(self, b: Any) -> int:
        if self.error is None:
            try:
                return self.raw.write(b)
            except OSError as e:
                self.error = e
        return len(memoryview(b))

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.raw.seek(offset, whence)

    def tell(self) -> int:
        return self.raw.tell()

    def truncate(self, size: int | None = None) -> int:
        try:
            return self.raw.truncate(size)
        except OSError as e:
            self.error = self.error or e
            return self.raw.tell() if size is None else size

    def flush(self) -> None:
        pass

    def check(self) -> None:
        if self.error is not None:
            raise self.error


def _write_rows(
    f: Any, df: Any, paths: list[str], meter: ProgressMeter, guarded: _GuardedFile
) -> None:
    cols = [_Column(f, p, i) for i, p in enumerate(paths)]
    it = iter(df)
    batch = list(islice(it, 1))
    limit = 1
    if batch:
        limit = max(1, min(4096, _BATCH_BYTES // max(1, _nbytes(_check_row(batch[0], 0, paths)))))
        batch += islice(it, limit - 1)
    first = 0
    while batch:
        batch = _checked(batch, first, paths)
        for col, values in zip(cols, zip(*batch)):
            col.append(values, first)
        meter.update(len(batch), 0)
        first += len(batch)
        guarded.check()
        batch = list(islice(it, limit))  # whole batches pulled at C speed
    for col in cols:  # an empty flow still gets its (empty) datasets
        if col.ds is None:
            f.create_dataset(col.path, shape=(0,), maxshape=(None,), dtype="f8", chunks=True)
