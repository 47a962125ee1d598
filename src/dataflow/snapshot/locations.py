"""The snapshot store's in-memory index: where the record of each dataset index lives.

One entry per index in NumPy arrays (shard number, offset, size on disk, cost, and whether this
process has checked the record's checksums), so a lookup is a few array reads and a million
indices take 30 MB. The first record seen for an index is used; copies written by other
writers (two processes computed the same index) are kept aside and take its place if it is
forgotten: found corrupted, discarded (a tombstone), or its shard deleted.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dataflow.snapshot.shard import KIND_RECORD, KIND_TOMBSTONE

__all__ = ["Locations"]


class Locations:
    """Index -> (shard number, offset, size, cost) of the record that ``get`` reads."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.sid = np.full(size, -1, np.int32)
        self.off = np.zeros(size, np.int64)
        self.rsize = np.zeros(size, np.int64)
        self.cost = np.zeros(size, np.float64)
        self.checked = np.zeros(size, np.bool_)
        self.n = 0
        self.names: list[str | None] = []  # by shard number; None once the shard is deleted
        self.live: list[int] = []  # by shard number: the bytes of the records indexed there
        self.live_n: list[int] = []  # ... and how many they are
        self.by_name: dict[str, int] = {}
        self.alt: dict[int, list[tuple[int, int, int, float]]] = {}
        self.dead: set[tuple[str, int]] = set()  # (shard, offset) of records not to use

    def add_shard(self, name: str) -> int:
        self.names.append(name)
        self.live.append(0)
        self.live_n.append(0)
        sid = self.by_name[name] = len(self.names) - 1
        return sid

    def add(self, sid: int, table: np.ndarray,
            tombstone_target: Callable[[int], tuple[str, int] | None]) -> list[str]:
        """Index the entries of shard ``sid`` (a ``shard.ENTRY`` table); what is wrong with
        them. ``tombstone_target(offset)`` reads the record that a tombstone names."""
        name = self.names[sid]
        bad = (table["index"] < 0) | (table["index"] >= self.size)
        problems = [f"record at byte {int(e['offset'])}: index {int(e['index'])} is out of "
                    f"range(0, {self.size})" for e in table[bad]]
        table = table[~bad]
        if not len(table):
            return problems
        if not (table["kind"] != KIND_RECORD).any() and not any(n == name for n, _ in self.dead):
            # the common case, at NumPy speed: records of indices not stored yet
            idx = table["index"]
            take = np.zeros(len(table), np.bool_)
            take[np.unique(idx, return_index=True)[1]] = True
            take &= self.sid[idx] < 0
            new = table[take]
            j = new["index"]
            self.off[j], self.rsize[j], self.cost[j] = new["offset"], new["size"], new["cost"]
            self.sid[j] = sid  # last: a reader in another thread sees a whole entry
            self.n += len(new)
            self.live[sid] += int(new["size"].sum())
            self.live_n[sid] += len(new)
            table = table[~take]
        for i, off, size, cost, kind in table.tolist():
            if kind == KIND_TOMBSTONE:
                target = tombstone_target(off)
                if target is not None:
                    self.tombstone(i, *target)
            elif (name, off) not in self.dead:
                self.index(i, sid, off, size, cost)
        return problems

    def index(self, i: int, sid: int, off: int, size: int, cost: float) -> None:
        if self.sid[i] < 0:
            self.off[i], self.rsize[i], self.cost[i] = off, size, cost
            self.sid[i] = sid  # last: a reader in another thread sees a whole entry
            self.n += 1
            self.live[sid] += size
            self.live_n[sid] += 1
        elif (int(self.sid[i]), int(self.off[i])) != (sid, off):
            self.alt.setdefault(i, []).append((sid, off, size, cost))

    def has_copy(self, i: int) -> bool:
        """Whether another writer's copy of the record of ``i`` would take its place."""
        return any(self.names[sid] is not None and (self.names[sid], off) not in self.dead
                   for sid, off, _, _ in self.alt.get(i, ()))

    def where(self, i: int) -> tuple[str, int]:
        """(shard name, offset) of the record indexed at ``i``."""
        name = self.names[int(self.sid[i])]
        assert name is not None
        return name, int(self.off[i])

    def kill(self, i: int) -> None:
        """Never use the record indexed at ``i`` again (in this process)."""
        self.dead.add(self.where(i))
        self.forget(i)

    def forget(self, i: int) -> None:
        """Unindex ``i``; a copy from another writer, if any, takes its place."""
        at = int(self.sid[i])
        self.live[at] -= int(self.rsize[i])
        self.live_n[at] -= 1
        self.sid[i] = -1
        self.checked[i] = False
        self.n -= 1
        for sid, off, size, cost in self.alt.pop(i, []):
            name = self.names[sid]
            if name is not None and (name, off) not in self.dead:
                self.index(i, sid, off, size, cost)

    def tombstone(self, i: int, name: str, off: int) -> None:
        """A tombstone for the record at (``name``, ``off``) of index ``i``."""
        self.dead.add((name, off))
        sid = self.by_name.get(name)
        if sid is None or not 0 <= i < self.size:
            return
        if int(self.sid[i]) == sid and int(self.off[i]) == off:
            self.forget(i)
        elif i in self.alt:
            self.alt[i] = [a for a in self.alt[i] if (a[0], a[1]) != (sid, off)]

    def lose_shard(self, sid: int) -> None:
        """A shard deleted from disk: forget its records."""
        for i in np.flatnonzero(self.sid == sid).tolist():
            self.forget(i)
        for i in list(self.alt):
            self.alt[i] = [a for a in self.alt[i] if a[0] != sid]
        name = self.names[sid]
        if name is not None:
            del self.by_name[name]
        self.names[sid] = None

    def nbytes(self) -> int:
        return int(self.rsize[self.sid >= 0].sum())

    def costs(self, sids: list[int] | None = None) -> dict[int, tuple[float, int]]:
        """Index -> (cost, size on disk) of the records indexed, or of those in shards
        ``sids``."""
        idx = np.flatnonzero(self.sid >= 0 if sids is None else np.isin(self.sid, sids))
        return dict(zip(idx.tolist(), zip(self.cost[idx].tolist(), self.rsize[idx].tolist(),
                                          strict=True), strict=True))
