"""tensorpack's ``utils.concurrency``: stoppable threads and process helpers."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import queue
import signal
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "LoopThread",
    "StoppableThread",
    "enable_death_signal",
    "ensure_proc_terminate",
    "mask_sigint",
    "start_proc_mask_signal",
]

#: seconds the stoppable queue operations wait before checking whether they were stopped
_POLL_S = 5.0


class StoppableThread(threading.Thread):
    """A thread with a stop event: :meth:`stop` sets it, :meth:`stopped` reads it, and
    :meth:`queue_put_stoppable` / :meth:`queue_get_stoppable` give up once it is set."""

    def __init__(self, evt: threading.Event | None = None) -> None:
        super().__init__()
        self._stop_evt = threading.Event() if evt is None else evt

    def stop(self) -> None:
        self._stop_evt.set()

    def stopped(self) -> bool:
        return self._stop_evt.is_set()

    def queue_put_stoppable(self, q: queue.Queue, obj: Any) -> None:
        """Put ``obj`` into ``q``, waiting for room, unless the thread is stopped meanwhile."""
        while not self.stopped():
            try:
                q.put(obj, timeout=_POLL_S)
                return
            except queue.Full:
                pass

    def queue_get_stoppable(self, q: queue.Queue) -> Any:
        """An item of ``q``, waiting for one; None when the thread is stopped meanwhile."""
        while not self.stopped():
            try:
                return q.get(timeout=_POLL_S)
            except queue.Empty:
                pass
        return None


class LoopThread(StoppableThread):
    """A daemon thread calling ``func()`` in a loop until stopped; with ``pausable``,
    :meth:`pause` makes it wait (before its next call) until :meth:`resume`."""

    def __init__(self, func: Callable[[], Any], pausable: bool = True) -> None:
        super().__init__()
        if not callable(func):
            raise TypeError(f"`func` must be callable, got {func!r}.")
        self._func = func
        self._pausable = pausable
        if pausable:
            self._lock = threading.Lock()
        self.daemon = True

    def run(self) -> None:
        while not self.stopped():
            if self._pausable:
                with self._lock:  # held by pause() until resume()
                    pass
            self._func()

    def pause(self) -> None:
        if not self._pausable:
            raise RuntimeError("LoopThread.pause(): this thread was made with pausable=False.")
        self._lock.acquire()

    def resume(self) -> None:
        if not self._pausable:
            raise RuntimeError("LoopThread.resume(): this thread was made with pausable=False.")
        self._lock.release()


def _as_list(proc: Any) -> list[Any]:
    return list(proc) if isinstance(proc, list | tuple) else [proc]


def ensure_proc_terminate(proc: Any) -> None:
    """Terminate and join ``proc`` (a ``multiprocessing.Process``, or a list of them) when the
    interpreter exits, if it is still alive then (it is held by a weak reference)."""
    for p in _as_list(proc):
        ref = weakref.ref(p)

        def stop(ref: weakref.ref = ref) -> None:
            p = ref()
            if p is None or p._popen is None:  # collected, or never started
                return
            if p.is_alive():
                p.terminate()
            p.join()

        atexit.register(stop)


def is_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def mask_sigint() -> Iterator[bool]:
    """Ignore SIGINT inside the context when in the main thread (where signal handlers can be
    set); yields whether it did. Processes started inside inherit the ignored SIGINT, so a
    Ctrl-C reaches the parent only."""
    if not is_main_thread():
        yield False
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield True
    finally:
        signal.signal(signal.SIGINT, old)


def start_proc_mask_signal(proc: Any) -> None:
    """Start ``proc`` (a process or a list of them) with SIGINT ignored (see
    :func:`mask_sigint`)."""
    for p in _as_list(proc):
        with mask_sigint():
            p.start()


_warned_death_signal = False


def enable_death_signal(_warn: bool = True) -> None:
    """Ask the kernel to send this process SIGHUP when its parent dies (Linux
    ``prctl(PR_SET_PDEATHSIG)``, through ``ctypes``: no optional package is needed). Elsewhere
    it does nothing, after a warning (once, if ``_warn``)."""
    global _warned_death_signal
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(1, signal.SIGHUP, 0, 0, 0) == 0:  # PR_SET_PDEATHSIG = 1
                return
        except (OSError, AttributeError):  # pragma: no cover - exotic libc
            pass
    if _warn and not _warned_death_signal:
        _warned_death_signal = True
        warnings.warn("enable_death_signal(): not supported on this system; a child process "
                      "will not be told when its parent dies.", RuntimeWarning, stacklevel=2)
