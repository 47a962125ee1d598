"""A worker process's start: the start methods, the check that what a spawned worker needs
pickles, the thread limits of numeric libraries inside workers, and the bootstrap every worker
process runs first (its seeds, and ending when its parent dies, even by SIGKILL).

Guarantees kept here:

* **No orphans.** On Linux each worker asks the kernel to SIGKILL it when its parent dies
  (``prctl(PR_SET_PDEATHSIG, SIGKILL)`` through ``ctypes``, no optional package); in every OS a
  watchdog thread in the worker also exits when the parent pid changes.
* **Ctrl-C** is handled by the parent only: workers ignore SIGINT, the parent's
  ``KeyboardInterrupt`` unwinds and closes the runners.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from dataflow import _global_rng
from dataflow import rng as _rng
from dataflow.parallel._worker import seed_globals

__all__ = [
    "THREAD_ENV_VARS",
    "check_picklable",
    "get_context",
    "limited_thread_env",
    "parent_info",
    "worker_bootstrap",
]

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
                cv2.setNumThreads(cv2_threads)  # type: ignore[union-attr]


def _set_pdeathsig() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        # the symbols of the running program include libc's (ctypes.util.find_library would
        # run ldconfig in a subprocess, 4 ms of every worker's start)
        libc = ctypes.CDLL(None, use_errno=True)
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
    worker_id: int,
    parent: tuple[int, bool, int | None],
    *,
    globals_seed: tuple[int, tuple[int, ...]] | None = None,
    dispatch_globals: bool = False,
) -> None:
    """First thing a worker process runs: signals, orphan protection, threads, seeds.

    ``globals_seed`` ``(entropy, spawn_key)`` seeds the global ``np.random`` / ``random``
    (runner workers); ``dispatch_globals`` makes them draw per input instead (map workers, see
    :mod:`dataflow._global_rng`).
    """
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
    seed_worker(worker_id, global_seed, globals_seed, dispatch_globals)


def seed_worker(
    worker_id: int,
    global_seed: int | None,
    globals_seed: tuple[int, tuple[int, ...]] | None,
    dispatch_globals: bool,
) -> None:
    """A worker's seeds: the consumer's global seed (a spawned worker, or a Ray actor, does not
    inherit it), its worker id for :mod:`dataflow.rng`, and NumPy's and ``random``'s global
    generators (see :func:`worker_bootstrap`)."""
    if _rng.get_seed() != global_seed:
        _rng.set_seed(global_seed)
    _rng.set_worker_info(worker_id)
    if globals_seed is not None:
        seed_globals(np.random.SeedSequence(globals_seed[0], spawn_key=globals_seed[1]))
    if dispatch_globals:
        _global_rng.install()


def globals_seed(flow: Any, worker_id: int) -> tuple[int, tuple[int, ...]]:
    """The seed of the global generators of runner worker ``worker_id`` of ``flow``."""
    seq = _rng.stage_sequence(None, _rng.path_of(flow), _rng.GLOBALS, worker=worker_id)
    return _rng.seed_words(seq)
