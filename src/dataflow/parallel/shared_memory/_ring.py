"""The shared ring of a forked worker: the fast path of medium-sized arrays (one copy in the
worker, one in the consumer, no system call, no page fault)."""

from __future__ import annotations

import mmap
import os
import pickle
import time
from typing import Any

__all__ = ["RING_BYTES", "Ring"]

#: bytes of each worker's shared ring (fork only), for arrays of 32 KiB to 2 MiB
RING_BYTES = 8 * 1024 * 1024


class Ring:
    """A single-producer, single-consumer ring of bytes in memory shared by fork.

    The consumer creates one ring per worker (anonymous ``MAP_SHARED`` memory, inherited by
    the forked worker: no file, nothing can leak). The worker copies a buffer in and sends
    ``(offset, size, head)`` in its message; the consumer copies the bytes out into memory it
    owns and publishes ``head`` as the new tail, which frees the space. Messages of a worker
    are decoded in the order they were written, so releases are in order. A full ring makes
    the worker wait (like a full ZeroMQ queue); buffers larger than a quarter of the ring are
    not written (the caller sends them another way).

    Header: the tail (bytes released so far, monotonic) as a little-endian uint64 at offset 0.

    Processes that are not parent and child share a ring through a named segment instead:
    :meth:`create` (the consumer: a new file in ``/dev/shm``, its pages reserved) and
    :meth:`attach` (the writer, which unlinks the name once it has mapped it, so nothing is
    left in ``/dev/shm`` whoever dies afterwards).
    """

    HEADER = 64
    ALIGN = 64

    def __init__(self, capacity: int, mm: mmap.mmap | None = None) -> None:
        self.capacity = capacity
        self.mm = mm if mm is not None else mmap.mmap(-1, capacity + self.HEADER,
                                                      flags=mmap.MAP_SHARED)
        self.view = memoryview(self.mm)
        self.tail = self.view[: self.HEADER].cast("Q")
        self.head = 0  # worker side: bytes allocated so far (monotonic)
        self.max_item = capacity // 4

    @classmethod
    def create(cls, path: str, capacity: int) -> Ring:
        """Consumer side: a ring in a new file ``path`` (``/dev/shm/dataflow-...``) that
        another process attaches to by name. ``OSError`` when the pages cannot be reserved."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            # reserve the pages: a tmpfs that is full raises here instead of a SIGBUS later
            os.posix_fallocate(fd, 0, capacity + cls.HEADER)
            mm = mmap.mmap(fd, capacity + cls.HEADER)
        except OSError:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)
        return cls(capacity, mm)

    @classmethod
    def attach(cls, path: str) -> Ring:
        """Writer side: map the ring a consumer created at ``path`` and unlink the name."""
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            if size <= cls.HEADER:
                raise OSError(f"{path} is not a ring")
            mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
            os.unlink(path)
        return cls(size - cls.HEADER, mm)

    def write(self, buf: memoryview, wait: bool = True) -> tuple[int, int, int] | None:
        """Worker side: copy ``buf`` in; ``(offset, size, new head)``, or None if too large
        (or, with ``wait=False``, if the ring has no room for it now)."""
        n = buf.nbytes
        if n > self.max_item:
            return None
        cap, head = self.capacity, self.head
        pos = head % cap
        skip = cap - pos if pos + n > cap else 0
        need = head + skip + n - cap
        if not wait and self.tail[0] < need:
            return None
        delay = 0.00005
        while self.tail[0] < need:
            time.sleep(delay)
            delay = min(delay * 2, 0.002)
        off = (head + skip) % cap
        start = self.HEADER + off
        self.view[start : start + n] = buf
        padded = (n + self.ALIGN - 1) // self.ALIGN * self.ALIGN
        self.head = head + skip + min(padded, cap - off)
        return off, n, self.head

    def read(self, off: int, n: int, head: int) -> bytearray:
        """Consumer side: copy the bytes out (writable, owned by the caller) and release them."""
        start = self.HEADER + off
        out = bytearray(self.view[start : start + n])
        self.tail[0] = head
        return out

    def loads(self, off: int, n: int, head: int) -> Any:
        """Consumer side: unpickle an in-band pickle straight from the ring (the objects it
        builds own their bytes) and release it: one copy fewer than :meth:`read`."""
        start = self.HEADER + off
        with self.view[start : start + n] as data:
            obj = pickle.loads(data)
        self.tail[0] = head
        return obj

    def close(self) -> None:
        self.tail.release()
        self.view.release()
        self.mm.close()
