"""Worker processes: a pool with death detection, and ``MultiProcessRunner`` (mp queue).

:class:`ProcessPool` starts the workers (fork by default on Linux, or ``start_method``), tells
which died without saying goodbye, and terminates them (SIGTERM, then SIGKILL). Its
:meth:`ProcessPool.receiver` wraps a transport's raw receive with the death check that makes a
killed worker surface as a :class:`~dataflow.errors.WorkerError` within about a second.
"""

from __future__ import annotations

import contextlib
import pickle
import queue
import signal
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from dataflow.base import DataFlow
from dataflow.errors import DataFlowTerminated, WorkerError
from dataflow.parallel import _lifecycle
from dataflow.parallel._base import RunnerBase, check_positive_int
from dataflow.parallel._runner import runner_loop
from dataflow.parallel._worker import END, ERROR

__all__ = ["MultiProcessPrefetchData", "MultiProcessRunner", "PrefetchData", "ProcessPool"]

#: seconds between two death checks while messages keep arriving
CHECK_INTERVAL = 0.5
#: seconds to wait for a dead worker's last messages before declaring it dead
DRAIN_SECONDS = 1.0
#: at most this many messages of the other workers are held while draining
DRAIN_MAX_MESSAGES = 256


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
        self.ctx = _lifecycle.get_context(start_method)
        method = self.ctx.get_start_method()
        if method != "fork" and picklable is not None:
            _lifecycle.check_picklable(picklable[1], picklable[0], method)
        self.procs = [
            self.ctx.Process(target=target, args=a, name=f"{name}-{i}", daemon=False)
            for i, a in enumerate(args)
        ]
        self.mapper = mapper  # map workers keep running after an ERROR; runners end
        self.reported: set[int] = set()  # workers that announced their end (END / ERROR)
        self.assigned: dict[int, dict[int, None]] = {}  # mappers: indices given to each worker
        self._pending: deque[tuple] = deque()
        self._next_check = 0.0
        self.closed = False

    def start(self) -> None:
        with _lifecycle.limited_thread_env(), warnings.catch_warnings():
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
        for p in self.procs:
            if p.pid is None:
                continue
            p.join(max(0.0, deadline - time.monotonic()))
            if p.exitcode is None:
                with contextlib.suppress(Exception):
                    p.kill()
                p.join(5.0)
            with contextlib.suppress(Exception):
                p.close()

    def _note(self, msg: tuple) -> None:
        kind = msg[0]
        if kind in (END, ERROR) and not self.mapper:
            self.reported.add(msg[1])

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
                self._note(msg)
                self._pending.append(msg)
                if msg[0] == ERROR:
                    return  # the error itself will be raised
        for i in dead:
            if i in self.reported:
                continue
            p = self.procs[i]
            lost = list(self.assigned.get(i, ()))
            what = f" with {len(lost)} input(s) in flight" if lost else ""
            raise WorkerError(
                "WorkerDied",
                f"worker process {i} (pid {p.pid}) {_describe_exit(p.exitcode)}{what}. "
                "It may have run out of memory, crashed in native code, or been killed.",
                worker_id=i,
                index=lost[0] if lost else None,
                stage=p.name.rsplit("-", 1)[0],
            )

    def receiver(
        self, raw_receive: Callable[[float], tuple | None]
    ) -> Callable[[float], tuple | None]:
        """``raw_receive`` with death detection (checked on idle waits and every 0.5 s)."""
        name = self.procs[0].name.rsplit("-", 1)[0] if self.procs else "workers"

        def receive(timeout: float) -> tuple | None:
            if self.closed:
                raise DataFlowTerminated(f"{name} was closed while being iterated")
            if self._pending:
                return self._pending.popleft()
            now = time.monotonic()
            if now >= self._next_check:
                self._next_check = now + CHECK_INTERVAL
                self.check(raw_receive)
                if self._pending:
                    return self._pending.popleft()
            msg = raw_receive(timeout)
            if msg is None:
                self.check(raw_receive)
                return self._pending.popleft() if self._pending else None
            self._note(msg)
            return msg

        return receive


def _mp_runner_main(
    ds: DataFlow, q: Any, worker_id: int, parent: tuple[int, bool], start: Any = None
) -> None:
    _lifecycle.worker_bootstrap(worker_id, parent)

    def emit(msg: tuple) -> None:
        q.put(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))

    runner_loop(ds, emit, worker_id, "MultiProcessRunner", start=start, checkpoints=True)
    q.close()
    q.join_thread()  # flush the last message (END / ERROR) before exiting


class MultiProcessRunner(RunnerBase):
    """Run ``num_proc`` independent copies of ``ds`` in processes, through one queue.

    Tensorpack's contract (SPEC 2.6): each worker resets its own copy of ``ds`` and iterates
    it forever; with ``num_proc > 1`` an unshuffled ``ds`` is therefore seen ``num_proc``
    times. Each ``__iter__`` yields ``len(ds)`` datapoints (or forever if the length is
    unknown). Transport is a ``multiprocessing.Queue(num_prefetch)``, so it works with every
    start method and on Windows; :class:`MultiProcessRunnerZMQ` is faster.

    Unlike tensorpack: an exception in a worker (or a killed worker) is raised in the consumer
    as :class:`~dataflow.errors.WorkerError`; ``reset_state()`` twice is fine; workers never
    outlive the consumer.

    ``state_dict()`` saves counters only: the workers iterate independent copies of ``ds``, so
    a restore cannot be exact; the restored epoch yields the datapoints it had left (see
    :meth:`RunnerBase.state_dict <dataflow.parallel._base.RunnerBase.state_dict>`).

    Args:
        ds: the flow to copy into each worker.
        num_prefetch: capacity of the queue.
        num_proc: number of worker processes.
        start_method: ``None`` (fork on Linux, else spawn), ``'fork'``, ``'forkserver'`` or
            ``'spawn'`` (then ``ds`` must be picklable).
    """

    def __init__(
        self,
        ds: DataFlow,
        num_prefetch: int,
        num_proc: int,
        *,
        start_method: str | None = None,
    ) -> None:
        super().__init__(ds)
        self.num_prefetch = check_positive_int(num_prefetch, "num_prefetch", 16)
        self.num_proc = self._num_workers = check_positive_int(num_proc, "num_proc")
        self.start_method = start_method
        _lifecycle.get_context(start_method)  # validate now
        self._pool: ProcessPool | None = None
        self._queue: Any = None

    def _start(self) -> None:
        ctx = _lifecycle.get_context(self.start_method)
        self._queue = ctx.Queue(self.num_prefetch)
        parent = _lifecycle.parent_info()
        self._pool = ProcessPool(
            _mp_runner_main,
            [(self.ds, self._queue, i, parent, self._worker_start(i))
             for i in range(self.num_proc)],
            start_method=self.start_method,
            name=type(self).__name__,
            picklable=("ds", self.ds),
        )
        self._pool.start()
        q = self._queue
        self._queue = None
        self._resources = res = _lifecycle.Resources()
        res.add(q.join_thread)
        res.add(q.close)
        name = type(self).__name__

        def raw(timeout: float) -> tuple | None:
            res.check(name)
            try:
                return pickle.loads(q.get(timeout=timeout))
            except queue.Empty:
                return None

        self._receive = self._pool.receiver(raw)  # type: ignore[method-assign]

    def _stop(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool = None
        if self._queue is not None:  # a start that failed half-way
            self._queue.close()
            self._queue = None
        self._release_resources()


PrefetchData = MultiProcessRunner
MultiProcessPrefetchData = MultiProcessRunner
