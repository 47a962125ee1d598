"""Shared-memory transport of large buffers between the processes of one machine.

A worker copies a large buffer (a NumPy array's memory) once into a POSIX shared-memory segment
(``/dev/shm/dataflow-<runner>-<n>``, the namespace that ``multiprocessing.shared_memory`` uses)
and sends only its name. The consumer maps the segment, unlinks it at once and wraps the mapping
in a writable ``memoryview``: the memory is released when the last array using it is garbage
collected, and nothing is left in ``/dev/shm`` (a runner's ``close()`` also removes segments
that were sent but never received; segments of a consumer that was SIGKILLed are removed by the
next runner that starts, once they are 10 minutes old).

Segments are created directly (``os.open`` + ``mmap``) rather than through
``multiprocessing.shared_memory.SharedMemory``, whose resource tracker would start an extra
helper process and warn about segments that the *other* process unlinks.

Before writing, the worker checks the free space of ``/dev/shm``; when a segment would leave
less than :data:`MIN_FREE_BYTES` free (containers often have a 64 MB ``/dev/shm``), it warns
once and sends the buffer inline through ZeroMQ instead.
"""

from __future__ import annotations

import glob
import itertools
import mmap
import os
import sys
import time
import uuid
import warnings

__all__ = [
    "RING_BYTES",
    "SHM_DIR",
    "Ring",
    "SharedMemoryWriter",
    "cleanup_segments",
    "cleanup_stale_segments",
    "make_rings",
    "new_prefix",
    "open_segment",
    "shm_available",
]

SHM_DIR = "/dev/shm"
#: free space that must remain in /dev/shm after writing a segment
MIN_FREE_BYTES = 256 * 1024 * 1024


def shm_available() -> bool:
    """Whether the shared-memory path can be used on this OS."""
    return sys.platform.startswith("linux") and os.path.isdir(SHM_DIR)


def _free_bytes() -> int:
    st = os.statvfs(SHM_DIR)
    return st.f_bavail * st.f_frsize


class SharedMemoryWriter:
    """Writes buffers into fresh segments named ``<prefix>-<worker>-<n>`` (worker side)."""

    def __init__(self, prefix: str, worker_id: int | str) -> None:
        self.prefix = f"{prefix}-{worker_id}"
        self._counter = itertools.count()
        self._warned = False

    def write(self, buf: memoryview) -> str | None:
        """Copy ``buf`` (1-D bytes) into a new segment; its name, or ``None`` to send inline."""
        nbytes = buf.nbytes
        try:
            if _free_bytes() - nbytes < MIN_FREE_BYTES:
                raise OSError(f"only {_free_bytes()} bytes free in {SHM_DIR}")
            name = f"{self.prefix}-{next(self._counter)}"
            fd = os.open(os.path.join(SHM_DIR, name), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        except OSError as e:
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"dataflow: shared memory unavailable ({e}); sending large arrays through "
                    "ZeroMQ instead. Enlarge /dev/shm (docker: --shm-size=2g) to use it.",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return None
        try:
            os.ftruncate(fd, nbytes)
            with mmap.mmap(fd, nbytes) as m:
                m[:] = buf
        except BaseException:
            os.close(fd)
            os.unlink(os.path.join(SHM_DIR, name))
            raise
        os.close(fd)
        return name


def open_segment(name: str) -> memoryview:
    """Map segment ``name`` (consumer side), unlink it, and return a writable view of it."""
    if "/" in name or not name.startswith("dataflow-"):
        raise ValueError(f"invalid shared-memory segment name {name!r}")
    path = os.path.join(SHM_DIR, name)
    fd = os.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        m = mmap.mmap(fd, size) if size else None
    finally:
        os.close(fd)
        os.unlink(path)
    return memoryview(m) if m is not None else memoryview(bytearray())


def new_prefix() -> str:
    """A fresh segment-name prefix, ``dataflow-<consumer pid>-<random>``."""
    return f"dataflow-{os.getpid()}-{uuid.uuid4().hex[:12]}"


#: a segment this old whose consumer process is gone is a leftover (of a killed consumer)
STALE_SECONDS = 600.0


def cleanup_stale_segments() -> int:
    """Remove segments left by consumers that were killed (pid gone, older than 10 min)."""
    n = 0
    now = time.time()
    for path in glob.glob(os.path.join(SHM_DIR, "dataflow-*-*")):
        pid_text = os.path.basename(path).split("-")[1]
        if not pid_text.isdigit():
            continue
        try:
            if now - os.stat(path).st_mtime < STALE_SECONDS:
                continue
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            try:
                os.unlink(path)
                n += 1
            except OSError:
                pass
        except OSError:
            continue
    return n


def cleanup_segments(prefix: str) -> int:
    """Remove every segment whose name starts with ``prefix`` (never received); returns count."""
    n = 0
    for path in glob.glob(os.path.join(SHM_DIR, glob.escape(prefix) + "-*")):
        try:
            os.unlink(path)
            n += 1
        except OSError:
            pass
    return n


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
    """

    HEADER = 64
    ALIGN = 64

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.mm = mmap.mmap(-1, capacity + self.HEADER, flags=mmap.MAP_SHARED)
        self.view = memoryview(self.mm)
        self.tail = self.view[: self.HEADER].cast("Q")
        self.head = 0  # worker side: bytes allocated so far (monotonic)
        self.max_item = capacity // 4

    def write(self, buf: memoryview) -> tuple[int, int, int] | None:
        """Worker side: copy ``buf`` in; ``(offset, size, new head)``, or None if too large."""
        n = buf.nbytes
        if n > self.max_item:
            return None
        cap, head = self.capacity, self.head
        pos = head % cap
        skip = cap - pos if pos + n > cap else 0
        need = head + skip + n - cap
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

    def close(self) -> None:
        self.tail.release()
        self.view.release()
        self.mm.close()


#: bytes of each worker's shared ring (fork only), for arrays of 32 KiB to 2 MiB
RING_BYTES = 8 * 1024 * 1024

_stale_checked = False


def make_rings(use_shm: bool, start_method: str, n: int) -> list[Ring] | None:
    """One shared ring per worker when workers are forked (``start_method`` is the effective
    one: they inherit the memory); the first call also removes stale segments."""
    global _stale_checked
    if use_shm and not _stale_checked:
        _stale_checked = True
        cleanup_stale_segments()
    if not use_shm or start_method != "fork":
        return None
    return [Ring(RING_BYTES) for _ in range(n)]
