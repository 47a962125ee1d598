"""Eviction and compaction of a snapshot store's shards: the part of
:class:`~dataflow.snapshot.store.SnapshotStore` that rewrites shard files.

A record is evicted by forgetting it and compacting the shard that held it: the shard's live
records are copied into a new shard file, which takes its place, so that the evicted bytes
leave the disk (a budget relies on it). A process rewrites its own shards, and sealed ones (an
earlier run's, another process's that is done with them) once it has claimed them: it renames
the shard's index file (``.<shard>.idx.claimed-...``), which only one process can do. A crash
half-way leaves both files, whose records are valid copies of each other.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading

import numpy as np

from dataflow.snapshot.locations import Locations
from dataflow.snapshot.shard import (
    ENTRY,
    INDEX_SUFFIX,
    KIND_RECORD,
    KIND_TOMBSTONE,
    SUFFIX,
    ShardReader,
    ShardWriter,
)

__all__ = ["CLAIMED", "Compaction"]

#: in the name a claimed shard's index file is renamed to
CLAIMED = ".claimed-"


class Compaction:
    """Eviction and compaction, mixed into :class:`~dataflow.snapshot.store.SnapshotStore`,
    whose state and methods below it uses (see there)."""

    root: str
    _loc: Locations
    _shards: list[ShardReader | None]
    _mine: list[int]  # the shards this process rewrites (its own, rolled, claimed)
    _tombs: dict[int, list[tuple[int, int, int]]]  # shards' tombstones
    _claims: dict[int, str]  # claimed shards: their renamed index files
    _own: int
    _writer: ShardWriter | None
    _closed: bool

    # SnapshotStore's, used here (these bodies only say so to a type checker)
    def _guard(self) -> threading.RLock:
        raise NotImplementedError

    def _closed_error(self) -> ValueError:
        raise NotImplementedError

    def _new_reader(self, name: str) -> tuple[int, ShardReader]:
        raise NotImplementedError

    def refresh(self, min_interval: float = 0.0) -> None:
        raise NotImplementedError

    def disk_bytes(self) -> int:
        raise NotImplementedError

    def own_costs(self) -> dict[int, tuple[float, int]]:
        """:meth:`costs` of the records this process can :meth:`evict`: those in its own
        shards, and in sealed shards (whose writers are done with them: another process's, or
        an earlier run's), which it claims before it compacts them."""
        return self._loc.costs(self._evictable())

    def cheapest_own(self, per_record: int = 0) -> float:
        """The lowest cost per byte (seconds / (size on disk + ``per_record``)) of the records
        listed by :meth:`own_costs`; ``inf`` if there are none. At NumPy speed."""
        loc = self._loc
        mask = np.zeros(len(loc.sid), np.bool_)
        for sid in self._evictable():
            mask |= loc.sid == sid
        if not mask.any():
            return float("inf")
        return float((loc.cost[mask] / (loc.rsize[mask] + per_record)).min())

    def dead_bytes(self) -> int:
        """The bytes in this process's own shards that :meth:`compact` would free: records
        evicted, found corrupted, or stored by another process first, and their index entries."""
        return sum(self._dead_in(sid) for sid in self._mine)

    def evict(self, indices: list[int]) -> list[int]:
        """Forget the records of ``indices`` (among :meth:`own_costs`) and :meth:`compact`; the
        indices evicted. A sealed shard of another writer is claimed first (its index file
        renamed: one process wins); a record in a shard that another process claimed first
        stays. Other processes find the records gone when they refresh (the shard that held
        them is replaced)."""
        with self._guard():
            if self._closed:
                raise self._closed_error()
            loc = self._loc
            evictable = self._evictable()
            gone = []
            for i in indices:
                sid = int(loc.sid[i])
                if sid < 0 or sid not in evictable:
                    raise ValueError(f"SnapshotStore.evict: index {i} is not stored in a shard "
                                     "this process can rewrite; evict only what own_costs() "
                                     "lists.")
                if sid not in self._mine:
                    if not self._claim(sid):
                        continue
                    self._mine.append(sid)
                loc.kill(int(i))
                gone.append(i)
            self.compact()
            return gone

    def compact(self) -> int:
        """Rewrite this process's own shards that hold dead bytes (see :meth:`dead_bytes`)
        with their live records only, and delete the old files: the bytes freed on disk. A
        crash half-way leaves both files, whose records are valid copies of each other."""
        with self._guard():
            if self._closed:
                raise self._closed_error()
            self.refresh()  # (tombstones other processes wrote for records copied here)
            before = self.disk_bytes()
            for sid in [sid for sid in self._mine if self._dead_in(sid) > 0]:
                self._compact(sid)
            return before - self.disk_bytes()

    # -- internals ---------------------------------------------------------------------------

    def _evictable(self) -> list[int]:
        """This process's shards, and the sealed shards of other writers."""
        names = self._loc.by_name
        return self._mine + [sid for sid, shard in enumerate(self._shards)
                             if shard is not None and shard.sealed and sid not in self._mine
                             and shard.name in names]

    def _claim(self, sid: int) -> bool:
        """Make sealed shard ``sid`` this process's to rewrite: rename its index file (atomic:
        of processes claiming one shard at once, one succeeds). Its readers walk it meanwhile."""
        if sid in self._claims:
            return True
        shard = self._shards[sid]
        assert shard is not None
        claim = os.path.join(self.root, f".{shard.name[: -len(SUFFIX)]}{INDEX_SUFFIX}"
                             f"{CLAIMED}{os.getpid()}-{secrets.token_hex(4)}")
        try:
            os.rename(shard.path[: -len(SUFFIX)] + INDEX_SUFFIX, claim)
        except FileNotFoundError:  # claimed by another process, or never sealed
            return False
        self._claims[sid] = claim
        return True

    def _dead_in(self, sid: int) -> int:
        shard = self._shards[sid]
        if shard is None:
            return 0
        tombs = self._tombs.get(sid, [])
        loc = self._loc
        return (shard.walked - loc.live[sid] - sum(t[2] for t in tombs)
                + ENTRY.itemsize * (shard.count - loc.live_n[sid] - len(tombs)))

    def _compact(self, sid: int) -> None:
        """Copy the live records (but those another writer stored too) and the tombstones of
        records in other shards still there, of own shard ``sid`` into a new shard, which
        replaces it."""
        old = self._shards[sid]
        assert old is not None
        if sid != self._own and not self._claim(sid):  # a rolled shard another process took
            self._mine.remove(sid)
            return
        loc = self._loc
        idx = np.flatnonzero(loc.sid == sid)
        keep: list[tuple[int, int, int, float, int, bool]] = [
            (int(i), int(loc.off[i]), int(loc.rsize[i]), float(loc.cost[i]), KIND_RECORD,
             bool(loc.checked[i])) for i in idx.tolist() if not loc.has_copy(i)]  # (no copies)
        for i, off, size in self._tombs.get(sid, []):
            target = old.tombstone_target(off)
            if target is not None and target[0] != old.name and target[0] in loc.by_name:
                keep.append((i, off, size, 0.0, KIND_TOMBSTONE, True))
        keep.sort(key=lambda e: e[1])
        if old.mapped < old.walked:
            old.remap()
        new = ShardWriter(self.root)
        new_sid = self._new_reader(new.name)[0]
        moved: list[tuple[int, int, int, float, int, bool]] = []
        try:
            for i, off, size, cost, kind, checked in keep:
                at = new.offset
                new.append(b"", [old.mm[off: off + size]], (i, at, size, cost, kind))
                moved.append((i, at, size, cost, kind, checked))
            if sid != self._own:
                new.seal()
        except BaseException:
            new.abandon()
            with contextlib.suppress(OSError):
                os.remove(new.path)
            self._loc.lose_shard(new_sid)
            self._shards[new_sid] = None
            raise
        reader = self._shards[new_sid]
        assert reader is not None
        reader.walked, reader.count = new.offset, len(new.entries)
        if sid == self._own:
            assert self._writer is not None
            self._writer.abandon()
            self._writer, self._own = new, new_sid
        else:
            reader.sealed = True
        self._mine[self._mine.index(sid)] = new_sid
        self._tombs.pop(sid, None)
        # the copies first (as second copies), then the old shard forgotten: they take its
        # place at once, so a read in another thread never finds the index missing
        for i, at, size, cost, kind, _ in moved:
            if kind == KIND_RECORD:
                loc.index(i, new_sid, at, size, cost)
            else:
                self._tombs.setdefault(new_sid, []).append((i, at, size))
        for path in (old.path, old.path[: -len(SUFFIX)] + INDEX_SUFFIX, self._claims.pop(sid, "")):
            with contextlib.suppress(FileNotFoundError):
                if path:
                    os.remove(path)
        loc.lose_shard(sid)
        for i, _, _, _, kind, checked in moved:
            if kind == KIND_RECORD and checked and int(loc.sid[i]) == new_sid:
                loc.checked[i] = True
        # the old reader stays until the next refresh finds its file gone: a read in another
        # thread that looked it up just before reads the old map (still mapped), or finds the
        # file gone and looks again
