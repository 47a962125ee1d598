"""``LMDBSerializer``: save a DataFlow to an LMDB database, and load it back.

Layout (tensorpack's, so files are exchangeable both ways): keys ``b'%08d' % index``, values
``dumps(datapoint)`` (pickle protocol 5 by default), and a final ``b'__keys__'`` entry holding
``dumps(list_of_keys)``. The path is a single LMDB file, or an existing directory that then gets
``data.mdb`` (as in tensorpack).

Differences from tensorpack, on purpose:

* Atomic: the database is written to a temporary file next to the target and renamed onto it
  once complete and synced; a failure leaves neither. An existing target is refused unless
  ``overwrite=True``.
* No data loss when the map grows: each write transaction's items are kept until it commits;
  the map is grown between transactions when the next batch may not fit, and if LMDB still
  reports ``MapFullError`` the transaction is aborted, the map doubled and the whole batch
  replayed. The entry count is verified at the end.
* Streaming with bounded memory: a transaction holds at most ``write_frequency`` datapoints and
  about 64 MB. Items are appended with ``MDB_APPEND`` (keys are written in order), which is
  faster than plain puts.
* ``load(path, shuffle=False)`` is one sequential cursor scan; old msgpack files are detected.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from dataflow.serialize._atomic import (
    begin_save,
    import_optional,
    serialize_error,
)
from dataflow.serialize._atomic_write import atomic_output, check_output
from dataflow.serialize.codec import get_dumps
from dataflow.serialize.lmdb_data import KEYS_KEY, LMDBData, _lmdb_loader

__all__ = ["LMDBDataPoint", "LMDBSerializer"]

_DEFAULT_MAP_SIZE = 1 << 40 if sys.platform.startswith("linux") and sys.maxsize > 2**32 else 1 << 27
_MAX_TXN_BYTES = 64 << 20
_APPEND_LIMIT = 10**8  # 8-digit keys stay in order below this; beyond, plain (unordered) puts


class _LMDBWriter:
    """Writes batches of ``(key, value)`` into a fresh LMDB file, growing the map safely."""

    def __init__(self, path: str, map_size: int, proactive: bool = True) -> None:
        lmdb = import_optional("lmdb", "LMDBSerializer")
        self._map_full = lmdb.MapFullError
        self.map_size = int(map_size)
        self.proactive = proactive  # False only in tests, to exercise the replay path
        self.grows_proactive = 0
        self.grows_reactive = 0
        # a private file being written: no locks, no syncs (it is synced once, when complete)
        self.env = lmdb.open(path, subdir=False, map_size=self.map_size, meminit=False,
                             map_async=True, sync=False, metasync=False, lock=False, max_dbs=0)
        self.psize = self.env.stat()["psize"]

    def _grow(self) -> None:
        self.map_size *= 2
        self.env.set_mapsize(self.map_size)

    def put_batch(self, items: list[tuple[bytes, bytes]], nbytes: int, append: bool) -> None:
        """Write ``items`` in one transaction; no item is lost whatever the map size."""
        psize = self.psize
        count = len(items)
        need = int(1.25 * (nbytes + 24 * count)) + 64 * psize
        if count and nbytes // count > psize // 2:  # overflow pages round each value up
            need += count * psize
        used = (self.env.info()["last_pgno"] + 1) * psize
        while self.proactive and used + need > self.map_size:  # between transactions
            self._grow()
            self.grows_proactive += 1
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    consumed, _added = txn.cursor().putmulti(items, overwrite=True, append=append)
                break
            except self._map_full:  # the transaction was aborted: grow and replay all of it
                self._grow()
                self.grows_reactive += 1
        if consumed != count:  # pragma: no cover - py-lmdb raises before this
            raise RuntimeError(f"LMDB accepted {consumed} of {count} items")

    def finish(self, expected_entries: int, path: str) -> None:
        self.env.sync(True)
        entries = self.env.stat()["entries"]
        self.env.close()
        if entries != expected_entries:
            raise RuntimeError(
                f"LMDBSerializer.save: {path!r} holds {entries} entries after writing, "
                f"expected {expected_entries}; the database was not saved."
            )

    def abort(self) -> None:
        try:
            self.env.close()
        except Exception:
            pass


def _target_file(path: str) -> str:
    """The file to create: ``path/data.mdb`` for an existing directory, else ``path``."""
    return os.path.join(path, "data.mdb") if os.path.isdir(path) else path


class LMDBSerializer:
    """Save a DataFlow to an LMDB database / load it back (see the module docstring for the
    layout, which is tensorpack's: files go both ways). Guide: ``docs/serialize.md``."""

    @staticmethod
    def save(
        df: Any,
        path: str | os.PathLike,
        write_frequency: int = 5000,
        *,
        overwrite: bool = False,
        codec: str = "pickle",
        map_size: int | None = None,
        progress: bool = True,
    ) -> None:
        """Write one epoch of ``df`` to the LMDB database ``path``.

        Calls ``df.reset_state()`` itself (as tensorpack does), then iterates ``df`` once, so
        ``df`` must be finite. Datapoint ``i`` is stored under the key ``b"%08d" % i`` as
        ``dumps(datapoint)``, followed by a ``b"__keys__"`` entry listing the keys: the layout
        of tensorpack's ``LMDBSerializer``, whose ``load`` reads these files (and whose files
        :meth:`load` reads). Memory stays bounded: a write transaction holds at most
        ``write_frequency`` datapoints and about 64 MB.

        The save is atomic: the database is written to a temporary file next to the target,
        synced, and renamed onto it once complete. If the save fails or is interrupted
        (an exception from ``df``, the codec or the disk; ``KeyboardInterrupt`` included),
        nothing is left behind and an existing target is untouched.

        Args:
            df: a finite DataFlow.
            path: the LMDB file to create, or an existing directory, which then gets the file
                ``data.mdb`` (as in tensorpack). Its directory must exist.
            write_frequency: datapoints per write transaction, at most (default 5000;
                transactions are also cut at about 64 MB). Any value writes the same file.
            overwrite: replace an existing database (default False: refuse it, as tensorpack
                does; the NumPy, HDF5 and TFRecord saves replace by default).
            codec: how datapoints are encoded: ``"pickle"`` (protocol 5, what tensorpack >=
                0.9.9 writes and reads; the default) or ``"msgpack"`` (what tensorpack 0.8.9 -
                0.9.8 wrote). :meth:`load` detects either.
            map_size: the initial LMDB map size in bytes, at least 4096 (default 1 TiB of
                address space on 64-bit Linux, which costs no disk, 128 MiB elsewhere); it is
                doubled as needed between transactions, and no datapoint is lost when it grows.
            progress: show a tqdm progress bar (datapoints/s and MB/s) on stderr.

        Returns:
            None. ``LMDBSerializer.load(path)`` reads the database back.

        Raises:
            FileExistsError: the target exists and ``overwrite`` is false.
            FileNotFoundError: the directory of ``path`` does not exist.
            TypeError: ``df`` is not a DataFlow, or a datapoint cannot be serialized (the
                message names its index and structure).
            ValueError: ``write_frequency``, ``map_size`` or ``codec`` is invalid.
            OSError: LMDB failed to write (a full disk, a file too large); nothing was saved.
            ImportError: the ``lmdb`` package is missing (``pip install 'lmdb>=1.4'``, or
                the extra ``[lmdb]``).

        Example::

            ds = DataFromList([[np.zeros((2, 2)), 0], [np.ones((2, 2)), 1]], shuffle=False)
            LMDBSerializer.save(ds, "/tmp/train.lmdb", progress=False)
            loaded = LMDBSerializer.load("/tmp/train.lmdb", shuffle=False)
        """
        path = os.fspath(path)
        if (
            isinstance(write_frequency, bool)
            or not isinstance(write_frequency, int)
            or (write_frequency < 1)
        ):
            raise ValueError(
                f"`write_frequency` must be a positive int, got {write_frequency!r}; "
                "e.g. write_frequency=5000."
            )
        if map_size is None:
            map_size = _DEFAULT_MAP_SIZE
        elif not isinstance(map_size, int) or map_size < 4096:
            raise ValueError(f"`map_size` must be an int >= 4096 bytes, got {map_size!r}")
        dumps = get_dumps(codec)
        check_output(_target_file(path), "LMDBSerializer.save", overwrite)
        lmdb = import_optional("lmdb", "LMDBSerializer")
        target, meter = begin_save(df, _target_file(path), "LMDBSerializer.save", "LMDB",
                                   overwrite, progress, check_output)
        try:
            with atomic_output(target, "LMDBSerializer.save", overwrite) as tmp:
                writer = _LMDBWriter(tmp, map_size)
                try:
                    n = _write_all(df, writer, dumps, write_frequency, meter)
                    keys = [b"%08d" % i for i in range(n)]
                    keys_value = dumps(keys)
                    writer.put_batch([(KEYS_KEY, keys_value)], len(keys_value), append=False)
                    writer.finish(n + 1, path)
                except lmdb.Error as e:
                    writer.abort()
                    raise OSError(
                        f"LMDBSerializer.save: writing {target!r} failed ({type(e).__name__}: "
                        f"{e}); nothing was saved. Is the disk full or the file too large?"
                    ) from e
                except BaseException:
                    writer.abort()
                    raise
        finally:
            meter.close()

    @staticmethod
    def load(path: str | os.PathLike, shuffle: bool = True, *, seed: int | None = None) -> LMDBData:
        """A flow yielding the saved datapoints (exact ``len``, any number of epochs).

        Args:
            path: an LMDB file, or a directory holding ``data.mdb``: written by :meth:`save`
                or by tensorpack's ``LMDBSerializer.save`` (pickle or msgpack values, detected).
            shuffle: ``False``: one sequential cursor scan in key (= saving) order, the fastest
                read. ``True`` (the default, as in tensorpack): reads by key in a new random
                order every epoch.
            seed: seed of the shuffle orders (default: the global seed, else OS entropy).

        Returns:
            an :class:`LMDBData` whose datapoints are the decoded values (tensorpack returned
            ``MapData(LMDBData(...), loads)``; this does the same in one stage). It is
            resumable: its ``state_dict()`` has ``type`` ``"LMDBSerializer.load"``.

        Raises:
            FileNotFoundError: ``path`` does not exist, or is a directory without ``data.mdb``.
            CorruptFileError: ``path`` is not a readable or a complete LMDB database.

        Decoding unpickles: load only files you trust.
        """
        return _lmdb_loader(path, shuffle, seed)


def _write_all(df: Any, writer: _LMDBWriter, dumps: Any, write_frequency: int, meter: Any) -> int:
    items: list[tuple[bytes, bytes]] = []
    add = items.append
    nbytes = 0
    idx = 0
    shown = 0
    shown_bytes = 0
    total_bytes = 0
    for dp in df:
        try:
            v = dumps(dp)
        except Exception as e:
            raise serialize_error("LMDBSerializer.save", idx, dp, e) from e
        add((b"%08d" % idx, v))
        nbytes += len(v)
        idx += 1
        if not idx & 255:
            meter.update(idx - shown, total_bytes + nbytes - shown_bytes)
            shown, shown_bytes = idx, total_bytes + nbytes
        if len(items) >= write_frequency or nbytes >= _MAX_TXN_BYTES:
            writer.put_batch(items, nbytes, append=idx <= _APPEND_LIMIT)
            total_bytes += nbytes
            items = []
            add = items.append
            nbytes = 0
    if items:
        writer.put_batch(items, nbytes, append=idx <= _APPEND_LIMIT)
        total_bytes += nbytes
    meter.update(idx - shown, total_bytes - shown_bytes)
    return idx


def LMDBDataPoint(
    lmdb_path: str | os.PathLike, shuffle: bool = True, *, seed: int | None = None
) -> LMDBData:
    """tensorpack's older reader of LMDBs holding serialized datapoints (deprecated there in
    favour of ``LMDBSerializer.load``, which it equals): the saved datapoints of ``lmdb_path``.
    """
    return LMDBSerializer.load(lmdb_path, shuffle, seed=seed)
