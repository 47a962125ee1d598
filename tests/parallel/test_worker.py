"""The shared engine: errors as values, and the scheduler's ordered/strict semantics."""

from __future__ import annotations

import pickle
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow.errors import WorkerError
from dataflow.parallel._protocol import DATA, END, ERROR, ErrorInfo, raise_worker_error
from dataflow.parallel._runner import runner_stream
from dataflow.parallel._scheduler import MapScheduler, repeat_enumerate
from dataflow.parallel._worker import map_loop, runner_loop
from tests.parallel.flows import Range


class _WeirdError(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a}-{b}")


def _capture(exc: BaseException, **kw) -> ErrorInfo:
    try:
        raise exc
    except BaseException as e:
        return ErrorInfo.capture(e, **kw)


def test_error_info_is_raised_as_worker_error_from_the_original():
    info = _capture(ValueError("boom"), worker_id=3, index=9, stage="Stage")
    info = pickle.loads(pickle.dumps(info))
    with pytest.raises(WorkerError) as ei:
        raise_worker_error(info, index=4)
    err = ei.value
    assert (err.exc_type, err.exc_message, err.worker_id, err.index, err.stage) == (
        "ValueError", "boom", 3, 4, "Stage"
    )
    assert type(err.__cause__) is ValueError
    assert str(err.__cause__) == "boom"
    assert "ValueError: boom" in str(err)
    assert 'raise exc' in err.remote_traceback
    assert str(err).startswith("ValueError: boom (raised in Stage, worker 3, input index 4)")


def test_unpicklable_exception_is_reconstructed():
    info = _capture(_WeirdError(1, 2), worker_id=0)
    assert info.exc_pickle is None
    assert info.exc_type == "tests.parallel.test_worker._WeirdError"
    with pytest.raises(WorkerError) as ei:
        raise_worker_error(info)
    assert str(ei.value.__cause__) == "tests.parallel.test_worker._WeirdError: 1-2"
    assert ei.value.index is None


def test_runner_loop_sends_epochs_then_end_on_empty_epoch():
    sent = []

    class Twice(Range):
        epochs = 0

        def __iter__(self):
            self.epochs += 1
            if self.epochs <= 2:
                yield from super().__iter__()

    runner_loop(Twice(2), sent.append, 5, "S")
    assert sent == [(DATA, 5, [0]), (DATA, 5, [1]), (DATA, 5, [0]), (DATA, 5, [1]), (END, 5, None)]


def test_runner_loop_reports_errors_as_values():
    sent = []
    runner_loop(Range(5, fail_at=2), sent.append, 1, "S")
    assert [m[0] for m in sent] == [DATA, DATA, ERROR]
    assert sent[-1][2].exc_type == "KeyError"
    assert sent[-1][2].worker_id == 1


def test_map_loop_answers_every_index_even_on_error():
    chunks = [[(0, (0, 0), [1]), (1, (0, 1), [7]), (2, (0, 2), [3])], None]
    sent = []

    def f(dp):
        if dp[0] == 7:
            raise ValueError("seven")
        return [dp[0] + 1]

    map_loop(lambda: chunks.pop(0), sent.append, f, 2, "S", (0, ()))
    assert sent[0][0] == ERROR
    assert sent[0][2].index == 1
    assert sent[1][:3] == (DATA, 2, [(0, [2]), (1, None), (2, [4])])
    # when the chunk was mapped (the profiler) and the thread's CPU seconds in it (the probe)
    start, end, cpu = sent[1][3]
    assert 0 < start <= end and 0 <= cpu <= end - start + 0.01


def test_runner_stream_stops_when_all_workers_ended():
    msgs = [(DATA, 0, "a"), (END, 0, None), None, (DATA, 1, "b"), (END, 1, None)]
    finished: set[int] = set()
    got = list(runner_stream(lambda t: msgs.pop(0), 2, None, finished))
    assert got == ["a", "b"]
    assert finished == {0, 1}


def test_repeat_enumerate_stops_on_empty_pass():
    assert list(repeat_enumerate([])) == []
    it = repeat_enumerate(["x", "y"])
    assert [next(it) for _ in range(5)] == [(0, "x"), (1, "y"), (0, "x"), (1, "y"), (0, "x")]


class FakeTransport:
    """Maps synchronously, answers chunks in a random order, split at random points."""

    def __init__(self, func, seed: int):
        self.func = func
        self.rng = random.Random(seed)
        self.pending: list[list] = []
        self.max_in_flight = 0
        self.in_flight = 0
        self.idle = 0

    def submit(self, chunk):
        self.in_flight += len(chunk)
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.pending.append([(i, self.func(dp)) for i, _key, dp in chunk])

    def receive(self, timeout):
        if not self.pending:
            self.idle += 1  # a real transport would block for `timeout` here
            return None
        chunk = self.pending.pop(self.rng.randrange(len(self.pending)))
        cut = self.rng.randint(1, len(chunk))
        if cut < len(chunk):
            self.pending.append(chunk[cut:])
        self.in_flight -= cut
        return (DATA, 0, chunk[:cut])


def _none_on_3(x):
    return None if x % 3 == 0 else x * 10


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 60),
    buffer_size=st.integers(1, 70),
    chunk=st.integers(1, 8),
    ordered=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_strict_epochs_yield_exactly_the_serial_map(n, buffer_size, chunk, ordered, seed):
    t = FakeTransport(_none_on_3, seed)
    s = MapScheduler(t, buffer_size, ordered, chunk)
    expected = [x * 10 for x in range(n) if x % 3]
    for _ in range(2):
        s.start_epoch(enumerate(range(n)))
        got = list(s.run())
        if ordered:
            assert got == expected
        else:
            assert Counter(got) == Counter(expected)
    assert t.max_in_flight <= buffer_size
    assert t.idle == 0  # the scheduler never waits while it could submit


@settings(max_examples=30, deadline=None)
@given(buffer_size=st.integers(1, 20), stop=st.integers(0, 15), seed=st.integers(0, 100))
def test_abandoned_strict_epoch_does_not_leak_into_the_next(buffer_size, stop, seed):
    t = FakeTransport(lambda x: x, seed)
    s = MapScheduler(t, buffer_size, False, 2)
    s.start_epoch(enumerate(range(100, 120)))
    it = s.run()
    for _ in range(stop):
        next(it)
    it.close()
    s.start_epoch(enumerate(range(10)))
    assert sorted(s.run()) == list(range(10))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 12), buffer_size=st.integers(1, 30), seed=st.integers(0, 100))
def test_non_strict_stream_continues_across_iterations(n, buffer_size, seed):
    t = FakeTransport(lambda x: x, seed)
    s = MapScheduler(t, buffer_size, True, 3)
    s.set_source(repeat_enumerate(list(range(n))))
    got = []
    for _ in range(3):
        it = s.run()
        got += [next(it) for _ in range(n + 1)]
        it.close()
    assert got == [i % n for i in range(3 * (n + 1))]


def test_error_message_carries_the_position_in_the_epoch():
    class FailingLater(FakeTransport):
        def receive(self, timeout):
            msg = super().receive(timeout)
            idx = msg[2][0][0]
            if idx >= 4:  # a global index of the second epoch
                return (ERROR, 1, _capture(RuntimeError("x"), worker_id=1, index=idx))
            return msg

    s = MapScheduler(FailingLater(lambda x: x, 0), 1, False)
    s.start_epoch(enumerate(range(3)))
    assert list(s.run()) == [0, 1, 2]
    s.start_epoch(enumerate(range(3)))
    with pytest.raises(WorkerError) as ei:
        list(s.run())
    assert ei.value.index == 1  # global index 4 is the second input of this epoch
    assert ei.value.worker_id == 1
    assert type(ei.value.__cause__) is RuntimeError
