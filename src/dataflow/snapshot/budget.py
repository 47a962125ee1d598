"""A snapshot under a byte budget: store the outputs that are most expensive per byte.

``budget=`` bounds the bytes the snapshot's shard files and their index files take on disk
(``meta.json`` and ``deterministic.json``, a few hundred bytes, are not counted): a record
counts with its size on disk (compressed, if it is) and the 40 bytes of its index entry, a
shard with its index's 28 bytes, and records that were evicted count until they are reclaimed.
A process evicts records of its own shards and of sealed shards (of processes done with them:
another run's), which it claims first (one process wins).
Every output that is computed has a measured cost (the seconds ``map_func`` took) and a size;
its *density* is seconds per byte. While the budget has room, outputs are stored as they come.
When it is full, an output whose density is at least :data:`REPLACE_MARGIN` (1.5) times that of
the cheapest stored ones replaces them: they are evicted and the process's shards that held
them are compacted (rewritten with their live records) before the new record is written, so
the files never exceed the budget. A compaction copies the live records, so an eviction frees
up to :data:`EVICT_BATCH` of the budget at once, and that room is kept for outputs that beat the
evicted ones by the margin (:attr:`Budget.floor`). Outputs whose measured costs differ by less
than the margin never replace each other: the first ones to fit stay. Over the epochs the
snapshot comes to hold the outputs that save the most time per byte, and the rest are computed
each time: an epoch's time falls in proportion to the work stored.

The decision is :func:`admit`'s, a pure function of the stored costs; :class:`Budget` applies
it for one process, which counts every shard it sees.
"""

from __future__ import annotations

import os
import re
import threading
import time
from typing import Any

from dataflow.snapshot.shard import ENTRY

__all__ = ["EVICT_BATCH", "REPLACE_MARGIN", "Budget", "admit", "parse_budget"]

#: a stored output is replaced only by one that costs at least this many times more seconds
#: per byte: outputs of about the same cost (noise in the measured seconds) never churn
REPLACE_MARGIN = 1.5
#: when outputs must be evicted for a costlier one, up to this fraction of the budget is freed at
#: once (of outputs it beats by the margin): a compaction rewrites the process's shards, so it
#: makes room for many replacements, not one
EVICT_BATCH = 1 / 16

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40}


def parse_budget(budget: Any) -> int | None:
    """``budget`` in bytes: ``None`` (no limit), an int, or a string like ``"20GB"``,
    ``"512MiB"`` or ``"1.5e9"``."""
    if budget is None:
        return None
    if isinstance(budget, bool):
        raise TypeError(f"`budget` must be a number of bytes or a string like '20GB', got "
                        f"{budget!r}.")
    if isinstance(budget, int | float):
        value = float(budget)
    elif isinstance(budget, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)\s*", budget.lower())
        if m is None or m.group(2) not in _UNITS:
            raise ValueError(
                f"`budget` must be a number of bytes or a size like '20GB', '512MiB', got "
                f"{budget!r}; units: {', '.join(u.upper() for u in _UNITS if u)}.")
        value = float(m.group(1)) * _UNITS[m.group(2)]
    else:
        raise TypeError(f"`budget` must be a number of bytes or a string like '20GB', got "
                        f"{type(budget).__name__} {budget!r}.")
    if value < 0 or value != value:
        raise ValueError(f"`budget` must be >= 0 bytes, got {budget!r}.")
    return int(value)


class CostClock:
    """The seconds an output took to compute, as steady as the machine allows.

    Wall-clock time counts the time a thread waited for a core: on a busy machine (the threads
    of the stage after the snapshot, other jobs) one output in a few measures twice its cost,
    and a budget that compares costs would replace outputs by others that only look costlier.
    On Linux the time a thread spent runnable but waiting for a core is in
    ``/proc/thread-self/schedstat`` (its second field, nanoseconds); it is taken away, so what
    is left is the time computing or waiting for I/O (a real cost of recomputing). Elsewhere
    the wall-clock time is used. And for each index the lowest cost measured so far in this
    process counts: a cost is never higher than its quietest measurement."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._lowest: dict[int, float] = {}

    def _waited(self) -> float:
        fd = getattr(self._local, "fd", None)
        if fd is None:
            try:
                fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
            except OSError:
                fd = -1
            self._local.fd = fd
        if fd < 0:
            return 0.0
        try:
            return int(os.pread(fd, 128, 0).split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return 0.0

    def measure(self, i: int, compute: Any) -> tuple[Any, float, bool]:
        """``(compute(), its cost in seconds, whether index i was measured before)``: see the
        class."""
        waited, start = self._waited(), time.perf_counter()
        value = compute()
        seconds = time.perf_counter() - start - (self._waited() - waited)
        before = self._lowest.get(i)
        seconds = max(seconds, 0.0) if before is None else min(max(seconds, 0.0), before)
        self._lowest[i] = seconds
        return value, seconds, before is not None

    def __reduce__(self) -> tuple[Any, ...]:
        return (CostClock, ())  # (a new one: its threads' files and measurements stay here)


def by_density(stored: dict[int, tuple[float, int]]) -> list[tuple[int, tuple[float, int]]]:
    """``stored.items()``, the cheapest per byte first (ties: the lower index)."""
    return sorted(stored.items(), key=lambda kv: (kv[1][0] / max(kv[1][1], 1), kv[0]))


def admit(size: int, seconds: float, free: int, stored: dict[int, tuple[float, int]],
          margin: float = REPLACE_MARGIN, extra: int = 0,
          order: list[tuple[int, tuple[float, int]]] | None = None) -> tuple[bool, list[int]]:
    """Whether an output of ``size`` bytes that took ``seconds`` is stored, and which stored
    outputs (``{index: (seconds, bytes)}``) to discard for it: the cheapest per byte, and only
    those that it beats per byte by ``margin`` times or more. ``free``: the budget's bytes
    left. ``extra``: when some must go, discard more of those it beats while the room left
    after it stays within ``extra`` bytes (room for the next ones: a compaction serves many).
    ``order``: ``by_density(stored)``, where the caller keeps it."""
    if size <= free:
        return True, []
    density = seconds / max(size, 1)
    victims: list[int] = []
    for i, (s, b) in by_density(stored) if order is None else order:
        if s / max(b, 1) * margin > density or (size <= free and free + b - size > extra):
            break
        victims.append(i)
        free += b
    return (True, victims) if size <= free else (False, [])


class Budget:
    """The budget of one process's writer: ``limit`` bytes on disk (``None``: no limit).

    ``floor``: the highest cost per byte evicted so far, times the margin: once outputs were
    evicted, free room is given only to outputs that could have evicted them, never back to
    outputs like them (which would only be evicted again, at the cost of another compaction)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.evicted = 0
        self.refused = 0
        self.floor = 0.0
        # the cheapest own record's cost per byte, as of the store's version ``_seen``: a full
        # budget refuses most outputs, each at the cost of a comparison
        self._cheapest = float("inf")
        self._seen: Any = None
        # this process's evictable records ({index: (seconds, bytes)}) and by_density's order
        # of them, as of the store's version ``_own_seen``
        self._own: dict[int, tuple[float, int]] = {}
        self._order: list[tuple[int, tuple[float, int]]] = []
        self._own_seen: Any = None

    def place(self, store: Any, size: int, seconds: float, evict: bool = True) -> bool:
        """Make room in ``store`` for a record of ``size`` bytes on disk that took ``seconds``
        (evicting this process's cheaper records and compacting its shards); whether it fits.
        ``evict=False``: only free room is given (a cost measured once may be an outlier,
        and a compaction rewrites the shards: only a cost measured again may evict).
        Meant as ``store.put``'s ``admit``, under the store's lock."""
        limit = self.limit
        if limit is None:
            return True
        size += ENTRY.itemsize + store.new_shard_bytes()  # (its index entry, a new index)
        density = seconds / size
        used = store.disk_bytes()
        if used + size <= limit and density >= self.floor:
            return True
        if not evict:
            self.refused += 1
            return False
        dead = store.dead_bytes()
        if used + size > limit + dead:  # victims needed: is any cheap enough? (no dict built)
            version = store.version()
            if version != self._seen:
                self._cheapest, self._seen = store.cheapest_own(ENTRY.itemsize), version
            if density < REPLACE_MARGIN * self._cheapest:
                self.refused += 1
                return False
        version = store.version()
        if version != self._own_seen:  # (most outputs of a full budget are refused here: the
            # records and their order are built again only when they changed)
            own = {i: (s, b + ENTRY.itemsize) for i, (s, b) in store.own_costs().items()}
            self._own, self._order, self._own_seen = own, by_density(own), version
        own = self._own
        ok, victims = admit(size, seconds, limit - used + dead, own,
                            extra=int(limit * EVICT_BATCH), order=self._order)
        if not ok or (not victims and density < self.floor):
            self.refused += 1
            return False
        gone = store.evict(victims)  # (and compacts)
        if gone:
            self.floor = max(self.floor, REPLACE_MARGIN * max(own[i][0] / own[i][1]
                                                              for i in gone))
        self.evicted += len(gone)
        if store.disk_bytes() + size <= limit:
            return True
        self.refused += 1  # (another process's shards grew meanwhile)
        return False
