"""``RunnerBase``: the base of every runner (``N`` independent copies of a flow in workers), and
:func:`runner_stream`, one ``__iter__`` of a runner in the consumer. A back end gives it a
transport (:class:`~dataflow.parallel._protocol.RunnerTransport`) in ``_start()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from dataflow.base import DataFlow, ProxyDataFlow
from dataflow.errors import WorkerError
from dataflow.parallel._lifecycle import Lifecycle
from dataflow.parallel._protocol import (
    DATA,
    END,
    ERROR,
    POLL_INTERVAL,
    STATE,
    STATS,
    RunnerTransport,
    raise_worker_error,
)
from dataflow.state import EpochCounter, StateMismatchError, check_state
from dataflow.validation import known_length

__all__ = ["RunnerBase", "runner_stream"]


class RunnerBase(EpochCounter, Lifecycle, ProxyDataFlow):
    """``N`` independent copies of ``ds`` running in workers (tensorpack's runners).

    Each copy is reset in its worker as runner worker ``i`` (see :func:`dataflow.rng.worker_scope`):
    its random stages key their streams by ``i``, so the copies differ and each reproduces.
    Each ``__iter__`` yields ``len(ds)`` datapoints when that length is known and positive,
    else runs until every worker's copy yields an empty epoch (for an endless flow: forever).
    """

    profile_hint = "runner"

    _num_workers: int
    _count: list[int] | None = None  # [_pos] while an epoch is live
    _transport: RunnerTransport | None = None  # set by the back end's _start()

    def __init__(self, ds: DataFlow) -> None:
        ProxyDataFlow.__init__(self, ds)
        self._init_lifecycle()
        self._finished: set[int] = set()
        self._starts: list[tuple[Any, int]] | None = None  # restored: for the next _start()
        self._worker_starts: list[tuple[Any, int]] | None = None  # what _start() passes
        self._delivered: list[int] = []  # datapoints yielded of each worker since it started
        # each worker's last checkpoint: (datapoints it had sent, state of its copy, to skip)
        self._ckpts: list[tuple[int, Any, int]] = []

    def reset_state(self) -> None:
        """Start the workers (each resets its own copy of ``ds``). Idempotent."""
        if self._started:
            return
        self._finished = set()
        self._closed = False
        self._worker_starts, self._starts = self._starts, None
        self._start_or_clean()
        n = self._num_workers
        self._delivered = [0] * n
        starts = self._worker_starts or [(self._initial_state(i), 0) for i in range(n)]
        self._ckpts = [(0, state, skip) for state, skip in starts]
        self._started = True

    def _worker_start(self, i: int) -> tuple[Any, int] | None:
        """``(state, skip)`` for worker ``i``'s ``runner_loop`` after a restore, else None."""
        return None if self._worker_starts is None else self._worker_starts[i]

    def _initial_state(self, i: int) -> Any:
        """The state of worker ``i``'s copy when it started, if the consumer knows it (``None``:
        a copy made from the untouched ``ds``, which a restore can make again)."""
        return None

    _recorder: Callable[[int, float, float, float], None] | None = None

    def trace_workers(self, recorder: Callable[[int, float, float, float], None] | None) -> None:
        """Call ``recorder(worker, start, end, waited)`` with the workers' time (busy, and
        waiting for the consumer) while iterating; used by :func:`dataflow.profile`."""
        self._recorder = recorder

    def _on_stats(self, wid: int, payload: tuple[float, float, float]) -> None:
        if self._recorder is not None:
            self._recorder(wid, *payload)

    def _on_state(self, wid: int, payload: tuple[int, Any]) -> None:
        count, state = payload
        self._ckpts[wid] = (count, state, 0)

    def __len__(self) -> int:
        return len(self.ds)

    def __iter__(self) -> Iterator[Any]:
        self._ensure_started()
        if self._iter_thread is not None:  # an iteration is alive: the guard raises
            return self._run(None, 0, [0])
        token, start = self._begin()
        n = known_length(self.ds)
        self._count = count = [start]  # _pos of this epoch, counted by runner_stream
        return self._run(token, n if n else None, count)

    def _run(self, token: object | None, size: int | None, count: list[int]) -> Iterator[Any]:
        with self._iterating():
            try:
                assert self._transport is not None
                yield from runner_stream(
                    self._transport.receive, self._num_workers, size, self._finished, count,
                    self._delivered, self._on_state, self._on_stats,
                )
                if token is not None and self._token is token:
                    self._pos = count[0]
                    self._end(token)  # (a closed iterator leaves the epoch unfinished)
            except WorkerError:
                self._shutdown()
                raise
            finally:
                if token is not None and self._token is token:
                    self._pos = count[0]
                    self._count = None

    def _counters(self) -> dict[str, Any]:
        if self._count is not None:
            self._pos = self._count[0]
        return super()._counters()

    def state_dict(self) -> dict[str, Any]:
        """Counters (``epoch``, ``pos``: datapoints yielded in it, ``done``) and, for each
        worker, where its copy of ``ds`` stands: ``{"child": state, "skip": n}``, the state of
        the copy at its last checkpoint and how many of its datapoints since were delivered.

        Each worker sends its copy's state at its start and then every 16 datapoints or so
        (paced to cost under 0.5 % of its time). On resume (same number of workers), each worker
        restores its copy to that state and skips the ``n`` datapoints already delivered: every
        worker's stream continues right after its last delivered datapoint, with no loss and no
        repetition. Not exact: the interleaving of the workers' streams differs (it is not
        deterministic anyway), and the restored epoch yields the ``len(ds) - pos`` datapoints it
        had left, from whichever workers send them first. A copy without ``state_dict()``
        restarts from scratch and skips what was delivered (exact if it is deterministic).
        """
        workers = [
            {"child": state, "skip": skip + self._delivered[w] - count}
            for w, (count, state, skip) in enumerate(self._ckpts)
        ] if self._ckpts else [{"child": None, "skip": 0}] * self._num_workers
        return {"type": type(self).__name__, "size": known_length(self.ds),
                "num_workers": self._num_workers, **self._counters(), "workers": workers}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`: running workers are stopped, and the next
        ``__iter__`` starts them from the saved positions of their copies."""
        check_state(state, self, size=known_length(self.ds), num_workers=self._num_workers)
        workers = state.get("workers")
        if not isinstance(workers, list) or len(workers) != self._num_workers or not all(
            isinstance(w, dict) and isinstance(w.get("skip"), int) and w["skip"] >= 0
            and (w.get("child") is None or isinstance(w["child"], dict))
            for w in workers
        ):
            raise StateMismatchError(
                f"state for stage {type(self).__name__}: expected workers=[{{'child': state or "
                f"None, 'skip': int >= 0}}] * {self._num_workers}, found {workers!r:.80}; the "
                "state is corrupt or from another version."
            )
        self.restore_epoch(state)
        if self._started:
            self._shutdown()  # restart the workers from the saved positions
        self._starts = [(w.get("child"), w["skip"]) for w in workers]


def runner_stream(
    receive: Callable[[float], tuple | None],
    num_workers: int,
    size: int | None,
    finished: set[int],
    count: list[int] | None = None,
    delivered: list[int] | None = None,
    on_state: Callable[[int, Any], None] | None = None,
    on_stats: Callable[[int, Any], None] | None = None,
) -> Iterator[Any]:
    """One ``__iter__`` of a runner: ``size`` datapoints (or forever when ``size`` is None).

    Stops early once every worker ended (``finished``, updated in place, persists).
    ``count[0]`` (if given) counts the datapoints yielded, ``delivered[w]`` those of worker
    ``w``, before each is yielded; ``STATE`` messages go to ``on_state(w, payload)``, ``STATS``
    messages to ``on_stats(w, payload)``.
    """
    if count is None:
        count = [0]
    if delivered is None:
        delivered = [0] * num_workers
    while size is None or count[0] < size:
        if len(finished) >= num_workers:
            return
        msg = receive(POLL_INTERVAL)
        if msg is None:
            continue
        kind, wid, payload = msg
        if kind == DATA:
            count[0] += 1
            delivered[wid] += 1
            yield payload
        elif kind == ERROR:
            finished.add(wid)
            raise_worker_error(payload)
        elif kind == END:
            finished.add(wid)
        elif kind == STATE and on_state is not None:
            on_state(wid, payload)
        elif kind == STATS and on_stats is not None:
            on_stats(wid, payload)
