"""The runners' side of the engine: ``runner_loop`` (a worker sends epochs of its copy of the
flow, with checkpoints of that copy) and ``runner_stream`` (one ``__iter__`` in the consumer).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

from dataflow.parallel._worker import (
    DATA,
    END,
    ERROR,
    POLL_INTERVAL,
    STATE,
    ErrorInfo,
    WorkerStopped,
    raise_worker_error,
)

__all__ = ["runner_loop", "runner_stream"]


def runner_loop(
    ds: Any,
    emit: Callable[[tuple], None],
    worker_id: int,
    stage: str,
    *,
    reset: bool = True,
    start: tuple[Any, int] | None = None,
    checkpoints: bool = False,
) -> None:
    """Body of a runner worker: ``reset_state()`` its copy of ``ds`` (unless ``reset`` is
    false: the thread runner resets its flows beforehand), then send epochs forever.

    An epoch that yields nothing ends the worker with ``END`` (so an empty or exhausted flow
    ends the consumer's iteration instead of spinning or hanging).

    With ``checkpoints``, it also sends ``STATE`` messages ``(count, ds.state_dict())``: the
    state of its copy after its first ``count`` datapoints sent (at the start, then at most
    every 16 datapoints, paced to cost under 0.5 % of the time). ``start = (state, skip)``
    restores the copy to ``state`` (unless ``None``) and skips ``skip`` datapoints first.
    """
    try:
        if reset:
            ds.reset_state()
        skip, first_may_be_empty = 0, False
        if start is not None:
            state, skip = start
            first_may_be_empty = True  # the rest of a restored epoch may be empty
            if state is not None:
                ds.load_state_dict(state)
        pacer = _StatePacer(ds, emit, worker_id) if checkpoints else None
        if pacer is not None and start is None:
            pacer.send(0)
        step = _StatePacer.EVERY if pacer is not None else 1 << 62
        count = 0  # datapoints sent
        while True:
            itr = iter(ds)
            n = 0
            if skip:  # already delivered before the restore
                n = sum(1 for _ in itertools.islice(itr, skip))
                skip -= n
            k = step
            while k == step:  # chunks of `step` datapoints; the state is saved between them
                k = 0
                for k, dp in enumerate(itertools.islice(itr, step), 1):  # noqa: B007
                    emit((DATA, worker_id, dp))
                n += k
                count += k
                if pacer is not None and count >= pacer.next_at:
                    pacer.maybe_send(count)
            if n == 0 and not first_may_be_empty:
                emit((END, worker_id, None))
                return
            first_may_be_empty = False
    except WorkerStopped:
        return
    except BaseException as e:
        try:
            emit((ERROR, worker_id, ErrorInfo.capture(e, worker_id, stage=stage)))
        except WorkerStopped:
            return


class _StatePacer:
    """Sends a runner worker's ``STATE`` messages, paced by their cost."""

    EVERY = 16
    RATIO = 200

    def __init__(self, ds: Any, emit: Callable[[tuple], None], worker_id: int) -> None:
        self.ds, self.emit, self.worker_id = ds, emit, worker_id
        self.next_at = self.EVERY
        self.not_before = 0.0

    def maybe_send(self, count: int) -> None:
        self.next_at = count + self.EVERY
        if time.perf_counter() >= self.not_before:
            self.send(count)

    def send(self, count: int) -> None:
        start = time.perf_counter()
        try:
            state = self.ds.state_dict()
        except NotImplementedError:
            self.next_at = 1 << 62  # the copy cannot save a state: never try again
            return
        self.emit((STATE, self.worker_id, (count, state)))
        end = time.perf_counter()
        self.not_before = end + self.RATIO * (end - start)


def runner_stream(
    receive: Callable[[float], tuple | None],
    num_workers: int,
    size: int | None,
    finished: set[int],
    count: list[int] | None = None,
    delivered: list[int] | None = None,
    on_state: Callable[[int, Any], None] | None = None,
) -> Iterator[Any]:
    """One ``__iter__`` of a runner: ``size`` datapoints (or forever when ``size`` is None).

    Stops early once every worker ended (``finished``, updated in place, persists).
    ``count[0]`` (if given) counts the datapoints yielded, ``delivered[w]`` those of worker
    ``w``, before each is yielded; ``STATE`` messages go to ``on_state(w, payload)``.
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
