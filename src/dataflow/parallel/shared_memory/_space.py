"""The consumer's :class:`SegmentSpace` (a pipeline's segments and the clean-up process that
removes them whoever dies), this process's connections to clean-up processes, and the workers'
:class:`SharedMemoryWriter`. The design is in :mod:`dataflow.parallel.shared_memory`."""

from __future__ import annotations

import atexit
import itertools
import logging
import mmap
import os
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections import deque

# the free-space limits are read through the module at each use (seg.MIN_FREE_BYTES), so
# that a setting of them applies here too
from dataflow.parallel.shared_memory import _reaper
from dataflow.parallel.shared_memory import _segments as seg
from dataflow.parallel.shared_memory._segments import SHM_DIR

__all__ = ["NOT_STARTED", "SegmentSpace", "SharedMemoryWriter", "start_space"]

logger = logging.getLogger("dataflow.parallel")

#: seconds a writer waits for the clean-up process to accept it (it may still be starting)
ACCEPT_TIMEOUT = 30.0
#: seconds the interpreter's exit waits for clean-up processes still ending, before it kills them
REAPER_EXIT_TIMEOUT = 10.0


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
        if sock.recv(1) != _reaper.ACCEPTED:
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
            [sys.executable, "-S", "-I", _reaper.__file__, *map(str, fds), SHM_DIR, prefix],
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
        free = seg.free_bytes()
        if free < seg.MIN_FREE_BYTES:
            cls._warn(f"{SHM_DIR} has only {seg.mib(free)} free, less than the "
                      f"{seg.mib(seg.MIN_FREE_BYTES)} that shared memory leaves free")
            return None
        space = cls(seg.new_prefix())
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
        seg.cleanup_segments(self.prefix)
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
                 max_in_flight: int = seg.MAX_IN_FLIGHT_BYTES) -> None:
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
        free = seg.free_bytes()
        if free - nbytes < seg.MIN_FREE_BYTES:
            self._fall_back(f"only {seg.mib(free)} free in {SHM_DIR}", space_short=True)
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
