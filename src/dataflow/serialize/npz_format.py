"""``NumpySerializer``: all datapoints in one compressed ``.npz`` file (held in memory).

Layout (tensorpack's): ``np.savez_compressed(file, buffer=objects)`` where ``objects`` is a 1-D
object array with one datapoint per element (pickled inside the npz). Loading needs
``allow_pickle=True``: load only trusted files.

Differences from tensorpack, on purpose:

* Works on NumPy >= 1.24 (tensorpack used the removed ``np.object``); pickles arrays through
  public NumPy names (see :mod:`~dataflow.serialize.codec`) so NumPy 1.x reads the files, and
  reads NumPy 1.x files without deprecation warnings.
* The buffer is always 1-D, one datapoint per element, and loaded datapoints are the saved
  ``list``/``dict`` objects (tensorpack's ``np.asarray(dps, dtype=object)`` could build a 2-D or
  deeper array and loaded rows were object ndarrays; such files still load, rows become lists).
* The file is written exactly at ``path`` (NumPy appends ``.npz`` to a bare path; ``load``
  still finds ``path + '.npz'``), atomically: an existing file is replaced only once the new
  one is complete.

It is the slowest serializer (everything is compressed in one piece); prefer LMDB or TFRecord.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterator
from typing import Any

import numpy as np

from dataflow.base import RNGDataFlow
from dataflow.serialize._atomic import (
    CorruptFileError,
    begin_save,
    serialize_error,
)
from dataflow.serialize._atomic_write import atomic_output, check_output
from dataflow.serialize.codec import dump_pickle, dumps, load_pickle
from dataflow.state import ReaderState

__all__ = ["NumpyData", "NumpySerializer"]


class NumpyData(ReaderState, RNGDataFlow):
    """The datapoints of an in-memory sequence; a new order each epoch if ``shuffle``.

    Resumable: ``state_dict()`` saves epoch, position and seed (no datapoint)."""

    def __init__(self, items: Any, shuffle: bool = True, *, seed: int | None = None) -> None:
        self._items = items
        self._init_reader(shuffle, seed)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Any]:
        return self._run(*self._begin_epoch())

    def _run(self, token: object, epoch: int, start: int) -> Iterator[Any]:
        with self._guard:
            items = self._items
            if self._shuffle:
                order = self._epoch_rng(epoch).permutation(len(items))[start:].tolist()
                for self._pos, i in enumerate(order, start + 1):
                    yield items[i]
            else:
                for self._pos, dp in enumerate(items[start:] if start else items, start + 1):
                    yield dp
            self._end(token)


def _read_npy(fp: Any) -> Any:
    version = np.lib.format.read_magic(fp)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp)
    else:
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp)
    if not dtype.hasobject:
        count = int(np.prod(shape))
        data = np.frombuffer(fp.read(count * dtype.itemsize), dtype=dtype, count=count)
        return data.reshape(shape, order="F" if fortran else "C").copy()
    return load_pickle(fp)  # NumPy-1.x pickles load on NumPy 2 without warnings


def _load_buffer(path: str) -> list[Any]:
    try:
        with zipfile.ZipFile(path) as zf:
            if "buffer.npy" not in zf.namelist():
                raise CorruptFileError(
                    f"NumpySerializer.load: {path!r} has no `buffer` array (it holds "
                    f"{zf.namelist()}); it was not written by NumpySerializer."
                )
            with zf.open("buffer.npy") as fp:
                buf = _read_npy(fp)
    except CorruptFileError:
        raise
    except Exception as e:
        raise CorruptFileError(
            f"NumpySerializer.load: {path!r} is not a readable .npz file ({type(e).__name__}: "
            f"{e}); it is corrupt, truncated or of another format."
        ) from e
    if not isinstance(buf, np.ndarray):
        return list(buf)
    if buf.ndim == 1:
        return list(buf)
    return [list(row) for row in buf]  # tensorpack's 2-D object arrays


def _write_npz(f: Any, buf: np.ndarray) -> None:
    """``np.savez_compressed(f, buffer=buf)``, pickling with :func:`dump_pickle` so that NumPy
    1.x can read it."""
    with (
        zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as zf,
        zf.open("buffer.npy", "w", force_zip64=True) as out,
    ):
        header = {"descr": "|O", "fortran_order": False, "shape": buf.shape}
        np.lib.format.write_array_header_1_0(out, header)
        dump_pickle(buf, out)


def _raise_unserializable(dps: list[Any], e: Exception) -> None:
    for i, dp in enumerate(dps):
        try:
            dumps(dp)
        except TypeError:
            raise serialize_error("NumpySerializer.save", i, dp, e) from e


class NumpySerializer:
    """Save a DataFlow to a ``.npz`` file / load it back (everything in memory)."""

    @staticmethod
    def save(
        df: Any, path: str | os.PathLike, *, overwrite: bool = True, progress: bool = True
    ) -> None:
        """Write one epoch of ``df`` (after ``df.reset_state()``) to ``path`` atomically.

        An existing file is replaced, as in tensorpack (a re-run preprocessing script works),
        but only once the new one is complete: until then, and if the save fails, the old file
        stays as it was. ``overwrite=False`` refuses an existing file (FileExistsError).
        """
        what = "NumpySerializer.save"
        path, meter = begin_save(df, os.fspath(path), what, "npz", overwrite, progress,
                                 check_output)
        try:
            dps = list(df)
            meter.update(len(dps), 0)
            buf = np.empty(len(dps), dtype=object)
            for i, dp in enumerate(dps):
                buf[i] = dp
            with atomic_output(path, what, overwrite) as tmp, open(tmp, "wb") as f:
                try:
                    _write_npz(f, buf)
                except Exception as e:
                    _raise_unserializable(dps, e)
                    raise
        finally:
            meter.close()

    @staticmethod
    def load(path: str | os.PathLike, shuffle: bool = True, *, seed: int | None = None):
        """A flow of the saved datapoints (exact ``len``, any number of epochs)."""
        path = os.fspath(path)
        if not os.path.exists(path) and os.path.exists(path + ".npz"):
            path += ".npz"  # tensorpack saved `foo` as `foo.npz`
        if not os.path.exists(path):
            raise FileNotFoundError(f"NumpySerializer.load: `path` {path!r} does not exist.")
        return NumpyData(_load_buffer(path), shuffle, seed=seed)
