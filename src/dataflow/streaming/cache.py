"""A local cache directory of whole shards, shared by the processes of one node.

Layout, per cached URL (``K`` = a hash of the URL, plus its file name for people):

- ``K.data``: a complete copy; its modification time is a stamp of its last use, later than
  every other file's (least recently used copies are removed first when room is needed);
- ``K.part``: a copy being downloaded, appended to, renamed to ``K.data`` when complete;
- ``K.lock``: held (``flock``, exclusive) by the one process that downloads ``K.part``; it holds
  the object's size, the room reserved for it.

Every change of the directory (a reservation, an eviction, a rename) happens under the
directory-wide lock ``.cache.lock``, so the bytes of the ``.data`` files plus the room reserved
by the ``.part`` files never exceed ``cache_limit``, whatever the processes do. A reader holds a
shared ``flock`` on the copy it reads, and eviction skips copies so held. A second process that
wants a shard being downloaded follows the growing ``.part`` file; if the downloading process
dies, its lock is released and the follower resumes the download where the file ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Claim", "ShardCache"]

_LOCK_NAME = ".cache.lock"


@contextlib.contextmanager
def _flocked(path: str) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _try_lock(fd: int, kind: int) -> bool:
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@dataclass(eq=False)
class Claim:
    """This process's use of one cached object.

    ``kind``: ``"hit"`` (complete: read ``fd``), ``"download"`` (this process writes it, from
    ``resume_at``), ``"follow"`` (another process writes it; ``fd`` reads the growing file), or
    ``"bypass"`` (larger than the cache can ever hold: not cached).
    """

    cache: ShardCache
    base: str
    size: int
    kind: str
    fd: int = -1  # read descriptor, shared-locked against eviction
    lock_fd: int = -1  # download: the exclusive lock on K.lock
    write_fd: int = -1
    resume_at: int = 0
    used_at: int = 0  # the use stamp of a download, given to the copy when it is complete

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self.write_fd, view)
            view = view[n:]

    def commit(self) -> None:
        """The download is complete: make it the ``.data`` copy (atomically)."""
        os.fdatasync(self.write_fd)
        os.close(self.write_fd)
        self.write_fd = -1
        with _flocked(self.cache.lock_path):
            os.replace(self.base + ".part", self.base + ".data")
            # its use is when its download was claimed, not when it ended (a copy used since
            # then must stay the more recent)
            with contextlib.suppress(FileNotFoundError):
                os.utime(self.base + ".data", ns=(self.used_at, self.used_at))
            os.unlink(self.base + ".lock")
            os.close(self.lock_fd)
            self.lock_fd = -1
        self.kind = "hit"

    def abandon(self) -> None:
        """Stop downloading (the partial file stays for whoever resumes it)."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1
        if self.lock_fd >= 0:
            os.close(self.lock_fd)
            self.lock_fd = -1

    def progress(self) -> tuple[int, bool]:
        """(bytes in the file now, whether it is complete) while following."""
        size = os.fstat(self.fd).st_size
        return size, size >= self.size and os.path.exists(self.base + ".data")

    def take_over(self) -> bool:
        """While following: if the downloading process is gone, become the downloader."""
        with _flocked(self.cache.lock_path):
            if os.path.exists(self.base + ".data") or not os.path.exists(self.base + ".part"):
                return False
            fd = os.open(self.base + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
            if not _try_lock(fd, fcntl.LOCK_EX):
                os.close(fd)
                return False
            self.lock_fd = fd
            self.write_fd = os.open(self.base + ".part", os.O_WRONLY | os.O_APPEND)
            self.resume_at = os.fstat(self.write_fd).st_size
            self.used_at = self.cache.next_stamp()
            self.kind = "download"
            return True

    def touch(self) -> None:
        """Mark the complete copy as used now (least recently used copies go first)."""
        with _flocked(self.cache.lock_path):
            self.cache.stamp(self.base + ".data")

    def close(self) -> None:
        """Release everything held (idempotent)."""
        self.abandon()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class ShardCache:
    """A cache directory of at most ``limit`` bytes (None: no limit)."""

    def __init__(self, directory: str | os.PathLike[str], limit: int | None = None) -> None:
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.limit = limit
        self.lock_path = os.path.join(self.directory, _LOCK_NAME)

    def base_of(self, url: str) -> str:
        digest = hashlib.sha256(url.encode()).hexdigest()[:32]
        name = re.sub(r"[^A-Za-z0-9._-]", "_", url.rstrip("/").rsplit("/", 1)[-1])[-60:]
        return os.path.join(self.directory, f"{digest}-{name}")

    def _entries(self) -> list[tuple[str, int, int]]:
        """(path, mtime in ns, size) of the files of the directory (gone ones skipped)."""
        out = []
        with os.scandir(self.directory) as it:
            for entry in it:
                try:
                    st = entry.stat()
                except FileNotFoundError:  # removed by another process meanwhile
                    continue
                out.append((entry.path, st.st_mtime_ns, st.st_size))
        return out

    def next_stamp(self, path: str = "") -> int:
        """A use stamp later than every file's modification time but ``path``'s (under the
        directory lock): the file clock is too coarse to order uses made within a few
        milliseconds, and eviction goes by this order."""
        latest = max((m for p, m, _ in self._entries() if p != path), default=0)
        return max(time.time_ns(), latest + 1000)

    def stamp(self, path: str) -> None:
        """Mark ``path`` as used now (under the directory lock)."""
        stamp = self.next_stamp(path)
        with contextlib.suppress(FileNotFoundError):
            os.utime(path, ns=(stamp, stamp))

    def usage(self) -> int:
        """Bytes of the complete copies plus the room reserved by downloads."""
        with _flocked(self.lock_path):
            return self._usage()

    def _usage(self) -> int:
        """:meth:`usage`, under the directory lock held by the caller."""
        total = 0
        for path, _, size in self._entries():
            if path.endswith(".data"):
                total += size
            elif path.endswith(".lock") and not path.endswith(_LOCK_NAME):
                total += self._reserved(path)
        return total

    @staticmethod
    def _reserved(lock_path: str) -> int:
        try:
            with open(lock_path) as f:
                text = f.read().strip()
        except FileNotFoundError:
            return 0
        return int(text) if text.isdigit() else 0

    def _evict(self, need: int, keep: str) -> bool:
        """Remove least recently used unread copies (and abandoned partial ones) until ``need``
        more bytes fit (under the directory lock); whether they fit."""
        assert self.limit is not None
        used = self._usage()
        if used + need <= self.limit:
            return True
        candidates = []
        for path, mtime, _ in self._entries():
            base, ext = os.path.splitext(path)
            if ext in (".data", ".lock") and base != keep and not path.endswith(_LOCK_NAME):
                candidates.append((mtime, path))
        for _, path in sorted(candidates):
            base, ext = os.path.splitext(path)
            freed = self._remove_if_unused(base, ext)
            used -= freed
            if used + need <= self.limit:
                return True
        return used + need <= self.limit

    def _remove_if_unused(self, base: str, ext: str) -> int:
        if ext == ".data":
            try:
                fd = os.open(base + ".data", os.O_RDONLY)
            except FileNotFoundError:
                return 0
            try:
                if not _try_lock(fd, fcntl.LOCK_EX):
                    return 0  # a reader holds it
                size = os.fstat(fd).st_size
                os.unlink(base + ".data")
                return size
            finally:
                os.close(fd)
        fd = os.open(base + ".lock", os.O_RDWR)
        try:
            if not _try_lock(fd, fcntl.LOCK_EX):
                return 0  # being downloaded
            part_fd = None
            with contextlib.suppress(FileNotFoundError):
                part_fd = os.open(base + ".part", os.O_RDONLY)
            if part_fd is not None:
                busy = not _try_lock(part_fd, fcntl.LOCK_EX)
                os.close(part_fd)
                if busy:
                    return 0  # a follower still reads it
            size = self._reserved(base + ".lock")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(base + ".part")
            os.unlink(base + ".lock")
            return size
        finally:
            os.close(fd)

    def claim(self, url: str, size: int) -> Claim:
        """How this process gets ``url`` (of ``size`` bytes): see :class:`Claim`."""
        base = self.base_of(url)
        if self.limit is not None and size > self.limit:
            return Claim(self, base, size, "bypass")
        with _flocked(self.lock_path):
            with contextlib.suppress(FileNotFoundError):
                fd = os.open(base + ".data", os.O_RDONLY)
                fcntl.flock(fd, fcntl.LOCK_SH)
                self.stamp(base + ".data")
                return Claim(self, base, size, "hit", fd=fd)
            lock_fd = os.open(base + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
            if not _try_lock(lock_fd, fcntl.LOCK_EX):  # another process downloads it
                os.close(lock_fd)
                fd = os.open(base + ".part", os.O_RDONLY | os.O_CREAT, 0o644)
                fcntl.flock(fd, fcntl.LOCK_SH)
                return Claim(self, base, size, "follow", fd=fd)
            reserved = self._reserved(base + ".lock")
            if reserved != size:  # a new download (or a stale one of another size)
                os.ftruncate(lock_fd, 0)
                if self.limit is not None and not self._evict(size, keep=base):
                    os.close(lock_fd)
                    os.unlink(base + ".lock")
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(base + ".part")
                    return Claim(self, base, size, "bypass")
                os.pwrite(lock_fd, str(size).encode(), 0)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(base + ".part")
            write_fd = os.open(base + ".part", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            fd = os.open(base + ".part", os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_SH)
            resume = os.fstat(write_fd).st_size
            return Claim(self, base, size, "download", fd=fd, lock_fd=lock_fd,
                         write_fd=write_fd, resume_at=min(resume, size),
                         used_at=self.next_stamp())
