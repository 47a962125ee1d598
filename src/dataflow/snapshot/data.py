"""``SnapshotData``: the outputs ``map_func(ds[i])`` of a position-readable flow, computed once
and read back by position from a persistent, verified snapshot.

A snapshot lives under ``path/<key>/`` (the store's format: :mod:`dataflow.snapshot.store`);
the key digests the source, ``map_func`` and the library's version (:mod:`dataflow.snapshot.key`).
Reading is *read-through*: an index not yet stored is computed, returned and stored; a complete
snapshot never calls ``map_func`` nor reads ``ds``. Every process (a trainer rank, a service
worker, another job) opens its own writer of the same snapshot and reads what the others wrote.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from dataflow.base import DataFlow, RNGDataFlow
from dataflow.errors import DataFlowError
from dataflow.rng import derive_rng, path_of, stage_sequence
from dataflow.snapshot.budget import Budget, CostClock, parse_budget
from dataflow.snapshot.determinism import (
    CHECK_INPUTS,
    NondeterministicError,
    check_deterministic,
    fingerprint,
    func_name,
)
from dataflow.snapshot.explain import explain_snapshot
from dataflow.snapshot.key import function_parts, make_key, source_parts
from dataflow.snapshot.source import positional
from dataflow.state import ReaderState
from dataflow.validation import check_callable

__all__ = ["SnapshotData", "StaleSnapshotError"]

logger = logging.getLogger(__name__)

#: the file, in a snapshot's folder, that says its ``map_func`` passed the randomness test
CHECKED = "deterministic.json"


class StaleSnapshotError(DataFlowError, ValueError):
    """A stored output differs from what ``map_func`` computes now for the same input: the
    snapshot is stale (a change its key did not catch)."""


def _check_verify(verify: Any) -> tuple[float, bool]:
    """``(fraction, repair)`` from ``verify``: a fraction in [0, 1], or ``"repair"``."""
    if verify == "repair":
        return 0.01, True
    if isinstance(verify, tuple) and len(verify) == 2 and verify[0] == "repair":
        verify, repair = verify[1], True
    else:
        repair = False
    if isinstance(verify, bool) or not isinstance(verify, int | float) or not 0 <= verify <= 1:
        raise ValueError(f"`verify` must be a fraction in [0, 1] of the hits to recompute, or "
                         f"'repair', got {verify!r}; e.g. verify=0.01, or verify=0 to trust the "
                         "snapshot.")
    return float(verify), repair


def check_workers(num_workers: Any) -> int | str:
    if num_workers == "auto":
        return "auto"
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"`num_workers` must be 'auto' or an int >= 1 (threads that compute "
                         f"the misses ahead of the reader), got {num_workers!r}; e.g. "
                         "num_workers=1 to compute them in the reading thread.")
    return num_workers


def _shallow(dp: Any) -> Any:
    """A shallow copy of a datapoint, as ``MapData`` hands its function."""
    if type(dp) is list:
        return dp[:]
    if isinstance(dp, dict):
        return dict(dp)
    return dp


def _nbytes(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, np.ndarray | np.generic):
        return int(value.nbytes)
    if isinstance(value, bytes | bytearray | str):
        return len(value)
    if isinstance(value, list | tuple):
        return 8 + sum(_nbytes(v) for v in value)
    if isinstance(value, dict):
        return 8 + sum(_nbytes(k) + _nbytes(v) for k, v in value.items())
    return 16


class SnapshotData(ReaderState, RNGDataFlow):
    """The outputs ``map_func(ds[i])`` (or ``ds[i]``) of a position-readable ``ds``, stored
    under ``path`` and read back by position.

    ``ds``: a list or sequence, ``DataFromList``, an LMDB/Numpy/HDF5 flow, a dataset loader,
    another ``SnapshotData``, or any flow with a ``len()`` (read once, in order, into a list:
    the cheap part, such as keys or file names). ``map_func``: a *deterministic* function
    (decoding, a fixed resize); a random one is refused (:class:`NondeterministicError`)
    with a hint of where the snapshot can go. A ``None`` output is stored as a drop and skipped
    when iterating, as ``MapData`` skips it (``snap[i]`` gives ``None``).

    ``key``: overrides the digest of the source and ``map_func`` (the folder under ``path``).
    ``budget``: bytes (or ``"20GB"``) the snapshot may hold; the outputs that cost the most
    seconds per byte are stored, the rest computed each time (:mod:`dataflow.snapshot.budget`).
    ``verify``: the fraction of the hits recomputed and compared byte for byte (chosen at random
    each epoch); a mismatch raises :class:`StaleSnapshotError` naming the index, or with
    ``verify="repair"`` (or ``("repair", fraction)``) drops the stale snapshot and recomputes.
    ``compression``: ``None``, ``"lz4"`` or ``"zstd"``. ``on_full``: ``"raise"`` (a full disk
    ends in an error naming ``path``) or ``"read"`` (a warning, then read on without storing).
    ``num_workers``: threads that compute an epoch's misses ahead of the reader, in order
    (``"auto"``: the cores this process may use; ``1``: in the reading thread). Decoders that
    release the GIL (OpenCV, the JPEG decoder, NumPy) then fill a snapshot as fast as a threaded
    mapper would run them; a complete snapshot is read in the reading thread.

    A DataFlow: each ``__iter__`` is one epoch in index order, or with ``shuffle=True`` in a new
    permutation per epoch derived from ``seed`` (see :mod:`dataflow.rng`); ``state_dict()`` saves
    the epoch and the position, and a restore continues exactly (also after a ``break``).
    Picklable: a copy in another process opens its own writer of the same snapshot.
    """

    #: this flow reads by position in place (``len()`` and ``[i]``): see ``positional()``
    by_position = True

    def __init__(self, ds: Any, path: str | os.PathLike[str], *,
                 map_func: Callable[[Any], Any] | None = None, key: str | None = None,
                 budget: int | str | None = None, verify: float | str = 0.01,
                 compression: str | None = None, shuffle: bool = False,
                 seed: int | None = None, on_full: str = "raise",
                 num_workers: int | str = "auto") -> None:
        self._setup(ds, path, map_func, key, budget, verify, compression, shuffle, seed,
                    on_full)
        self.num_workers = check_workers(num_workers)
        self._ensure_checked()

    def _setup(self, ds: Any, path: str | os.PathLike[str], map_func: Callable[[Any], Any] | None,
               key: str | None, budget: int | str | None, verify: float | str,
               compression: str | None, shuffle: bool, seed: int | None, on_full: str) -> None:
        """The constructor's work, without the randomness test."""
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"`path` must be a folder (str or os.PathLike), got "
                            f"{type(path).__name__} {path!r}; e.g. path='/data/snapshots'.")
        self.path = os.fspath(path)
        self.ds = ds
        self.map_func = None if map_func is None else check_callable(
            map_func, "map_func", "lambda dp: [decode(dp[0]), dp[1]]")
        self.budget = parse_budget(budget)
        self.verify, self.repair = _check_verify(verify)
        if compression not in (None, "lz4", "zstd"):
            raise ValueError(f"`compression` must be None, 'lz4' or 'zstd', got "
                             f"{compression!r}.")
        if on_full not in ("raise", "read"):
            raise ValueError(f"`on_full` must be 'raise' or 'read', got {on_full!r}.")
        self.compression, self.on_full = compression, on_full
        if key is not None and (not isinstance(key, str) or not key or "/" in key
                                or key.startswith(".")):
            raise ValueError(f"`key` must be a non-empty folder name (no '/', not starting "
                             f"with '.'), got {key!r}; e.g. key='imagenet-decode-v2'.")
        try:
            self._size = len(ds)
        except (NotImplementedError, TypeError):
            positional(ds)  # raises the clear error of a flow without len()
            raise
        self.parts = {**source_parts(ds), **function_parts(map_func)}
        self.key = key if key is not None else make_key(self.parts)
        self._init_reader(shuffle, seed)
        self.shuffle = bool(shuffle)
        #: where ``dataflow.snapshot`` cut the chain, and why (``None``: built by the user)
        self.cut: Any = None
        # the order of a source this snapshot replaced, that many stages below it (see cut.py)
        self._order_depth: int | None = None
        self._reader: Any = None
        self._store: Any = None
        self._budget = Budget(self.budget)
        self._clock = CostClock()  # (a budget's costs: steadier than the wall-clock time)
        self._verify_rng = np.random.default_rng()
        self._stats = self._zero_stats()
        self._checked = map_func is None or self._marker_exists()
        #: threads that compute the misses of an epoch ahead of the reader ("auto": the cores)
        self.num_workers = "auto"
        # counters, the budget's choice and the verify draw are shared by those threads
        self._lock = threading.Lock()

    # ---- identity -------------------------------------------------------------------------

    @property
    def root(self) -> str:
        """The snapshot's folder, ``path/<key>``."""
        return os.path.join(self.path, self.key)

    def snapshot_identity(self) -> dict[str, str]:
        """What a snapshot of this snapshot is keyed by: its own key."""
        return {"snapshot": self.key}

    def _meta(self) -> dict[str, Any]:
        return {"key": self.key, "parts": self.parts, "size": self._size,
                "map_func": None if self.map_func is None else func_name(self.map_func)}

    def explain(self) -> str:
        """What this snapshot is keyed by, how much of it is stored, and what differs from the
        other snapshots under ``path`` (the changed parts: code, a constant, a closure value, a
        global, the source)."""
        return explain_snapshot(self.path, self.key, self.parts, self._open().stored(),
                                self._size)

    # ---- the randomness test --------------------------------------------------------------

    def _func_digest(self) -> str:
        return make_key({k: v for k, v in self.parts.items() if not k.startswith("source.")})

    def _marker_exists(self) -> bool:
        """Whether this ``map_func`` passed the test for this snapshot (under a ``key=`` of
        the user's, another function's pass does not count)."""
        try:
            with open(os.path.join(self.root, CHECKED)) as f:
                return json.load(f).get("func") == self._func_digest()
        except (OSError, ValueError, AttributeError):
            return False

    def _ensure_checked(self, tested: bool = False) -> None:
        """Run the randomness test once per snapshot (a file in its folder says it passed);
        ``tested``: the caller ran it."""
        if self._checked:
            return
        n = 0
        if not tested:
            reader = self._source()
            n = min(CHECK_INPUTS, len(reader))
            inputs = [reader.get(i) for i in range(n)]
            check_deterministic(self.map_func, inputs)  # type: ignore[arg-type]
        self._checked = True
        tmp = os.path.join(self.root, f".{CHECKED}.{os.getpid()}")
        try:
            os.makedirs(self.root, exist_ok=True)
            with open(tmp, "w") as f:
                json.dump({"map_func": func_name(self.map_func), "func": self._func_digest(),
                           "inputs": n}, f)
            os.replace(tmp, os.path.join(self.root, CHECKED))
        except OSError as e:  # (a full or read-only disk: other processes test again)
            logger.warning("snapshot %s: could not record that map_func passed the randomness "
                           "test (%s)", self.root, e)
            with contextlib.suppress(OSError):
                os.remove(tmp)

    # ---- by position ----------------------------------------------------------------------

    def __len__(self) -> int:
        return self._size

    def _source(self) -> Any:
        if self._reader is None:
            self._reader = positional(self.ds)
        return self._reader

    def _open(self) -> Any:
        if self._store is None:
            from dataflow.snapshot.store import SnapshotStore

            self._store = SnapshotStore(self.root, self._size, compression=self.compression,
                                        on_full=self.on_full, meta=self._meta())
        return self._store

    def _compute(self, i: int) -> Any:
        dp = self._source().get(i)
        return dp if self.map_func is None else self.map_func(_shallow(dp))

    def __getitem__(self, i: int) -> Any:
        if isinstance(i, bool) or not isinstance(i, int | np.integer):
            raise TypeError(f"SnapshotData indices are ints, got {type(i).__name__} {i!r}.")
        n = self._size
        if not -n <= i < n:
            raise IndexError(f"SnapshotData index {i} out of range for {n} datapoints.")
        return self._value(int(i) % n)

    def _value(self, i: int) -> Any:
        store = self._open()
        found, value = store.get(i)
        stats = self._stats
        if found:
            with self._lock:
                stats["hits"] += 1
                stats["bytes_read"] += _nbytes(value)
                check = bool(self.verify) and self._verify_rng.random() < self.verify
            return self._verify(i, value) if check else value
        # another process (a rank, a service worker) may have stored it: a refresh costs a
        # stat of the folder (listed again only when it changed) and one per shard being written
        store.refresh()
        found, value = store.get(i)
        if found:
            with self._lock:
                stats["hits"] += 1
                stats["bytes_read"] += _nbytes(value)
            return value
        if self.budget is None:
            start = time.perf_counter()
            value = self._compute(i)
            seconds, again = time.perf_counter() - start, True
        else:
            value, seconds, again = self._clock.measure(i, lambda: self._compute(i))
        stored = self._put(store, i, value, seconds, again)
        with self._lock:
            stats["misses"] += 1
            stats["compute_seconds"] += seconds
            stats["bytes_stored"] += stored
        return value

    def _put(self, store: Any, i: int, value: Any, seconds: float, again: bool) -> int:
        """Store ``value`` at ``i`` (it took ``seconds``), under a budget only if it is given
        room (``again``: its cost was measured before, so it may evict); the bytes written."""
        if self.budget is None:
            return int(store.put(i, value, cost=seconds))
        place, lock = self._budget.place, self._lock

        def admit(size: int) -> Any:
            with lock:  # one choice at a time: it reads and changes the stored costs
                return place(store, size, seconds, evict=again)

        return int(store.put(i, value, cost=seconds, admit=admit))

    def _verify(self, i: int, stored: Any) -> Any:
        start = time.perf_counter()
        fresh = self._compute(i)
        seconds = time.perf_counter() - start
        if fingerprint(fresh) == fingerprint(stored):
            with self._lock:
                self._stats["verified"] += 1
            return stored
        with self._lock:
            self._stats["verify_failed"] += 1
        if self.map_func is not None:
            check_deterministic(self.map_func, [self._source().get(i)])
        if not self.repair:
            raise StaleSnapshotError(
                f"snapshot {self.root!r}: the stored output at index {i} differs from what "
                f"`map_func` {func_name(self.map_func) if self.map_func else '(none)'} computes "
                "now: the snapshot is stale (a change the key did not catch, e.g. a file read "
                "inside map_func). Remove the folder, pass another key=, or "
                "verify='repair' to drop it and recompute.")
        logger.warning("snapshot %s: index %d is stale; dropping the snapshot and recomputing",
                       self.root, i)
        store = self._open()
        store.drop()
        self._stats["repaired"] += 1
        self._stats["bytes_stored"] += self._put(store, i, fresh, seconds, again=False)
        return fresh

    # ---- DataFlow -------------------------------------------------------------------------

    def children(self) -> list[DataFlow]:
        return [self.ds] if isinstance(self.ds, DataFlow) else []

    def _replace_child(self, old: DataFlow, new: DataFlow) -> None:
        raise ValueError(f"SnapshotData cannot replace its source {type(old).__name__}: the "
                         "source is part of the snapshot's key. Build a new SnapshotData(new, "
                         "path, ...) over the other source.")

    def reset_state(self) -> None:
        super().reset_state()
        depth = self._order_depth
        if depth is not None:  # the order of the source this snapshot replaced
            self._seed_seq = stage_sequence(self.seed, (*path_of(self), *(0,) * depth))
            self._stream = derive_rng(self._seed_seq)
        self._verify_rng = np.random.default_rng()

    def __iter__(self) -> Iterator[Any]:
        return self._run(*self._begin_epoch())

    def _run(self, token: object, epoch: int, start: int) -> Iterator[Any]:
        with self._guard:
            n = self._size
            order = (self._epoch_rng(epoch).permutation(n).tolist() if self._shuffle
                     else range(n))
            workers = self._workers()
            if workers > 1 and not self._open().complete():
                outputs = self._ahead(order, start, n, workers)
            else:
                outputs = map(self._value, (order[p] for p in range(start, n)))
            try:
                for p, out in enumerate(outputs, start):
                    self._pos = p + 1
                    if out is not None:
                        yield out
            finally:
                close = getattr(outputs, "close", None)
                if close is not None:
                    close()
            self._end(token)

    def _workers(self) -> int:
        if self.num_workers == "auto":  # (the cores this process may use: affinity, quota)
            from dataflow.parallel.autotuning.budget import cpu_budget

            return cpu_budget().cores
        return int(self.num_workers)

    def _ahead(self, order: Any, start: int, n: int, workers: int) -> Iterator[Any]:
        """The outputs at positions ``start..n`` in order, computed by ``workers`` threads up
        to ``8 * workers`` positions ahead of the reader (a miss is computed and stored by its
        thread; a hit is read there too). Closing it (a ``break``) waits for the positions in
        flight, so nothing is left writing."""
        from concurrent.futures import ThreadPoolExecutor

        self._source()  # (made once, here: a flow without positions is read in this thread)
        pending: collections.deque[Any] = collections.deque()
        with ThreadPoolExecutor(workers, thread_name_prefix="dataflow-snapshot") as pool:
            try:
                p = start
                while p < n or pending:
                    while p < n and len(pending) < 8 * workers:
                        pending.append(pool.submit(self._value, order[p]))
                        p += 1
                    yield pending.popleft().result()
            finally:
                for f in pending:
                    f.cancel()

    def close(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            store.close()
        self._reader = None
        if isinstance(self.ds, DataFlow):  # (idempotent, as every flow's close)
            self.ds.close()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_store=None, _reader=None, _stats=self._zero_stats())
        state.pop("_probe", None)
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._verify_rng = np.random.default_rng()
        self._lock = threading.Lock()

    # ---- counters -------------------------------------------------------------------------

    @staticmethod
    def _zero_stats() -> dict[str, Any]:
        return {"hits": 0, "misses": 0, "bytes_stored": 0, "bytes_read": 0, "verified": 0,
                "verify_failed": 0, "repaired": 0, "compute_seconds": 0.0}

    def stats(self) -> dict[str, Any]:
        """This process's counters: ``hits``, ``misses``, ``bytes_stored``, ``bytes_read``
        (the outputs' bytes), ``verified`` / ``verify_failed`` / ``repaired``,
        ``compute_seconds`` (in ``map_func`` and the source, on misses), ``evicted`` /
        ``refused`` (under a budget), and the snapshot's ``stored`` count and ``size``."""
        out = dict(self._stats)
        out.update(evicted=self._budget.evicted, refused=self._budget.refused,
                   size=self._size, key=self.key)
        if self._store is not None:
            out["stored"] = self._store.stored()
            out["store"] = self._store.stats()
        return out

    def profile_metrics(self) -> dict[str, float]:
        """The counters :func:`dataflow.profile` prints under its table."""
        s = self._stats
        total = s["hits"] + s["misses"]
        return {"snapshot hits": float(s["hits"]), "snapshot misses": float(s["misses"]),
                "snapshot hit rate": s["hits"] / total if total else 0.0,
                "snapshot MB stored": s["bytes_stored"] / 1e6,
                "snapshot MB read": s["bytes_read"] / 1e6,
                "snapshot verified": float(s["verified"]),
                "snapshot verify failed": float(s["verify_failed"])}


NondeterministicError = NondeterministicError  # (re-exported: the error a random map raises)
