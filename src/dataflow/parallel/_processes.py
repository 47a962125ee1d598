"""Worker processes: start methods, the bootstrap of a worker, parent-death handling, and
:class:`ProcessPool`, which starts the workers, tells which died without saying goodbye and
terminates them.

Guarantees kept here:

* **No exit hang.** Worker processes are not daemonic (so a worker may start its own pool);
  :mod:`dataflow.parallel._lifecycle` closes every live runner at exit.
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
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from dataflow import _global_rng
from dataflow import rng as _rng
from dataflow.errors import DataFlowTerminated, WorkerError
from dataflow.parallel._protocol import END, ERROR
from dataflow.parallel._worker import seed_globals

__all__ = [
    "THREAD_ENV_VARS",
    "PooledTransport",
    "ProcessPool",
    "check_picklable",
    "get_context",
    "limited_thread_env",
    "parent_info",
    "start_pool",
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


# ---- worker processes and their deaths ---------------------------------------------------

#: seconds between two death checks while messages keep arriving
CHECK_INTERVAL = 0.5
#: seconds to wait for a dead worker's last messages before declaring it dead
DRAIN_SECONDS = 1.0
#: at most this many messages of the other workers are held while draining
DRAIN_MAX_MESSAGES = 256


def describe_exit(proc: Any) -> str:
    """How the process ``proc`` ended, in words."""
    return _describe_exit(proc.exitcode)


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited unexpectedly with exit code {code}"


class ProcessPool:
    """``len(args)`` processes running ``target(*args[i])``; worker ``i`` has id ``i``."""

    def __init__(
        self,
        target: Callable[..., None],
        args: Sequence[tuple],
        *,
        start_method: str | None,
        name: str,
        picklable: tuple[str, Any] | None = None,
        mapper: bool = False,
    ) -> None:
        self.ctx = get_context(start_method)
        method = self.ctx.get_start_method()
        if method != "fork" and picklable is not None:
            check_picklable(picklable[1], picklable[0], method)
        self.target = target
        self.procs = [
            self.ctx.Process(target=target, args=a, name=f"{name}-{i}",  # type: ignore[attr-defined]
                             daemon=False)
            for i, a in enumerate(args)
        ]
        self.retired: list[Any] = []  # processes of dead workers that were replaced
        #: called with the slot of a worker that died without reporting why; returns whether it
        #: was replaced (else the death is raised as a WorkerError)
        self.on_death: Callable[[int], bool] | None = None
        self.mapper = mapper  # map workers keep running after an ERROR; runners end
        self.reported: set[int] = set()  # workers that announced their end (END / ERROR)
        self.assigned: dict[int, dict[int, Any]] = {}  # mappers: inputs given to each worker
        self._pending: deque[tuple] = deque()
        self._next_check = 0.0
        self.closed = False
        self.name = name
        self.restarts = 0  # workers replaced so far

    def start(self) -> None:
        with limited_thread_env(), warnings.catch_warnings():
            # Python >= 3.12 warns when forking a process that has threads (ZeroMQ's I/O
            # threads of other runners, for instance). Fork is the documented default on
            # Linux; workers only use what they create after the fork. start_method='spawn'
            # avoids fork altogether.
            warnings.filterwarnings(
                "ignore", message=r".*multi-threaded, use of fork\(\) may lead to deadlocks",
                category=DeprecationWarning,
            )
            for p in self.procs:
                p.start()

    def _spawn(self, i: int, args: tuple) -> Any:
        p = self.ctx.Process(target=self.target, args=args,  # type: ignore[attr-defined]
                             name=f"{self.name}-{i}",
                             daemon=False)
        with limited_thread_env(), warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", message=r".*multi-threaded, use of fork\(\) may lead to deadlocks",
                category=DeprecationWarning,
            )
            p.start()
        return p

    def replace(self, i: int, args: tuple) -> None:
        """Start a new process in the slot of worker ``i`` (which died), running
        ``target(*args)``."""
        p = self._spawn(i, args)
        self.retired.append(self.procs[i])
        self.procs[i] = p
        self.reported.discard(i)
        self.restarts += 1

    def add(self, args: tuple) -> int:
        """Start one more worker, running ``target(*args)``; returns its slot (the next one)."""
        slot = len(self.procs)
        self.procs.append(self._spawn(slot, args))
        self.assigned[slot] = {}
        return slot

    def retire(self, i: int) -> None:
        """Worker ``i`` was told to stop: its exit is not a death."""
        self.reported.add(i)

    @property
    def pids(self) -> list[int | None]:
        return [p.pid for p in self.procs]

    def terminate(self, timeout: float = 2.0) -> None:
        self.closed = True
        for p in self.procs:
            if p.pid is not None and p.exitcode is None:
                with contextlib.suppress(Exception):
                    p.terminate()
        deadline = time.monotonic() + timeout
        for p in [*self.procs, *self.retired]:
            if p.pid is None:
                continue
            p.join(max(0.0, deadline - time.monotonic()))
            if p.exitcode is None:
                with contextlib.suppress(Exception):
                    p.kill()
                p.join(5.0)
            with contextlib.suppress(Exception):
                p.close()

    def check(self, raw_receive: Callable[[float], tuple | None]) -> None:
        """Raise ``WorkerError`` for a worker that died without reporting why."""
        try:
            dead = [
                i for i, p in enumerate(self.procs)
                if i not in self.reported and p.exitcode is not None
            ]
        except ValueError:  # closed by another thread meanwhile
            dead = []
        if self.closed:
            raise DataFlowTerminated("the workers were stopped while being iterated")
        if not dead:
            return
        deadline = time.monotonic() + DRAIN_SECONDS
        while (
            time.monotonic() < deadline
            and len(self._pending) < DRAIN_MAX_MESSAGES  # (other workers keep sending)
            and any(i not in self.reported for i in dead)
        ):
            msg = raw_receive(0.05)
            if msg is not None:
                self.note(msg)
                self._pending.append(msg)
                if msg[0] == ERROR:
                    return  # the error itself will be raised
        for i in dead:
            if i in self.reported:
                continue
            if self.on_death is not None and self.on_death(i):
                continue  # replaced
            p = self.procs[i]
            lost = list(self.assigned.get(i, ()))
            what = f" with {len(lost)} input(s) in flight" if lost else ""
            limit = (f" It was not replaced: {self.restarts} worker(s) were replaced already, "
                     "as many as max_restarts allows in one epoch." if self.on_death is not None
                     else "")
            raise WorkerError(
                "WorkerDied",
                f"worker process {i} (pid {p.pid}) {_describe_exit(p.exitcode)}{what}. "
                f"It may have run out of memory, crashed in native code, or been killed.{limit}",
                worker_id=i,
                index=lost[0] if lost else None,
                stage=p.name.rsplit("-", 1)[0],
            )

    def poll(self, raw_receive: Callable[[float], tuple | None]) -> tuple | None:
        """Before a transport's receive: a message held while draining a dead worker, or the
        death check that is due every 0.5 s (which may find one). ``None``: receive as usual."""
        if self.closed:
            raise DataFlowTerminated(f"{self.name} was closed while being iterated")
        if self._pending:
            return self._pending.popleft()
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + CHECK_INTERVAL
            self.check(raw_receive)
            if self._pending:
                return self._pending.popleft()
        return None

    def idle(self, raw_receive: Callable[[float], tuple | None]) -> tuple | None:
        """After a receive that timed out: check for deaths now."""
        self.check(raw_receive)
        return self._pending.popleft() if self._pending else None

    def note(self, msg: tuple) -> None:
        """A message received: a runner worker that sent END or ERROR is not dead when it exits."""
        if msg[0] in (END, ERROR) and not self.mapper:
            self.reported.add(msg[1])


class PooledTransport:
    """A consumer's transport whose workers are ``pool``'s processes: ``receive`` interleaves
    the pool's death checks with the transport's own ``_raw(timeout)`` receive."""

    pool: ProcessPool | None = None

    def _raw(self, timeout: float) -> tuple | None:
        raise NotImplementedError

    def receive(self, timeout: float) -> tuple | None:
        pool = self.pool
        if pool is None:
            return self._raw(timeout)
        msg = pool.poll(self._raw)
        if msg is not None:
            return msg
        msg = self._raw(timeout)
        if msg is None:
            return pool.idle(self._raw)
        pool.note(msg)
        return msg


def start_pool(target: Callable[..., None], args: Sequence[tuple], start_method: str | None,
               name: str, picklable: tuple[str, Any], mapper: bool = False) -> ProcessPool:
    """A :class:`ProcessPool` of ``target(*args[i])``, started."""
    pool = ProcessPool(target, args, start_method=start_method, name=name, picklable=picklable,
                       mapper=mapper)
    pool.start()
    return pool
