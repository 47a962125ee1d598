"""Readers of LMDB databases: ``LMDBData`` (raw ``[key, value]``) and ``LMDBDataDecoder``.

On-disk layout (tensorpack's, see :class:`~dataflow.serialize.LMDBSerializer`): 8-digit ASCII
keys ``b'00000000'``, ``b'00000001'``, ... holding serialized datapoints, plus an optional
``b'__keys__'`` entry holding the serialized list of keys. The path is either a directory
holding ``data.mdb`` or a single LMDB file.

Differences from tensorpack, on purpose:

* ``keys`` given as a format string (e.g. ``'{:0>8d}'``) produce ``bytes`` keys (tensorpack
  produced ``str`` keys, which py-lmdb rejects on Python 3).
* Explicit ``keys`` are what is iterated (in the given order when ``shuffle=False``) and
  ``len`` is their count; without them, every entry but ``__keys__`` is.
* ``shuffle`` orders come from :meth:`RNGDataFlow._epoch_rng`, so ``seed=`` reproduces them.
* ``__iter__`` opens the database itself if ``reset_state()`` was not called.
* Resumable (``state_dict()`` / ``load_state_dict()``): a restored reader continues the epoch
  without reading the delivered part: a sequential scan puts its cursor on the saved key, a
  by-key read re-derives the epoch's order and starts at the saved position.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any

from dataflow.base import DataFlow, DataFlowReentrantGuard, ProxyDataFlow, RNGDataFlow
from dataflow.errors import DataFlowError
from dataflow.serialize._atomic import CorruptFileError, check_source_path, import_optional
from dataflow.serialize.codec import get_loads, loads, sniff_codec
from dataflow.sharding import SKIPPED
from dataflow.state import (
    DONE,
    POS,
    TYPE,
    ReaderState,
    StateMismatchError,
    check_state,
    mismatch,
)

__all__ = ["LMDBData", "LMDBDataDecoder"]

logger = logging.getLogger(__name__)

KEYS_KEY = b"__keys__"
READ_MAP_SIZE = 1 << 41 if sys.maxsize > 2**32 else 1 << 30


def open_env(path: str, what: str, readahead: bool = True):
    """Open ``path`` (an LMDB directory or file) read-only and lock-free."""
    lmdb = import_optional("lmdb", what)
    subdir = os.path.isdir(path)
    if subdir and not os.path.isfile(os.path.join(path, "data.mdb")):
        raise FileNotFoundError(
            f"{what}: the directory {path!r} holds no LMDB database (no data.mdb); check the path."
        )
    try:
        env = lmdb.open(path, subdir=subdir, readonly=True, lock=False, readahead=readahead,
                        map_size=READ_MAP_SIZE, max_readers=100, meminit=False)
    except lmdb.Error as e:
        raise CorruptFileError(
            f"{what}: {path!r} is not a readable LMDB database ({type(e).__name__}: {e})."
        ) from e
    # A truncated file would crash the process (SIGBUS) on the first read past its end.
    data_file = os.path.join(path, "data.mdb") if subdir else path
    needed = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    actual = os.path.getsize(data_file)
    if actual < needed:
        env.close()
        raise CorruptFileError(
            f"{what}: {path!r} is truncated: it has {actual} bytes, its header says "
            f"{needed}; the database cannot be read."
        )
    return env


_ENVS: dict[tuple[int, int], list[Any]] = {}
_ENVS_LOCK = threading.Lock()


def _reinit_lock() -> None:  # a fork while another thread held the lock must not deadlock
    global _ENVS_LOCK
    _ENVS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_lock)


def acquire_env(path: str, what: str, readahead: bool = True) -> tuple[Any, tuple[int, int]]:
    """A shared read-only environment for ``path`` and its registry key.

    py-lmdb refuses to open one database twice in a process, so readers of the same file
    (e.g. a train and a validation flow) share one environment, reference-counted.
    """
    data_file = os.path.join(path, "data.mdb") if os.path.isdir(path) else path
    try:
        st = os.stat(data_file)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{what}: {path!r} holds no LMDB database (no {data_file!r}); check the path."
        ) from None
    key = (st.st_dev, st.st_ino)
    with _ENVS_LOCK:
        entry = _ENVS.get(key)
        if entry is not None:
            entry[1] += 1
            return entry[0], key
        env = open_env(path, what, readahead)
        _ENVS[key] = [env, 1]
        return env, key


def release_env(key: tuple[int, int]) -> None:
    with _ENVS_LOCK:
        entry = _ENVS.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del _ENVS[key]
            entry[0].close()


def _as_key(k: Any, i: int) -> bytes:
    if isinstance(k, bytes):
        return k
    if isinstance(k, str):
        return k.encode("utf-8")
    if isinstance(k, bytearray | memoryview):
        return bytes(k)
    raise TypeError(f"`keys` entries must be bytes or str, got {k!r} at index {i}")


class LMDBData(ReaderState, RNGDataFlow):
    """Yields ``[key, value]`` (both ``bytes``) of every entry of an LMDB database.

    Args:
        lmdb_path: a directory holding ``data.mdb``, or an LMDB file.
        shuffle: ``False``: one sequential cursor scan in key order (fastest). ``True``: random
            reads in a new order every epoch, by the keys of ``keys`` / ``__keys__`` (or, if
            there are none, by keys collected with one scan at construction, which is slow).
        keys: the keys to read: a list of ``bytes``/``str``, or a format string such as
            ``'{:0>8d}'`` formatted over ``range(len)``. Default: the ``__keys__`` entry.
        seed: seed of the shuffle orders (default: the global seed, else OS entropy).

    ``len`` is exact. Not reentrant. The database is opened at construction only to count
    entries, then closed; ``reset_state()`` (or the first ``__iter__``) reopens it, so the
    flow can be forked or pickled before that. ``state_dict()`` saves the epoch, the position
    (and, for a sequential scan, the key of the last datapoint delivered, in hex) and the seed;
    its ``type`` is the stage's public name, ``"LMDBData"`` (``"LMDBSerializer.load"`` for the
    flow that function returns), which state errors name too.
    """

    #: the public name of the stage, in its errors and states (default: the class's name)
    _WHAT = ""
    #: the ``type`` of states saved by earlier versions, loaded as the current one
    _OLD_TYPES: tuple[str, ...] = ()

    def __init__(
        self,
        lmdb_path: str | os.PathLike,
        shuffle: bool = True,
        keys: list[Any] | str | None = None,
        *,
        seed: int | None = None,
    ) -> None:
        self._what = self._WHAT or type(self).__name__
        self._lmdb_path = check_source_path(lmdb_path, self._what, "lmdb_path")
        self._shuffle = bool(shuffle)
        self.seed = seed
        self._env: Any = None
        self._env_key: tuple[int, int] | None = None
        self._pos = 0
        self._epoch = 0
        self._resume: int | None = None
        self._cursor: Any = None  # the cursor of a sequential scan in progress
        self._seq_key: bytes | None = None  # where a restored sequential scan continues after
        self._guard = DataFlowReentrantGuard(self._what)
        self._codec = "pickle"
        env, key = acquire_env(self._lmdb_path, self._what)
        try:
            with env.begin() as txn:
                self._scan_layout(txn, keys)
        finally:
            release_env(key)

    def _scan_layout(self, txn: Any, keys: list[Any] | str | None) -> None:
        entries = txn.stat()["entries"]
        stored_keys = txn.get(KEYS_KEY)
        self._has_keys_entry = stored_keys is not None
        self._size = entries - (1 if self._has_keys_entry else 0)
        cur = txn.cursor()
        self._keys_entry_last = bool(cur.last() and cur.key() == KEYS_KEY)
        if cur.first() and cur.key() == KEYS_KEY:
            cur.next()
        first_value = cur.value() if cur.key() else None
        if first_value:
            self._codec = sniff_codec(first_value)
        self._explicit_keys = keys is not None
        if isinstance(keys, str):
            keys = [keys.format(i).encode("utf-8") for i in range(self._size)]
        elif keys is not None:
            if not isinstance(keys, list | tuple):
                raise TypeError(
                    f"`keys` must be a list of keys, a format string like '{{:0>8d}}', or None, "
                    f"got {type(keys).__name__}"
                )
            keys = [_as_key(k, i) for i, k in enumerate(keys)]
        elif stored_keys is not None:
            try:
                keys = loads(stored_keys)
                if keys and not isinstance(keys[0], bytes):
                    keys = [_as_key(k, i) for i, k in enumerate(keys)]
            except Exception as e:
                raise CorruptFileError(
                    f"{self._what}: the `__keys__` entry of {self._lmdb_path!r} cannot be "
                    f"decoded ({type(e).__name__}: {e})."
                ) from e
        elif self._shuffle:
            logger.warning(
                "%s: %r has no `__keys__` entry; collecting the keys with a full scan.",
                self._what,
                self._lmdb_path,
            )
            keys = [k for k in txn.cursor().iternext(keys=True, values=False) if k != KEYS_KEY]
        self.keys: Any = keys
        if self._explicit_keys:
            assert isinstance(keys, list)  # (made a list above)
            self._size = len(keys)

    def __len__(self) -> int:
        return self._size

    def reset_state(self) -> None:
        super().reset_state()
        self._open()

    def _open(self) -> None:
        if self._env is None:
            self._env, self._env_key = acquire_env(
                self._lmdb_path, self._what, readahead=not self._shuffle
            )

    def close(self) -> None:
        self._keep_position()  # before the environment, and with it the cursor, goes
        self._cursor = None
        key, self._env_key, self._env = self._env_key, None, None
        if key is not None:
            release_env(key)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_env"] = state["_env_key"] = state["_cursor"] = None
        return state

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # ----------------------------------------------------------------- iteration
    def _order(self, epoch: int, start: int = 0) -> list[bytes]:
        """The keys of epoch ``epoch`` in read order (random reads), from position ``start``."""
        keys = self.keys
        if not self._shuffle:
            return keys[start:]
        perm = self._epoch_rng(epoch).permutation(len(keys))[start:]
        return [keys[i] for i in perm.tolist()]

    def _sequential(self, txn: Any, mode: str, start: int) -> Iterator[Any]:
        """The records from position ``start`` in key order: their values (``mode="values"``),
        ``(key, value)`` pairs (``"items"``) or keys only (``"keys"``: the cursor stays on each
        record while it is yielded, so ``self._cursor.value()`` reads it)."""
        cur = self._cursor = txn.cursor()
        if start:  # continue after the last key delivered before the state was saved
            if self._seq_key is None or not cur.set_key(self._seq_key):
                raise mismatch(self._what, "the saved key in", repr(self._lmdb_path),
                               self._seq_key, "the database changed since the state was saved.")
            if not cur.next():
                return iter(())
        keys, values = mode != "values", mode != "keys"
        if not self._has_keys_entry or self._keys_entry_last:
            it = cur.iternext(keys=keys, values=values)
            return islice(it, self._size - start) if self._has_keys_entry else it
        if mode == "values":
            return (v for k, v in cur if k != KEYS_KEY)
        if mode == "keys":
            return (k for k in cur.iternext(keys=True, values=False) if k != KEYS_KEY)
        return ((k, v) for k, v in cur if k != KEYS_KEY)

    def iter_shard(self, rank: int, world_size: int) -> Iterator[Any]:
        """One epoch, like ``iter(self)``, but the positions ``p`` with ``p % world_size !=
        rank`` are yielded as :data:`~dataflow.sharding.SKIPPED`, without reading their
        records (the protocol :class:`~dataflow.sharding.ShardableSource`, which
        :class:`~dataflow.sharding.ShardData` uses)."""
        return self._iter(self._decoder(), (rank, world_size))

    def _decoder(self) -> Callable[[bytes], Any] | None:
        """How a value is decoded (``None``: datapoints are ``[key, value]``)."""
        return None

    def _skipping(self, keys: Iterator[Any], start: int, skip: tuple[int, int],
                  read: Callable[[Any], Any]) -> Iterator[Any]:
        """``read(key)`` at the positions ``rank (mod world_size)`` of ``keys`` (which begins
        at position ``start``), :data:`SKIPPED` at the others."""
        rank, size = skip
        for self._pos, k in enumerate(keys, start + 1):
            yield read(k) if (self._pos - 1) % size == rank else SKIPPED

    def _sparse(self, txn: Any, decode: Callable[[bytes], Any] | None, start: int,
                skip: tuple[int, int]) -> Iterator[Any]:
        """A sequential scan that reads only the records of positions ``rank (mod world_size)``."""
        keys = self._sequential(txn, "keys", start)
        cur = self._cursor  # on the record of the key being read
        if decode is None:
            return self._skipping(keys, start, skip, lambda k: [k, cur.value()])
        return self._skipping(keys, start, skip, lambda k: decode(cur.value()))

    def _iter(self, decode: Callable[[bytes], Any] | None,
              skip: tuple[int, int] | None = None) -> Iterator[Any]:
        token, epoch, start = self._begin_epoch()
        self._cursor = None
        return self._run(decode, token, epoch, start, skip)

    def _run(
        self, decode: Callable[[bytes], Any] | None, token: object, epoch: int, start: int,
        skip: tuple[int, int] | None,
    ) -> Iterator[Any]:
        self._open()
        by_key = self._shuffle or self._explicit_keys
        with self._guard, self._env.begin(buffers=False) as txn:
            try:
                if by_key:
                    yield from self._iter_keys(txn, decode, epoch, start, skip)
                elif decode is None and skip is None:
                    items = self._sequential(txn, "items", start)
                    for self._pos, kv in enumerate(items, start + 1):
                        yield list(kv)
                else:
                    try:
                        if skip is not None:
                            yield from self._sparse(txn, decode, start, skip)
                        else:
                            items = self._sequential(txn, "values", start)
                            assert decode is not None  # (skip is None here)
                            for self._pos, v in enumerate(items, start + 1):
                                yield decode(v)
                    except Exception as e:
                        if isinstance(e, StateMismatchError):
                            raise
                        raise self._decode_error(e, epoch) from e
                self._end(token)  # (exhausted; a closed iterator leaves the epoch unfinished)
            finally:
                if self._token is token:  # (the transaction ends with this block)
                    self._keep_position()
                    self._cursor = None

    def _iter_keys(
        self, txn: Any, decode: Callable[[bytes], Any] | None, epoch: int, start: int,
        skip: tuple[int, int] | None,
    ) -> Iterator[Any]:
        get = txn.get
        order = self._order(epoch, start)

        def item(k: bytes) -> list[bytes]:
            v = get(k)
            if v is None:
                raise KeyError(k)
            return [k, v]

        try:
            if skip is not None:
                read = item if decode is None else lambda k: decode(get(k))
                yield from self._skipping(iter(order), start, skip, read)
            elif decode is None:
                for self._pos, k in enumerate(order, start + 1):
                    yield item(k)
            else:
                for self._pos, k in enumerate(order, start + 1):
                    yield decode(get(k))
        except KeyError as e:
            raise CorruptFileError(
                f"{self._what}: key {e.args[0]!r} (record {self._pos - 1}) is missing from "
                f"{self._lmdb_path!r}; the `keys` / `__keys__` list does not match the database."
            ) from None
        except Exception as e:
            key = order[self._pos - 1 - start]
            if get(key) is None:
                raise CorruptFileError(
                    f"{self._what}: key {key!r} (record {self._pos - 1}) is "
                    f"missing from {self._lmdb_path!r}; `keys` / `__keys__` do not match it."
                ) from None
            raise self._decode_error(e, epoch) from e

    # ----------------------------------------------------------------- state
    # ReaderState names a stage by its class; this reader is also made by a function
    # (LMDBSerializer.load) through a private class, so its states and their errors carry the
    # name the user wrote instead, self._what.
    def state_dict(self) -> dict[str, Any]:
        """Epoch, position, size, shuffle, seed and, for a sequential scan, the key of the
        last datapoint delivered; ``type`` is the stage's public name."""
        return {**super().state_dict(), TYPE: self._what}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state of the same database (same number of datapoints) and ``shuffle``;
        a mismatch raises :class:`StateMismatchError` naming the stage as the user made it."""
        if isinstance(state, dict) and state.get(TYPE) in self._OLD_TYPES:
            state = {**state, TYPE: self._what}
        n = len(self)
        check_state(state, self._what, size=n, shuffle=self._shuffle)
        pos = state.get(POS)
        if not isinstance(pos, int) or isinstance(pos, bool) or not 0 <= pos <= n:
            raise mismatch(self._what, "a position in", f"[0, {n}]", pos, "the state is damaged.")
        if not state[DONE]:
            self._check_extra(state)
        self._forget_iteration()
        self.restore_epoch(state)

    def _load_seed_state(self, seed: dict[str, Any]) -> None:
        try:
            super()._load_seed_state(seed)
        except StateMismatchError:
            raise mismatch(self._what, "a seed", "{'entropy': int, 'spawn_key': [int, ...]}",
                           seed, "the state is damaged.") from None

    def _require_reset(self) -> None:
        try:
            super()._require_reset()
        except DataFlowError as e:  # the message begins with the class's name
            name = type(self).__name__
            message = str(e)
            if name == self._what or not message.startswith(name):
                raise
            raise DataFlowError(self._what + message[len(name):]) from None

    def _keep_position(self) -> None:
        """Remember the key of the record delivered last by an unfinished sequential scan,
        while its cursor can still say it: a state saved after the scan stopped (a ``break``,
        ``close()``) resumes after that record."""
        cur = self._cursor
        if cur is None or not self._pos or self._done:
            return
        try:
            self._seq_key = bytes(cur.key())
        except Exception:  # its environment was closed under it: nothing to keep
            pass

    def _state_extra(self) -> dict[str, Any]:
        if self._shuffle or self._explicit_keys:
            return {}
        key = self._seq_key
        if self._cursor is not None and self._pos:
            key = self._cursor.key()  # the cursor is on the datapoint delivered last
        return {"key": None if key is None or not self._pos else bytes(key).hex()}

    def _forget_iteration(self) -> None:
        self._cursor = None

    def _check_extra(self, state: dict[str, Any]) -> None:
        if self._shuffle or self._explicit_keys or not state["pos"]:
            return
        hint = "the state was saved from another database."
        try:
            key = bytes.fromhex(state.get("key"))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise mismatch(self._what, "the hex key of the last datapoint delivered,", "a str",
                           state.get("key"), hint) from None
        self._open()
        with self._env.begin(buffers=False) as txn:
            if txn.get(key) is None:
                raise mismatch(self._what, "a key present in", repr(self._lmdb_path), key, hint)
        self._seq_key = key

    def _decode_error(self, e: Exception, epoch: int) -> CorruptFileError:
        codec = self._codec.split("-")[0]
        return CorruptFileError(
            f"{self._what}: record {self._pos - 1} of {self._lmdb_path!r} (epoch {epoch}) "
            f"cannot be decoded as {codec} ({type(e).__name__}: {e}); the file is corrupt "
            "or was not written by LMDBSerializer."
        )

    def __iter__(self) -> Iterator[Any]:
        return self._iter(self._decoder())


class LMDBDataDecoder(ProxyDataFlow):
    """Maps every ``[key, value]`` of ``lmdb_data`` through ``decoder(key, value)``.

    A ``None`` result drops the datapoint (then ``len`` is an upper bound).
    """

    def __init__(self, lmdb_data: DataFlow, decoder: Callable[[bytes, bytes], Any]) -> None:
        super().__init__(lmdb_data)
        if not callable(decoder):
            raise TypeError(f"`decoder` must be callable as decoder(key, value), got {decoder!r}")
        self.decoder = decoder

    def __iter__(self) -> Iterator[Any]:
        decoder = self.decoder
        for k, v in self.ds:
            dp = decoder(k, v)
            if dp is not None:
                yield dp


def _lmdb_loader(path: Any, shuffle: bool, seed: int | None) -> LMDBData:
    """LMDBSerializer.load: an LMDBData that yields decoded values."""
    return _LoadedLMDBData(path, shuffle, seed=seed)


class _LoadedLMDBData(LMDBData):
    """``LMDBData`` yielding ``loads(value)`` directly (no MapData layer on the hot path).

    Its errors and states name it ``LMDBSerializer.load``, what the user called; states saved
    before that (``type`` ``"_LoadedLMDBData"``) still load.
    """

    _WHAT = "LMDBSerializer.load"
    _OLD_TYPES = ("_LoadedLMDBData",)

    def _decoder(self) -> Callable[[bytes], Any] | None:
        return get_loads(self._codec)
