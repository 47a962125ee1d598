"""The engine's protocol: what workers and the consumer say to each other, in every back end.

Messages are tuples ``(kind, worker_id, payload)``:

* ``DATA``: a runner's datapoint, or a mapper's list of ``(index, result)`` pairs;
* ``ERROR``: an :class:`ErrorInfo` -- worker errors travel as values and are re-raised in the
  consumer as :class:`~dataflow.errors.WorkerError` chained from the original exception;
* ``READY``: a map worker announces it can take work (nothing is sent to it before that);
* ``END``: a runner's copy of the flow yielded an empty epoch: that worker has nothing more;
* ``STATE``: a runner worker's ``(count, state of its copy after count datapoints)``;
* ``STATS``: a runner worker's ``(start, end, waited)``: between two ``time.perf_counter()``
  readings it waited ``waited`` seconds for the consumer and was busy the rest (for the
  profiler's trace; a map worker's ``DATA`` carries ``(start, end)`` of its chunk as a fourth
  element instead);
* ``RETURNED``: the inputs of a chunk a map worker was told to hand back (its transport is
  being replaced: the work moves to processes) and did not start, as a chunk: the consumer
  submits them to the new transport. The worker sent the results of the ones it mapped first.

Map requests are chunks, lists of ``(index, key, datapoint)``: ``index`` is a global, increasing
counter so that results can be matched, ordered and told apart from stale ones; ``key`` is the
input's ``(epoch, position)``, which keys the random draws made while mapping it (see
:mod:`dataflow.rng`).

A back end provides a transport: :class:`MapTransport` (mappers) or :class:`RunnerTransport`
(runners).
"""

from __future__ import annotations

import pickle
import traceback
from dataclasses import dataclass
from typing import Any, Protocol

from dataflow.errors import ReconstructedError, WorkerError, WorkerStopped

__all__ = [
    "DATA",
    "END",
    "ERROR",
    "POLL_INTERVAL",
    "READY",
    "RETURNED",
    "STATE",
    "STATS",
    "ErrorInfo",
    "MapTransport",
    "RunnerTransport",
    "WorkerStopped",
    "raise_worker_error",
]

DATA, ERROR, READY, END, STATE, STATS, RETURNED = 0, 1, 2, 3, 4, 5, 6
#: seconds between liveness checks while the consumer waits
POLL_INTERVAL = 0.2


@dataclass(frozen=True)
class ErrorInfo:
    """An exception raised in a worker, as a picklable value."""

    exc_type: str
    message: str
    traceback: str
    exc_pickle: bytes | None
    worker_id: int | None
    index: int | None = None
    stage: str | None = None

    @classmethod
    def capture(
        cls,
        exc: BaseException,
        worker_id: int | None,
        index: int | None = None,
        stage: str | None = None,
    ) -> ErrorInfo:
        try:
            exc_pickle = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
            pickle.loads(exc_pickle)
        except Exception:
            exc_pickle = None
        typ = type(exc)
        name = typ.__qualname__ if typ.__module__ == "builtins" else (
            f"{typ.__module__}.{typ.__qualname__}"
        )
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(name, str(exc), tb, exc_pickle, worker_id, index, stage)

    def original(self) -> BaseException:
        """The original exception if it can be unpickled here, else a reconstruction."""
        if self.exc_pickle is not None:
            try:
                exc = pickle.loads(self.exc_pickle)
                if isinstance(exc, BaseException):
                    return exc
            except Exception:
                pass
        return ReconstructedError(f"{self.exc_type}: {self.message}")

    def to_error(self, index: int | None = None) -> WorkerError:
        return WorkerError(
            self.exc_type,
            self.message,
            self.traceback,
            worker_id=self.worker_id,
            index=self.index if index is None else index,
            stage=self.stage,
        )


def raise_worker_error(info: ErrorInfo, index: int | None = None) -> None:
    """Raise ``info`` as a ``WorkerError`` chained from the original exception."""
    raise info.to_error(index) from info.original()


class MapTransport(Protocol):
    """How a mapper's consumer talks to its workers."""

    def submit(self, chunk: list[tuple[int, Any, Any]]) -> None:
        """Send a chunk of ``(index, key, datapoint)`` to a worker (waiting for one if none
        is ready)."""

    def receive(self, timeout: float) -> tuple | None:
        """The next message, or ``None`` after ``timeout`` seconds; raises ``WorkerError`` for
        a worker that died."""


class RunnerTransport(Protocol):
    """How a runner's consumer receives what its workers send."""

    def receive(self, timeout: float) -> tuple | None:
        """The next message, or ``None`` after ``timeout`` seconds; raises ``WorkerError`` for
        a worker that died."""
