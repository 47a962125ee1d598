"""Shared-memory transport of large buffers between the processes of one machine.

A worker copies a large buffer (a NumPy array's memory) once into a POSIX shared-memory segment
(``/dev/shm/dataflow-<consumer pid>-<random>-<writer>-<n>``, the namespace that
``multiprocessing.shared_memory`` uses) and sends only its name. The consumer maps the segment,
unlinks it at once and wraps the mapping in a writable ``memoryview``: the memory is released
when the last array using it is garbage collected.

Nothing is left in ``/dev/shm``, whoever dies. Each pipeline's segments belong to a
:class:`SegmentSpace`, which starts a small clean-up process (:mod:`._shm_reaper`) that every
writer of the pipeline is connected to before it writes a segment. The process starts when the
pipeline first needs a segment, not with the pipeline: until then a writer sends its buffers
inline, and the consumer starts the process when it receives the first large inline buffer (most
pipelines, whose arrays are small or fit the workers' rings, never start one). Then, when the
consumer's connection closes (it closed the pipeline, or it was killed, even by SIGKILL) the
segments sent but never received are removed at once, and again when the last writer is gone
(see that module). A runner's ``close()`` removes them as well. Segments of a consumer whose
clean-up process was also killed are removed by the next pipeline that starts, once they are 10
minutes old.

Segments are created directly (``os.open`` + ``mmap``) rather than through
``multiprocessing.shared_memory.SharedMemory``, whose resource tracker would start an extra
helper process and warn about segments that the *other* process unlinks.

``/dev/shm`` never overflows into a bus error. A tmpfs accepts ``ftruncate`` beyond its free
space and raises SIGBUS at the first page that does not fit, so the writer reserves the pages
with ``posix_fallocate`` first (which fails cleanly when the space is short). A pipeline does
not use shared memory when ``/dev/shm`` has less than :data:`MIN_FREE_BYTES` free when it
starts (containers often have a 64 MB ``/dev/shm``): it warns once and sends large arrays
through ZeroMQ. A writer sends a buffer inline instead of writing a segment when the segment
would leave less than that free, when it could not be reserved, or when the writer's segments
not yet received by the consumer already hold :data:`MAX_IN_FLIGHT_BYTES` (the ZeroMQ
high-water mark bounds the number of *messages* in flight, and a segment's message is small).
"""

from __future__ import annotations

import atexit
import glob
import itertools
import logging
import mmap
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections import deque

from dataflow.parallel import _shm_reaper

__all__ = [
    "MAX_IN_FLIGHT_BYTES",
    "MIN_FREE_BYTES",
    "RING_BYTES",
    "SHM_DIR",
    "Ring",
    "SegmentSpace",
    "SharedMemoryWriter",
    "cleanup_segments",
    "cleanup_stale_segments",
    "make_rings",
    "new_prefix",
    "open_segment",
    "shm_available",
    "start_space",
]

logger = logging.getLogger("dataflow.parallel")

SHM_DIR = "/dev/shm"
#: free space that must remain in /dev/shm after writing a segment
MIN_FREE_BYTES = 256 * 1024 * 1024
#: bytes of one writer's segments that may wait for the consumer; beyond, buffers go inline
MAX_IN_FLIGHT_BYTES = 256 * 1024 * 1024
#: seconds a writer waits for the clean-up process to accept it (it may still be starting)
ACCEPT_TIMEOUT = 30.0
#: seconds the interpreter's exit waits for clean-up processes still ending, before it kills them
REAPER_EXIT_TIMEOUT = 10.0


def shm_available() -> bool:
    """Whether the shared-memory path can be used on this OS."""
    return sys.platform.startswith("linux") and os.path.isdir(SHM_DIR)


def _free_bytes() -> int:
    st = os.statvfs(SHM_DIR)
    return st.f_bavail * st.f_frsize


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


# ---- the connections of this process to the clean-up processes ------------------------------

# prefix -> this process's connection to that pipeline's clean-up process (None: refused).
# A forked child does not keep its parent's connections: the at-fork hook below closes its
# copies, so that they do not keep a pipeline "alive" for the clean-up process after the
# parent has gone; the child connects on its own when it writes its first segment.
_links: dict[str, socket.socket | None] = {}
_links_lock = threading.Lock()
#: clean-up processes of closed spaces, maybe still exiting
_ending: list[subprocess.Popen] = []
#: the spaces of which this process is the consumer, by prefix (a forked child owns none)
_owned: dict[str, SegmentSpace] = {}
#: what ``_link`` returns while the pipeline's clean-up process has not started
NOT_STARTED = "its clean-up process has not started yet"


def _forget_links_in_child() -> None:
    global _links_lock
    _links_lock = threading.Lock()  # (it may have been held by another thread of the parent)
    for sock in _links.values():
        if sock is not None:
            sock.close()  # closes this process's copy only: the parent's stays connected
    _links.clear()
    _ending.clear()  # the parent's clean-up processes are not this child's to collect
    _owned.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_links_in_child)


def _reaper_address(prefix: str) -> str:
    return f"\0{prefix}-reaper"  # a Linux abstract socket: nothing on disk


def _connect(prefix: str) -> socket.socket | None:
    """A connection accepted by ``prefix``'s clean-up process, or None (it has not started,
    no longer accepts writers, or is gone: nobody listens at its address then)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(ACCEPT_TIMEOUT)
        sock.connect(_reaper_address(prefix))
        if sock.recv(1) != _shm_reaper.ACCEPTED:
            raise ConnectionRefusedError("the clean-up process no longer accepts writers")
        sock.settimeout(None)  # blocking again: _alive() peeks with MSG_DONTWAIT
    except OSError:
        sock.close()
        return None
    return sock


def _alive(sock: socket.socket) -> bool:
    """Whether the other end of ``sock`` is still there (it never sends anything more)."""
    try:
        return sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def _link(prefix: str) -> str | None:
    """Make sure this process is connected to ``prefix``'s clean-up process; None if it is,
    else why not (:data:`NOT_STARTED` while there is none to connect to)."""
    space = _owned.get(prefix)
    if space is not None:  # the consumer's own writer: it starts the process itself
        space.start()
    with _links_lock:
        sock = _links.get(prefix)
        if sock is None:
            sock = _connect(prefix)
            if sock is None:
                return NOT_STARTED  # (tried again at the next buffer: a connect is cheap)
            _links[prefix] = sock
    if not _alive(sock):
        return "its clean-up process is gone"
    return None


def _start_reaper(prefix: str) -> tuple[subprocess.Popen, socket.socket]:
    """Start the clean-up process of ``prefix``: (the process, the owner's connection)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # bound and listening before the process starts: writers that connect while it starts
        # wait in the backlog
        listener.bind(_reaper_address(prefix))
        listener.listen(128)
        fds = (listener.fileno(), theirs.fileno())
        proc = subprocess.Popen(
            [sys.executable, "-S", "-I", _shm_reaper.__file__, *map(str, fds), SHM_DIR, prefix],
            pass_fds=fds, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
    except BaseException:
        mine.close()
        raise
    finally:
        listener.close()
        theirs.close()
    return proc, mine


class SegmentSpace:
    """The segments of one pipeline (consumer side): a fresh prefix and the clean-up process
    that removes them when the consumer and every writer are gone (see the module docstring).

    :meth:`open` returns None, after a ``RuntimeWarning``, when shared memory should not be
    used because ``/dev/shm`` has too little free space. :meth:`start` starts the clean-up
    process (the first large inline buffer received calls it, through :func:`start_space`).
    :meth:`close` (idempotent) removes the segments never received and lets the process end:
    call it after the workers have stopped.
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._proc: subprocess.Popen | None = None
        self._link: socket.socket | None = None
        self._pid = os.getpid()
        self._closed = False
        self._failed = False
        self._lock = threading.Lock()

    @classmethod
    def open(cls) -> SegmentSpace | None:
        free = _free_bytes()
        if free < MIN_FREE_BYTES:
            cls._warn(f"{SHM_DIR} has only {_mib(free)} free, less than the {_mib(MIN_FREE_BYTES)} "
                      "that shared memory leaves free")
            return None
        space = cls(new_prefix())
        _owned[space.prefix] = space
        return space

    @property
    def started(self) -> bool:
        return self._proc is not None

    def start(self) -> bool:
        """Start the clean-up process, once; whether writers can use segments now."""
        with self._lock:
            if self._proc is None and not (self._closed or self._failed):
                try:
                    self._proc, self._link = _start_reaper(self.prefix)
                except OSError as e:
                    self._failed = True
                    self._warn(f"its clean-up process could not start ({type(e).__name__}: {e})")
                    return False
                with _links_lock:
                    _links[self.prefix] = self._link  # this process writes through the owner's
            return self._proc is not None and not self._closed

    @staticmethod
    def _warn(why: str) -> None:
        warnings.warn(
            f"dataflow: not using shared memory: {why}; large arrays go through ZeroMQ instead "
            f"(one more copy each). Enlarge {SHM_DIR} (docker run --shm-size=2g; Kubernetes: an "
            f"emptyDir volume with medium: Memory mounted at {SHM_DIR}), or pass use_shm=False "
            "to choose this without the warning.",
            RuntimeWarning,
            stacklevel=4,
        )

    def close(self) -> None:
        with self._lock:
            if self._closed or os.getpid() != self._pid:
                return
            self._closed = True
        _owned.pop(self.prefix, None)
        cleanup_segments(self.prefix)
        with _links_lock:
            _links.pop(self.prefix, None)
        if self._proc is None:
            return
        # The clean-up process exits by itself once it reads the end of this connection (the
        # writers are gone by now). Waiting for it here would cost a pipeline's close the
        # process's whole start-up when the pipeline was short-lived: a thread collects it.
        assert self._link is not None
        self._link.close()
        _ending.append(self._proc)
        threading.Thread(target=_collect, args=(self._proc,), name="dataflow-shm-collect",
                         daemon=True).start()

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the clean-up process to exit (after :meth:`close`); its exit status (None:
        it never started)."""
        if self._proc is None:
            return None
        return self._proc.wait(timeout)


def start_space(prefix: str) -> None:
    """Start the clean-up process of this process's space ``prefix`` (if it is ours and open):
    a writer sent a large buffer inline because there was none."""
    space = _owned.get(prefix)
    if space is not None:
        space.start()


def _collect(proc: subprocess.Popen) -> None:
    """Wait for a closed space's clean-up process to exit, and collect it (no zombie is left)."""
    proc.wait()
    try:
        _ending.remove(proc)
    except ValueError:  # (the interpreter's exit collected it first)
        pass


@atexit.register
def _end_reapers() -> None:
    # a clean-up process outliving the interpreter would be a writer's leak: give them the time
    # they need to sweep, then end them
    deadline = time.monotonic() + REAPER_EXIT_TIMEOUT
    for proc in list(_ending):
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    _ending.clear()


class SharedMemoryWriter:
    """Writes buffers into fresh segments named ``<prefix>-<writer>-<n>``.

    ``prefix`` is a :class:`SegmentSpace`'s: before its first segment, the writer's process
    connects to that space's clean-up process (without one, it writes no segment). ``write``
    returns None (send the buffer inline) when a segment cannot or should not be written: see
    the module docstring. Such a fallback is logged once per writer (it runs in a worker:
    logging, not ``warnings``, whose filters are the consumer's).
    """

    def __init__(self, prefix: str, worker_id: int | str,
                 max_in_flight: int = MAX_IN_FLIGHT_BYTES) -> None:
        self.space = prefix
        self.prefix = f"{prefix}-{worker_id}"
        self.max_in_flight = max_in_flight
        self._counter = itertools.count()
        self._sent: deque[tuple[str, int]] = deque()  # (path, bytes) maybe not yet received
        self._sent_bytes = 0
        self._warned = False

    def _in_flight(self) -> int:
        """Bytes of this writer's segments that the consumer has not opened yet (it unlinks a
        segment when it opens it, in the order they were sent)."""
        sent = self._sent
        while sent and not os.path.exists(sent[0][0]):
            self._sent_bytes -= sent.popleft()[1]
        return self._sent_bytes

    def _fall_back(self, why: str, space_short: bool = False) -> None:
        if not self._warned:
            self._warned = True
            fix = f" Enlarge {SHM_DIR} (docker run --shm-size=2g) to use it." if space_short else ""
            logger.warning("dataflow: shared memory unavailable (%s); sending large arrays "
                           "through ZeroMQ instead.%s", why, fix)

    def write(self, buf: memoryview) -> str | None:
        """Copy ``buf`` (1-D bytes) into a new segment; its name, or ``None`` to send inline."""
        nbytes = buf.nbytes
        if self._in_flight() + nbytes > self.max_in_flight:
            return None  # the consumer is behind: the ZeroMQ high-water mark bounds the rest
        why = _link(self.space)
        if why is not None:
            if why is not NOT_STARTED:  # (not a fallback: the consumer starts it now)
                self._fall_back(why)
            return None
        free = _free_bytes()
        if free - nbytes < MIN_FREE_BYTES:
            self._fall_back(f"only {_mib(free)} free in {SHM_DIR}", space_short=True)
            return None
        name = f"{self.prefix}-{next(self._counter)}"
        path = os.path.join(SHM_DIR, name)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        except OSError as e:
            self._fall_back(f"{type(e).__name__}: {e}")
            return None
        ok = False
        try:
            if nbytes:
                try:  # reserve the pages: a later page fault past the free space is a SIGBUS
                    os.posix_fallocate(fd, 0, nbytes)
                except OSError as e:
                    self._fall_back(f"{SHM_DIR} is full ({e.strerror})", space_short=True)
                    return None
                with mmap.mmap(fd, nbytes) as m:
                    m[:] = buf
            ok = True
        finally:
            os.close(fd)
            if not ok:
                os.unlink(path)
        self._sent.append((path, nbytes))
        self._sent_bytes += nbytes
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
