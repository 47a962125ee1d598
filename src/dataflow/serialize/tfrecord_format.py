"""``TFRecordSerializer``: datapoints as TFRecord files, written and read without TensorFlow.

Each record holds ``dumps(datapoint)`` (no ``tf.train.Example``), as in tensorpack, framed the
TFRecord way: ``uint64 length``, ``uint32 masked_crc32c(length)``, ``data``,
``uint32 masked_crc32c(data)`` (little-endian). Files are read by ``tf.data.TFRecordDataset``
and files written by TensorFlow's writers load here.

Writing never needs TensorFlow (CRC32C is computed with NumPy, see ``_crc32c``). Reading uses
``reader`` (default: the ``DATAFLOW_TFRECORD_READER`` environment variable, else
``"auto"``): ``"auto"`` (TensorFlow when it is installed, else built-in), ``"builtin"``
(mmap + NumPy CRC checks, no TensorFlow) or ``"tf"`` (``tf.data.TFRecordDataset``).
Pass ``reader="builtin"`` (or set ``DATAFLOW_TFRECORD_READER=builtin``) for speed: it was
measured 7-9x faster per epoch than ``TFRecordDataset`` (eager iteration, 20k records of 3 KB),
needs no ~4 s TensorFlow import, and is safe in forked workers.

Differences from tensorpack, on purpose: the loaded flow has an exact ``len`` (counted by a
header scan unless ``size`` is given), can be iterated for any number of epochs, and a
truncated or corrupt file raises :class:`CorruptFileError` naming the file and record index.

Resumable: ``state_dict()`` holds the byte offset of the next record, and a restored flow
continues the epoch from there without reading the delivered part (with ``reader="tf"`` the
rest of that one epoch is read by the built-in reader, since ``TFRecordDataset`` cannot start
at an offset; the records are the same).
"""

from __future__ import annotations

import importlib.util
import os
import struct
from collections.abc import Callable, Iterator
from typing import Any

from dataflow.base import DataFlow, DataFlowReentrantGuard
from dataflow.serialize._atomic import (
    CorruptFileError,
    begin_save,
    check_source_path,
    import_optional,
    serialize_error,
)
from dataflow.serialize._atomic_write import atomic_output, check_output
from dataflow.serialize._tfrecord_io import _BATCH_BYTES, _BATCH_RECORDS, frame_records, map_file
from dataflow.serialize._tfrecord_io import Scanner as _Scanner
from dataflow.serialize.codec import get_dumps, get_loads, sniff_codec
from dataflow.state import ReaderState, mismatch

__all__ = ["TFRecordData", "TFRecordSerializer"]

READERS = ("auto", "builtin", "tf")
DEFAULT_READER = "auto"  # TensorFlow when installed; reader="builtin" is faster


def _resolve_reader(reader: str | None) -> str:
    if reader is None:
        reader = os.environ.get("DATAFLOW_TFRECORD_READER") or DEFAULT_READER
    if reader not in READERS:
        raise ValueError(
            f"`reader` must be one of {READERS} (or set DATAFLOW_TFRECORD_READER), got "
            f"{reader!r}; 'builtin' needs no TensorFlow."
        )
    if reader == "auto":
        reader = "tf" if importlib.util.find_spec("tensorflow") is not None else "builtin"
    return reader

class TFRecordData(ReaderState, DataFlow):
    """Yields the records of a TFRecord file, decoded with ``loads`` (or raw with
    ``decode=False``). Exact ``len``; any number of epochs; not reentrant.

    Args:
        path: the TFRecord file.
        size: the number of records to read per epoch; default: all (counted by a scan of the
            record headers at construction, which also detects truncation and foreign files).
        reader: ``"builtin"`` / ``"tf"`` / ``"auto"`` (see the module docstring).
        verify: check the data checksums with the built-in reader (TensorFlow always does);
            the length checksums are always checked.
        decode: ``loads`` each record (codec detected from the first record).

    ``state_dict()`` saves the epoch, the position and the byte offset of the next record;
    ``load_state_dict()`` checks that a record starts there.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        size: int | None = None,
        *,
        reader: str | None = None,
        verify: bool = True,
        decode: bool = True,
    ) -> None:
        self._path = check_source_path(path, "TFRecordSerializer.load")
        if os.path.isdir(self._path):
            raise IsADirectoryError(f"TFRecord `path` {self._path!r} is a directory, not a file")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
            raise ValueError(f"`size` must be a non-negative int or None, got {size!r}")
        self._reader = _resolve_reader(reader)
        self._verify = bool(verify)
        self._decode = bool(decode)
        self._guard = DataFlowReentrantGuard("TFRecordData")
        self._pos = 0
        self._epoch = 0
        self._resume: int | None = None
        self._off = 0  # byte offset of the record after the last one delivered
        self._batch: tuple[int, int, list[Any]] | None = None  # (offset, index, records)
        self._limit = size
        buf, closer = map_file(self._path)
        try:
            scanner = _Scanner(buf, self._path, verify=False)
            first = scanner.next_batch(1)
            self._codec = sniff_codec(first[0]) if first else "pickle"
            if size is None:
                scanner = _Scanner(buf, self._path, verify=False)
                count = 0
                while batch := scanner.next_batch(None, want_data=False):
                    count += len(batch)
                self._size = count
            else:
                self._size = size
        finally:
            if closer is not None:
                closer()

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Any]:
        decode: Callable[[Any], Any] | None = get_loads(self._codec) if self._decode else None
        token, _, start = self._begin_epoch()
        self._batch = None
        if not start:
            self._off = 0
        if self._reader == "tf" and not start:
            return self._iter_tf(decode, token)
        return self._iter_builtin(decode, token, start, self._off)

    def _short(self, got: int) -> CorruptFileError:
        return CorruptFileError(
            f"TFRecord file {self._path!r} has only {got} records but `size` is {self._size}; "
            "pass the right size, or size=None to count them."
        )

    def _decode_error(self, e: Exception) -> CorruptFileError:
        codec = self._codec.split("-")[0]
        return CorruptFileError(
            f"TFRecord file {self._path!r}: record {self._pos - 1} cannot be decoded as "
            f"{codec} ({type(e).__name__}: {e}); was it written by TFRecordSerializer? "
            "Use decode=False for raw records."
        )

    def _iter_builtin(
        self, decode: Callable[[Any], Any] | None, token: object, start: int, offset: int
    ) -> Iterator[Any]:
        with self._guard:
            buf, closer = map_file(self._path)
            try:
                scanner = _Scanner(buf, self._path, self._verify)
                scanner.off, scanner.index = offset, start
                limit = self._limit
                while True:
                    off, index = scanner.off, scanner.index
                    recs = scanner.next_batch(limit)
                    if not recs:
                        break
                    self._batch = (off, index, recs)
                    if decode is None:
                        for rec in recs:
                            self._pos += 1
                            yield rec
                        continue
                    try:
                        for rec in recs:
                            self._pos += 1
                            yield decode(rec)
                    except Exception as e:
                        raise self._decode_error(e) from e
                if limit is not None and self._pos < limit:
                    raise self._short(self._pos)
                self._end(token)  # (exhausted; a closed iterator leaves the epoch unfinished)
            finally:
                if self._token is token:
                    self._off, self._batch = self._offset(), None
                if closer is not None:
                    closer()

    def _iter_tf(self, decode: Callable[[Any], Any] | None, token: object) -> Iterator[Any]:
        tf = import_optional("tensorflow", "TFRecordSerializer.load(reader='tf')")
        with self._guard:
            ds = tf.data.TFRecordDataset(self._path)
            if self._limit is not None:
                ds = ds.take(self._limit)
            it = ds.as_numpy_iterator()
            while True:
                try:
                    rec = next(it)
                except StopIteration:
                    break
                except tf.errors.OpError as e:
                    raise CorruptFileError(
                        f"TFRecord file {self._path!r}: record {self._pos} cannot be read "
                        f"({type(e).__name__}: {e.message}); the file is corrupt or "
                        "truncated."
                    ) from None
                self._pos += 1
                self._off += 16 + len(rec)
                if decode is None:
                    yield rec
                    continue
                try:
                    dp = decode(rec)
                except Exception as e:
                    raise self._decode_error(e) from e
                yield dp
            self._end(token)
            if self._limit is not None and self._pos < self._limit:
                raise self._short(self._pos)

    # ----------------------------------------------------------------- state
    def _offset(self) -> int:
        """The byte offset of the record after the last one delivered."""
        if self._batch is None:
            return self._off
        off, index, recs = self._batch
        return off + sum(16 + len(r) for r in recs[: self._pos - index])

    def _state_extra(self) -> dict[str, Any]:
        return {"offset": self._offset()}

    def _forget_iteration(self) -> None:
        self._batch = None

    def _check_extra(self, state: dict[str, Any]) -> None:
        pos, off = state["pos"], state.get("offset")
        buf, closer = map_file(self._path)
        try:
            if off is None:  # a hand-made state: find the offset by a scan of the headers only
                scanner = _Scanner(buf, self._path, verify=False)
                while scanner.index < pos and scanner.next_batch(pos, want_data=False):
                    pass
                off = scanner.off
            hint = "the state was saved from another file."
            if (
                not isinstance(off, int) or isinstance(off, bool)
                or not 16 * pos <= off <= len(buf) or (pos == 0 and off != 0)
            ):
                raise mismatch(self, f"the byte offset of record {pos}, an int in",
                               f"[{16 * pos}, {len(buf)}]", off, hint)
            if off < len(buf):
                try:
                    _Scanner(buf, self._path, verify=False)._check_header(pos, off)
                except (CorruptFileError, struct.error):
                    raise mismatch(self, f"a record header at the offset of record {pos},",
                                   f"byte {off}", "none", hint) from None
        finally:
            if closer is not None:
                closer()
        self._off = off


class TFRecordSerializer:
    """Save a DataFlow as a TFRecord file of serialized datapoints / load it back."""

    @staticmethod
    def save(
        df: Any,
        path: str | os.PathLike,
        *,
        overwrite: bool = True,
        codec: str = "pickle",
        progress: bool = True,
    ) -> None:
        """Write one epoch of ``df`` (after ``df.reset_state()``) to the TFRecord file ``path``.

        Streams with bounded memory (batches of <= 1024 records / 8 MB); no TensorFlow needed.
        Atomic: a temporary file is renamed onto ``path`` once complete and synced. An existing
        file is replaced, as in tensorpack (a re-run preprocessing script works), but only then:
        until then, and if the save fails, the old file stays as it was. ``overwrite=False``
        refuses an existing file (FileExistsError).
        """
        dumps = get_dumps(codec)
        what = "TFRecordSerializer.save"
        path, meter = begin_save(df, os.fspath(path), what, "TFRecord", overwrite, progress,
                                 check_output)
        try:
            with atomic_output(path, what, overwrite) as tmp, open(tmp, "wb") as f:
                batch: list[bytes] = []
                nbytes = 0
                for idx, dp in enumerate(df):
                    try:
                        rec = dumps(dp)
                    except Exception as e:
                        raise serialize_error("TFRecordSerializer.save", idx, dp, e) from e
                    batch.append(rec)
                    nbytes += len(rec)
                    if len(batch) >= _BATCH_RECORDS or nbytes >= _BATCH_BYTES:
                        f.write(frame_records(batch))
                        meter.update(len(batch), nbytes)
                        batch, nbytes = [], 0
                if batch:
                    f.write(frame_records(batch))
                    meter.update(len(batch), nbytes)
        finally:
            meter.close()

    @staticmethod
    def load(
        path: str | os.PathLike,
        size: int | None = None,
        *,
        reader: str | None = None,
        verify: bool = True,
    ) -> TFRecordData:
        """A flow of the saved datapoints in file order (exact ``len``, any number of epochs)."""
        return TFRecordData(path, size, reader=reader, verify=verify)
