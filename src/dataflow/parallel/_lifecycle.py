"""Process lifecycle: start methods, worker bootstrap, parent-death handling, exit clean-up.

Guarantees kept here (SPEC 8.1-8.3):

* **No exit hang.** Worker processes are not daemonic (so a worker may start its own pool), and
  one ``atexit`` hook closes every live runner. The hook is registered *after* importing
  ``multiprocessing.util``, and ``atexit`` runs hooks last-in first-out, so ours runs before
  multiprocessing's own hook that joins non-daemonic children.
* **No orphans.** On Linux each worker asks the kernel to SIGKILL it when its parent dies
  (``prctl(PR_SET_PDEATHSIG, SIGKILL)`` through ``ctypes``, no optional package); in every OS a
  watchdog thread in the worker also exits when the parent pid changes.
* **Ctrl-C** is handled by the parent only: workers ignore SIGINT, the parent's
  ``KeyboardInterrupt`` unwinds and closes the runners.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import logging
import multiprocessing
import multiprocessing.util
import os
import pickle
import random
import signal
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np

from dataflow import rng as _rng

__all__ = [
    "Resources",
    "check_picklable",
    "get_context",
    "limited_thread_env",
    "parent_info",
    "register",
    "worker_bootstrap",
]

logger = logging.getLogger("dataflow.parallel")

_START_METHODS = (None, "fork", "forkserver", "spawn")
#: environment variables that size the thread pools of BLAS / OpenMP libraries
THREAD_ENV_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "OPENCV_FOR_THREADS_NUM",
)
#: key mixed into the seeds of the global ``random``/``np.random`` state in map workers
GLOBAL_RNG_KEY = 0x6D6170  # "map"


def get_context(start_method: str | None) -> multiprocessing.context.BaseContext:
    """The multiprocessing context for ``start_method`` (``None``: fork on Linux, else spawn)."""
    if start_method not in _START_METHODS:
        raise ValueError(
            f"`start_method` must be one of None, 'fork', 'forkserver', 'spawn'; got "
            f"{start_method!r}. None picks 'fork' on Linux and 'spawn' elsewhere."
        )
    if start_method is None:
        start_method = "fork" if sys.platform.startswith("linux") else "spawn"
    return multiprocessing.get_context(start_method)


def _find_unpicklable(obj: Any, path: str, seen: set[int], depth: int = 0) -> str | None:
    """The dotted path of the innermost attribute of ``obj`` that fails to pickle."""
    if depth > 8 or id(obj) in seen:
        return None
    seen.add(id(obj))
    children: list[tuple[str, Any]] = []
    if isinstance(obj, dict):
        children = [(f"{path}[{k!r}]", v) for k, v in obj.items()]
    elif isinstance(obj, list | tuple):
        children = [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
    else:
        attrs = getattr(obj, "__dict__", None)
        if isinstance(attrs, dict):
            children = [(f"{path}.{k}", v) for k, v in attrs.items()]
    for child_path, child in children:
        try:
            pickle.dumps(child)
        except Exception:
            return _find_unpicklable(child, child_path, seen, depth + 1) or child_path
    return None


def check_picklable(obj: Any, name: str, start_method: str) -> None:
    """Raise a ``TypeError`` naming the attribute of ``obj`` that cannot be pickled."""
    try:
        pickle.dumps(obj)
    except Exception as e:
        where = _find_unpicklable(obj, name, set()) or name
        raise TypeError(
            f"`{name}` must be picklable to start workers with start_method={start_method!r}, "
            f"but `{where}` is not ({type(e).__name__}: {e}). Use start_method='fork' "
            "(Linux), or build that attribute lazily in reset_state() instead of __init__, "
            "or replace lambdas by module-level functions."
        ) from e


@contextlib.contextmanager
def limited_thread_env() -> Iterator[None]:
    """Single-threaded BLAS/OpenMP/OpenCV in the children started inside this block.

    Environment variables (read by libraries a spawned child loads) are set to 1 for the
    duration. OpenCV, if already imported, is switched to one thread *in this process* and
    restored afterwards: that joins its thread pool before the fork, so a forked child inherits
    a single-threaded OpenCV. (Calling ``cv2.setNumThreads`` in a forked child instead can
    deadlock on the pool's condition variables, whose waiting threads do not exist there.)
    """
    saved = {k: os.environ.get(k) for k in THREAD_ENV_VARS}
    for k in THREAD_ENV_VARS:
        os.environ[k] = "1"
    cv2 = sys.modules.get("cv2")
    cv2_threads = None
    if cv2 is not None:
        with contextlib.suppress(Exception):
            cv2_threads = cv2.getNumThreads()
            cv2.setNumThreads(1)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if cv2_threads is not None:
            with contextlib.suppress(Exception):
                cv2.setNumThreads(cv2_threads)


def _set_pdeathsig() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # pragma: no cover - exotic libc
        pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else (pid reused): treat as gone
        return False
    return True


def _watch_parent(parent_pid: int, interval: float = 0.25) -> None:
    """Exit when the consumer (or our direct parent, e.g. a fork server) is gone."""
    direct = os.getppid()

    def watch() -> None:
        while True:
            if os.getppid() != direct or not _pid_alive(parent_pid):
                os._exit(1)
            time.sleep(interval)

    threading.Thread(target=watch, name="dataflow-parent-watchdog", daemon=True).start()


def parent_info() -> tuple[int, bool, int | None]:
    """(pid, whether PR_SET_PDEATHSIG is safe, global seed) of the process about to start
    workers.

    The kernel sends the death signal when the *thread* that forked exits, so it is only used
    when workers are started from the main thread; the watchdog covers the other cases. The
    global seed travels along so that spawned workers (which do not inherit it) derive the
    same streams as forked ones.
    """
    return os.getpid(), threading.current_thread() is threading.main_thread(), _rng.get_seed()


def worker_bootstrap(
    worker_id: int, parent: tuple[int, bool, int | None], *, seed_globals: bool = False
) -> None:
    """First thing a worker process runs: signals, orphan protection, threads, seeds."""
    parent_pid, use_pdeathsig, global_seed = parent
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if use_pdeathsig:
        _set_pdeathsig()  # (under forkserver the direct parent is the server, which exits
        # when the consumer dies)
    if not _pid_alive(parent_pid):  # the consumer died before prctl took effect
        os._exit(1)
    _watch_parent(parent_pid)
    for k in THREAD_ENV_VARS:
        os.environ[k] = "1"
    # OpenCV is made single-threaded by the parent around the fork (limited_thread_env), and
    # by OPENCV_FOR_THREADS_NUM in spawned children: never call cv2 here.
    seed_worker(worker_id, global_seed, seed_globals)


def seed_worker(worker_id: int, global_seed: int | None, seed_globals: bool) -> None:
    """A worker's seeds: the consumer's global seed (a spawned worker, or a Ray actor, does not
    inherit it), its worker id for :mod:`dataflow.rng`, and with ``seed_globals`` NumPy's and
    ``random``'s global generators from a stream of their own."""
    if global_seed is not None and _rng.get_seed() != global_seed:
        _rng.set_seed(global_seed)
    _rng.set_worker_info(worker_id)
    if seed_globals:
        seq = _rng.derive_seed_sequence(None, GLOBAL_RNG_KEY)
        state = seq.generate_state(4)
        np.random.seed(state)
        random.seed(int.from_bytes(state.tobytes(), "little"))


# ---- registry of live runners, closed at interpreter exit -------------------------------------

_live: weakref.WeakSet[Any] = weakref.WeakSet()
_live_lock = threading.Lock()


def register(runner: Any) -> None:
    """Remember ``runner`` so that it is closed at interpreter exit (if still alive then)."""
    with _live_lock:
        _live.add(runner)


def _close_all() -> None:
    with _live_lock:
        runners = list(_live)
    for r in runners:
        try:
            r.close()
        except Exception:  # pragma: no cover - best effort at exit
            logger.debug("closing %r at exit failed", r, exc_info=True)


atexit.register(_close_all)


class Resources:
    """Clean-up callables run once, in reverse order, by the thread that may run them.

    ZeroMQ sockets and shared mappings must not be closed under a thread that is using them.
    When ``close()`` of a runner comes from another thread than the one iterating it (an
    ``atexit`` hook, a watchdog), it calls :meth:`request_close`: the iterating thread runs
    the clean-up at its next :meth:`check` (within one poll interval) and raises
    ``DataFlowTerminated``, or when its iteration ends.
    """

    def __init__(self) -> None:
        self._fns: list[Any] = []
        self._lock = threading.Lock()
        self._done = False
        self.requested = False

    def add(self, fn: Any) -> None:
        self._fns.append(fn)

    def close(self) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
            fns, self._fns = self._fns[::-1], []
        for fn in fns:
            try:
                fn()
            except Exception:  # pragma: no cover - best effort
                logger.debug("clean-up %r failed", fn, exc_info=True)

    def request_close(self) -> None:
        self.requested = True

    def check(self, name: str) -> None:
        """In the iterating thread: honour a pending close request (or a completed close)."""
        if self.requested or self._done:
            self.close()
            from dataflow.errors import DataFlowTerminated

            raise DataFlowTerminated(f"{name} was closed while being iterated")
