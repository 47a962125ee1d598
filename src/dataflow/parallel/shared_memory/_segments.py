"""Shared-memory segments themselves: the files in ``/dev/shm`` (named
``dataflow-<consumer pid>-<random>-<writer>-<n>``), the free-space rules, opening one on the
consumer side, and removing the ones never received (see :mod:`dataflow.parallel.shared_memory`
for the whole design)."""

from __future__ import annotations

import glob
import mmap
import os
import sys
import time
import uuid

__all__ = [
    "MAX_IN_FLIGHT_BYTES",
    "MIN_FREE_BYTES",
    "SHM_DIR",
    "cleanup_segments",
    "cleanup_stale_segments",
    "free_bytes",
    "mib",
    "new_prefix",
    "open_segment",
    "shm_available",
]

SHM_DIR = "/dev/shm"
#: free space that must remain in /dev/shm after writing a segment
MIN_FREE_BYTES = 256 * 1024 * 1024
#: bytes of one writer's segments that may wait for the consumer; beyond, buffers go inline
MAX_IN_FLIGHT_BYTES = 256 * 1024 * 1024


def shm_available() -> bool:
    """Whether the shared-memory path can be used on this OS."""
    return sys.platform.startswith("linux") and os.path.isdir(SHM_DIR)


def free_bytes() -> int:
    st = os.statvfs(SHM_DIR)
    return st.f_bavail * st.f_frsize


def mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


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
