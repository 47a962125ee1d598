"""The worker processes of one runner or mapper: :class:`ProcessPool` (start, watch, replace,
stop), :class:`PooledTransport` (what a transport over a pool shares) and :func:`start_pool`.

**No exit hang.** Worker processes are not daemonic (so a worker may start its own pool);
:mod:`dataflow.parallel._lifecycle` closes every live runner at exit.
"""

from __future__ import annotations

import contextlib
import signal
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from dataflow.errors import DataFlowTerminated, WorkerError
from dataflow.parallel._bootstrap import check_picklable, get_context, limited_thread_env
from dataflow.parallel._protocol import END, ERROR

__all__ = [
    "PooledTransport",
    "ProcessPool",
    "start_pool",
]


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
